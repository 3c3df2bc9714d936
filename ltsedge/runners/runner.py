"""Measure ONNX models on this device, one worker subprocess at a time.

A ``Runner`` owns one long-lived worker (``ltsedge.runners.worker``): starting onnxruntime once per
model would cost more than timing a small model. Whatever goes wrong with a model (it crashes the
runtime, hangs, eats memory, does not load) becomes ``Measurement(ok=False, error=...)`` and the
next model gets a fresh worker; the caller carries on.

Memory isolation: the worker resets its peak-RSS counter and trims the heap around every model
(see worker.py); the Runner also replaces a worker whose resting RSS grew by more than
``RESTART_GROWTH_MB`` (leaked or fragmented memory would hide in the next model's figure), and uses
a fresh worker per model where the counter cannot be reset (not Linux).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ltsedge.devices import DeviceProfile, check_provider
from ltsedge.devices.fingerprint import Sensors, machine_fingerprint
from ltsedge.errors import LtsedgeError
from ltsedge.runners import policy, stats
from ltsedge.runners.measurement import Measurement
from ltsedge.runners.process import WorkerDied, WorkerProcess
from ltsedge.runners.protocol import RunSettings
from ltsedge.runners.reference import reference_model
from ltsedge.wire import weights_mb

RESTART_GROWTH_MB = 64.0

Model = str | Path | bytes


def _warn(message: str) -> None:
    print(f"ltsedge: warning: {message}", file=sys.stderr)


class Runner:
    """Measures models under one device profile. Use as a context manager, or call close()."""

    def __init__(self, profile: DeviceProfile, *, timeout_s: float | None = None,
                 memory_limit_mb: float | None = None, log: Callable[[str], None] | None = None,
                 sensors: Any = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, fresh_worker_per_model: bool = False):
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
        self._tmp = tempfile.TemporaryDirectory(prefix="ltsedge-runner-")
        self._worker: WorkerProcess | None = None
        self._reference_path: Path | None = None
        self._count = 0

    # -- public API ------------------------------------------------------------------------------
    def measure(self, model: Model, *, shapes: dict[str, list[int]] | None = None) -> Measurement:
        """Load, warm up and time one model. Model failures come back as ``ok=False``, never raised."""
        path, temporary = self._model_path(model)
        try:
            return self._measure_path(path, shapes)
        finally:
            if temporary:
                path.unlink(missing_ok=True)

    def measure_many(self, models: list[Model], *, shapes: dict[str, list[int]] | None = None,
                     on_result: Callable[[int, Measurement], None] | None = None) -> list[Measurement]:
        """Measure a batch with a cool-down between models and the drift check (see policy.py):
        the reference model is timed before the batch, every ``drift_check_every`` models and after
        the last one; when it drifted, wait for it to come back and re-measure the models since the
        last good check. ``on_result(i, measurement)`` is called as soon as model i is measured (and
        again if it is re-measured), so a caller can keep every figure even if the batch is interrupted."""
        report = on_result or (lambda i, m: None)
        for model in models:  # a missing file is the caller's error: say so before measuring anything
            if not isinstance(model, (bytes, bytearray, memoryview)) and not Path(model).is_file():
                raise LtsedgeError(f"model file not found: {model}")
        every = self.profile.drift_check_every
        baseline = self._reference_baseline() if models and every else None
        results: list[Measurement] = []
        unchecked: list[int] = []
        for i, model in enumerate(models):
            if i:
                self._cool_down()
            results.append(self.measure(model, shapes=shapes))
            report(i, results[i])
            unchecked.append(i)
            if baseline is not None and (len(unchecked) >= every or i == len(models) - 1):
                if not self._reference_holds(baseline, len(unchecked)):
                    for j in unchecked:
                        self._cool_down()
                        results[j] = self.measure(models[j], shapes=shapes)
                        results[j].drift_remeasured = True
                        report(j, results[j])
                unchecked = []
        return results

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
            path = Path(self._tmp.name) / f"model-{self._count}.onnx"
            path.write_bytes(model)
            return path, True
        path = Path(model)
        if not path.is_file():
            raise LtsedgeError(f"model file not found: {path}")
        return path.resolve(), False  # the worker runs in another directory

    def _measure_path(self, path: Path, shapes: dict[str, list[int]] | None) -> Measurement:
        worker = self._ensure_worker()
        first_model = worker.served == 0
        # The warm-up model takes onnxruntime's one-time costs out of every model's figure. A worker that
        # cannot reset its peak counter serves one model only: there the warm-up's peak would be the floor.
        warmup = str(self._reference()) if worker.hello["peak_resettable"] else None
        request = {"cmd": "measure", "path": str(path), "run": RunSettings.from_profile(self.profile), "shapes": shapes,
                   "warmup_path": warmup}
        try:
            reply = worker.request(request, timeout_s=self.profile.timeout_s,
                                   memory_limit_mb=self.profile.memory_limit_mb)
        except WorkerDied as e:
            self._worker = None  # a fresh one for the next model
            reply = {"ok": False, "error": str(e)}
        else:
            worker.served += 1
        measurement = self._to_measurement(reply)
        if measurement.ok:
            measurement.memory_method = "fresh_process" if first_model else "reset_peak"
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
        times = reply["latencies_ms"]
        timed = {name: {**stats.summarize(w["latencies_ms"]), "runs": len(w["latencies_ms"]),
                        "converged": w["converged"]} for name, w in reply.get("workloads", {}).items()}
        generation = {}
        if "decode" in timed:
            generation = dict(workload="decode", prefill_latency_ms=timed.get("prefill", {}).get("latency_ms"),
                              decode_latency_ms=timed["decode"]["latency_ms"], kv_cache_mb=reply.get("kv_cache_mb"),
                              workloads=timed)
        return Measurement(ok=True, error=None, runs=len(times), converged=reply["converged"], **generation,
                           peak_memory_mb=reply["peak_memory_mb"],
                           device_peak_memory_mb=reply.get("device_peak_memory_mb"),
                           **stats.summarize(times), **common)

    # -- the worker ------------------------------------------------------------------------------
    def _ensure_worker(self) -> WorkerProcess:
        if self._worker is None or not self._worker.alive:
            self._worker = WorkerProcess(Path(self._tmp.name) / "worker.log")
        return self._worker

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None and self._worker.alive else None

    def _maybe_retire(self, reply: dict[str, Any]) -> None:
        """Replace the worker when its memory could leak into the next model's figure."""
        worker = self._worker
        if worker is None:
            return
        grown = reply.get("rss_after_mb", 0.0) - worker.hello["rss_mb"]
        if self.fresh_worker_per_model or not worker.hello["peak_resettable"] or grown > RESTART_GROWTH_MB:
            worker.close()
            self._worker = None

    # -- between models --------------------------------------------------------------------------
    def _cool_down(self) -> float:
        return policy.cool_down(self.profile, temperature=self.sensors.temperature_c, clock=self.clock,
                                sleep=self.sleep, log=self.log)

    def _reference(self) -> Path:
        if self._reference_path is None:
            self._reference_path = Path(self._tmp.name) / "reference.onnx"
            self._reference_path.write_bytes(reference_model())
        return self._reference_path

    def _measure_reference(self) -> Measurement:
        return self._measure_path(self._reference(), None)

    def _reference_baseline(self) -> float | None:
        ref = self._measure_reference()
        if not ref.ok:
            self.log(f"the drift reference model could not be measured ({ref.error}); drift check off")
            return None
        return ref.latency_ms

    def _reference_holds(self, baseline_ms: float, n_models: int) -> bool:
        """Is the machine as fast as at the start? If not, warn and wait (bounded) for it to recover."""
        limit = policy.drift_limit(self.profile)
        ref = self._measure_reference()
        if not ref.ok:
            self.log(f"the drift reference model could not be measured ({ref.error}); skipping this check")
            return True
        change = policy.relative_change(ref.latency_ms, baseline_ms)
        if abs(change) <= limit:
            return True
        self.log(f"the reference model's latency drifted {change:+.1%} ({ref.latency_ms:.3g} ms vs "
                 f"{baseline_ms:.3g} ms at the start, limit {limit:.0%}); cooling down, then re-measuring the "
                 f"last {n_models} model(s)")
        start = self.clock()
        while (waited := self.clock() - start) < self.profile.max_cooldown_wait_s:
            self.sleep(min(policy.DRIFT_RETRY_S, self.profile.max_cooldown_wait_s - waited))
            ref = self._measure_reference()
            if ref.ok and abs(policy.relative_change(ref.latency_ms, baseline_ms)) <= limit:
                return False
        self.log(f"the reference model is still off after {self.profile.max_cooldown_wait_s:g} s; re-measuring anyway")
        return False


def measure(model: Model, profile: DeviceProfile, *, shapes: dict[str, list[int]] | None = None,
            **runner_options: Any) -> Measurement:
    """Measure one model in a fresh worker (``runner_options`` as for ``Runner``)."""
    with Runner(profile, **runner_options) as runner:
        return runner.measure(model, shapes=shapes)
