"""A Runner's calibrations: the scale of its milliseconds, the run's own calibration and the drift guards.

Milliseconds: ratio x the scale (``Runner.calibration``): the machine's pinned calibration when given
(``pinned=``, ``use_pinned``; from the store by ``policy.pinned_calibration``), else the run's own. The run's
own calibration (the reference alone before the first model, ``run_calibration``) is measured either
way: it is the drift guard's baseline and says how the machine is doing now.

``RunnerCalibration`` is the Runner's base class holding them; it times the reference alone through the
Runner's ``_time_reference(seconds)`` (the worker, ``runner.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from ltsedge.runners.measurement import Measurement
from ltsedge.runners.policy import PIN_PAUSE_S, PIN_WINDOW_S, PIN_WINDOWS, Calibration, DriftGuard, PinnedCalibration

CALIBRATION_S = 1.0  # of the reference alone, before the first model


class RunnerCalibration:
    """The calibrations and drift guards of a Runner (its base class)."""

    sleep: Callable[[float], None]

    def _init_calibration(self, calibration: Calibration | None, pinned: PinnedCalibration | None) -> None:
        # The scale: milliseconds = ratio x this. The machine's pinned calibration, a resumed search's
        # own, or else the run's own calibration.
        self.calibration: Calibration | None = None
        # The reference alone at the start of this run (measured before the first model, or given):
        # the drift guard's baseline.
        self.run_calibration: Calibration | None = None
        self.pinned: PinnedCalibration | None = None
        self._guard: DriftGuard | None = None
        self._bandwidth_guard: DriftGuard | None = None  # for workloads timed beside the bandwidth reference
        if calibration is not None:
            self.use_calibration(calibration)
        if pinned is not None:
            self.use_pinned(pinned)

    def _time_reference(self, seconds: float) -> tuple[list[float], list[float]]:
        """Per-run ms of each reference alone (compute, bandwidth), ``seconds`` of each after warm-up."""
        raise NotImplementedError

    def use_calibration(self, calibration: Calibration) -> None:
        """Measure against a run's calibration taken earlier: the scale and the drift guard's baseline."""
        self.calibration, self.run_calibration = calibration, calibration
        self._guard, self._bandwidth_guard = DriftGuard(calibration), None

    def use_pinned(self, pinned: PinnedCalibration | Calibration) -> None:
        """Milliseconds through a scale fixed beforehand (the machine's pinned calibration, or a resumed
        search's); the drift guard keeps to this run's own calibration, measured before the first model."""
        if isinstance(pinned, PinnedCalibration):
            self.pinned, pinned = pinned, pinned.calibration
        self.calibration = pinned

    def calibrate(self) -> Calibration:
        """Time the reference alone (after warm-up) if this run has not yet: its own calibration (the
        drift guard's baseline), and the scale unless one was given. Returns the scale."""
        if self.run_calibration is None:
            self.run_calibration = Calibration.from_samples(*self._time_reference(CALIBRATION_S))
            self._guard, self._bandwidth_guard = DriftGuard(self.run_calibration), None
        if self.calibration is None:
            self.calibration = self.run_calibration
        return self.calibration

    def measure_pinned(self, windows: int = PIN_WINDOWS, seconds: float = PIN_WINDOW_S,
                       pause_s: float = PIN_PAUSE_S) -> PinnedCalibration:
        """The machine's calibration, measured carefully: ``windows`` windows of the reference alone with
        pauses between (policy.PinnedCalibration). The last window also serves as this run's own
        calibration when it has none yet."""
        timed, bandwidth = [], []
        for i in range(windows):
            if i:
                self.sleep(pause_s)
            compute_ms, bandwidth_ms = self._time_reference(seconds)
            timed.append(compute_ms)
            bandwidth.append(bandwidth_ms)
        if self.run_calibration is None:
            self.run_calibration = Calibration.from_samples(timed[-1], bandwidth[-1])
            self._guard, self._bandwidth_guard = DriftGuard(self.run_calibration), None
        from datetime import datetime, timezone

        return PinnedCalibration.from_windows(timed, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                              bandwidth)

    def bandwidth_scale(self) -> float:
        """Compute over bandwidth reference time, from the scale's calibration (the pinned one: fixed for
        the machine), else the run's own: a bandwidth reference sample times this is in the compute
        reference's milliseconds, so every workload's ratio is in one unit (reference.py)."""
        self.calibrate()
        return self.calibration.bandwidth_scale or self.run_calibration.bandwidth_scale or 1.0

    def _watched(self, measurement: Measurement) -> tuple[DriftGuard | None, float | None]:
        """The drift guard for a measurement and the reference time it judges. The compute reference is
        watched wherever a workload was timed beside it (a forward pass; a generate measurement's
        prefill): a small, cache-resident model whose time follows the machine, not the model beside it.
        The bandwidth reference runs slower beside a model than alone, by as much as the model's weights
        take of the caches (+12-50% here, differing from model to model: read as drift, it measured 69
        candidates of one search again), so it is watched only where nothing was timed beside the
        compute reference (a prefill raced out), against its level beside the run's first such model:
        that guard watches for change within the run. A decode step timed alone has no reference."""
        workloads = measurement.workloads or {measurement.workload: {"reference_ms": measurement.reference_ms}}
        beside = {}
        for figures in workloads.values():
            if figures.get("reference_ms") is not None:
                beside.setdefault(figures.get("reference", "compute"), figures["reference_ms"])
        if "compute" in beside:
            return self._guard, beside["compute"]
        if "bandwidth" not in beside:
            return None, None
        if self._bandwidth_guard is None and self.run_calibration is not None:
            self._bandwidth_guard = DriftGuard(Calibration(beside["bandwidth"], self.run_calibration.bandwidth_noise))
        return self._bandwidth_guard, beside["bandwidth"]
