"""What one measured candidate costs in a decode search: the objective timed in full and the prompt's
prefill coarsely (a raced search, runners/racing.py) against every workload in full (profile, publishing).

Random architectures of the default GPT-2 space, generate variant, sequence/context 192, the ``cpu``
profile; each measured both ways back to back in one worker (the order alternating), so the machine's
load falls on both alike. Prints per-candidate wall seconds, the saving, and how far the coarse prefill
and the decode figures of the two ways lie apart (the decode policy is the same both ways: that column
is the machine's own between-run spread).

    python benchmarks/measure_cost.py [--samples 8] [--seed 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ltsedge.devices import load_profile
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.runners import Runner
from ltsedge.runners.racing import Race
from ltsedge.search.api import SearchOptions, resolve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    settings = resolve(SearchOptions(objective="decode"))[0]
    archs = settings.space.sample(args.samples, seed=args.seed)
    profile = load_profile("cpu").replace(sequence=192, context=192)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Runner(profile) as runner:
        for i, arch in enumerate(archs):
            path = Path(tmp) / f"{arch.id}.onnx"
            export_model(arch, ExportOptions(variant="generate")).save(path, digest=False)
            race = Race("decode", 1, (), profile.tolerance)  # an empty front: never raced out
            ways = [("raced", race), ("full", None)] if i % 2 == 0 else [("full", None), ("raced", race)]
            out = {}
            for name, r in ways:
                t = time.perf_counter()
                m = runner.measure(path, race=r).to_dict()
                out[name] = (time.perf_counter() - t, m)
            (tr, raced), (tf, full) = out["raced"], out["full"]
            rel = {w: raced["workloads"][w]["latency_ratio"] / full["workloads"][w]["latency_ratio"] - 1
                   for w in ("prefill", "decode")}
            rows.append((arch, tr, tf, rel, raced["workloads"]["prefill"]["runs"], full["workloads"]["prefill"]["runs"]))
            print(f"{arch.n_layer:2d} x {arch.d_model:4d}: raced {tr:5.1f} s, full {tf:5.1f} s; prefill runs "
                  f"{rows[-1][4]} vs {rows[-1][5]}; prefill {rel['prefill']:+.1%}, decode {rel['decode']:+.1%}",
                  flush=True)
    raced_s, full_s = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"\n{len(rows)} candidates: raced {raced_s / len(rows):.1f} s, full {full_s / len(rows):.1f} s per candidate "
          f"({full_s / raced_s:.2f}x); median |prefill difference| "
          f"{statistics.median(abs(r[3]['prefill']) for r in rows):.1%}, median |decode difference| "
          f"{statistics.median(abs(r[3]['decode']) for r in rows):.1%}")


if __name__ == "__main__":
    main()
