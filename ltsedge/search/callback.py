"""Per-generation bookkeeping, as a pymoo ``Callback``: hypervolume, front size, progress.

pymoo calls it at the end of every ``tell``, once the generation's candidates are evaluated and
the survivors chosen. The hypervolume's normalisation is fixed after the first generation, so the
values of one search compare with each other.
"""

from __future__ import annotations

from pymoo.core.callback import Callback

from ltsedge.proxy import count_params
from ltsedge.search.checkpoint import SearchState
from ltsedge.search.pareto import HypervolumeScale, pareto_front


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
            largest = space.decode(space.upper_bounds)
            max_merit = merit(largest, count_params(largest).decoder_params)  # the space's largest model's
            state.hv_scale = HypervolumeScale.from_candidates(candidates, max_merit).to_dict()
        front = pareto_front(candidates, self.settings.budgets, merit)
        s = self.evaluator.stats
        record = {"generation": state.generation, "hypervolume": HypervolumeScale(**state.hv_scale)(front, merit),
                  "front_size": len(front), "evaluated": len(candidates), "measured": s.measured,
                  "cached": s.cached, "failed": s.failed}
        state.hv_history.append(record)
        if self.progress:
            self.progress.generation_done(state.generation, record)
