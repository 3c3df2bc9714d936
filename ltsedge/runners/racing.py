"""Racing: spend precision only where the Pareto front can change.

Every candidate gets a cheap first estimate (``first_estimate`` paired samples). If even its most
optimistic latency (the fastest of those samples, less the tolerance) and memory (less its noise)
is dominated by a point of the current front — taken at its pessimistic figures — or breaks a
budget, no amount of further timing can put it on the front: it stops there. Everything else is
timed to full precision. The frontier is still re-measured afresh before it is published.

Only the race's own workload (the search's objective) is timed to the profile's tolerance. A generate
model's other workload is reported, not optimised: it is timed coarsely (``secondary``), since in a
decode search the prompt's prefill took about four fifths of each measurement (docs/benchmarks.md).
Its figures carry ``coarse: true``; a coarse figure never replaces a complete one in the store, and the
published frontier is re-measured afresh (search/frontier.py).

Pure and picklable: the parent sends a ``Race`` with each request, the worker asks ``settled``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MEMORY_RELATIVE, MEMORY_FLOOR_MB = 0.02, 2.0  # peak-memory noise (see check.verdict)
# The other workloads of a raced model: +-10% at 95% from 3 to 8 samples, a quarter of the time budget.
SECONDARY_TOLERANCE, SECONDARY_MIN_RUNS, SECONDARY_MAX_RUNS = 0.10, 3, 8


@dataclass(frozen=True)
class Race:
    workload: str  # the objective's workload: forward, prefill or decode
    params: float  # the candidate's quality merit: its decoder parameters, or a fitted proxy's (search/pareto.py)
    front: tuple[tuple[float, float, float], ...]  # (merit, latency ratio, peak MB) of the current front
    tolerance: float  # the front's figures are known within +-tolerance
    max_ratio: float | None = None  # the latency budget, as a ratio to the reference
    max_memory_mb: float | None = None
    first_estimate: int = 6  # samples before deciding: [min, max] of 6 covers the median with 96.9%
    coarse_others: bool = True  # time the other workloads coarsely (``secondary``)

    def secondary(self, settings):
        """The repeat policy for a workload other than the race's: ``settings`` (a RunSettings) made coarse."""
        min_runs = min(settings.min_runs, SECONDARY_MIN_RUNS)
        return dataclasses.replace(settings, tolerance=max(settings.tolerance, SECONDARY_TOLERANCE), min_runs=min_runs,
                                   max_runs=max(min_runs, min(settings.max_runs, SECONDARY_MAX_RUNS)),
                                   max_seconds=settings.max_seconds / 4)

    def settled(self, ratios: list[float], memory_mb: float | None) -> bool:
        """Is the candidate off the front (or over budget) beyond its uncertainty?"""
        if len(ratios) < self.first_estimate:
            return False
        fastest = min(ratios) * (1 - self.tolerance)
        lightest = None if memory_mb is None else memory_mb - max(MEMORY_RELATIVE * memory_mb, MEMORY_FLOOR_MB)
        if self.max_ratio is not None and fastest > self.max_ratio:
            return True
        if self.max_memory_mb is not None and lightest is not None and lightest > self.max_memory_mb:
            return True
        if lightest is None:
            return False
        for params, ratio, memory in self.front:
            slowest = ratio * (1 + self.tolerance)
            heaviest = memory + max(MEMORY_RELATIVE * memory, MEMORY_FLOOR_MB)
            if params >= self.params and slowest < fastest and heaviest < lightest:
                return True
        return False
