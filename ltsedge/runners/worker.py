"""The measuring process: loads one model at a time into onnxruntime and times it.

Run as ``python -m ltsedge.runners.worker`` by ``ltsedge.runners.process`` (the Runner never imports
this module). It imports onnxruntime, numpy and psutil only (no torch, no onnx): it starts fast and
its own memory stays small and flat, so the peak memory of a model is the model's.

Protocol: length-prefixed pickled dicts on stdin (requests) and on the original stdout (replies);
fd 1 is then pointed at stderr, so a stray print from a library cannot corrupt the stream.
  -> {"cmd": "measure", "path": ..., "run": RunSettings, "shapes": {...}, "warmup_path": ...}
  <- {"ok": True, "latencies_ms": [...], ...} or {"ok": False, "error": "failed to load: ..."}
  -> {"cmd": "exit"}  (or EOF)
On start it sends {"hello": ...}: pid, RSS, whether the peak-RSS counter can be reset.

Peak memory (Linux): writing "5" to /proc/self/clear_refs resets the kernel's peak-RSS counter
(VmHWM) to the current RSS; the model's figure is VmHWM after the runs minus RSS before loading.
After a model, glibc's malloc_trim(0) hands freed memory back to the kernel, so the next model
starts from the same baseline. Elsewhere the counter cannot be reset and the parent starts a fresh
worker for every model.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
import time
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.runners import stats
from ltsedge.runners.inputs import (
    PRIMARY_WORKLOAD,
    make_inputs,
    past_inputs,
    workloads_of,
)
from ltsedge.runners.memory import (
    gpu_memory_bytes,
    peak_rss_bytes,
    release_memory,
    reset_peak,
    rss_bytes,
)
from ltsedge.runners.protocol import RunSettings, read_message, write_message

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


# ---------------------------------------------------------------------------------------------
# onnxruntime
# ---------------------------------------------------------------------------------------------
def session_options(run: RunSettings):
    import onnxruntime as ort

    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    modes = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL, "parallel": ort.ExecutionMode.ORT_PARALLEL}
    so = ort.SessionOptions()
    so.intra_op_num_threads = run.intra_op_threads
    so.inter_op_num_threads = run.inter_op_threads
    so.graph_optimization_level = levels[run.graph_optimization]
    so.execution_mode = modes[run.execution_mode]
    so.enable_cpu_mem_arena = run.enable_cpu_mem_arena
    so.enable_mem_pattern = run.enable_mem_pattern
    spin = "1" if run.allow_spinning else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    so.add_session_config_entry("session.inter_op.allow_spinning", spin)
    so.log_severity_level = 3  # errors only: warnings would fill the worker's log
    return so


def providers(run: RunSettings) -> list:
    ep = run.execution_provider
    options = {k: _option_text(v) for k, v in run.provider_options.items()}
    chain = [(ep, options)]
    if ep != "CPUExecutionProvider":
        chain.append("CPUExecutionProvider")  # for the nodes the accelerator does not implement
    return chain


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def create_session(path: str, run: RunSettings):
    import onnxruntime as ort

    session = ort.InferenceSession(path, sess_options=session_options(run), providers=providers(run))
    ep = run.execution_provider
    if ep not in session.get_providers():  # onnxruntime falls back to the CPU silently
        raise RuntimeError(f"execution provider {ep} could not be initialised "
                           f"(the session runs on {', '.join(session.get_providers())})")
    return session


MEMORY_WORDS = ("memory", "allocat", "bad_alloc")


def failure_kind(error: str) -> str:
    """A model's own failure repeats on every run; running out of memory depends on the machine's state."""
    return "environment" if any(w in error.lower() for w in MEMORY_WORDS) else "model"


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : ", "", text)


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------
def make_run_once(session, feeds: dict, run: RunSettings):
    """One full forward pass. On CUDA: inputs copied to the GPU once, outputs left there (IOBinding)."""
    if run.execution_provider != "CUDAExecutionProvider":
        return lambda: session.run(None, feeds)
    import onnxruntime as ort

    device_id = int(run.provider_options.get("device_id", 0))
    binding = session.io_binding()
    device_inputs = {name: ort.OrtValue.ortvalue_from_numpy(x, "cuda", device_id) for name, x in feeds.items()}
    for name, value in device_inputs.items():
        binding.bind_ortvalue_input(name, value)
    for output in session.get_outputs():
        binding.bind_output(output.name, "cuda", device_id)

    def run_once():
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()  # wait for the GPU: time the work, not the launch

    return run_once


MIN_SAMPLE_MS = 2.0  # a timed sample lasts at least this long: sub-millisecond runs are timed in batches
MAX_PER_SAMPLE = 1000


def time_runs(run_once, run: RunSettings) -> tuple[list[float], bool]:
    """Warm-up, then timed samples until the median is known within tolerance (or the budget is spent).

    A sample is one run, or for runs shorter than ``MIN_SAMPLE_MS`` (a decode step of a small model
    takes ~0.1 ms) a batch of consecutive runs timed together and divided: the timer's resolution and
    the scheduler's jitter would otherwise be most of the figure."""
    for _ in range(run.warmup):
        run_once()
    per_sample, t0 = 0, time.perf_counter()  # how many runs fill a sample (the first, untimed, calibrates)
    while per_sample < MAX_PER_SAMPLE and (time.perf_counter() - t0) * 1000 < MIN_SAMPLE_MS:
        run_once()
        per_sample += 1
    times: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(per_sample):
            run_once()
        times.append((time.perf_counter() - t0) * 1000 / per_sample)
        if stats.converged(times, run.min_runs, run.tolerance):
            return times, True
        if len(times) >= run.max_runs or time.perf_counter() - start >= run.max_seconds:
            return times, False


