"""Device profiles, read from TOML: the built-in ones (``cpu``, ``arm64``, ``cuda``) or a user's file.

Profiles ship as ``ltsedge/devices/<name>.toml``; a user's own profile is any TOML file with the same
tables. ``profile.py`` defines and validates a profile; this module reads the files (every key
checked against the schema, never ignored) and checks that this onnxruntime has the profile's
execution provider. ``fingerprint.py`` identifies the machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ltsedge.devices.profile import DeviceProfile, check_type, coarse, strict
from ltsedge.errors import LtsedgeError
from ltsedge.files import read_toml
from ltsedge.validate import reject_unknown, toml_repr

PROFILE_DIR = Path(__file__).parent

# TOML table -> the fields it holds. Top-level keys: name, description.
TABLES: dict[str, tuple[str, ...]] = {
    "runtime": ("execution_provider", "provider_options", "intra_op_threads", "inter_op_threads",
                "graph_optimization", "execution_mode", "enable_cpu_mem_arena", "enable_mem_pattern",
                "allow_spinning", "malloc_mmap_threshold_kb", "huge_pages"),
    "workload": ("batch", "sequence", "context", "generate_loop"),
    "repeats": ("warmup", "min_runs", "max_runs", "max_seconds", "tolerance", "drift_check_every",
                "decode_reference", "workers"),
    "limits": ("timeout_s", "memory_limit_mb"),
    "budgets": ("max_latency_ms", "max_memory_mb", "max_prefill_ms", "max_decode_ms"),
    "thermal": ("cooldown_s", "max_temperature_c", "max_cooldown_wait_s"),
    "export": ("target_ort", "precision"),
}
TOP_LEVEL = ("name", "description")

# Where to get an execution provider that this onnxruntime lacks.
INSTALL_HINTS = {
    "CUDAExecutionProvider": "install onnxruntime-gpu",
    "TensorrtExecutionProvider": "install onnxruntime-gpu with TensorRT",
    "OpenVINOExecutionProvider": "install onnxruntime-openvino",
    "DmlExecutionProvider": "install onnxruntime-directml",
    "QNNExecutionProvider": "install onnxruntime-qnn",
    "CoreMLExecutionProvider": "use onnxruntime on macOS",
}


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------
def builtin_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def builtin_profiles() -> list[DeviceProfile]:
    """Every profile shipped with ltsedge, whether or not this machine has its execution provider."""
    return [load_profile(name, check_available=False) for name in builtin_names()]


def load_profile(name_or_path: str | Path, *, check_available: bool = True) -> DeviceProfile:
    """A builtin profile by name ("cpu", "arm64", "cuda") or a profile TOML file by path.

    ``check_available`` also requires the execution provider in this onnxruntime (to measure with it);
    pass False just to read or list a profile.
    """
    if _looks_like_path(name_or_path):
        path = Path(name_or_path)
        profile = _from_toml(path, source=str(path), default_name=path.stem)
    else:
        name = str(name_or_path)
        if name not in builtin_names():
            raise LtsedgeError(f"unknown device profile {name!r} (known: {', '.join(builtin_names())}; "
                               f"or give the path of a .toml file)")
        profile = _from_toml(PROFILE_DIR / f"{name}.toml", source="builtin", default_name=name)
    if check_available:
        check_provider(profile)
    return profile


def _looks_like_path(name_or_path: str | Path) -> bool:
    text = str(name_or_path)
    return isinstance(name_or_path, Path) or text.endswith(".toml") or "/" in text or "\\" in text


def _from_toml(path: Path, *, source: str, default_name: str) -> DeviceProfile:
    where = f"device profile file {path}"
    data = read_toml(path, "device profile file")
    fields = _flatten(data, where)
    fields.setdefault("name", default_name)
    try:
        return DeviceProfile(source=source, **fields)
    except LtsedgeError as e:  # range checks name the profile; say the file instead
        message = str(e).removeprefix(f"device profile {fields['name']!r}: ")
        raise LtsedgeError(f"{where}: {message}") from None


def _flatten(data: dict[str, Any], where: str) -> dict[str, Any]:
    """TOML tables -> DeviceProfile fields, with every key checked against the schema."""
    allowed = ", ".join([*TOP_LEVEL, *(f"[{t}]" for t in TABLES)])
    fields: dict[str, Any] = {}
    reject_unknown("key", data, [*TOP_LEVEL, *TABLES], sort_known=False, where=where, place="at the top level",
                   allowed=allowed)
    for key, value in data.items():
        if key in TOP_LEVEL:
            fields[key] = check_type(key, value, key, where)
            continue
        if not isinstance(value, dict):
            raise LtsedgeError(f"{where}: {key!r} must be a table [{key}], got {toml_repr(value)}")
        reject_unknown("key", value, TABLES[key], sort_known=False, where=where, place=f"in [{key}]")
        for sub, sub_value in value.items():
            fields[sub] = check_type(sub, sub_value, f"[{key}] {sub}", where)
    return fields


# ---------------------------------------------------------------------------------------------
# Execution provider availability
# ---------------------------------------------------------------------------------------------
def available_providers() -> list[str]:
    import onnxruntime

    return list(onnxruntime.get_available_providers())


def check_provider(profile: DeviceProfile) -> None:
    """Raise if this onnxruntime cannot run ``profile``'s execution provider."""
    available = available_providers()
    ep = profile.execution_provider
    if ep in available:
        return
    hint = INSTALL_HINTS.get(ep, "install an onnxruntime build that includes it")
    raise LtsedgeError(f"{profile.label}: execution provider {ep} is not available in this onnxruntime "
                       f"(available: {', '.join(available)}); {hint}")


__all__ = ["DeviceProfile", "available_providers", "builtin_names", "builtin_profiles", "check_provider",
           "coarse", "load_profile", "strict"]
