"""Store keys: what identifies a model and a measurement, defined once for the search, profile and check.

A measurement is keyed by (model key, machine fingerprint hash, measurement settings hash,
onnxruntime version). The model key is either the content of a file (``sha256:<hex>``) or an
exported architecture (``arch:<id>:<setting>=<value>...``) with every setting that decides the
exported bytes: the backbone's graph version, opset, IR version, how the random weights were made,
the export variant and, where it changes the graph, the generate variant's KV-cache layout.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.devices.profile import LATER_SETTINGS
from ltsedge.errors import LtsedgeError
from ltsedge.hashing import settings_hash
from ltsedge.runners.loop import SESSION_LABEL, loop_label
from ltsedge.runners.reference import BANDWIDTH_VERSION
from ltsedge.runners.stats import PAIRS_METHOD
from ltsedge.workloads import WORKLOADS

WEIGHTS_SCHEME = "shared-v1"  # changes to how candidate weights are made invalidate stored figures
DEFAULT_VARIANT = "forward"  # keys of the full-sequence forward predate variants: it is left out of them


def measurement_key(model_key: str, fingerprint: dict, profile, shapes: dict | None = None,
                    variant: str = DEFAULT_VARIANT) -> tuple[str, str, str, str]:
    """The store's full key: model, machine, measurement settings (with any input shapes that replace
    the profile's workload, and the cache length of a generate model's decode), onnxruntime version."""
    return (model_key, fingerprint_hash(fingerprint), settings_hash(measurement_settings(profile, shapes, variant)),
            fingerprint.get("onnxruntime", ""))


# The profile's settings that decide how fast the reference model runs (not the workload or the repeat
# policy: a stricter re-measurement shares the machine's pinned calibration). huge_pages is in a profile's
# settings only when set (profile.LATER_SETTINGS), so calibrations pinned before it keep their keys.
RUNTIME_SETTINGS = ("execution_provider", "provider_options", "intra_op_threads", "inter_op_threads",
                    "graph_optimization", "execution_mode", "enable_cpu_mem_arena", "enable_mem_pattern",
                    "allow_spinning", "huge_pages")


# What changes a figure's value (the runtime, the workload, the memory settings), as against the repeat policy
# and the number of workers, which change only how precisely it is known: what a regression check
# (``check --against``) must hold equal. A generate model's figures also depend on its decode context and on
# what a decode step is timed beside (a ratio to the bandwidth reference, or plain milliseconds).
FIGURE_SETTINGS = RUNTIME_SETTINGS + ("malloc_mmap_threshold_kb", "batch", "sequence")
GENERATE_FIGURE_SETTINGS = ("context", "decode_reference")


def figure_settings(profile, variant: str = DEFAULT_VARIANT) -> dict[str, Any]:
    """The settings a figure of a ``variant`` model measured with ``profile`` depends on, every one named
    (a later setting at its old value too, so records of before and after it compare)."""
    settings = profile.settings()
    out = {k: settings.get(k, LATER_SETTINGS.get(k)) for k in FIGURE_SETTINGS}
    if variant != DEFAULT_VARIANT:
        out.update({k: getattr(profile, k) for k in GENERATE_FIGURE_SETTINGS})
        out["loop"] = generate_loop(profile)
    return out


def generate_loop(profile) -> str:
    """What times a generation model under ``profile`` (``runners/loop.py``): genai's loop or a session."""
    return loop_label(profile, "generate")


def runtime_settings(profile) -> dict[str, Any]:
    return {k: v for k, v in profile.settings().items() if k in RUNTIME_SETTINGS}


def calibration_key(fingerprint: dict, profile) -> tuple[str, str, str]:
    """The store's key of a pinned calibration: machine, runtime settings, onnxruntime version."""
    return fingerprint_hash(fingerprint), settings_hash(runtime_settings(profile)), fingerprint.get("onnxruntime", "")


def measurement_settings(profile, shapes: dict | None = None, variant: str = DEFAULT_VARIANT) -> dict[str, Any]:
    """What decides a measured figure besides the model and the machine: the profile's settings, which
    sample pairs a ratio is made of, the input shapes when given, the decode context for a generate
    model (keys of the forward variant at the profile's own workload predate both)."""
    settings = {**profile.settings(), "pairs": PAIRS_METHOD}
    if shapes:
        settings["shapes"] = {name: list(dims) for name, dims in sorted(shapes.items())}
    if profile.execution_provider == "CUDAExecutionProvider":
        settings["memory"] = "gpu"  # the figure judged is the GPU's (Runner._memory_figures); it was the host's
    if variant != DEFAULT_VARIANT:
        settings["context"] = profile.context
        loop = generate_loop(profile)
        if loop != SESSION_LABEL:  # figures of genai's loop (its version named); a session's keep their keys
            settings["loop"] = loop
        # Decode ratios are to the bandwidth reference since it was added (runners/reference.py): figures
        # timed beside the compute reference are of another unit, and never answer for these.
        # A profile that times decode alone says so in its settings (decode_reference = "none").
        if profile.decode_reference == "bandwidth" and any(
                w.variant == variant and w.reference == "bandwidth" for w in WORKLOADS.values()):
            settings["bandwidth_reference"] = BANDWIDTH_VERSION
    return settings


def arch_key(arch_id: str, export: dict[str, Any]) -> str:
    """Model key of an exported architecture, e.g. ``arch:gpt2-L3-d256-3f9a0c1b2d:ir=8:opset=17``.

    Export settings are sorted by name, so the same settings always give the same key.
    """
    _check_part("architecture id", arch_id)
    if not isinstance(export, dict):
        raise LtsedgeError(f"export settings must be a dict, got {type(export).__name__}")
    parts = [f"arch:{arch_id}"]
    for name in sorted(export):
        value = export[name]
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            raise LtsedgeError(f"export setting {name!r} = {value!r} must be a string, number, bool or null")
        text = value if isinstance(value, str) else json.dumps(value)
        _check_part("export setting name", name)
        _check_part(f"export setting {name!r}", text)
        parts.append(f"{name}={text}")
    return ":".join(parts)


def file_key(sha256: str) -> str:
    """Model key of an ONNX file given by content: ``sha256:<64 hex digits>``."""
    if not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise LtsedgeError(f"file hash {sha256!r} is not a SHA-256 hex digest (64 hex digits)")
    return f"sha256:{sha256.lower()}"


def _check_part(what: str, value: Any) -> None:
    # ':' separates the parts of a key and '=' a setting from its value, so they'd make keys ambiguous.
    if not isinstance(value, str) or not value or ":" in value or "=" in value:
        raise LtsedgeError(f"{what} {value!r} must be a non-empty string without ':' or '='")
