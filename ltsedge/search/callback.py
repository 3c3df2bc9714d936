"""Per-generation bookkeeping, as a pymoo ``Callback``: hypervolume, front size, progress.

pymoo calls it at the end of every ``tell``, once the generation's candidates are evaluated and
the survivors chosen. The hypervolume's normalisation is fixed after the first generation, so the
values of one search compare with each other.
"""

from __future__ import annotations

import dataclasses

from pymoo.core.callback import Callback

from ltsedge.proxy import count_params
from ltsedge.search.checkpoint import SearchState
from ltsedge.search.pareto import HypervolumeScale, pareto_front


def highest_merit(space, merit) -> float:
    """The highest merit the space holds: that of its widest model at each depth (by decoder parameters, the
    deepest; a fitted proxy may rank a shallower one above it)."""
    best = 0.0
    for depth in space.n_layer:
        at_depth = dataclasses.replace(space, n_layer=(depth,))  # as proxycheck.sampling.depth_set narrows it
        arch = at_depth.decode(at_depth.upper_bounds)
        best = max(best, merit(arch, count_params(arch).decoder_params))
    return best


class GenerationCallback(Callback):
    def __init__(self, evaluator, settings, state: SearchState, *, progress=None):
        super().__init__()
        self.evaluator, self.settings, self.state, self.progress = evaluator, settings, state, progress

    def notify(self, algorithm) -> None:
        state = self.state
        state.generation += 1
        candidates = self.evaluator.candidates()
        merit = self.settings.merit
        if state.hv_scale is None:
            space = self.settings.space
            state.hv_scale = HypervolumeScale.from_candidates(candidates, highest_merit(space, merit)).to_dict()
        front = pareto_front(candidates, self.settings.budgets, merit)
        s = self.evaluator.stats
        record = {"generation": state.generation, "hypervolume": HypervolumeScale(**state.hv_scale)(front, merit),
                  "front_size": len(front), "evaluated": len(candidates), "measured": s.measured,
                  "cached": s.cached, "failed": s.failed}
        state.hv_history.append(record)
        if self.progress:
            self.progress.generation_done(state.generation, record)
