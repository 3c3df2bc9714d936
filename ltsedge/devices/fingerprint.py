"""Which machine measured a model, and in what state it was: the fingerprint and the noise sensors.

The fingerprint identifies the hardware and software a measurement is valid for (a latency from a
Raspberry Pi 4 says nothing about a Pi 5). Its hash covers only identity fields, never volatile ones
(load, clock, temperature, kernel release). ARM kernels often have no "model name" in /proc/cpuinfo,
so the CPU is named from its implementer and part codes; the board comes from the device tree.

Nothing here ever raises on a missing or odd /proc or /sys file: it falls back, or reports None.
``root`` is injectable so the tests read sample files from tests/data/. The readings taken beside
every measurement (temperature, throttling, clock, load) are ``sensors.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path("/")

# /proc/cpuinfo "CPU implementer" codes (from the Linux kernel's arch/arm64/include/asm/cputype.h).
IMPLEMENTERS = {
    0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon", 0x4E: "NVIDIA",
    0x50: "APM", 0x51: "Qualcomm", 0x53: "Samsung", 0x61: "Apple", 0xC0: "Ampere",
}
# (implementer, "CPU part") -> core name, for the cores found on edge boards and ARM servers.
PARTS = {
    (0x41, 0xD03): "Cortex-A53", (0x41, 0xD04): "Cortex-A35", (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57", (0x41, 0xD08): "Cortex-A72", (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75", (0x41, 0xD0B): "Cortex-A76", (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD0D): "Cortex-A77", (0x41, 0xD40): "Neoverse-V1", (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1", (0x41, 0xD46): "Cortex-A510", (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2", (0x41, 0xD49): "Neoverse-N2", (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD80): "Cortex-A520", (0x41, 0xD81): "Cortex-A720",
    (0x4E, 0x004): "Carmel",
    (0x61, 0x022): "M1 Icestorm", (0x61, 0x023): "M1 Firestorm", (0x61, 0x032): "M2 Blizzard",
    (0x61, 0x033): "M2 Avalanche",
    (0xC0, 0xAC3): "Ampere-1", (0xC0, 0xAC4): "Ampere-1a",
}
# Identity fields: what fingerprint_hash covers. The rest (os release, python, sensors) is context.
# Profile settings and the onnxruntime version are keyed separately by the store.
IDENTITY = ("arch", "cpu_model", "board", "cpu_implementer", "cpu_part", "logical_cores", "physical_cores",
            "memory_total_gb", "system")
# Identity fields that most machines do not have: hashed only when present, so adding them left the
# fingerprints of machines without them unchanged. A CPU quota (cgroups) limits the cores a process
# gets, a GPU is what a CUDA profile measures.
OPTIONAL_IDENTITY = ("cpu_quota", "gpu_model")


def machine_fingerprint(profile: Any = None, root: Path = ROOT) -> dict[str, Any]:
    """The machine (and, given a profile, the settings) a measurement was taken on."""
    blocks = _cpuinfo_blocks(root)
    implementer, part = _arm_core(blocks)
    memory_mb = _memory_total_mb(root)
    fp: dict[str, Any] = {
        "arch": platform.machine() or "unknown",
        "cpu_model": _cpu_model(blocks, implementer, part),
        "board": _board(root, blocks),
        "cpu_implementer": implementer,
        "cpu_part": part,
        "logical_cores": _logical_cores(blocks),
        "physical_cores": _physical_cores(blocks),
        "memory_total_mb": memory_mb,
        "memory_total_gb": round(memory_mb / 1024) if memory_mb else None,  # stable across kernels
        "system": platform.system(),
        "os": f"{platform.system()} {platform.release()}".strip(),
        "python": platform.python_version(),
        "onnxruntime": _onnxruntime_version(),
        "cpu_quota": _cpu_quota(root),
        "gpu_model": None,
    }
    if profile is not None:
        if profile.execution_provider == "CUDAExecutionProvider":
            fp["gpu_model"] = _gpu_model(int(profile.provider_options.get("device_id", 0)))
        fp["execution_provider"] = profile.execution_provider
        fp["settings"] = profile.settings()
        fp["settings_hash"] = profile.settings_hash()
    return fp


def fingerprint_hash(fp: dict[str, Any]) -> str:
    """Short stable hash of the identity fields: same hardware and OS family, same hash."""
    identity = {k: fp.get(k) for k in IDENTITY}
    identity.update({k: fp[k] for k in OPTIONAL_IDENTITY if fp.get(k) is not None})
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# cgroup CPU quota, GPU
# ---------------------------------------------------------------------------------------------
def _cpu_quota(root: Path) -> float | None:
    """Cores this process may use under a cgroup CPU quota (containers, CI runners); None when unlimited."""
    own = read_text(root / "proc/self/cgroup") or ""
    v2 = next((line[3:].strip() for line in own.splitlines() if line.startswith("0::")), "")
    for path in ([f"sys/fs/cgroup{v2.rstrip('/')}/cpu.max"] if v2 else []) + ["sys/fs/cgroup/cpu.max"]:
        text = read_text(root / path)
        if text:
            fields = text.split()  # "max 100000" or "150000 100000": quota and period in microseconds
            return None if fields[0] == "max" or len(fields) < 2 else _ratio(fields[0], fields[1])
    quota = read_text(root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us")  # cgroup v1
    period = read_text(root / "sys/fs/cgroup/cpu/cpu.cfs_period_us")
    return _ratio(quota, period) if quota and period else None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota.strip()), int(period.strip())
    except ValueError:
        return None
    return round(q / p, 2) if q > 0 and p > 0 else None


def _gpu_model(device_id: int) -> str | None:
    """The GPU's name (NVML, else nvidia-smi); None where neither answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(device_id))
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no pynvml or no driver: try the command
        pass
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(device_id)],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