_warmed_up = False


def warm_up_runtime(run: RunSettings, warmup_path: str | None) -> None:
    """Load a small model once before the first real one: onnxruntime's one-time costs (~10 MB of
    kernel registries and allocators on a CPU; the CUDA context on a GPU) are then in the baseline,
    so the first model in a worker is charged the same as any later one."""
    global _warmed_up
    if _warmed_up or not warmup_path:
        return
    _warmed_up = True
    try:
        session = create_session(warmup_path, run)
        make_run_once(session, make_inputs(session, run), run)()
        del session
    except Exception:  # noqa: BLE001 - the real model's load reports any problem
        pass
    release_memory()


# ---------------------------------------------------------------------------------------------
# One request
# ---------------------------------------------------------------------------------------------
def measure(request: dict, peak_resettable: bool) -> dict:
    run = request["run"]
    warm_up_runtime(run, request.get("warmup_path"))
    device_id = int(run.provider_options.get("device_id", 0))
    release_memory()
    if peak_resettable:
        reset_peak()
    baseline = rss_bytes()
    gpu_before = gpu_memory_bytes(device_id) if run.execution_provider == "CUDAExecutionProvider" else None
    reply: dict[str, Any] = {"ok": False, "baseline_rss_mb": baseline / MB}
    session = feeds = run_once = None
    try:
        t0 = time.perf_counter()
        try:
            session = create_session(request["path"], run)
        except Exception as e:  # noqa: BLE001 - any load error is the model's failure, reported
            reply["error"] = f"failed to load: {first_line(e)}"
            reply["failure_kind"] = failure_kind(reply["error"])
            return reply
        reply["load_seconds"] = time.perf_counter() - t0
        _test_fault(session)
        timed: dict[str, dict] = {}
        t1 = time.perf_counter()
        for workload in workloads_of(session):
            try:
                feeds = make_inputs(session, run, request.get("shapes"), workload=workload)
            except LtsedgeError as e:
                reply["error"] = f"cannot make inputs: {e}"
                reply["failure_kind"] = "model"
                return reply
            if workload == "decode":  # the cache an app holds while generating, at the profile's context
                reply["kv_cache_mb"] = sum(feeds[name].nbytes for name in past_inputs(session)) / MB
            try:
                run_once = make_run_once(session, feeds, run)
                times, converged = time_runs(run_once, run)
            except Exception as e:  # noqa: BLE001
                reply["error"] = f"failed to run ({workload}): {first_line(e)}"
                reply["failure_kind"] = failure_kind(reply["error"])
                return reply
            timed[workload] = {"latencies_ms": times, "converged": converged}
            run_once = feeds = None
        reply["inference_seconds"] = time.perf_counter() - t1
        primary = timed[PRIMARY_WORKLOAD if PRIMARY_WORKLOAD in timed else next(iter(timed))]
        peak = peak_rss_bytes()
        gpu_after = gpu_memory_bytes(device_id) if gpu_before is not None else None
        reply.update(ok=True, error=None, latencies_ms=primary["latencies_ms"], converged=primary["converged"],
                     workloads=timed,
                     peak_memory_mb=max(0.0, (peak - baseline) / MB) if peak is not None else None,
                     device_peak_memory_mb=max(0.0, (gpu_after - gpu_before) / MB) if gpu_after is not None else None)
        return reply
    finally:
        del session, feeds, run_once
        release_memory()
        reply["rss_after_mb"] = rss_bytes() / MB


def _test_fault(session) -> None:
    """Tests only: a model whose metadata asks for it kills the worker the way a broken runtime would."""
    if os.environ.get(TEST_FAULTS_ENV) != "1":
        return
    fault = session.get_modelmeta().custom_metadata_map.get(FAULT_KEY)
    if fault == "segv":
        ctypes.string_at(0)
    elif fault == "abort":
        os.abort()
    elif fault == "exit":
        os._exit(3)


def hello(peak_resettable: bool) -> dict:
    import onnxruntime

    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnx", "scipy", "pymoo"))
    return {"hello": True, "pid": os.getpid(), "rss_mb": rss_bytes() / MB, "peak_resettable": peak_resettable,
            "onnxruntime": onnxruntime.__version__, "heavy_modules": heavy}


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # from here on, anything printed goes to stderr, not into the reply stream
    requests = sys.stdin.buffer
    # Ctrl-C in a terminal reaches the whole process group: the parent decides what to do (it kills
    # us if it must), so a keypress never turns into a "crashed" measurement.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    import onnxruntime  # noqa: F401 - imported before the first baseline, so it is not counted

    onnxruntime.set_default_logger_severity(3)
    peak_resettable = reset_peak()
    write_message(replies, hello(peak_resettable))
    while True:
        request = read_message(requests)
        if request is None or request.get("cmd") == "exit":
            return
        if request.get("cmd") == "measure":
            write_message(replies, measure(request, peak_resettable))
        else:
            write_message(replies, {"ok": False, "error": f"unknown worker command {request.get('cmd')!r}"})


if __name__ == "__main__":
    main()
