"""The end of a search: publish the frontier as models, then measure the baseline beside it.

The frontier's strict re-measurement and the baseline run back to back in one worker with the same
strict policy (and the baseline never from the store), so their comparison is one moment of a
machine whose speed drifts, not two.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsedge.devices import DeviceProfile, strict
from ltsedge.search.baseline import baseline_architectures, compare
from ltsedge.search.budgets import Budgets
from ltsedge.search.evaluate import OBJECTIVES, Candidate, CandidateEvaluator
from ltsedge.search.frontier import PublishedModel, publish
from ltsedge.search.outdir import OutputDir


@dataclass
class Finished:
    frontier: list[PublishedModel]
    baseline: list[dict]  # one comparison row per baseline model


def finish(front: list[Candidate], settings, profile: DeviceProfile, store, outdir: OutputDir, *,
           runner_factory, log, with_baseline: bool = True) -> Finished:
    careful = strict(profile)
    with runner_factory(careful, log=log) as runner:
        published = publish(front, runner, outdir, settings.budgets, settings.target_ort, log=log,
                            variant=OBJECTIVES[settings.objective][0], precision=settings.precision)
        baseline: list[Candidate] = []
        if with_baseline and settings.baseline is not None:
            evaluator = CandidateEvaluator(careful, runner, store, outdir, Budgets(),
                                           target_ort=settings.target_ort, fresh=True, objective=settings.objective,
                                           precision=settings.precision)
            final = {p.candidate.arch.id: p.candidate for p in published}
            archs = baseline_architectures(settings.baseline, settings.space, list(final.values()))
            # A baseline model on the front (the search started from it) is that front model: one figure.
            measured = iter(evaluator.evaluate([a for a in archs if a.id not in final], generation=-1))
            baseline = [final[a.id] if a.id in final else next(measured) for a in archs]
    return Finished(published, compare(baseline, [p.candidate for p in published]))
