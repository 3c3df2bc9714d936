"""Measure ONNX models on this device, one worker subprocess at a time.

A ``Runner`` owns one long-lived worker (``ltsedge.runners.worker``): starting onnxruntime once per
model would cost more than timing a small model. Whatever goes wrong with a model (it crashes the
runtime, hangs, eats memory, does not load) becomes ``Measurement(ok=False, error=...)`` and the
next model gets a fresh worker; the caller carries on.

Memory isolation: the worker resets its peak-RSS counter and trims the heap around every model
(see worker.py); the Runner also replaces a worker whose resting RSS grew by more than
``RESTART_GROWTH_MB`` (leaked or fragmented memory would hide in the next model's figure), and uses
a fresh worker per model where the counter cannot be reset (not Linux).

Calibrations (the scale of the milliseconds, the run's own, the drift guards): its base class,
``calibration.RunnerCalibration``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ltsedge.cache import cache_dir, content_file
from ltsedge.devices import DeviceProfile, check_provider
from ltsedge.devices.fingerprint import machine_fingerprint
from ltsedge.devices.sensors import Sensors
from ltsedge.errors import LtsedgeError
from ltsedge.runners import policy
from ltsedge.runners.calibration import RunnerCalibration
from ltsedge.runners.genai_files import genai_dir, kv_cache_mb
from ltsedge.runners.loop import SESSION_LABEL, genai_runs, loop_label
from ltsedge.runners.measurement import PRIMARY_FIELDS, Measurement, calibrated
from ltsedge.runners.policy import Calibration, PinnedCalibration
from ltsedge.runners.pooling import pooled
from ltsedge.runners.process import WorkerDied, WorkerProcess
from ltsedge.runners.protocol import RunSettings
from ltsedge.runners.racing import Race
from ltsedge.runners.reference import bandwidth_model, reference_model
from ltsedge.scratch import ScratchDir
from ltsedge.wire import weights_mb
from ltsedge.workloads import PRIMARY_WORKLOAD, WORKLOADS

RESTART_GROWTH_MB = 64.0
CALIBRATION_TIMEOUT_S = 120.0  # at most, whatever the profile's per-model timeout
CALIBRATION_FLOOR_S = 10.0  # at least: loading the reference and its second of timing, on a slow board
Model = str | Path | bytes


def _warn(message: str) -> None:
    print(f"ltsedge: warning: {message}", file=sys.stderr)


class Runner(RunnerCalibration):
    """Measures models under one device profile. Use as a context manager, or call close()."""

    def __init__(self, profile: DeviceProfile, *, timeout_s: float | None = None,
                 memory_limit_mb: float | None = None, log: Callable[[str], None] | None = None,
                 sensors: Any = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, fresh_worker_per_model: bool = False,
                 calibration: Calibration | None = None, pinned: PinnedCalibration | None = None):
        check_provider(profile)
        # A fresh worker per model: slower (onnxruntime starts each time), but a model's peak memory is
        # then never lowered by pages an earlier, larger model left in the process (measured: a 4.2 MB
        # model read 2.4-3.4 MB after a 4 x 512 model in the same worker, 4.20-4.25 MB in fresh ones).
        self.fresh_worker_per_model = fresh_worker_per_model
        overrides = {k: v for k, v in (("timeout_s", timeout_s), ("memory_limit_mb", memory_limit_mb)) if v is not None}
        self.profile = profile.replace(**overrides) if overrides else profile  # validated like the profile
        self.log = log or _warn
        self.sensors = sensors or Sensors()
        self.clock, self.sleep = clock, sleep
        self._tmp = ScratchDir("ltsedge-runner-")  # removed by a later Runner if we are killed outright
        self._worker: WorkerProcess | None = None
        self._reference_paths: dict[str, Path] = {}
        self._count = 0
        self._said_no_huge_pages = False
        self.genai_loop = genai_runs(self.profile)  # generation bundles timed in onnxruntime-genai's loop
        self._init_calibration(calibration, pinned)

    # -- public API ------------------------------------------------------------------------------
    def measure(self, model: Model, *, shapes: dict[str, list[int]] | None = None, race: Race | None = None
                ) -> Measurement:
        """Load, warm up and time one model. Model failures come back as ``ok=False``, never raised."""
        path, temporary = self._model_path(model)
        try:
            if self.profile.workers > 1 and race is None:
                return self._measure_pooled(path, shapes)
            return self._measure_path(path, shapes, race)
        finally:
            if temporary:
                path.unlink(missing_ok=True)

    def measure_many(self, models: list[Model], *, shapes: dict[str, list[int]] | None = None,
                     on_result: Callable[[int, Measurement], None] | None = None,
                     race: Callable[[int], Race | None] | None = None) -> list[Measurement]:
        """Measure a batch, with the cool-down between models and the drift guard (see policy.py): a
        model during which the reference drifted beyond the run's noise is measured once more.
        ``race(i)`` gives model i's race (racing.py), asked just before it is measured so that it sees
        the figures of the models before it. ``on_result(i, measurement)`` is called as soon as model i
        is measured (and again if it is re-measured), so a caller keeps every figure even if the batch
        is interrupted."""
        report = on_result or (lambda i, m: None)
        for model in models:  # a missing file is the caller's error: say so before measuring anything
            if not isinstance(model, (bytes, bytearray, memoryview)) and not Path(model).is_file():
                raise LtsedgeError(f"model file not found: {model}")
        results: list[Measurement] = []
        for i, model in enumerate(models):
            if i:
                self._cool_down()
            result = self.measure(model, shapes=shapes, race=race(i) if race else None)
            if result.drift is not None and self.profile.drift_check_every:
                guard, _ = self._watched(result)
                self.log(f"the reference model ran {result.drift:+.0%} against the run's calibration while "
                         f"model {i + 1} was timed (limit {guard.judged_limit:.0%}); measuring it again")
                report(i, result)
                self._cool_down()
                result = self.measure(model, shapes=shapes, race=race(i) if race else None)
                result.drift_remeasured = True
            results.append(result)
            report(i, result)
        return results

    def _time_reference(self, seconds: float) -> tuple[list[float], list[float]]:
        """Per-run ms of each reference alone (compute, bandwidth), ``seconds`` of each after warm-up."""
        worker = self._ensure_worker()
        # Our own small model, under the profile's memory limit and its timeout (absurd thread counts
        # show up here first); the timeout is per model, so the reference gets at least its floor.
        timeout_s = min(max(self.profile.timeout_s, CALIBRATION_FLOOR_S), CALIBRATION_TIMEOUT_S)
        try:
            reply = worker.request({"cmd": "calibrate", "run": RunSettings.from_profile(self.profile),
                                    "reference_path": str(self._reference()),
                                    "bandwidth_path": str(self._reference("bandwidth")), "seconds": seconds},
                                   timeout_s=timeout_s, memory_limit_mb=self.profile.memory_limit_mb)
        except WorkerDied as e:
            self._worker = None
            raise LtsedgeError(f"the reference model could not be timed on this device ({e})") from None
        return reply["reference_ms"], reply.get("bandwidth_ms") or []

    def fingerprint(self) -> dict[str, Any]:
        return machine_fingerprint(self.profile)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        self._tmp.cleanup()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is not None and self._worker is not None:
            self._worker.kill()  # interrupted mid-measurement: don't wait for the runs to finish
            self._worker = None
        self.close()

    # -- one model -------------------------------------------------------------------------------
    def _model_path(self, model: Model) -> tuple[Path, bool]:
        if isinstance(model, (bytes, bytearray, memoryview)):
            # A file, not the pipe: the worker loads every model the same way, so a model's memory
            # figure does not depend on how it was handed over.
            self._count += 1
            path = self._tmp.path / f"model-{self._count}.onnx"
            path.write_bytes(model)
            return path, True
        path = Path(model)
        if not path.is_file():
            raise LtsedgeError(f"model file not found: {path}")
        return path.resolve(), False  # the worker runs in another directory

    def _measure_pooled(self, path: Path, shapes: dict[str, list[int]] | None) -> Measurement:
        """The profile's ``workers`` measurements of one model, each after the first in a fresh worker,
        pooled (pooling.py); a failure ends it."""
        measurements = []
        for k in range(self.profile.workers):
            if k:
                self._retire_worker()
            measurements.append(self._measure_path(path, shapes, None))
            if not measurements[-1].ok:
                break
        return pooled(measurements)

    def _retire_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def _measure_path(self, path: Path, shapes: dict[str, list[int]] | None, race: Race | None) -> Measurement:
        self.calibrate()
        worker = self._ensure_worker()
        first_model = worker.served == 0
        genai = genai_dir(path, self._tmp.path) if not shapes and self.genai_loop else None
        request = {"cmd": "measure", "path": str(path), "run": RunSettings.from_profile(self.profile),
                   "genai_dir": str(genai) if genai else None,
                   "shapes": shapes, "reference_path": str(self._reference()),
                   "bandwidth_path": str(self._reference("bandwidth")), "bandwidth_scale": self.bandwidth_scale(),
                   "calibration_ms": self.calibration.reference_ms, "race": race}
        try:
            reply = worker.request(request, timeout_s=self.profile.timeout_s,
                                   memory_limit_mb=self.profile.memory_limit_mb)
        except WorkerDied as e:
            self._worker = None  # a fresh one for the next model
            reply = {"ok": False, "error": str(e)}
        else:
            worker.served += 1
        measurement = self._to_measurement(reply)
        measurement.loop = loop_label(self.profile, "generate") if genai else SESSION_LABEL
        if genai and measurement.ok:
            measurement.kv_cache_mb = kv_cache_mb(path, self.profile)
        if measurement.ok:  # the first model of a worker: nothing before it could lower or raise its peak
            method = reply.get("memory_method", "reset_peak")
            measurement.memory_method = "fresh_process" if first_model and method == "reset_peak" else method
        if not (measurement.error or "").startswith("failed to load"):
            measurement.weights_mb = weights_mb(path)
        self._maybe_retire(reply)
        return measurement

    def _to_measurement(self, reply: dict[str, Any]) -> Measurement:
        common = dict(load_seconds=reply.get("load_seconds", 0.0),
                      inference_seconds=reply.get("inference_seconds", 0.0), **self.sensors.read())
        if not reply.get("ok"):
            return Measurement.failure(reply.get("error") or "unknown failure",
                                       reply.get("failure_kind", "environment"), **common)
        figures = {name: calibrated(w, self.calibration.reference_ms, self.bandwidth_scale())
                   for name, w in reply["workloads"].items()}
        primary = figures.get(PRIMARY_WORKLOAD) or next(iter(figures.values()))
        generation = {}
        generating = [w for w in WORKLOADS.values() if w.variant == "generate"]
        if any(w.name in figures for w in generating):  # raced out: only the objective's may be there
            generation = dict(workload=PRIMARY_WORKLOAD if PRIMARY_WORKLOAD in figures else next(iter(figures)),
                              **{w.figure: figures.get(w.name, {}).get("latency_ms") for w in generating},
                              kv_cache_mb=reply.get("kv_cache_mb"), workloads=figures)
        measurement = Measurement(ok=True, error=None, **{k: primary[k] for k in PRIMARY_FIELDS}, **generation,
                                  calibration_ms=self.calibration.reference_ms, **self._memory_figures(reply),
                                  **common)
        guard, watched_ms = self._watched(measurement)
        measurement.drift = guard.change(watched_ms) if guard and guard.drifted(watched_ms) else None
        return measurement

    def _memory_figures(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The memory that bounds the device is the figure judged: on CUDA the GPU's (an app's model lives
        there; the host's RSS is mostly the CUDA libraries, ~200 MB whatever the model), else the RSS peak."""
        gpu = reply.get("device_peak_memory_mb")
        if self.profile.execution_provider == "CUDAExecutionProvider" and gpu is not None:
            return dict(peak_memory_mb=gpu, device_peak_memory_mb=gpu, host_peak_memory_mb=reply["peak_memory_mb"],
                        memory_of="gpu")
        return dict(peak_memory_mb=reply["peak_memory_mb"], device_peak_memory_mb=gpu)

    # -- the worker ------------------------------------------------------------------------------
    def _ensure_worker(self) -> WorkerProcess:
        if self._worker is None or not self._worker.alive:
            self._worker = WorkerProcess(self._tmp.path / "worker.log", huge_pages=self.profile.huge_pages)
            state = self._worker.hello.get("huge_pages", "off")
            if self.profile.huge_pages and state != "on" and not self._said_no_huge_pages:
                self._said_no_huge_pages = True
                self.log(f"huge_pages is set but this worker's blocks cannot be on huge pages ({state}): "
                         f"figures are measured with the system's pages")
        return self._worker

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None and self._worker.alive else None

    def _maybe_retire(self, reply: dict[str, Any]) -> None:
        """Replace the worker when its memory could leak into the next model's figure."""
        worker = self._worker
        if worker is None:
            return
        # Growth from the worker at rest before its first model (the references loaded: ~100 MB above
        # the worker at start-up, which would retire it after every model)
        if worker.rested_mb is None:
            worker.rested_mb = reply.get("baseline_rss_mb", worker.hello["rss_mb"])
        grown = reply.get("rss_after_mb", 0.0) - worker.rested_mb
        if self.fresh_worker_per_model or not worker.hello["peak_resettable"] or grown > RESTART_GROWTH_MB:
            self._retire_worker()

    # -- between models --------------------------------------------------------------------------
    def _cool_down(self) -> float:
        return policy.cool_down(self.profile, temperature=self.sensors.temperature_c, clock=self.clock,
                                sleep=self.sleep, log=self.log)

    def _reference(self, kind: str = "compute") -> Path:
        """The reference model's file, "compute" or "bandwidth": one copy per machine in ltsedge's cache
        folder (``cache.py``), or in this Runner's scratch directory where the cache cannot be written."""
        if kind not in self._reference_paths:
            data = reference_model() if kind == "compute" else bandwidth_model()
            try:
                self._reference_paths[kind] = content_file(data, f"reference-{kind}", cache_dir() / "references",
                                                           self._tmp.path)
            except OSError as e:
                raise LtsedgeError(f"cannot write the {kind} reference model ({e})") from None
        return self._reference_paths[kind]


def measure(model: Model, profile: DeviceProfile, *, shapes: dict[str, list[int]] | None = None,
            **runner_options: Any) -> Measurement:
    """Measure one model in a fresh worker (``runner_options`` as for ``Runner``)."""
    with Runner(profile, **runner_options) as runner:
        return runner.measure(model, shapes=shapes)
