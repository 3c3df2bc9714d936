"""The measuring process: loads one model at a time into onnxruntime and times it.

Run as ``python -m ltsedge.runners.worker`` by ``ltsedge.runners.process`` (the Runner never imports
this module). It imports onnxruntime, numpy and psutil only (no torch, no onnx): it starts fast and
its own memory stays small and flat, so the peak memory of a model is the model's.
The onnxruntime session it builds to a request's settings, and how it tells whose fault a failure
is, are in ``session.py``; this module is the process: the request loop, the reference model, and
the measurement of one model.

Protocol: length-prefixed pickled dicts on stdin (requests) and on the original stdout (replies);
fd 1 is then pointed at stderr, so a stray print from a library cannot corrupt the stream.
  -> {"cmd": "measure", "path": ..., "run": RunSettings, "shapes": {...}, "reference_path": ...,
      "bandwidth_path": ..., "bandwidth_scale": float, "calibration_ms": float, "race": Race}
  <- {"ok": True, "workloads": {name: paired samples}, ...} or {"ok": False, "error": "failed to load: ..."}
  -> {"cmd": "calibrate", "run": RunSettings, "reference_path": ..., "bandwidth_path": ..., "seconds": 1.0}
  <- {"ok": True, "reference_ms": [...], "bandwidth_ms": [...]}
Each workload is timed beside its reference (``Workload.reference``: the compute one, or the bandwidth
one for a decode step, whose samples are recorded times ``bandwidth_scale``: in the compute reference's
milliseconds). A profile with ``decode_reference = "none"`` times a decode step alone: its "reference
samples" are the request's ``calibration_ms`` (the parent's pinned calibration), so its ratio is its own
milliseconds in the compute reference's unit.
  -> {"cmd": "exit"}  (or EOF)
On start it sends {"hello": ...}: pid, RSS, whether the peak-RSS counter can be reset, whether its large
blocks are on huge pages (the environment it was started with: process.py).

Peak memory (Linux): writing "5" to /proc/self/clear_refs resets the kernel's peak-RSS counter
(VmHWM) to the current RSS; the model's figure is VmHWM after the runs minus RSS before loading.
After a model, glibc's malloc_trim(0) hands freed memory back to the kernel, so the next model
starts from the same baseline. Elsewhere the counter cannot be reset and the parent starts a fresh
worker for every model. A profile's ``malloc_mmap_threshold_kb`` fixes glibc's mmap threshold before
the first model (``configure_malloc``): the peak then repeats between runs and in any order of models.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.runners import timing
from ltsedge.runners.genai_loop import GENAI_REFUSED, GenaiBundle
from ltsedge.runners.inputs import (
    make_inputs,
    past_inputs,
    workloads_of,
)
from ltsedge.runners.memory import (
    gpu_memory_bytes,
    huge_pages_state,
    peak_reset_works,
    peak_rss_bytes,
    release_memory,
    reset_peak,
    rss_bytes,
)
from ltsedge.runners.protocol import RunSettings, read_message, write_message
from ltsedge.runners.racing import Race
from ltsedge.runners.session import configure_malloc, create_session, failure_kind, first_line, make_run_once
from ltsedge.workloads import WORKLOADS, timed_on

MB = 2**20
TEST_FAULTS_ENV = "LTSEDGE_WORKER_TEST_FAULTS"  # tests only: lets a model's metadata crash the worker
FAULT_KEY = "ltsedge.test_fault"


def exit_with_parent(check_every_s: float = 1.0) -> None:
    """Exit if the parent dies, even in the middle of a long run (an orphan would time models forever).

    A thread watching the parent's pid, not prctl(PR_SET_PDEATHSIG): that fires when the parent's
    *thread* that started us exits, which would kill a worker started from a thread pool.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(check_every_s)
            if os.getppid() != parent:  # re-parented: the parent is gone
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class Reference:
    """The reference model, loaded once before the first baseline and kept: every model is timed in
    alternation with it (``timing.py``), and loading it first takes onnxruntime's one-time costs (~10 MB
    of kernel registries and allocators on a CPU; the CUDA context on a GPU) out of every model's
    memory figure, the first model's included."""

    def __init__(self, path: str, settings: RunSettings):
        session = create_session(path, settings)
        self.run_once = make_run_once(session, make_inputs(session, settings), settings)
        self.session = session
        for _ in range(3):
            self.run_once()
        _, self.run_ms = timing.runs_filling(self.run_once, 50.0)


