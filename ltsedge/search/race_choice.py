"""Racing in a search: which Race each candidate runs (see ``ltsedge.runners.racing``), from the front so far.

The front is kept in ratio space (a candidate's latency over the reference's, timed beside it), the
unit that does not drift with the machine.
"""

from __future__ import annotations

from ltsedge.runners.racing import Race
from ltsedge.search.pareto import pareto_front


def race_for(params: int, candidates: list, objective: str, budgets, tolerance: float,
             calibration_ms: float) -> Race:
    front = []
    for c in pareto_front(candidates, budgets):
        ratio = c.measurement.ratio(objective)
        if ratio is not None and c.memory_mb is not None:
            front.append((c.params.decoder_params, ratio, c.memory_mb))
    max_ratio = budgets.max_latency_ms / calibration_ms if budgets.max_latency_ms is not None else None
    # an objective is the name of the workload it optimises (ltsedge.workloads): the one raced
    return Race(objective, params, tuple(front), tolerance, max_ratio, budgets.max_memory_mb)
