"""Memory figures of the measuring process itself: resident memory, its peak, and returning freed memory.

Peak memory (Linux): writing "5" to /proc/self/clear_refs resets the kernel's peak-RSS counter
(VmHWM) to the current RSS; a model's figure is VmHWM after its runs minus RSS before loading it.
glibc's malloc_trim(0) hands freed heap pages back to the kernel between models. GPU memory comes
from NVML (pynvml) where it is installed. Imported by the worker: psutil and the standard library only.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import sys

import psutil


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own symbols: libc's included
    except OSError:
        return None


LIBC = _libc() if sys.platform.startswith("linux") else None


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def release_memory() -> None:
    """Collect garbage and return freed heap pages to the kernel (glibc only; musl has no malloc_trim)."""
    gc.collect()
    trim = getattr(LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def reset_peak() -> bool:
    """Set the kernel's peak-RSS counter to the current RSS. False where that is impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return peak_rss_bytes() is not None
    except OSError:
        return False


def peak_rss_bytes() -> int | None:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/status") as f:
                m = re.search(r"^VmHWM:\s+(\d+)\s*kB", f.read(), re.MULTILINE)
            return int(m.group(1)) * 1024 if m else None
        except OSError:
            return None
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, kB elsewhere


def gpu_memory_bytes(device_id: int) -> int | None:
    """GPU memory this process holds (pynvml); device-wide use where per-process figures are hidden
    (e.g. containers with their own pid namespace); None without pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_id)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # noqa: BLE001 - no pynvml, no driver, no permission: no figure
        return None
