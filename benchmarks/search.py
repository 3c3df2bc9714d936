"""Search throughput and quality.

Part 1 (throughput): a search of a fixed small budget on the default space at sequence 192 (the
study's protocol). Prints candidates measured per minute, the share of wall time spent in timed and
warm-up inference versus everything else (building, exporting, loading, bookkeeping), and all-in
seconds per candidate by size.

Part 2 (quality): NSGA-II against random sampling of the same number of candidates, on three seeds,
final hypervolume on a common normalisation (the quick preset's space, sequence 64). Both methods
share one measurement store, so an architecture both meet is measured once and scored identically.

    python benchmarks/search.py [--part 1|2|all] [--population 10] [--generations 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ltsedge.proxy import count_params
from ltsedge.runners import Runner
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.evaluate import CandidateEvaluator
from ltsedge.search.frontier import HypervolumeScale, pareto_front
from ltsedge.search.budgets import Budgets
from ltsedge.search.run import SearchRun
from ltsedge.store import MeasurementStore


def throughput(tmp: Path, population: int, generations: int) -> None:
    options = SearchOptions(preset="default", out=tmp / "throughput", population=population, generations=generations,
                            seed=0, baseline=False, store_path=tmp / "throughput.sqlite", quiet=True, fresh=True)
    settings, profile = resolve(options)
    started = time.perf_counter()
    with MeasurementStore(options.store_path) as store:
        run = SearchRun(settings, profile, options.out, store, log=lambda m: None)
        result = run.run()
    wall = time.perf_counter() - started
    ev = result.summary["evaluation"]
    inference = ev["inference_seconds"]
    n = ev["measured"]
    print(f"default space, sequence {profile.sequence}: {n} candidates measured in {wall:.0f} s "
          f"({60 * n / wall:.1f} per minute, {wall / max(n, 1):.1f} s each all-in, frontier re-measure included)")
    print(f"  evaluation loop {ev['evaluate_seconds']:.0f} s: export {ev['export_seconds']:.0f} s, "
          f"session load {ev['load_seconds']:.0f} s, warm-up + timed inference {inference:.0f} s")
    print(f"  share of wall time in inference: {inference / wall:.0%}; everything else: {1 - inference / wall:.0%}")
    print(f"  share of the evaluation loop in inference: {inference / ev['evaluate_seconds']:.0%}")
    print(f"  frontier: {len(result.frontier)} models")


def quality(tmp: Path, seeds=(0, 1, 2), population: int = 12, generations: int = 5) -> None:
    store_path = tmp / "quality.sqlite"
    print(f"NSGA-II vs random sampling, quick space at sequence 64, {population * generations} candidates each")
    for seed in seeds:
        options = SearchOptions(preset="quick", out=tmp / f"nsga-{seed}", population=population,
                                generations=generations, seed=seed, baseline=False, store_path=store_path,
                                quiet=True)
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
    parser.add_argument("--part", default="all", choices=["1", "2", "all"])
    parser.add_argument("--population", type=int, default=10)
    parser.add_argument("--generations", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("1", "all"):
            throughput(Path(tmp), args.population, args.generations)
        if args.part in ("2", "all"):
            quality(Path(tmp))


if __name__ == "__main__":
    main()
