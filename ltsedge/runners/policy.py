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

Pinned calibration: a run's own calibration is one second of the reference at start-up, and a busy
moment then rescales every millisecond of the run (three models profiled minutes apart moved 0.3-34%
in ms while their ratios moved 1-10%). So the machine's speed is measured carefully once (``PIN_WINDOWS``
windows of the reference alone; a low quantile of their medians: the machine when quiet) and kept in
the store; every run's ms are its ratios times that, and its own start-up calibration is reported beside
it as the machine's state now (and stays the drift guard's baseline: the guard works within a run).
``pinned_calibration`` takes it from the store, or measures and stores it once.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ltsedge.runners.runner import Runner

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


def _median_and_noise(samples: list[float]) -> tuple[float, float]:
    median = statistics.median(samples)
    mad = statistics.median(abs(s - median) for s in samples)
    return median, (mad / median if median > 0 else 0.0)


@dataclass(frozen=True)
class Calibration:
    """The references alone, after warm-up: the compute reference's median per-run time and relative
    spread, and the bandwidth reference's (None where it was not timed: an older calibration)."""

    reference_ms: float
    noise: float  # median absolute deviation / median of the calibration samples
    bandwidth_ms: float | None = None
    bandwidth_noise: float = 0.0

    @classmethod
    def from_samples(cls, samples: list[float], bandwidth: list[float] | None = None) -> Calibration:
        bandwidth_ms, bandwidth_noise = _median_and_noise(bandwidth) if bandwidth else (None, 0.0)
        return cls(*_median_and_noise(samples), bandwidth_ms, bandwidth_noise)

    @property
    def bandwidth_scale(self) -> float | None:
        """Compute over bandwidth reference time: a bandwidth reference sample times this is in the
        compute reference's milliseconds (reference.py)."""
        return self.reference_ms / self.bandwidth_ms if self.bandwidth_ms else None

    def to_dict(self) -> dict:
        out = {"reference_ms": self.reference_ms, "noise": self.noise}
        if self.bandwidth_ms is not None:
            out.update(bandwidth_ms=self.bandwidth_ms, bandwidth_noise=self.bandwidth_noise)
        return out


PIN_WINDOWS = 5  # windows of the reference alone, each timed like a run's calibration
PIN_WINDOW_S = 1.0
PIN_PAUSE_S = 0.2  # between windows: a neighbour's burst should not span them all
PIN_QUANTILE = 0.25  # of the window medians: the machine when quiet, not its luckiest second
STATE_FLOOR = 0.03  # a run's calibration closer than this to the pinned one is "as calibrated"
# The most a pin says a figure moves between runs (``figure_spread``). On a 2-vCPU VM the ratio of the two
# references, timed alone in five windows, had an interquartile range of 1.1% to 78% in back-to-back pins
# (its host switches between states in which memory-bound and compute-bound work run at different
# relative speeds): a pin measures the moment it was taken. A figure is made of the pairs timed while
# the compute reference ran at its quiet speed, and moved a median 2.3% between a quiet and a loaded
# run (docs/benchmarks-history.md, "Repeatability"); a pin in a bad moment made every budget within 33% of its
# figure marginal. Load is what ``check``'s confirmations handle (check/verdict.py); the band covers how
# far a figure moves between runs, capped at the repeatability target for that (3%). Capped at 5%, a model
# 4.8% under its budget read marginal (a CI fail) under the check-verdicts benchmark's load.
FIGURE_SPREAD_CAP = 0.03


