"""Are measurements repeatable? 20 architectures spread over the default space, measured in two runs.

Each run is a separate measuring worker (a fresh process) going through all 20 models; the second run
goes through them in reverse order, so drift and order effects are not hidden. Prints, for latency and
for peak memory, the Spearman rank correlation between the runs and the median relative difference.
Latency three ways: the model's own median (uncalibrated: what a plain timer gives), the ratio to the
reference model timed beside it, and milliseconds through the machine's pinned calibration (measured
once at the start, as the store keeps it for a search, profile or check).
Targets: latency SRC >= 0.98 and median difference <= 3%; memory within 2% or 2 MB.
``--variant generate`` measures the generate variant: latency is then the decode step (per token after
``context`` cached tokens), timed beside the bandwidth reference, and the prompt's prefill is reported too.

``--load`` measures the second run under a competing load the benchmark starts itself (the neighbour of
``reference_choice.py``: compute, memory streaming or idle at random, 0.3-2 s each), so the pair says
how a figure taken on a quiet machine compares with one taken on a busy one. ``--conditions quiet quiet
loaded`` runs any sequence of quiet and loaded runs (alternating order) and compares each with the first.

``--twice`` measures every model twice in a row in each worker, to tell a figure's spread within one
worker process from its spread between two.

``--estimators`` keeps every workload's paired samples and judges, on the same samples, other ways of
turning them into one ratio (the median of the per-pair ratios is what ltsedge reports): which of them
repeats between a quiet and a loaded run without losing what it has between two quiet ones.
Three of them use no reference at all (the model's own samples: what a figure through the pin would
be if nothing were timed beside the model).

``--decode-references bandwidth none`` times the decode step both ways (the profile's ``decode_reference``),
one worker per way, side by side in every run: which repeats on this machine, measured in one run.

``--pool K`` also compares figures pooled over K consecutive runs (the median of their K figures per
model; the mean of two), group against group: what a figure made of K fresh workers would repeat to.
``--workers 1 2`` measures with each of these profile ``workers`` settings side by side in every run
(each model's figure pooled over that many fresh workers).
``--device cpu steady.toml`` measures with each of these device profiles side by side in every run (each
with its own pinned calibration).
``--dump FILE`` writes every run's measurements as JSON, for other analyses of the same runs.

    python benchmarks/repeatability.py [--models 20] [--device cpu [PROFILE ...]] [--sequence 192] [--variant generate] [--load]
                                       [--conditions quiet quiet loaded] [--estimators] [--twice]
                                       [--decode-references bandwidth none] [--workers 1 2] [--pool 2]
                                       [--dump FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference_choice import load  # noqa: E402  (the competing neighbour)

from ltsedge.devices import load_profile
from ltsedge.devices.profile import DECODE_REFERENCES
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.proxy import count_params
from ltsedge.runners import Runner
from ltsedge.space import SearchSpace


def spread_sample(n: int, seed: int = 0, space: SearchSpace | None = None, pool: int = 2000):
    """n architectures at evenly spaced quantiles of decoder parameters in a uniform sample of ``pool``
    from ``space`` (the default space)."""
    pool = sorted((space or SearchSpace()).sample(pool, seed=seed), key=lambda a: count_params(a).decoder_params)
    return [pool[round(i * (len(pool) - 1) / (n - 1))] for i in range(n)]


def spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


class SampleKeepingRunner(Runner):
    """A runner that keeps the paired samples of the last model it measured (``samples``)."""

    samples: dict = {}

    def _to_measurement(self, reply):
        self.samples = {name: (w["model_ms"], w["reference_ms"]) for name, w in (reply.get("workloads") or {}).items()}
        return super()._to_measurement(reply)


def _quietest(m, r, share):
    """The per-pair ratios of the ``share`` of pairs whose reference sample was fastest."""
    order = np.argsort(r)[:max(3, round(share * len(r)))]
    return m[order] / r[order]


def _near_fastest(m, r, within):
    """The per-pair ratios of the pairs whose reference sample was within ``within`` of the reference's
    10th percentile (the machine when quiet), at least the quietest five."""
    keep = r <= (1 + within) * np.quantile(r, 0.1)
    if keep.sum() < 5:
        keep = np.isin(np.arange(len(r)), np.argsort(r)[:5])
    return m[keep] / r[keep]


# Ways of turning one workload's paired samples (model ms, reference ms) into a ratio.
ESTIMATORS = {
    "median of all pairs' ratios": lambda m, r: np.median(m / r),
    "median of the quietest half by reference": lambda m, r: np.median(_quietest(m, r, 0.5)),
    "median of the quietest third by reference": lambda m, r: np.median(_quietest(m, r, 1 / 3)),
    "median of pairs whose reference is within 5% of its q10": lambda m, r: np.median(_near_fastest(m, r, 0.05)),
    "median of pairs whose reference is within 10% of its q10": lambda m, r: np.median(_near_fastest(m, r, 0.10)),
    "q25 of ratios": lambda m, r: np.quantile(m / r, 0.25),
    "q25(model) / q25(reference)": lambda m, r: np.quantile(m, 0.25) / np.quantile(r, 0.25),
    "q10(model) / q10(reference)": lambda m, r: np.quantile(m, 0.10) / np.quantile(r, 0.10),
    "min(model) / min(reference)": lambda m, r: m.min() / r.min(),
    "median(model) / median(reference)": lambda m, r: np.median(m) / np.median(r),
    # No reference at all: the model's own milliseconds (the pin turns them into a ratio by a constant).
    "the model alone: median": lambda m, r: np.median(m),
    "the model alone: q10": lambda m, r: np.quantile(m, 0.10),
    "the model alone: min": lambda m, r: m.min(),
}


def measure_all(archs, profiles, tmp: Path, order, variant: str = "forward", pinned=None,
                samples: dict | None = None, again: dict | None = None) -> list[dict]:
    """Each model of ``order`` measured once in one fresh worker per profile (side by side: model after
    model, the profiles' order alternating), and, given ``again``, a second time right after by the first
    profile's (how far a figure moves within one worker process). ``samples``: the first profile's.
    ``pinned``: each profile's pinned calibration (None: each runner calibrates itself)."""
    outs = [{} for _ in profiles]
    with contextlib.ExitStack() as stack:
        runners = [stack.enter_context(SampleKeepingRunner(p, log=lambda m: print("   ", m), pinned=pin))
                   for p, pin in zip(profiles, pinned or [None] * len(profiles))]
        for n, i in enumerate(order):
            path = tmp / f"{archs[i].id}.onnx"
            export_model(archs[i], ExportOptions(variant=variant)).save(path)
            for j in (range(len(runners)) if n % 2 == 0 else reversed(range(len(runners)))):
                m = outs[j][i] = runners[j].measure(path)
                if j == 0 and again is not None:
                    again[i] = runners[j].measure(path)
                if j == 0 and samples is not None:
                    samples[i] = {k: (np.array(a), np.array(b)) for k, (a, b) in runners[j].samples.items()}
                status = f"{m.latency_ms:8.1f} ms {m.peak_memory_mb:7.1f} MB" if m.ok else m.error
                print(f"  {archs[i].id:<28} {profiles[j].name:<12} {status}", flush=True)
            path.unlink()
    return outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--device", nargs="+", default=["cpu"],
                        help="device profiles (names or TOML files); several are measured side by side in every run")
    parser.add_argument("--sequence", type=int, default=None)
    parser.add_argument("--variant", choices=("forward", "generate"), default="forward")
    parser.add_argument("--load", action="store_true", help="measure the second run under a competing load")
    parser.add_argument("--conditions", nargs="+", choices=("quiet", "loaded"),
                        help="the runs, in order (default: quiet quiet, or quiet loaded with --load)")
    parser.add_argument("--twice", action="store_true",
                        help="measure every model twice in a row in each worker: within- against between-worker spread")
    parser.add_argument("--estimators", action="store_true",
                        help="also judge other estimators of a ratio on the same paired samples")
    parser.add_argument("--decode-references", nargs="+", choices=DECODE_REFERENCES,
                        help="time the decode step each of these ways, side by side in every run (the profile's "
                             "decode_reference)")
    parser.add_argument("--workers", nargs="+", type=int,
                        help="measure with each of these profile `workers` settings (fresh workers pooled per "
                             "model), side by side in every run")
    parser.add_argument("--pool", type=int, default=0,
                        help="also compare figures pooled over K consecutive runs (each run a fresh worker; the "
                             "median of the K, the mean of two): what a figure made of K workers would repeat to")
    parser.add_argument("--dump", type=Path, help="write every run's per-model figures to this JSON file")
    args = parser.parse_args()
    conditions = args.conditions or ["quiet", "loaded" if args.load else "quiet"]
    devices = [load_profile(d) for d in args.device]
    if args.sequence:
        devices = [d.replace(sequence=args.sequence) for d in devices]
    profile = devices[0]
    profiles = [d.replace(name=f"{d.name}-decode-{r}", decode_reference=r) for d in devices
                for r in args.decode_references or ()] or devices
    if args.workers:
        profiles = [p.replace(name=f"{p.name}-workers{w}", workers=w) for p in profiles for w in args.workers]
    archs = spread_sample(args.models)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        # As a search, profile or check runs: milliseconds (and a decode step's unit) through the machine's
        # pinned calibration, measured once here (the store's, in a product run).
        pinned = []
        for p in profiles:  # each its own: thread counts and huge pages change the references' speed
            with Runner(p) as runner:
                pinned.append(runner.measure_pinned())
            print(f"pinned for {p.name}: compute reference {pinned[-1].reference_ms:.3f} ms, bandwidth reference "
                  f"{pinned[-1].bandwidth_ms:.3f} ms")
        runs, kept, agains = [], [], []
        for k, condition in enumerate(conditions):
            order = range(len(archs)) if k % 2 == 0 else reversed(range(len(archs)))
            print(f"run {k + 1} ({'reverse order, ' if k % 2 else ''}new worker, {condition})")
            kept.append({} if args.estimators else None)
            agains.append({} if args.twice else None)
            stop = mp.Event()
            neighbour = mp.Process(target=load, args=(stop, 0), daemon=True) if condition == "loaded" else None
            if neighbour:
                neighbour.start()
            try:
                runs.append(measure_all(archs, profiles, Path(tmp), order, args.variant, pinned, kept[-1], agains[-1]))
            finally:
                stop.set()
                if neighbour:
                    neighbour.join(timeout=10)
    print(f"\n{time.time() - started:.0f} s; {profile.name}, sequence {profile.sequence}; runs: {', '.join(conditions)}")
    for k, again in enumerate(agains):
        if again is not None:
            print(f"\nrun {k + 1} ({conditions[k]}): each model's first measurement against its second, in one worker:")
            compare(archs, runs[k][0], again, args.variant, None, None)
    for k in range(1, len(runs)):
        for j, p in enumerate(profiles):
            print(f"\nrun 1 ({conditions[0]}) against run {k + 1} ({conditions[k]}), {p.name}:")
            compare(archs, runs[0][j], runs[k][j], args.variant, kept[0] if j == 0 else None,
                    kept[k] if j == 0 else None)
    if args.pool > 1:
        compare_pooled(archs, runs, conditions, args.pool, args.variant)
    if args.dump:
        args.dump.write_text(json.dumps({"conditions": conditions, "models": [a.id for a in archs],
                                         "runs": [[{i: m.to_dict() for i, m in r.items()} for r in run]
                                                  for run in runs]}))
    for k, run in enumerate(runs if len(profiles) > 1 else ()):
        ok = [i for i in run[0] if all(r[i].ok for r in run)]
        for j in range(1, len(profiles)):
            ratio = [run[j][i].latency_ms / run[0][i].latency_ms for i in ok]
            print(f"run {k + 1}: {profiles[j].name} ms / {profiles[0].name} ms, median {statistics.median(ratio):.3f} "
                  f"(range {min(ratio):.3f}-{max(ratio):.3f})")