# ---------------------------------------------------------------------------------------------
# /proc/cpuinfo
# ---------------------------------------------------------------------------------------------
def read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def _cpuinfo_blocks(root: Path) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per blank-line separated block; lines without "key : value" are skipped."""
    text = read_text(root / "proc/cpuinfo") or ""
    blocks, current = [], {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep and key.strip():
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def _first(blocks: list[dict[str, str]], *keys: str) -> str | None:
    for key in keys:
        for block in blocks:
            if block.get(key):
                return block[key]
    return None


def parse_hex(text: str | None) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _arm_core(blocks: list[dict[str, str]]) -> tuple[str | None, str | None]:
    """("ARM", "Cortex-A72"); big.LITTLE boards give every core type: "Cortex-A55+Cortex-A76"."""
    codes = []
    for block in blocks:
        impl, part = parse_hex(block.get("CPU implementer")), parse_hex(block.get("CPU part"))
        if impl is not None and (impl, part) not in codes:
            codes.append((impl, part))
    if not codes:
        return None, None
    impl_names = dict.fromkeys(IMPLEMENTERS.get(i, f"0x{i:02x}") for i, _ in codes)
    part_names = dict.fromkeys(PARTS.get((i, p), f"0x{p:03x}" if p is not None else "unknown") for i, p in codes)
    return "+".join(impl_names), "+".join(part_names)


def _cpu_model(blocks: list[dict[str, str]], implementer: str | None, part: str | None) -> str:
    name = _first(blocks, "model name", "cpu model")  # x86; MIPS/RISC-V use "cpu model"
    if name:
        return re.sub(r"\s+", " ", name)
    if part and not part.startswith("0x"):
        return f"{implementer} {part}"
    hardware = _first(blocks, "Hardware", "uarch")  # 32-bit ARM kernels: SoC name, e.g. BCM2835
    if hardware:
        return hardware
    if implementer:
        return f"{implementer} {part}"
    return platform.processor() or "unknown"


def _board(root: Path, blocks: list[dict[str, str]]) -> str | None:
    for path in ("proc/device-tree/model", "sys/firmware/devicetree/base/model"):
        text = read_text(root / path)
        if text and text.strip("\x00\n "):
            return text.strip("\x00\n ")
    model = _first(blocks, "Model")  # Raspberry Pi kernels also print the board in cpuinfo
    if model:
        return model
    product = read_text(root / "sys/devices/virtual/dmi/id/product_name")  # x86 machines and VMs
    return product.strip() if product and product.strip() else None


def _logical_cores(blocks: list[dict[str, str]]) -> int:
    processors = sum(1 for b in blocks if "processor" in b)
    return processors or os.cpu_count() or 1


def _physical_cores(blocks: list[dict[str, str]]) -> int | None:
    cores = {(b.get("physical id"), b.get("core id")) for b in blocks if "core id" in b}
    if cores:  # x86: hyper-threads share a (package, core) pair
        return len(cores)
    if any("CPU implementer" in b for b in blocks):  # ARM cores have no SMT
        return sum(1 for b in blocks if "processor" in b) or None
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - a sensor never raises
        return None


def _memory_total_mb(root: Path) -> float | None:
    text = read_text(root / "proc/meminfo") or ""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    if m:
        return round(int(m.group(1)) / 1024, 1)
    if root != ROOT:
        return None
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**20, 1)
    except Exception:  # noqa: BLE001
        return None


def _onnxruntime_version() -> str | None:
    try:
        import onnxruntime

        return onnxruntime.__version__
    except Exception:  # noqa: BLE001
        return None