@dataclass(frozen=True)
class PinnedCalibration:
    """The reference's speed on this machine and runtime settings, measured once and kept in the store.

    ``reference_ms``: a low quantile of the windows' medians; ``noise``: the median within-window
    spread; ``spread``: the windows' interquartile range relative to ``reference_ms`` (how far this
    machine's speed moves between runs); ``ratio_spread``: the interquartile range of the windows'
    bandwidth-to-compute reference ratios, relative to their median: how far a *ratio* of two different
    kinds of work moves between runs. A figure is a ratio to the reference times the pinned calibration,
    so a figure moves as ratios do, not as the machine's speed does: ``check`` widens a figure's
    interval by ``figure_spread`` (a pin under a passing load measured a speed spread of 87% here, and
    every budget within 87% of its figure read as marginal), at most ``FIGURE_SPREAD_CAP``."""

    reference_ms: float
    noise: float
    spread: float
    windows: tuple[float, ...] = ()
    created_at: str | None = None
    bandwidth_ms: float | None = None  # the bandwidth reference's low quantile, timed in the same windows
    bandwidth_windows: tuple[float, ...] = ()
    ratio_spread: float | None = None  # None: pinned before it was kept (pinned again)

    @classmethod
    def from_windows(cls, windows: list[list[float]], created_at: str | None = None,
                     bandwidth_windows: list[list[float]] | None = None) -> PinnedCalibration:
        each = [Calibration.from_samples(w) for w in windows if w]
        if not each:
            raise ValueError("no window of the reference was timed")
        medians = sorted(c.reference_ms for c in each)
        low, high = (_quantile(medians, q) for q in (PIN_QUANTILE, 1 - PIN_QUANTILE))
        bandwidth = sorted(statistics.median(w) for w in bandwidth_windows or () if w)
        ratios = sorted(statistics.median(b) / statistics.median(c) for c, b in zip(windows, bandwidth_windows or ())
                        if b and c)
        # The spreads: interquartile ranges (one burst of a neighbour is not the machine's spread)
        return cls(low, statistics.median(c.noise for c in each), (high - low) / low,
                   tuple(c.reference_ms for c in each), created_at,
                   _quantile(bandwidth, PIN_QUANTILE) if bandwidth else None, tuple(bandwidth),
                   _relative_iqr(ratios) if ratios else None)

    @classmethod
    def from_dict(cls, data: dict) -> PinnedCalibration:
        """Read back from the store; ValueError when the stored object is not one."""
        try:
            bandwidth = data.get("bandwidth_ms")
            ratio_spread = data.get("ratio_spread")
            pinned = cls(float(data["reference_ms"]), float(data["noise"]), float(data["spread"]),
                         tuple(float(w) for w in data.get("windows", ())), data.get("created_at"),
                         None if bandwidth is None else float(bandwidth),
                         tuple(float(w) for w in data.get("bandwidth_windows", ())),
                         None if ratio_spread is None else float(ratio_spread))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a pinned calibration ({e})") from None
        if not pinned.reference_ms > 0 or not 0 <= pinned.spread < float("inf") \
                or not (pinned.bandwidth_ms is None or pinned.bandwidth_ms > 0) \
                or not (pinned.ratio_spread is None or 0 <= pinned.ratio_spread < float("inf")):
            raise ValueError(f"not a pinned calibration ({data})")
        return pinned

    @property
    def calibration(self) -> Calibration:
        return Calibration(self.reference_ms, self.noise, self.bandwidth_ms)

    def to_dict(self) -> dict:
        out = {"reference_ms": self.reference_ms, "noise": self.noise, "spread": self.spread,
               "windows": list(self.windows), "created_at": self.created_at}
        if self.bandwidth_ms is not None:
            out.update(bandwidth_ms=self.bandwidth_ms, bandwidth_windows=list(self.bandwidth_windows))
        if self.ratio_spread is not None:
            out["ratio_spread"] = self.ratio_spread
        return out

    @property
    def figure_spread(self) -> float:
        """How far a figure (ratio x this calibration) moves between runs: the ratio spread where it was
        measured, else the speed spread (an upper bound), at most ``FIGURE_SPREAD_CAP``."""
        return min(FIGURE_SPREAD_CAP, self.ratio_spread if self.ratio_spread is not None else self.spread)

    def state(self, run: Calibration) -> str | None:
        """One line on how this run's machine differs from the pinned one; None within the noise (the
        pinned windows' spread, the run calibration's own spread, at least ``STATE_FLOOR``)."""
        change = run.reference_ms / self.reference_ms - 1
        if abs(change) <= max(STATE_FLOOR, self.spread, 4 * run.noise):
            return None
        return f"this run: the machine {abs(change):.0%} {'slower' if change > 0 else 'faster'} than calibrated"


