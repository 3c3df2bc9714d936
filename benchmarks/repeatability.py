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
how a figure taken on a quiet machine compares with one taken on a busy one.

    python benchmarks/repeatability.py [--models 20] [--device cpu] [--sequence 192] [--variant generate] [--load]
"""

from __future__ import annotations

import argparse
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


def measure_all(archs, profile, tmp: Path, order, variant: str = "forward", pinned=None) -> dict:
    out = {}
    with Runner(profile, log=lambda m: print("   ", m), pinned=pinned) as runner:
        for i in order:
            path = tmp / f"{archs[i].id}.onnx"
            export_model(archs[i], ExportOptions(variant=variant)).save(path)
            m = runner.measure(path)
            path.unlink()
            out[i] = m
            status = f"{m.latency_ms:8.1f} ms {m.peak_memory_mb:7.1f} MB" if m.ok else m.error
            print(f"  {archs[i].id:<28} {status}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sequence", type=int, default=None)
    parser.add_argument("--variant", choices=("forward", "generate"), default="forward")
    parser.add_argument("--load", action="store_true", help="measure the second run under a competing load")
    args = parser.parse_args()
    profile = load_profile(args.device)
    if args.sequence:
        profile = profile.replace(sequence=args.sequence)
    archs = spread_sample(args.models)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        # As a search, profile or check runs: milliseconds (and a decode step's unit) through the machine's
        # pinned calibration, measured once here (the store's, in a product run).
        with Runner(profile) as runner:
            pinned = runner.measure_pinned()
        print(f"pinned: compute reference {pinned.reference_ms:.3f} ms, bandwidth reference {pinned.bandwidth_ms:.3f} ms")
        print("run 1")
        first = measure_all(archs, profile, Path(tmp), range(len(archs)), args.variant, pinned)
        print("run 2 (reverse order, new worker" + (", under a competing load)" if args.load else ")"))
        stop = mp.Event()
        neighbour = mp.Process(target=load, args=(stop, 0), daemon=True) if args.load else None
        if neighbour:
            neighbour.start()
        try:
            second = measure_all(archs, profile, Path(tmp), reversed(range(len(archs))), args.variant, pinned)
        finally:
            stop.set()
            if neighbour:
                neighbour.join(timeout=10)
    ok = [i for i in range(len(archs)) if first[i].ok and second[i].ok]
    print(f"\n{len(ok)} of {len(archs)} models measured in both runs; {time.time() - started:.0f} s; "
          f"{profile.name}, sequence {profile.sequence}")
    rows = (("latency, raw", lambda m: m.uncalibrated_latency_ms), ("latency ratio", lambda m: m.latency_ratio),
            ("latency ms", lambda m: m.latency_ms), ("peak memory", lambda m: m.peak_memory_mb))
    if args.variant == "generate":  # latency above is the decode step's; the prompt's prefill beside it
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


if __name__ == "__main__":
    main()
