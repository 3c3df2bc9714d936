"""Interleaved timing: every sample of a model is paired with a sample of the reference model.

A shared machine's speed moves by 10-35% from one minute to the next, but two models timed side
by side slow down together: the ratio of a model's time to a fixed reference model's stays within
~2% (measured: docs/measurement.md). So the worker alternates a sample of the model with a sample of
the reference of the same duration (as many reference runs as it takes), and the figure is the
median of the per-sample ratios (beside the compute reference, of the pairs timed while it ran at
its quiet speed: ``stats.figure_ratios``). The parent turns it back into milliseconds with the run's
fixed calibration of the reference (``latency_ms = ratio x calibration_ms``): within one run, milliseconds
then rank exactly as the ratios do, whatever the machine did meanwhile.

A sample lasts at least ``MIN_SAMPLE_MS``: a run shorter than that (a decode step of a small model
takes ~0.1 ms) is repeated and the batch timed together, so neither the timer's resolution nor an
IPC round trip per run is in the figure.

Pure Python and a clock: the worker imports it; the tests drive it with fake runs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ltsedge.runners import stats

MIN_SAMPLE_MS = 2.0
MAX_PER_SAMPLE = 1000


@dataclass
class Timed:
    """The samples of one workload: per-run milliseconds of the model and of the reference, paired."""

    model_ms: list[float] = field(default_factory=list)
    reference_ms: list[float] = field(default_factory=list)
    converged: bool = False
    stopped_early: bool = False  # raced out: dominated beyond its uncertainty, not refined
    runs_per_sample: int = 1
    coarse: bool = False  # timed to a coarse policy: not the objective of a raced search (racing.py)
    reference: str = "compute"  # the reference timed beside it (Workload.reference), or "none"

    @property
    def ratios(self) -> list[float]:
        """The ratios a figure is made of (``stats.figure_ratios``: beside the compute reference, the quiet pairs')."""
        return stats.figure_ratios(self.model_ms, self.reference_ms, self.reference)

    def to_dict(self) -> dict:
        return {"model_ms": self.model_ms, "reference_ms": self.reference_ms, "converged": self.converged,
                "stopped_early": self.stopped_early, "runs_per_sample": self.runs_per_sample,
                "coarse": self.coarse, "reference": self.reference}


def runs_filling(run_once: Callable[[], object], ms: float, clock=time.perf_counter) -> tuple[int, float]:
    """How many consecutive runs last at least ``ms`` (at least one, at most MAX_PER_SAMPLE), and their
    per-run time. At least one: a process descheduled between the first two clock reads would
    otherwise count zero runs, and a sample of zero runs has no time per run."""
    count, t0 = 0, clock()
    while count == 0 or (count < MAX_PER_SAMPLE and (clock() - t0) * 1000 < ms):
        run_once()
        count += 1
    return count, (clock() - t0) * 1000 / max(count, 1)


def timed_sample(run_once: Callable[[], object], runs: int, clock=time.perf_counter) -> float:
    """Per-run milliseconds of ``runs`` consecutive runs."""
    t0 = clock()
    for _ in range(runs):
        run_once()
    return (clock() - t0) * 1000 / runs


def time_paired(model_once: Callable[[], object], reference_once: Callable[[], object] | None, reference_run_ms: float,
                settings, *, first_estimate: int | None = None, stop_early: Callable[[Timed], bool] | None = None,
                reference_scale: float = 1.0, clock=time.perf_counter,
                before_sample: Callable[[], object] | None = None) -> Timed:
    """Warm-up, then paired samples until the median ratio is known within tolerance, the budget is
    spent, or (racing) ``stop_early`` says the first ``first_estimate`` samples settle it.

    ``reference_run_ms``: the reference's per-run time, to size its samples like the model's.
    ``reference_scale``: every reference sample is recorded times it (a workload timed beside the
    bandwidth reference: its samples in the compute reference's milliseconds, see ``reference.py``).
    With no ``reference_once`` the model is timed alone and every "reference sample" is
    ``reference_scale`` itself (the pinned calibration's ms): its ratios are its own ms in that unit.
    ``before_sample``: called, untimed, before every warm-up run and every sample of the model, which is
    then one run (a generator loop's decode step is timed after rewinding to the same past each time: the
    rewind is no part of a step an app takes)."""
    if before_sample is not None:
        model_once = _after(before_sample, model_once, clock)
    for _ in range(settings.warmup):
        model_once()
    per_sample, per_run_ms = (1, model_once()) if before_sample is not None else \
        runs_filling(model_once, MIN_SAMPLE_MS, clock)  # also one more warm-up
    sample_ms = per_sample * per_run_ms
    reference_runs = max(1, min(MAX_PER_SAMPLE * 10, round(sample_ms / max(reference_run_ms, 1e-6))))
    timed = Timed(runs_per_sample=per_sample)
    # A run after its untimed preparation times itself (``_after``): its own ms are the sample.
    sample = (lambda once, runs: once()) if before_sample is not None else \
        (lambda once, runs: timed_sample(once, runs, clock))
    start = clock()
    while True:
        if reference_once is None:
            timed.model_ms.append(sample(model_once, per_sample))
            timed.reference_ms.append(reference_scale)
        # Alternate which goes first, so that neither always follows the other's cache state.
        elif len(timed.model_ms) % 2 == 0:
            timed.model_ms.append(sample(model_once, per_sample))
            timed.reference_ms.append(timed_sample(reference_once, reference_runs, clock) * reference_scale)
        else:
            timed.reference_ms.append(timed_sample(reference_once, reference_runs, clock) * reference_scale)
            timed.model_ms.append(sample(model_once, per_sample))
        n = len(timed.model_ms)
        if stop_early is not None and n == first_estimate and stop_early(timed):
            timed.stopped_early = True
            return timed
        if stats.converged(timed.ratios, settings.min_runs, settings.tolerance, settings.max_runs, timed=n):
            timed.converged = True
            return timed
        if n >= settings.max_runs or clock() - start >= settings.max_seconds:
            return timed


def _after(prepare: Callable[[], object], run_once: Callable[[], object], clock) -> Callable[[], float]:
    """``run_once`` after an untimed ``prepare``; returns the run's own milliseconds."""
    def once() -> float:
        prepare()
        t0 = clock()
        run_once()
        return (clock() - t0) * 1000

    return once


def calibrate(reference_once: Callable[[], object], seconds: float, samples: int = 30,
              clock=time.perf_counter) -> list[float]:
    """The reference alone, ``samples`` samples or ``seconds``, whichever ends first: per-run ms each."""
    runs, _ = runs_filling(reference_once, MIN_SAMPLE_MS, clock)
    out, start = [], clock()
    while len(out) < samples and (not out or clock() - start < seconds):
        out.append(timed_sample(reference_once, runs, clock))
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)