class DriftGuard:
    """Has the machine changed since the calibration? Judged against the run's own noise: the
    calibration's spread and how much the reference's medians have wandered over the run so far."""

    HISTORY = 50  # reference medians remembered

    def __init__(self, calibration: Calibration, floor: float = DRIFT_FLOOR):
        self.calibration = calibration
        self.floor = floor
        self.history: list[float] = []  # relative changes of the reference's medians, model after model
        self.judged_limit = floor  # the limit of the last judgement

    @property
    def limit(self) -> float:
        wander = statistics.median(abs(c) for c in self.history) if len(self.history) >= 5 else 0.0
        return max(self.floor, 4 * self.calibration.noise, 3 * wander)

    def change(self, reference_ms: float) -> float:
        return reference_ms / self.calibration.reference_ms - 1

    def drifted(self, reference_ms: float) -> bool:
        """Beyond the noise so far (``judged_limit``)? (Then remembered as part of the run's noise.)"""
        change = self.change(reference_ms)
        self.judged_limit = self.limit  # what the change was judged against, before it widens the limit
        beyond = abs(change) > self.judged_limit
        self.history = (self.history + [change])[-self.HISTORY:]
        return beyond


def stored_pin(store, fingerprint: dict, profile) -> PinnedCalibration | None:
    """The machine's pinned calibration for the profile's runtime settings as the store keeps it (None:
    none yet, or not readable), without measuring anything."""
    from ltsedge.keys import calibration_key

    stored = store.get_calibration(*calibration_key(fingerprint, profile))
    try:
        return None if stored is None else PinnedCalibration.from_dict(stored)
    except ValueError:
        return None


def pinned_calibration(store, runner: Runner, *, redo: bool = False,
                       log: Callable[[str], None] | None = None) -> PinnedCalibration:
    """The machine's pinned calibration for the runner's runtime settings, from ``store``; measured (and
    stored) when the store has none, or when ``redo``. Making it is said in one line on ``log``."""
    from ltsedge.keys import calibration_key, runtime_settings

    fingerprint = runner.fingerprint()
    key = calibration_key(fingerprint, runner.profile)
    stored = None if redo else stored_pin(store, fingerprint, runner.profile)  # None when damaged: replaced
    if stored is not None and stored.bandwidth_ms is not None and stored.ratio_spread is not None:
        return stored  # else pinned before the bandwidth reference or the ratio spread: pinned again
    if not redo:
        (log or _note)(f"no pinned calibration of this machine with {runner.profile.name}'s runtime settings yet: "
                       f"measuring it once ({PIN_WINDOWS} x {PIN_WINDOW_S:g} s of the reference model)")
    pinned = runner.measure_pinned()
    store.put_calibration(*key, pinned.to_dict(), fingerprint=fingerprint, settings=runtime_settings(runner.profile))
    return pinned


def _quantile(ordered: list[float], q: float) -> float:
    """The value at quantile ``q`` of sorted ``ordered`` (the nearest rank: a measured value)."""
    return ordered[round(q * (len(ordered) - 1))]


def _relative_iqr(ordered: list[float]) -> float:
    """The interquartile range of sorted ``ordered`` relative to their median."""
    return (_quantile(ordered, 0.75) - _quantile(ordered, 0.25)) / statistics.median(ordered)


def _note(message: str) -> None:
    print(f"ltsedge: {message}", file=sys.stderr)
