"""Which reference keeps a decode figure steady between runs (issue 21, item 1).

Every figure ltsedge reports is a ratio to a reference model timed beside it, times the machine's
pinned calibration. For a forward pass or a prompt's prefill (compute-bound) the compute-bound reference
(``ltsedge.runners.reference``: four 384 x 384 MatMuls over 192 rows) moves with the model; a decode
step reads every weight once per token (memory-bound) and, on a 2-vCPU VM, did not: the same architectures
profiled twice differed by a median 18.5% in their decode ratios (docs/benchmarks-history.md).

This benchmark times the decode step (context 192) of random default-space GPT-2 architectures, each
sample in alternation with three references, and reports how each figure repeats:

  compute    the reference ltsedge uses (ratio)
  bandwidth  a chain of matrix-vector products over 96 MB of fp32 weights (six 2048 x 2048), beyond
             the caches: what a decode step does, without the model (ratio)
  decode     a fixed 6 x 512 GPT-2's decode step at the same context (ratio)
  raw        the decode step's own milliseconds, no reference

Three passes over the same models, each in this process: two on a quiet machine (minutes apart), one
under a competing load the benchmark starts itself (a process that switches at random between a
compute-bound matrix product, streaming a 256 MB array and idling, 0.3-2 s each: a neighbour whose
demand changes). Per figure: the median and largest |pass B / pass A - 1| and the Spearman correlation
of the two passes, for quiet vs quiet and quiet vs loaded.

    python benchmarks/reference_choice.py [--models 16] [--samples 15] [--seed 0]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ltsedge.architecture import Architecture  # noqa: E402
from ltsedge.devices import load_profile  # noqa: E402
from ltsedge.exporters import export_model  # noqa: E402
from ltsedge.exporters.options import ExportOptions  # noqa: E402
from ltsedge.runners.inputs import make_inputs  # noqa: E402
from ltsedge.runners.protocol import RunSettings  # noqa: E402
from ltsedge.runners.reference import BANDWIDTH_WIDTH, bandwidth_model, reference_model  # noqa: E402
from ltsedge.runners.session import session_options  # noqa: E402
from ltsedge.runners.timing import MIN_SAMPLE_MS, runs_filling  # noqa: E402
from ltsedge.space import SearchSpace  # noqa: E402

FIGURES = ("compute", "bandwidth", "decode", "raw")


def session(data: bytes, settings: RunSettings):
    import onnxruntime as ort

    return ort.InferenceSession(data, sess_options=session_options(settings), providers=["CPUExecutionProvider"])


def decode_runner(data: bytes, settings: RunSettings, profile):
    s = session(data, settings)
    feeds = make_inputs(s, profile, workload="decode")
    return lambda: s.run(None, feeds)


def fixed_input_runner(data: bytes, settings: RunSettings, shape: tuple[int, ...]):
    s = session(data, settings)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return lambda: s.run(None, {"x": x})


def time_model(run, references: dict, samples: int) -> dict[str, float]:
    """Median of ``samples`` per-run ms of the model, each beside one sample of every reference."""
    for _ in range(2):  # warm-up
        run()
        for ref in references.values():
            ref()
    model_ms, ratios = [], {name: [] for name in references}
    for _ in range(samples):
        _, ms = runs_filling(run, MIN_SAMPLE_MS)
        model_ms.append(ms)
        for name, ref in references.items():
            _, ref_ms = runs_filling(ref, MIN_SAMPLE_MS)
            ratios[name].append(ms / ref_ms)
    return {"raw": statistics.median(model_ms), **{n: statistics.median(r) for n, r in ratios.items()}}


def load(stop, seed: int) -> None:
    """A neighbour whose demand changes: compute, memory streaming or idle, at random, 0.3-2 s each."""
    os.environ["OMP_NUM_THREADS"] = "1"
    rng = random.Random(seed)
    a = np.random.default_rng(seed).standard_normal((512, 512)).astype(np.float32)
    big = np.ones(64 * 2**20, dtype=np.float32)  # 256 MB
    while not stop.is_set():
        phase, until = rng.choice(("compute", "memory", "idle")), time.time() + rng.uniform(0.3, 2.0)
        while time.time() < until and not stop.is_set():
            if phase == "compute":
                a = np.tanh(a @ a.T / 512)
            elif phase == "memory":
                big[::16] += 1.0  # touch every cache line: a streaming read-modify-write
            else:
                time.sleep(0.05)


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = (np.argsort(np.argsort(x)) for x in (a, b))
    return float(np.corrcoef(ra, rb)[0, 1])


def compare(first: list[dict], second: list[dict]) -> dict[str, tuple[float, float, float]]:
    out = {}
    for name in FIGURES:
        a, b = [p[name] for p in first], [p[name] for p in second]
        changes = [abs(y / x - 1) for x, y in zip(a, b)]
        out[name] = (statistics.median(changes), max(changes), spearman(a, b))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=16)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pause", type=float, default=60.0, help="seconds between the two quiet passes")
    args = parser.parse_args()

    profile = load_profile("cpu")  # sequence/context 192, as a default search
    settings = RunSettings.from_profile(profile)
    archs = SearchSpace.default("gpt2").sample(args.models, seed=args.seed)
    generate = ExportOptions(variant="generate")
    base = Architecture(n_layer=6, d_model=512, n_head=[8] * 6, d_inner=[2048] * 6, vocab_size=50257, n_positions=1024)
    references = {"compute": fixed_input_runner(reference_model(), settings, (192, 384)),
                  "bandwidth": fixed_input_runner(bandwidth_model(), settings, (1, BANDWIDTH_WIDTH)),
                  "decode": decode_runner(export_model(base, generate).to_bytes(), settings, profile)}
    print(f"{len(archs)} default-space GPT-2 architectures, decode step at context {profile.context}, "
          f"{args.samples} samples each beside every reference", flush=True)
    models = [export_model(a, generate).to_bytes() for a in archs]

    def one_pass(label: str) -> list[dict]:
        started = time.time()
        figures = []
        for data in models:
            figures.append(time_model(decode_runner(data, settings, profile), references, args.samples))
        print(f"  pass {label}: {time.time() - started:.0f} s", flush=True)
        return figures

    quiet_a = one_pass("quiet 1")
    time.sleep(args.pause)
    quiet_b = one_pass("quiet 2")
    stop = mp.Event()
    neighbour = mp.Process(target=load, args=(stop, args.seed), daemon=True)
    neighbour.start()
    try:
        loaded = one_pass("under load")
    finally:
        stop.set()
        neighbour.join(10)

    print("\n| figure | quiet vs quiet: median / max change, Spearman | quiet vs loaded: median / max change, Spearman |")
    print("|---|---|---|")
    same, moved = compare(quiet_a, quiet_b), compare(quiet_a, loaded)
    for name in FIGURES:
        s, m = same[name], moved[name]
        print(f"| {name} | {s[0]:.1%} / {s[1]:.1%}, {s[2]:.3f} | {m[0]:.1%} / {m[1]:.1%}, {m[2]:.3f} |")
    ref_ms = {name: statistics.median(p["raw"] / p[name] for p in quiet_a) for name in FIGURES if name != "raw"}
    print("\nreference per-run ms (median, quiet pass 1): "
          + ", ".join(f"{n} {v:.2f}" for n, v in ref_ms.items()))


if __name__ == "__main__":
    main()