def compare_pooled(archs, runs, conditions, k: int, variant: str) -> None:
    """Figures pooled over groups of ``k`` consecutive runs (the first profile's), group 1 against each
    other group: the median of the group's ratios per model (the mean of two)."""
    groups = [runs[g:g + k] for g in range(0, len(runs) - k + 1, k)]
    figures = {"latency ratio": lambda m: m.latency_ratio, "peak memory": lambda m: m.peak_memory_mb}
    if variant == "generate":
        figures["prefill ratio"] = lambda m: m.workloads["prefill"]["latency_ratio"]
    first = groups[0]
    for n, group in enumerate(groups[1:], start=1):
        ok = [i for i in range(len(archs)) if all(r[0][i].ok for r in (*first, *group))]
        names = lambda g: "+".join(conditions[g * k + j] for j in range(k))  # noqa: E731
        print(f"\nruns pooled by {k}: {names(0)} against {names(n)}, {len(ok)} models")
        for name, get in figures.items():
            a = [statistics.median(get(r[0][i]) for r in first) for i in ok]
            b = [statistics.median(get(r[0][i]) for r in group) for i in ok]
            rel = [abs(x - y) / ((x + y) / 2) for x, y in zip(a, b)]
            print(f"{name:<12} Spearman {spearman(a, b):.4f}  median relative difference "
                  f"{statistics.median(rel):.2%}  max {max(rel):.2%}")


