"""Do `ltsedge check` verdicts hold from one run to the next (issue 21, item 4)?

Five architectures spread over the quick preset's space by decoder parameters (1-6 layers, d_model up
to 384: a check of the default space's 16 x 1024 models takes minutes a run; forward pass, sequence
192, the `cpu` profile or ``--device``'s) are exported once and measured by one `ltsedge check` (a fresh store: it pins this
machine's calibration, as a CI cache would keep it). Each model then gets budgets 10% from its own
figures, one figure deciding each verdict: latency and memory budgets 10% above (should pass) for models
1 and 5, the latency budget 10% below (should fail on latency) for 2 and 4, the memory budget 10% below
(should fail on memory) for 3; the other budget 10% above. Then `ltsedge check
--budgets` runs ten times as CI runs it (a fresh process each, `CI=true`: marginal counts as fail), on a
quiet machine and again under a competing load the benchmark starts itself (a neighbour switching at
random between a compute-bound matrix product, streaming a 256 MB array and idling, 0.3-2 s each).

Per condition: how many of the 50 (model, run) verdicts equal that model's most frequent verdict, how
many equal the verdict its budgets were set for, how many checks were marginal, and how many
measurements the runs took (a verdict over its limit or marginal is measured again, up to twice).
Target (issue 21): the same verdict 50 of 50.

    python benchmarks/check_verdicts.py [--models 5] [--runs 10] [--margin 0.1] [--conditions quiet loaded]
                                       [--device cpu-steady]
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_choice import load  # noqa: E402  (the same competing neighbour)
from repeatability import spread_sample  # noqa: E402

from ltsedge.exporters import export_model  # noqa: E402
from ltsedge.exporters.options import ExportOptions  # noqa: E402
from ltsedge.search.api import SearchOptions, resolve  # noqa: E402


def check(models: list[Path], store: Path, device: str, *extra: str) -> dict:
    env = {**os.environ, "CI": "true", "LTSEDGE_STORE": str(store)}
    proc = subprocess.run([sys.executable, "-m", "ltsedge", "check", *map(str, models), "--device", device,
                           "--json", *extra], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ltsedge check failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout)


# (latency, memory) budget above (+1) or below (-1) each model's figure, in turn: every verdict hangs on
# one figure 10% from its budget (a model failing on memory is not also failing on latency).
SIDES = ((1, 1), (-1, 1), (1, -1), (-1, 1), (1, 1))


def budgets_file(path: Path, figures: list[dict], margin: float, device: str) -> list[bool]:
    """Budgets ``margin`` from each model's figures on the sides ``SIDES`` says; the verdicts intended."""
    lines, intended = [], []
    for i, r in enumerate(figures):
        latency, memory = SIDES[i % len(SIDES)]
        lines += ["[[model]]", f'path = "{Path(r["path"]).name}"', f"[model.budgets.{device}]",
                  f"max_latency_ms = {r['latency_ms'] * (1 + latency * margin):.4f}",
                  f"max_memory_mb = {r['peak_memory_mb'] * (1 + memory * margin):.4f}", ""]
        intended.append(latency > 0 and memory > 0)
    path.write_text("\n".join(lines))
    return intended


def repeated(models: list[Path], store: Path, budgets: Path, runs: int, device: str) -> list[dict[str, bool]]:
    """Each run's verdict per model (passed, counting marginal as CI does) and its marginal checks."""
    out = []
    for _ in range(runs):
        report = check(models, store, device, "--budgets", str(budgets))
        out.append({Path(r["path"]).name: (r["passed"], sum(bool(v) for v in r["marginal"].values()),
                                           r["latency_ms"], r["peak_memory_mb"],
                                           (r["measurement"] or {}).get("latency_ms"), 1 + len(r["remeasurements"]))
                    for r in report["results"]})
    return out


def summarise(label: str, runs: list[dict], intended: dict[str, bool], seconds: float) -> None:
    names = list(intended)
    same = agree = marginal = measured = 0
    for name in names:
        measured += sum(run[name][5] for run in runs)
        verdicts = [run[name][0] for run in runs]
        same += collections.Counter(verdicts).most_common(1)[0][1]
        agree += sum(v == intended[name] for v in verdicts)
        marginal += sum(run[name][1] for run in runs)
    total = len(names) * len(runs)
    per_model = ", ".join(f"{n[:18]}: {''.join('P' if run[n][0] else 'F' for run in runs)}" for n in names)
    print(f"| {label} | **{same}/{total}** | {agree}/{total} | {marginal} | {measured} | {seconds:.0f} s |", flush=True)
    print(f"  verdicts per run (P pass, F fail): {per_model}", flush=True)
    for name in names:  # how far the figures moved between the runs (relative to the first check's)
        lat = [run[name][2] for run in runs if run[name][2]]
        mem = [run[name][3] for run in runs if run[name][3]]
        first = [run[name][4] for run in runs if run[name][4]]
        print(f"  {name[:18]}: latency decided on {min(lat):.2f}-{max(lat):.2f} ms ({max(lat) / min(lat) - 1:.1%} "
              f"apart; the first measurements {min(first):.2f}-{max(first):.2f} ms, {max(first) / min(first) - 1:.1%}), "
              f"memory {min(mem):.1f}-{max(mem):.1f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--margin", type=float, default=0.1)
    parser.add_argument("--conditions", nargs="+", choices=["quiet", "loaded"], default=["quiet", "loaded"])
    parser.add_argument("--device", default="cpu", help="a built-in device profile's name (e.g. cpu-steady)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ltsedge-verdicts-") as tmp:
        tmp = Path(tmp)
        models = []
        quick = resolve(SearchOptions(preset="quick", quiet=True))[0].space
        for arch in spread_sample(args.models, seed=0, space=quick, pool=1000):
            path = tmp / f"{arch.id}.onnx"
            export_model(arch, ExportOptions()).save(path)
            models.append(path)
        store = tmp / "store.sqlite"
        started = time.perf_counter()
        first = check(models, store, args.device, "--max-latency-ms", "1e9", "--max-memory-mb", "1e9")
        print(f"{len(models)} models (quick space, forward, sequence 192), first check {time.perf_counter() - started:.0f} s; "
              f"between-run spread kept with the calibration: {first['between_run_spread']:.1%}")
        for r in first["results"]:
            print(f"  {Path(r['path']).name}: {r['latency_ms']:.2f} ms, {r['peak_memory_mb']:.1f} MB")
        budgets = tmp / "budgets.toml"
        intended = dict(zip((Path(r["path"]).name for r in first["results"]),
                            budgets_file(budgets, first["results"], args.margin, args.device)))
        print(f"\n{args.runs} runs of `CI=true ltsedge check --budgets` (budgets {args.margin:.0%} from the figures):")
        print("| condition | same verdict as the model's usual | as intended | marginal checks | measurements "
              "| wall |")
        print("|---|---|---|---|---|---|")
        if "quiet" in args.conditions:
            clock = time.perf_counter()
            quiet = repeated(models, store, budgets, args.runs, args.device)
            summarise("quiet", quiet, intended, time.perf_counter() - clock)
        if "loaded" not in args.conditions:
            return
        stop = mp.Event()
        neighbour = mp.Process(target=load, args=(stop, 0), daemon=True)
        neighbour.start()
        try:
            clock = time.perf_counter()
            loaded = repeated(models, store, budgets, args.runs, args.device)
        finally:
            stop.set()
            neighbour.join(timeout=10)
        summarise("competing load", loaded, intended, time.perf_counter() - clock)


if __name__ == "__main__":
    main()
