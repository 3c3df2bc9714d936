"""Memory that holds still: the peak memory of the same models under candidate settings, for repeatability
and for distance from what an app with default settings sees.

Models: ``--models`` random architectures of the default GPT-2 space, exported as the generate variant and
measured on a prompt of 192 tokens and one token after a 192-token cache, as a default search does. Timing
is cut to the least (one warm-up, two paired samples): only the memory figure is used.

Part 1, fresh processes: every model under every setting, ``--repeats`` times, each time in a new measuring
worker (memory_method "fresh_process": the model is the worker's first, after the reference model). The
worker is ltsedge's own (``ltsedge.runners.worker``), started with its session options extended for the two
settings a device profile does not hold:
  default      onnxruntime's defaults (arena growing by powers of two, weights pre-packed, memory pattern on)
               and glibc's (its dynamic mmap threshold): what an app with default settings sees
  same         arena_extend_strategy = kSameAsRequested: a CPU arena with that strategy registered with
               onnxruntime's environment (session.use_env_allocators = 1; the only way for the CPU provider),
               so the reference model and the model share it
  no-prepack   session config session.disable_prepacking = 1
  no-pattern   enable_mem_pattern = false (a profile setting)
  mmap-128k    glibc's mmap threshold fixed at 128 KiB (the profile setting malloc_mmap_threshold_kb = 128)
  median-of-3  the median of three fresh-process default figures (from the default's repeats: every split of
               six of them into two triples)
Part 2, the search's way: all models through one Runner (one long-lived worker: memory_method reset_peak
after the first), then reversed through a new one, under the default and under mmap-128k.

Per setting: the median and the largest between-run spread (max - min over the median), the models whose
figures all lie within 2% or 2 MB of each other, and the distance of the setting's median from the default's
median (the app's view): median of its size, and its range.

    python benchmarks/memory_settings.py [--models 8] [--repeats 4] [--seed 21]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ltsedge
from ltsedge.devices import load_profile
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.runners import Runner
from ltsedge.runners.protocol import RunSettings, read_message, write_message
from ltsedge.runners.reference import reference_model
from ltsedge.space import SearchSpace

MINIMAL_TIMING = dict(warmup=1, min_runs=1, max_runs=2, max_seconds=1.0, drift_check_every=0)
DEFAULT_REPEATS = 6  # the default's: two disjoint triples for median-of-3


@dataclass(frozen=True)
class Setting:
    name: str
    profile: dict = field(default_factory=dict)  # profile.replace(**profile)
    session_config: dict = field(default_factory=dict)  # onnxruntime session config entries
    same_as_requested: bool = False  # an environment CPU arena with arena_extend_strategy = kSameAsRequested


SETTINGS = (Setting("default"),
            Setting("same", same_as_requested=True),
            Setting("no-prepack", session_config={"session.disable_prepacking": "1"}),
            Setting("no-pattern", profile={"enable_mem_pattern": False}),
            Setting("mmap-128k", profile={"malloc_mmap_threshold_kb": 128}))
CHOSEN = "mmap-128k"

# The measuring worker with its session options extended by the setting (argv[1], JSON).
WORKER = r"""
import json, sys
import onnxruntime as ort
from ltsedge.runners import session, worker
setting = json.loads(sys.argv[1])
config = dict(setting["session_config"])
if setting["same_as_requested"]:
    cpu = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(cpu, ort.OrtArenaCfg({"arena_extend_strategy": 1}))  # kSameAsRequested
    config["session.use_env_allocators"] = "1"
