"""Memory figures of the measuring process itself: resident memory, its peak, and returning freed memory.

Peak memory (Linux): writing "5" to /proc/self/clear_refs resets the kernel's peak-RSS counter
(VmHWM) to the current RSS; a model's figure is VmHWM after its runs minus RSS before loading it.
glibc's malloc_trim(0) hands freed heap pages back to the kernel between models, and a fixed mmap
threshold (``fix_mmap_threshold``, a profile's ``malloc_mmap_threshold_kb``) makes the peak repeat. GPU
memory comes from NVML (pynvml) where it is installed, else from nvidia-smi. Imported by the worker: psutil and the standard library only.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import subprocess
import sys

import psutil

MIB = 2**20  # nvidia-smi reports MiB


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own symbols: libc's included
    except OSError:
        return None


LIBC = _libc() if sys.platform.startswith("linux") else None


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


M_MMAP_THRESHOLD = -3  # glibc's mallopt() parameter (malloc.h)


def fix_mmap_threshold(kib: int) -> bool:
    """Fix glibc's mmap threshold at ``kib`` KiB: a block at least that large gets its own mapping, handed
    back to the kernel as soon as it is freed. Left alone, glibc raises the threshold to the size of each
    mapped block freed (up to 32 MiB), after which such blocks come from the heap and may stay resident
    once freed; with several threads freeing them in no fixed order, a model's peak then differs between
    runs by up to a fifth (docs/benchmarks.md, "Memory that holds still"). Fixing it also stops that
    dynamic adjustment, for good. False where this C library has no mallopt (macOS) or refuses (musl)."""
    mallopt = getattr(LIBC, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, int(kib) * 1024))


HUGETLB_TUNABLE = "glibc.malloc.hugetlb=1"  # glibc >= 2.35: madvise(MADV_HUGEPAGE) on malloc's large blocks
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"


def with_huge_pages(env: dict[str, str]) -> dict[str, str]:
    """``env`` with glibc's huge-page tunable added to any the user set (read once, at process start)."""
    tunables = env.get("GLIBC_TUNABLES")
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{HUGETLB_TUNABLE}" if tunables else HUGETLB_TUNABLE}


def huge_pages_state() -> str:
    """Whether this process's large blocks can be on transparent huge pages: "on", "off" (not asked for),
    or why not (``huge_pages_unavailable``)."""
    if HUGETLB_TUNABLE not in os.environ.get("GLIBC_TUNABLES", "").split(":"):
        return "off"
    return huge_pages_unavailable() or "on"


def huge_pages_unavailable() -> str | None:
    """Why a process here cannot put its blocks on transparent huge pages ("no glibc", "kernel: never",
    "kernel: unknown"), or None where it can (glibc's tunable, the kernel's mode always or madvise)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        return "no glibc"
    mode = kernel_thp_mode()
    if mode is None:
        return "kernel: unknown"
    return None if mode in ("always", "madvise") else f"kernel: {mode}"


def kernel_thp_mode() -> str | None:
    """The kernel's transparent-huge-page mode ("always", "madvise", "never"), or None where unreadable."""
    try:
        with open(THP_MODE_FILE) as f:
            found = re.search(r"\[(\w+)\]", f.read())
    except OSError:
        return None
    return found.group(1) if found else None


def release_memory() -> None:
    """Collect garbage and return freed heap pages to the kernel (glibc only; musl has no malloc_trim)."""
    gc.collect()
    trim = getattr(LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


SLACK_BYTES = 1 << 20  # after a reset, the peak may sit this far above the RSS (pages touched meanwhile)


def reset_peak() -> bool:
    """Set the kernel's peak-RSS counter to the current RSS, and check that it did: False where the
    write is refused or ignored (some container and non-Linux kernels), or the counter did not drop."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    peak = peak_rss_bytes()
    return peak is not None and peak <= rss_bytes() + SLACK_BYTES


PROBE_BYTES = 8 << 20  # small: where the reset fails, this probe stays in every later peak


def peak_reset_works() -> bool:
    """Raise the peak with a short-lived buffer, free it, reset: did the peak come down?"""
    buffer = bytearray(PROBE_BYTES)
    buffer[::4096] = b"x" * len(buffer[::4096])  # touch every page: it must be resident
    del buffer
    release_memory()
    before = peak_rss_bytes()
    return reset_peak() and before is not None and peak_rss_bytes() < before - PROBE_BYTES // 2


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
    """GPU memory this process holds: NVML through pynvml (nvidia-ml-py) where installed, else the driver's
    nvidia-smi; device-wide use where per-process figures are hidden (e.g. containers with their own pid
    namespace); None where neither answers."""
    try:
        import pynvml
    except ImportError:
        return _gpu_memory_from_nvidia_smi(device_id)
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_id)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # noqa: BLE001 - no driver, no permission: no figure
        return None


def _gpu_memory_from_nvidia_smi(device_id: int, run=subprocess.run) -> int | None:
    """As ``gpu_memory_bytes``, from nvidia-smi's CSV (MiB): this process's line, else the device's use."""
    def query(what: str) -> list[list[str]]:
        out = run(["nvidia-smi", f"--query-{what}", "--format=csv,noheader,nounits", "-i", str(device_id)],
                  capture_output=True, text=True, timeout=10, check=True).stdout
        return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]

    try:
        for pid, used in query("compute-apps=pid,used_memory"):
            if int(pid) == os.getpid():
                return int(float(used) * MIB)
        return int(float(query("gpu=memory.used")[0][0]) * MIB)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):  # no driver, no GPU: no figure
        return None
