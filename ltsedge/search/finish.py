"""The end of a search: publish the frontier as models, then measure the baseline beside it.

Publishing (``frontier.py``) thins the search's front to the settings' resolution (``pareto.thin``),
re-measures every model kept from its file at the device profile's own policy (however the search timed
its candidates), then only the undecided ones (whose place on the front hangs on the noise) with the
strict policy. The baseline is measured at the profile's policy too, so the comparison is of figures
measured alike. What each pass cost is kept (``PublishCost``) and reported apart from the search's own
time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ltsedge.devices import DeviceProfile, strict
from ltsedge.search.baseline import baseline_architectures, compare, seeds_in_space
from ltsedge.search.budgets import Budgets
from ltsedge.search.candidate import Candidate
from ltsedge.search.evaluate import CandidateEvaluator
from ltsedge.search.frontier import PublishedModel, keep_front, remeasure, undecided, write_frontier
from ltsedge.search.pareto import thin
from ltsedge.search.outdir import OutputDir


@dataclass
class PublishCost:
    front: int = 0  # models the search's front held
    thinned: int = 0  # of those, the ones kept at the resolution (exported and re-measured)
    published: int = 0  # models the re-measured front holds
    strict: int = 0  # of the front, measured again strictly (undecided at the profile's policy)
    resolution: float = 0.0
    export_seconds: float = 0.0
    remeasure_seconds: float = 0.0  # every model kept, at the profile's policy
    strict_seconds: float = 0.0
    baseline_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Finished:
    frontier: list[PublishedModel]
    baseline: list[dict]  # one comparison row per baseline model
    cost: PublishCost = field(default_factory=PublishCost)


def finish(front: list[Candidate], settings, profile: DeviceProfile, store, outdir: OutputDir, *,
           runner_factory, log, with_baseline: bool = True) -> Finished:
    seeded = seeds_in_space(settings.baseline, settings.space, len(settings.baseline.layers)) \
        if settings.baseline is not None else []
    kept = thin(front, settings.resolution, keep={a.id for a in seeded})
    cost = PublishCost(front=len(front), thinned=len(kept), resolution=settings.resolution)
    clock = time.perf_counter()
    written = write_frontier(kept, outdir, settings.export_options, execution_provider=profile.execution_provider)
    cost.export_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    with runner_factory(profile, log=log) as runner:
        fresh = remeasure(written, runner, settings.objective, "profile", log=log)
    cost.remeasure_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    doubtful = undecided(fresh, settings.budgets, settings.objective)
    cost.strict = len(doubtful)
    with runner_factory(strict(profile), log=log) as runner:
        again = {p.candidate.arch.id: p for p in remeasure([p for p in fresh if p.candidate.arch.id in doubtful],
                                                           runner, settings.objective, "strict", log=log)}
    published = keep_front([again.get(p.candidate.arch.id, p) for p in fresh], outdir, settings.budgets)
    cost.strict_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    baseline: list[Candidate] = []
    if with_baseline and settings.baseline is not None:
        with runner_factory(profile, log=log) as runner:
            baseline = _baseline(settings, profile, runner, store, outdir, published)
    cost.baseline_seconds = time.perf_counter() - clock
    cost.published = len(published)
    return Finished(published, compare(baseline, [p.candidate for p in published]), cost)


def _baseline(settings, profile: DeviceProfile, runner, store, outdir: OutputDir,
              published: list[PublishedModel]) -> list[Candidate]:
    """The layer-scaled baseline, measured afresh (never from the store) at the profile's policy, each
    model with the embedding settings of the frontier model it is compared with."""
    evaluator = CandidateEvaluator(profile, runner, store, outdir, Budgets(), export=settings.export_options,
                                   fresh=True, objective=settings.objective)
    final = {p.candidate.arch.id: p.candidate for p in published}
    archs = baseline_architectures(settings.baseline, settings.space, list(final.values()))
    # A baseline model on the front (the search started from it) is that front model: one figure.
    measured = iter(evaluator.evaluate([a for a in archs if a.id not in final], generation=-1))
    return [final[a.id] if a.id in final else next(measured) for a in archs]