_references: dict[str, Reference] = {}


def references(settings: RunSettings, request: dict) -> dict[str, Reference]:
    """The references the request names, each loaded once (both before a model's memory baseline)."""
    for kind, key in (("compute", "reference_path"), ("bandwidth", "bandwidth_path")):
        if kind not in _references and request.get(key):
            _references[kind] = Reference(request[key], settings)
            release_memory()
    return _references


def calibrate(request: dict) -> dict:
    """Each reference alone: the run's calibration (and the drift guard's baseline)."""
    configure_malloc(request["run"])
    refs = references(request["run"], request)
    seconds = request.get("seconds", 1.0)
    reply = {"ok": True, "reference_ms": timing.calibrate(refs["compute"].run_once, seconds)}
    if "bandwidth" in refs:
        reply["bandwidth_ms"] = timing.calibrate(refs["bandwidth"].run_once, seconds)
    return reply


# ---------------------------------------------------------------------------------------------
# One request
# ---------------------------------------------------------------------------------------------
def measure(request: dict, peak_resettable: bool) -> dict:
    settings = request["run"]
    try:
        malloc = configure_malloc(settings)
    except RuntimeError as e:
        return {"ok": False, "error": str(e), "failure_kind": "environment"}
    refs = references(settings, request)
    device_id = int(settings.provider_options.get("device_id", 0))
    release_memory()
    if peak_resettable and not reset_peak():  # it worked at start-up: a failure now is worth saying
        peak_resettable = False
    baseline = rss_bytes()
    gpu_before = gpu_memory_bytes(device_id) if settings.execution_provider == "CUDAExecutionProvider" else None
    reply: dict[str, Any] = {"ok": False, "baseline_rss_mb": baseline / MB,
                             "memory_method": "reset_peak" if peak_resettable else "no_reset", "malloc": malloc}
    session = feeds = run_once = genai = None
    try:
        genai = request.get("genai_dir")  # a generation bundle timed in onnxruntime-genai's loop (genai_loop.py)
        t0 = time.perf_counter()
        try:
            session = GenaiBundle(genai, settings) if genai else create_session(request["path"], settings)
        except Exception as e:  # noqa: BLE001 - any load error is reported; failure_kind says whose it is
            reply["error"] = (f"{GENAI_REFUSED}: {first_line(e)}" if genai
                              else f"failed to load: {first_line(e)}")
            reply["failure_kind"] = failure_kind(e, reply["error"])
            return reply
        reply["load_seconds"] = time.perf_counter() - t0
        if not genai:
            _test_fault(session)
        timed: dict[str, dict] = {}
        t1 = time.perf_counter()
        race: Race | None = request.get("race")
        for workload in _ordered(timed_on("generate") if genai else workloads_of(session), race):
            prepare = None
            try:
                if genai:  # the generator's own loop: it fills the past of a decode step itself
                    session.check_lengths(workload)
                else:
                    feeds = make_inputs(session, settings, request.get("shapes"), workload=workload)
            except LtsedgeError as e:
                reply["error"] = f"cannot make inputs: {e}"
                reply["failure_kind"] = "model"
                return reply
            if workload == "decode" and not genai:  # the cache an app holds while generating, at the profile's context
                reply["kv_cache_mb"] = sum(feeds[name].nbytes for name in past_inputs(session)) / MB
            raced = race is not None and race.workload == workload
            coarse = race is not None and not raced and race.coarse_others
            try:
                if genai:
                    run_once, prepare = session.decode() if workload == "decode" else (session.prefill(), None)
                else:
                    run_once = make_run_once(session, feeds, settings)
                policy = race.secondary(settings) if coarse else settings
                kind = WORKLOADS[workload].reference if workload in WORKLOADS else "compute"
                if kind == "bandwidth" and settings.decode_reference == "none" and request.get("calibration_ms"):
                    kind, scale = "none", request["calibration_ms"]  # timed alone, in the pinned unit
                else:
                    kind = kind if kind in refs else "compute"  # a parent that sends no bandwidth reference
                    scale = request.get("bandwidth_scale", 1.0) if kind == "bandwidth" else 1.0
                result = _time(run_once, refs.get(kind), scale, policy, race if raced else None, baseline, prepare)
                result.coarse, result.reference = coarse, kind
            except Exception as e:  # noqa: BLE001
                reply["error"] = (f"{GENAI_REFUSED} ({workload}): {first_line(e)}" if genai
                                  else f"failed to run ({workload}): {first_line(e)}")
                reply["failure_kind"] = failure_kind(e, reply["error"])
                return reply
            timed[workload] = result.to_dict()
            run_once = feeds = prepare = None
            if result.stopped_early:  # raced out on the objective: the other workloads cannot save it
                break
        reply["inference_seconds"] = time.perf_counter() - t1
        peak = peak_rss_bytes()
        gpu_after = gpu_memory_bytes(device_id) if gpu_before is not None else None
        reply.update(ok=True, error=None, workloads=timed, reference_run_ms=refs["compute"].run_ms,
                     peak_memory_mb=max(0.0, (peak - baseline) / MB) if peak is not None else None,
                     device_peak_memory_mb=max(0.0, (gpu_after - gpu_before) / MB) if gpu_after is not None else None)
        return reply
    finally:
        if genai and session is not None:
            session.close()  # genai's generator and model, before the heap is trimmed
        del session, feeds, run_once
        release_memory()
        reply["rss_after_mb"] = rss_bytes() / MB


