"""Racing in a search: which Race each candidate runs (see ``ltsedge.runners.racing``), from the front so far.

The front is kept in ratio space (a candidate's latency over the reference's, timed beside it), the
unit that does not drift with the machine.
"""

from __future__ import annotations

from ltsedge.runners.racing import Race
from ltsedge.proxy import decoder_merit, merit_of
from ltsedge.search.pareto import pareto_front


def race_for(merit_value: float, candidates: list, objective: str, budgets, tolerance: float,
             calibration_ms: float, merit=decoder_merit) -> Race:
    """The race of a candidate of merit ``merit_value`` (pareto.py: decoder parameters, or a fitted
    proxy's) against the front so far, the front's points in the same merit."""
    front = []
    for c in pareto_front(candidates, budgets, merit):
        ratio = c.measurement.ratio(objective)
        if ratio is not None and c.memory_mb is not None:
            front.append((merit_of(c, merit), ratio, c.memory_mb))
    max_ratio = budgets.max_latency_ms / calibration_ms if budgets.max_latency_ms is not None else None
    # an objective is the name of the workload it optimises (ltsedge.workloads): the one raced
    return Race(objective, merit_value, tuple(front), tolerance, max_ratio, budgets.max_memory_mb)
