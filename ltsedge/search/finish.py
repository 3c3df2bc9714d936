"""The end of a search: publish the frontier as models, then measure the baseline beside it.

Publishing (``frontier.py``) thins the search's front to the settings' resolution (``pareto.thin``),
re-measures every model kept from its file at the device profile's own policy (however the search timed
its candidates), then only the undecided ones (whose place on the front hangs on the noise) with the
strict policy. The layer-scaled baseline's models the search started from (seeded) are re-measured
beside the front even where its figures left them off it: a baseline point is then judged on fresh
figures of both, taken together, so a baseline model can never come out faster than a front that was
only measured earlier. Thinning keeps them, and for each baseline point the front model the comparison
will pick (``baseline.comparison_anchors``), whatever would cover them. The rest of the baseline is measured as the front was (the objective's workload at
the profile's policy, the others coarsely), so the comparison is of figures measured alike. What each
pass cost is kept (``PublishCost``) and reported apart from the search's own time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ltsedge.devices import DeviceProfile, strict
from ltsedge.search.baseline import baseline_architectures, compare, comparison_anchors, seeds_in_space
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
    contenders: int = 0  # seeded baseline models off the search's front, re-measured beside it
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
           runner_factory, log, with_baseline: bool = True, evaluated: list[Candidate] = ()) -> Finished:
    """Publish ``front``; ``evaluated`` (every candidate of the search) holds the seeded baseline models."""
    seeded = {a.id for a in seeds_in_space(settings.baseline, settings.space, len(settings.baseline.layers))} \
        if settings.baseline is not None else set()
    anchors = comparison_anchors(settings.baseline, settings.space, front) \
        if with_baseline and settings.baseline is not None else set()
    kept = thin(front, settings.resolution, keep=seeded | anchors)
    contenders = _contenders(evaluated, seeded - {c.arch.id for c in kept}, settings.budgets) if with_baseline else []
    cost = PublishCost(front=len(front), thinned=len(kept), contenders=len(contenders), resolution=settings.resolution)
    clock = time.perf_counter()
    written = write_frontier(kept + contenders, outdir, settings.export_options,
                             execution_provider=profile.execution_provider)
    cost.export_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    with runner_factory(profile, log=log) as runner:
        fresh = remeasure(written, runner, settings.objective, "profile", log=log)
    cost.remeasure_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    doubtful = undecided(fresh, settings.budgets, settings.objective)
    cost.strict = len(doubtful)
    again = {}
    if doubtful:  # no strict runner (and no strict time) when every verdict was decided
        with runner_factory(strict(profile), log=log) as runner:
            again = {p.candidate.arch.id: p for p in remeasure([p for p in fresh if p.candidate.arch.id in doubtful],
                                                               runner, settings.objective, "strict", log=log)}
        cost.strict_seconds = time.perf_counter() - clock
    final = [again.get(p.candidate.arch.id, p) for p in fresh]
    published = keep_front(final, outdir, settings.budgets)
    clock = time.perf_counter()
    baseline: list[Candidate] = []
    if with_baseline and settings.baseline is not None:
        with runner_factory(profile, log=log) as runner:
            fresh_seeds = [p.candidate for p in final if p.candidate.arch.id in seeded]
            baseline = _baseline(settings, profile, runner, store, outdir, published, fresh_seeds)
    cost.baseline_seconds = time.perf_counter() - clock
    cost.published = len(published)
    return Finished(published, compare(baseline, [p.candidate for p in published]), cost)


def _contenders(evaluated: list[Candidate], ids: set[str], budgets: Budgets) -> list[Candidate]:
    """The candidates of ``ids`` that were measured and are within the budgets."""
    return [c for c in evaluated if c.arch.id in ids and c.ok and not c.predicted
            and not budgets.violations(c.params.decoder_params, c.latency_ms, c.memory_mb)]


def _baseline(settings, profile: DeviceProfile, runner, store, outdir: OutputDir,
              published: list[PublishedModel], fresh_seeds: list[Candidate]) -> list[Candidate]:
    """The layer-scaled baseline. Where the search started from a baseline model, that model's figure
    from publishing (re-measured beside the front, in the space's cheapest embedding); every other one
    measured afresh (never from the store), with the embedding settings of the frontier model it is
    compared with, as the front was re-measured: the objective's workload at the profile's policy, the
    others coarsely: only the objective is compared, and in a decode search the prefill timed in full
    was most of the baseline's time."""
    evaluator = CandidateEvaluator(profile, runner, store, outdir, Budgets(), export=settings.export_options,
                                   fresh=True, objective=settings.objective, coarse_others=True)
    seeds = {c.arch.n_layer: c for c in fresh_seeds}
    archs = [a for a in baseline_architectures(settings.baseline, settings.space, [p.candidate for p in published])
             if a.n_layer not in seeds]
    measured = {c.arch.n_layer: c for c in evaluator.evaluate(archs, generation=-1)}
    return [seeds.get(n) or measured[n] for n in settings.baseline.layers]