plain = session.session_options
def session_options(settings):
    options = plain(settings)
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return options
session.session_options = session_options  # create_session looks it up there
worker.main()
"""


def fresh_peak(path: Path, reference: Path, settings: RunSettings, setting: Setting, tmp: Path) -> float:
    """The model's peak memory (MB) in a new worker: its first model, after the reference."""
    env = dict(os.environ)
    root = str(Path(ltsedge.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    extra = json.dumps({"session_config": setting.session_config, "same_as_requested": setting.same_as_requested})
    with subprocess.Popen([sys.executable, "-c", WORKER, extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env=env, cwd=tmp) as proc:
        read_message(proc.stdout)  # hello
        write_message(proc.stdin, {"cmd": "measure", "path": str(path), "run": settings, "shapes": None,
                                   "reference_path": str(reference), "race": None})
        reply = read_message(proc.stdout)
        write_message(proc.stdin, {"cmd": "exit"})
    if not reply or not reply.get("ok"):
        raise SystemExit(f"{path.name} under {setting.name}: {reply and reply.get('error')}")
    return reply["peak_memory_mb"]


def within(values: list[float]) -> bool:
    gap = max(values) - min(values)
    return gap <= 2.0 or gap <= 0.02 * statistics.median(values)


def summary(name: str, per_model: dict[str, list[float]], app: dict[str, float], app_low: dict[str, float],
            splits: bool = False) -> str:
    """One table row. ``splits``: the figures are medians of triples (two disjoint ones per split)."""
    spreads, held, distances, from_low = [], 0, [], []
    for model, values in per_model.items():
        if splits:  # the largest gap between two disjoint triples' medians
            pairs = [(statistics.median(a), statistics.median(b)) for a, b in values]
            gaps = [abs(x - y) for x, y in pairs]
            centre = statistics.median([x for pair in pairs for x in pair])
            spreads.append(max(gaps) / centre)
            held += all(g <= 2.0 or g <= 0.02 * centre for g in gaps)
        else:
            centre = statistics.median(values)
            spreads.append((max(values) - min(values)) / centre)
            held += within(values)
        distances.append((centre - app[model]) / app[model])
        from_low.append((centre - app_low[model]) / app_low[model])
    return (f"| {name} | {statistics.median(spreads):.2%} | {max(spreads):.2%} | {held}/{len(per_model)} | "
            f"{statistics.median(abs(d) for d in distances):.1%} | {min(distances):+.1%} to {max(distances):+.1%} | "
            f"{statistics.median(from_low):+.1%} ({min(from_low):+.1%} to {max(from_low):+.1%}) |")


def triple_splits(values: list[float]) -> list[tuple[list[float], list[float]]]:
    six = values[:6]
    out = []
    for a in itertools.combinations(range(6), 3):
        if 0 in a:  # each split once
            out.append(([six[i] for i in a], [six[i] for i in range(6) if i not in a]))
    return out


def long_lived(paths: list[Path], profile, order) -> dict[Path, float]:
    out = {}
    with Runner(profile) as runner:
        for i in order:
            m = runner.measure(paths[i])
            if not m.ok:
                raise SystemExit(f"{paths[i].name}: {m.error}")
            out[paths[i]] = m.peak_memory_mb
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=4, help="fresh processes per model and setting "
                        f"(the default's: at least {DEFAULT_REPEATS})")
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    base = load_profile("cpu").replace(malloc_mmap_threshold_kb=0, **MINIMAL_TIMING)
    archs = SearchSpace.default("gpt2").sample(args.models, seed=args.seed)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="ltsedge-memory-") as name:
        tmp = Path(name)
        reference = tmp / "reference.onnx"
        reference.write_bytes(reference_model())
        paths = []
        for arch in archs:
            paths.append(tmp / f"{arch.id}.onnx")
            export_model(arch, ExportOptions(variant="generate")).save(paths[-1])
        figures: dict[str, dict[str, list[float]]] = {s.name: {} for s in SETTINGS}
        for arch, path in zip(archs, paths):
            for setting in SETTINGS:
                settings = RunSettings.from_profile(base.replace(**setting.profile))
                repeats = max(args.repeats, DEFAULT_REPEATS) if setting.name == "default" else args.repeats
                values = [fresh_peak(path, reference, settings, setting, tmp) for _ in range(repeats)]
                figures[setting.name][arch.id] = values
                print(f"  {arch.id:<26} {setting.name:<11} " + " ".join(f"{v:8.2f}" for v in values), flush=True)
        search_way = {}
        for name, profile in (("default", base), (CHOSEN, base.replace(malloc_mmap_threshold_kb=128))):
            first = long_lived(paths, profile, range(len(paths)))
            second = long_lived(paths, profile, reversed(range(len(paths))))
            search_way[name] = {p.stem: [first[p], second[p]] for p in paths}
            print(f"  search's way, {name}: " + " ".join(f"{first[p]:.2f}/{second[p]:.2f}" for p in paths), flush=True)
    print(f"\n{len(archs)} models (seed {args.seed}), {args.repeats} fresh processes per model and setting "
          f"({max(args.repeats, DEFAULT_REPEATS)} for the default), {time.time() - started:.0f} s\n")
    print(table(figures, search_way))


def table(figures: dict[str, dict[str, list[float]]], search_way: dict[str, dict[str, list[float]]]) -> str:
    """The markdown table: a row per setting, then median-of-3, then the search's way."""
    app = {model: statistics.median(values) for model, values in figures["default"].items()}
    app_low = {model: min(values) for model, values in figures["default"].items()}
    rows = ["| setting (memory_method) | median spread | largest spread | within 2% or 2 MB | "
            "median distance from the app's view | distance range | from the app's lowest figure |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    rows += [summary(f"{s.name} (fresh_process)", figures[s.name], app, app_low) for s in SETTINGS]
    rows.append(summary("median-of-3 (3 x fresh_process)", {m: triple_splits(v) for m, v in figures["default"].items()},
                        app, app_low, splits=True))
    rows += [summary(f"{name} (one worker, then reversed: reset_peak)", per_model, app, app_low)
             for name, per_model in search_way.items()]
    return "\n".join(rows)


if __name__ == "__main__":
    main()
