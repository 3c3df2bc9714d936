"""Between models: the thermal cool-down and the drift guard, with the clock and sensors injected.

Cool-down (fan-less boards): sleep ``cooldown_s``, then, if ``max_temperature_c`` is set and the
temperature readable, wait until the hottest thermal zone is below it, at most ``max_cooldown_wait_s``.

Drift guard: every model is timed in alternation with the reference model (``timing.py``), so every
measurement says how fast the reference ran meanwhile, at no extra cost. The guard compares that
with the run's calibration (the reference alone, after warm-up, at the start of the run; kept for the
whole run, across a resume). A change beyond the run's own noise — the largest of ``DRIFT_FLOOR``,
4 x the calibration's relative spread and 3 x the median wander of the reference over the run so
far — in either direction is drift: the model is measured once more. The
ratios already cancel a machine that is uniformly slower or faster; the second measurement guards
against what does not cancel (a phase change in the middle of a model's samples). Nothing waits on
drift itself: a machine that got faster is good news, and a busy neighbour does not leave because we
sleep. Only a board that reports heat or throttling is given its cool-down.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

WAIT_STEP_S = 1.0  # how often to re-read the temperature while waiting
DRIFT_FLOOR = 0.10  # a shared VM's reference wanders by a few percent all day


def cool_down(profile, *, temperature: Callable[[], float | None], clock: Callable[[], float],
              sleep: Callable[[float], None], log: Callable[[str], None]) -> float:
    """Pause between two models as the profile asks; returns the seconds waited (by ``clock``)."""
    start = clock()
    if profile.cooldown_s > 0:
        sleep(profile.cooldown_s)
    limit = profile.max_temperature_c
    if limit is None:
        return clock() - start
    waiting_since = clock()
    while True:
        temp = temperature()
        if temp is None or temp < limit:
            return clock() - start
        waited = clock() - waiting_since
        if waited >= profile.max_cooldown_wait_s:
            log(f"still {temp:.1f} C after waiting {waited:.0f} s for it to drop below {limit:g} C; measuring anyway")
            return clock() - start
        sleep(min(WAIT_STEP_S, profile.max_cooldown_wait_s - waited))


@dataclass(frozen=True)
class Calibration:
    """The reference model alone, after warm-up: its median per-run time and its relative spread."""

    reference_ms: float
    noise: float  # median absolute deviation / median of the calibration samples

    @classmethod
    def from_samples(cls, samples: list[float]) -> Calibration:
        median = statistics.median(samples)
        mad = statistics.median(abs(s - median) for s in samples)
        return cls(median, mad / median if median > 0 else 0.0)

    def to_dict(self) -> dict:
        return {"reference_ms": self.reference_ms, "noise": self.noise}


class DriftGuard:
    """Has the machine changed since the calibration? Judged against the run's own noise: the
    calibration's spread and how much the reference's medians have wandered over the run so far."""

    HISTORY = 50  # reference medians remembered

    def __init__(self, calibration: Calibration, floor: float = DRIFT_FLOOR):
        self.calibration = calibration
        self.floor = floor
        self.history: list[float] = []  # relative changes of the reference's medians, model after model

    @property
    def limit(self) -> float:
        wander = statistics.median(abs(c) for c in self.history) if len(self.history) >= 5 else 0.0
        return max(self.floor, 4 * self.calibration.noise, 3 * wander)

    def change(self, reference_ms: float) -> float:
        return reference_ms / self.calibration.reference_ms - 1

    def drifted(self, reference_ms: float) -> bool:
        """Beyond the noise so far? (Then remembered as part of the run's noise.)"""
        change = self.change(reference_ms)
        beyond = abs(change) > self.limit
        self.history = (self.history + [change])[-self.HISTORY:]
        return beyond