def compare(archs, first: dict, second: dict, variant: str, first_samples: dict | None,
            second_samples: dict | None) -> None:
    ok = [i for i in range(len(archs)) if first[i].ok and second[i].ok]
    print(f"{len(ok)} of {len(archs)} models measured in both runs")
    rows = (("latency, raw", lambda m: m.uncalibrated_latency_ms), ("latency ratio", lambda m: m.latency_ratio),
            ("latency ms", lambda m: m.latency_ms), ("peak memory", lambda m: m.peak_memory_mb))
    if variant == "generate":  # latency above is the decode step's; the prompt's prefill beside it
        rows += (("prefill ratio", lambda m: m.workloads["prefill"]["latency_ratio"]),
                 ("prefill ms", lambda m: m.workloads["prefill"]["latency_ms"]))
    for name, get in rows:
        a = [get(first[i]) for i in ok]
        b = [get(second[i]) for i in ok]
        attr = "peak_memory_mb" if name == "peak memory" else name
        rel = [abs(x - y) / ((x + y) / 2) for x, y in zip(a, b)]
        absolute = [abs(x - y) for x, y in zip(a, b)]
        line = (f"{name:<12} Spearman {spearman(a, b):.4f}  median relative difference {statistics.median(rel):.2%}"
                f"  max {max(rel):.2%}")
        if attr == "peak_memory_mb":
            within = sum(r <= 0.02 or d <= 2.0 for r, d in zip(rel, absolute))
            line += f"  within 2% or 2 MB: {within}/{len(ok)}"
        print(line)
    if first_samples is None:
        return
    print("| workload | estimator | Spearman | median rel. diff | max |")
    print("|---|---|---|---|---|")
    for workload in first_samples[ok[0]]:
        for name, estimate in ESTIMATORS.items():
            a = [estimate(*first_samples[i][workload]) for i in ok if workload in first_samples[i]]
            b = [estimate(*second_samples[i][workload]) for i in ok if workload in first_samples[i]]
            rel = [abs(x - y) / ((x + y) / 2) for x, y in zip(a, b)]
            print(f"| {workload} | {name} | {spearman(a, b):.3f} | {statistics.median(rel):.2%} | {max(rel):.2%} |")


if __name__ == "__main__":
    main()
