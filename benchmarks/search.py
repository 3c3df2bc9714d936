"""Search throughput and quality.

Part 1 (throughput): a search of a fixed small budget on the default space at sequence 192 (the
study's protocol). Prints candidates measured per minute, the share of wall time spent in timed and
warm-up inference versus everything else (building, exporting, loading, bookkeeping), and all-in
seconds per candidate by size.

Part 2 (quality): NSGA-II against random sampling of the same number of candidates, on three seeds,
final hypervolume on a common normalisation (the quick preset's space, sequence 64). Both methods
share one measurement store, so an architecture both meet is measured once and scored identically.

Part 3 (racing): the same search (same seed, nothing from the store) with racing and without; the
final front's hypervolume in ratio units (latency over the reference model timed beside it, which
does not drift between the two runs), racing's as a share of full precision's, and the time each took.

    python benchmarks/search.py [--part 1|2|3|all] [--population 20] [--generations 5]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from pymoo.indicators.hv import HV

from ltsedge.proxy import count_params
from ltsedge.runners import Runner
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.budgets import Budgets
from ltsedge.search.evaluate import CandidateEvaluator
from ltsedge.search.pareto import HypervolumeScale, pareto_front
from ltsedge.search.loop import SearchRun
from ltsedge.store import MeasurementStore


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the measuring workers, once closed)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def search(tmp: Path, name: str, population: int, generations: int, *, racing: bool = True, seed: int = 0):
    options = SearchOptions(preset="default", out=tmp / name, population=population, generations=generations,
                            seed=seed, baseline=False, store_path=tmp / f"{name}.sqlite", quiet=True, fresh=True,
                            objective="forward", racing=racing, measure="all", seed_baseline=False)
    settings, profile = resolve(options)
    started, cpu = time.perf_counter(), cpu_seconds()
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, options.out, store, log=lambda m: None).run()
    return result, profile, time.perf_counter() - started, cpu_seconds() - cpu


def throughput(tmp: Path, population: int, generations: int) -> None:
    result, profile, wall, cpu = search(tmp, "throughput", population, generations)
    ev = result.summary["evaluation"]
    n, loop = ev["measured"], ev["evaluate_seconds"]
    raced = sum(c.measurement.stopped_early for c in result.candidates)
    per = loop / max(n, 1)
    print(f"default space, sequence {profile.sequence}, objective forward, racing: {n} candidates measured "
          f"({raced} raced out after a first estimate)")
    print(f"  evaluation loop {loop:.0f} s = {per:.2f} s per candidate all-in: export {ev['export_seconds']:.0f} s, "
          f"session load {ev['load_seconds']:.0f} s, warm-up + timed inference {ev['inference_seconds']:.0f} s")
    print(f"  whole command {wall:.0f} s (frontier of {len(result.frontier)} re-measured strictly); "
          f"CPU busy {cpu / wall:.0%} of wall time (one core = 100%)")
    print(f"  the study's 100 x 30 search (3000 candidates at this rate): {3000 * per / 60:.0f} min")


def hypervolume_in_ratios(candidates) -> np.ndarray:
    """The front's points in (-params, ratio to the reference, memory): units that do not drift."""
    front = pareto_front(candidates, Budgets())
    points = np.array([[-c.params.decoder_params, c.measurement.latency_ratio, c.memory_mb] for c in front])
    return points


def racing(tmp: Path, population: int, generations: int) -> None:
    raced, _, raced_wall, _ = search(tmp, "raced", population, generations, racing=True)
    full, _, full_wall, _ = search(tmp, "full", population, generations, racing=False)
    a, b = hypervolume_in_ratios(raced.candidates), hypervolume_in_ratios(full.candidates)
    both = np.vstack([a, b])
    scale = np.array([both[:, 0].min(), both[:, 1].max() * 1.1, both[:, 2].max() * 1.1])
    hv = HV(ref_point=np.ones(3))

    def norm(p):
        return np.column_stack([1 - p[:, 0] / scale[0], p[:, 1] / scale[1], p[:, 2] / scale[2]])

    hv_raced, hv_full = hv(norm(a)), hv(norm(b))
    stopped = sum(c.measurement.stopped_early for c in raced.candidates)
    print(f"racing vs full precision, default space, {population} x {generations}, same seed:")
    print(f"  hypervolume (ratio units) {hv_raced:.4f} vs {hv_full:.4f}: {hv_raced / hv_full:.1%} of full precision")
    print(f"  wall time {raced_wall:.0f} s vs {full_wall:.0f} s; {stopped} of {len(raced.candidates)} raced out")


def quality(tmp: Path, seeds=(0, 1, 2), population: int = 12, generations: int = 5) -> None:
    store_path = tmp / "quality.sqlite"
    print(f"NSGA-II vs random sampling, quick space at sequence 64, {population * generations} candidates each")
    for seed in seeds:
        options = SearchOptions(preset="quick", out=tmp / f"nsga-{seed}", population=population,
                                generations=generations, seed=seed, baseline=False, store_path=store_path,
                                quiet=True, measure="all", seed_baseline=False)
        settings, profile = resolve(options)
        with MeasurementStore(store_path) as store:
            nsga = SearchRun(settings, profile, options.out, store, log=lambda m: None).run().candidates
            n = len(nsga)
            with Runner(profile, log=lambda m: None) as runner:
                evaluator = CandidateEvaluator(profile, runner, store, tmp, Budgets())
                random_archs = settings.space.sample(n, seed=1000 + seed)
                rand = evaluator.evaluate(random_archs, generation=1)
        largest = max((count_params(a.arch).decoder_params for a in nsga + rand))
        scale = HypervolumeScale.from_candidates(nsga + rand, largest)
        hv_nsga = scale(pareto_front(nsga, Budgets()))
        hv_rand = scale(pareto_front(rand, Budgets()))
        print(f"  seed {seed}: hypervolume NSGA-II {hv_nsga:.4f} vs random {hv_rand:.4f} "
              f"({'NSGA-II >= random' if hv_nsga >= hv_rand else 'random ahead'}; {n} vs {len(rand)} candidates)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="all", choices=["1", "2", "3", "all"])
    parser.add_argument("--population", type=int, default=20)
    parser.add_argument("--generations", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("1", "all"):
            throughput(Path(tmp), args.population, args.generations)
        if args.part in ("2", "all"):
            quality(Path(tmp))
        if args.part in ("3", "all"):
            racing(Path(tmp), args.population, args.generations)


if __name__ == "__main__":
    main()