def _ordered(workloads: tuple[str, ...], race: Race | None) -> list[str]:
    """The raced workload (the search's objective) first: if it settles the candidate, the rest is skipped."""
    return sorted(workloads, key=lambda w: w != (race.workload if race else None))


def _time(run_once, ref: Reference | None, scale: float, settings: RunSettings, race: Race | None,
          baseline: int, prepare=None) -> timing.Timed:
    def settled(timed: timing.Timed) -> bool:
        peak = peak_rss_bytes()
        memory_mb = max(0.0, (peak - baseline) / MB) if peak is not None else None
        return race.settled(timed.ratios, memory_mb)

    return timing.time_paired(run_once, ref.run_once if ref else None, ref.run_ms if ref else 0.0, settings,
                              reference_scale=scale, first_estimate=race.first_estimate if race else None,
                              stop_early=settled if race else None, before_sample=prepare)


def _test_fault(session) -> None:
    """Tests only: a model whose metadata asks for it kills the worker the way a broken runtime would."""
    if os.environ.get(TEST_FAULTS_ENV) != "1":
        return
    fault = session.get_modelmeta().custom_metadata_map.get(FAULT_KEY) or ""
    if fault == "segv":
        ctypes.string_at(0)
    elif fault == "abort":
        os.abort()
    elif fault == "exit":
        os._exit(3)
    elif fault.startswith("exit-once:"):  # a passing trouble: the first worker to load it dies, no other
        marker = Path(fault.split(":", 1)[1])
        if not marker.exists():
            marker.touch()
            os._exit(3)


def hello(peak_resettable: bool) -> dict:
    import onnxruntime

    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnx", "scipy", "pymoo"))
    return {"hello": True, "pid": os.getpid(), "rss_mb": rss_bytes() / MB, "peak_resettable": peak_resettable,
            "onnxruntime": onnxruntime.__version__, "heavy_modules": heavy, "huge_pages": huge_pages_state()}


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # from here on, anything printed goes to stderr, not into the reply stream
    requests = sys.stdin.buffer
    # Ctrl-C in a terminal reaches the whole process group, and SIGTERM too where `timeout` or systemd
    # sends it: the parent decides what to do (it kills us if it must; exit_with_parent if it died), so
    # neither turns into a "crashed" measurement.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_with_parent()
    import onnxruntime  # noqa: F401 - imported before the first baseline, so it is not counted

    onnxruntime.set_default_logger_severity(3)
    # Tests only: pretend this kernel will not reset the peak (as some containers' will not).
    peak_resettable = peak_reset_works() and os.environ.get(TEST_FAULTS_ENV) != "no_peak_reset"
    write_message(replies, hello(peak_resettable))
    while True:
        request = read_message(requests)
        if request is None or request.get("cmd") == "exit":
            return
        if request.get("cmd") == "measure":
            write_message(replies, measure(request, peak_resettable))
        elif request.get("cmd") == "calibrate":
            write_message(replies, calibrate(request))
        else:
            write_message(replies, {"ok": False, "error": f"unknown worker command {request.get('cmd')!r}"})


if __name__ == "__main__":
    main()
