"""The end of a search: publish the frontier as models, then measure the baseline beside it.

Publishing (``frontier.py``) re-measures every front model from its file at the search's own policy,
then only the undecided ones (whose place on the front hangs on the noise) with the strict policy. The
strict pass and the baseline run back to back in one worker with the same strict policy (and the
baseline never from the store), so their comparison is one moment of a machine whose speed drifts, not
two. What each pass cost is kept (``PublishCost``) and reported apart from the search's own time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ltsedge.devices import DeviceProfile, strict
from ltsedge.search.baseline import baseline_architectures, compare
from ltsedge.search.budgets import Budgets
from ltsedge.search.evaluate import Candidate, CandidateEvaluator
from ltsedge.search.frontier import PublishedModel, keep_front, remeasure, undecided, write_frontier
from ltsedge.search.outdir import OutputDir


@dataclass
class PublishCost:
    front: int = 0  # models the search's front held
    published: int = 0  # models the re-measured front holds
    strict: int = 0  # of the front, measured again strictly (undecided at the search's policy)
    export_seconds: float = 0.0
    remeasure_seconds: float = 0.0  # every front model, at the search's policy
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
    cost = PublishCost(front=len(front))
    clock = time.perf_counter()
    written = write_frontier(front, outdir, settings.export_options, execution_provider=profile.execution_provider)
    cost.export_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    with runner_factory(profile, log=log) as runner:
        fresh = remeasure(written, runner, settings.objective, "search", log=log)
    cost.remeasure_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    doubtful = undecided(fresh, settings.budgets, settings.objective)
    cost.strict = len(doubtful)
    careful = strict(profile)
    baseline: list[Candidate] = []
    with runner_factory(careful, log=log) as runner:
        again = {p.candidate.arch.id: p for p in remeasure([p for p in fresh if p.candidate.arch.id in doubtful],
                                                           runner, settings.objective, "strict", log=log)}
        published = keep_front([again.get(p.candidate.arch.id, p) for p in fresh], outdir, settings.budgets)
        cost.strict_seconds, clock = time.perf_counter() - clock, time.perf_counter()
        if with_baseline and settings.baseline is not None:
            export = settings.export_options  # the evaluator exports and keys with it
            evaluator = CandidateEvaluator(careful, runner, store, outdir, Budgets(),
                                           target_ort=export.target_ort, fresh=True, objective=settings.objective,
                                           precision=export.precision)
            final = {p.candidate.arch.id: p.candidate for p in published}
            archs = baseline_architectures(settings.baseline, settings.space, list(final.values()))
            # A baseline model on the front (the search started from it) is that front model: one figure.
            measured = iter(evaluator.evaluate([a for a in archs if a.id not in final], generation=-1))
            baseline = [final[a.id] if a.id in final else next(measured) for a in archs]
        cost.baseline_seconds = time.perf_counter() - clock
    cost.published = len(published)
    return Finished(published, compare(baseline, [p.candidate for p in published]), cost)
