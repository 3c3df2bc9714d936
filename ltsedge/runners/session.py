"""onnxruntime for the measuring worker: a session built to a ``RunSettings`` (options, execution
providers, glibc's malloc), one timed call of it (``make_run_once``), and whose fault a failure is.

Imported only by the worker (``worker.py``), and so, like it, imports nothing heavy: onnxruntime is
imported inside the functions that need it.
"""

from __future__ import annotations

import re
from typing import Any

from ltsedge.runners.memory import fix_mmap_threshold
from ltsedge.runners.protocol import RunSettings


def session_options(settings: RunSettings):
    import onnxruntime as ort

    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    modes = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL, "parallel": ort.ExecutionMode.ORT_PARALLEL}
    so = ort.SessionOptions()
    so.intra_op_num_threads = settings.intra_op_threads
    so.inter_op_num_threads = settings.inter_op_threads
    so.graph_optimization_level = levels[settings.graph_optimization]
    so.execution_mode = modes[settings.execution_mode]
    so.enable_cpu_mem_arena = settings.enable_cpu_mem_arena
    so.enable_mem_pattern = settings.enable_mem_pattern
    spin = "1" if settings.allow_spinning else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    so.add_session_config_entry("session.inter_op.allow_spinning", spin)
    so.log_severity_level = 3  # errors only: warnings would fill the worker's log
    return so


_mmap_threshold_kb = 0  # glibc's own, dynamic threshold until a request's settings fix it


def configure_malloc(settings: RunSettings) -> str:
    """Fix glibc's mmap threshold where the settings ask for it, before its reference or model is loaded; how
    this worker's malloc now runs: "default" (the C library's own: glibc's dynamic threshold), "mmap_threshold=
    <n>KiB", or "no_mallopt" (asked for, but not glibc: it cannot apply, and the figures are the library's own)."""
    global _mmap_threshold_kb
    wanted = settings.malloc_mmap_threshold_kb
    if wanted != _mmap_threshold_kb:
        if wanted == 0:  # glibc has no way back to the dynamic threshold once one was set
            raise RuntimeError(f"this worker's mmap threshold is fixed at {_mmap_threshold_kb} KiB: glibc's own "
                               f"threshold needs a fresh worker")
        if not fix_mmap_threshold(wanted):
            return "no_mallopt"
        _mmap_threshold_kb = wanted
    return f"mmap_threshold={_mmap_threshold_kb}KiB" if _mmap_threshold_kb else "default"


def providers(settings: RunSettings) -> list:
    ep = settings.execution_provider
    options = {k: _option_text(v) for k, v in settings.provider_options.items()}
    chain = [(ep, options)]
    if ep != "CPUExecutionProvider":
        chain.append("CPUExecutionProvider")  # for the nodes the accelerator does not implement
    return chain


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def create_session(path: str, settings: RunSettings):
    import onnxruntime as ort

    session = ort.InferenceSession(path, sess_options=session_options(settings), providers=providers(settings))
    ep = settings.execution_provider
    if ep not in session.get_providers():  # onnxruntime falls back to the CPU silently
        raise RuntimeError(f"execution provider {ep} could not be initialised "
                           f"(the session runs on {', '.join(session.get_providers())})")
    return session


MEMORY_WORDS = ("memory", "allocat", "bad_alloc")
# onnxruntime's words for a data file that is not beside the model: the files' fault, not the model's
MISSING_FILE_WORDS = ("external data path does not exist",)


def failure_kind(error: BaseException, message: str) -> str:
    """"model" for a failure the model will repeat on every run (onnxruntime refuses or fails to run it),
    which the store keeps; "environment" for one it need not: running out of memory depends on the
    machine's state, a missing external-data file on how the model was shipped, and an error not
    raised by onnxruntime (ltsedge's own code, an execution provider that did not start) says nothing
    about the model. Those are measured again next time."""
    if not type(error).__module__.startswith("onnxruntime"):
        return "environment"
    words = (*MEMORY_WORDS, *MISSING_FILE_WORDS)
    return "environment" if any(w in message.lower() for w in words) else "model"


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : ", "", text)


def make_run_once(session, feeds: dict, settings: RunSettings):
    """One full forward pass. On CUDA: inputs copied to the GPU once, outputs left there (IOBinding)."""
    if settings.execution_provider != "CUDAExecutionProvider":
        return lambda: session.run(None, feeds)
    import onnxruntime as ort

    device_id = int(settings.provider_options.get("device_id", 0))
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
