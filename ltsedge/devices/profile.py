"""A device profile: how to run and time a model on one kind of device, validated on creation.

The profile names the onnxruntime execution provider and session options, the workload (batch x
sequence tokens), the repeat policy, limits, optional default budgets and the thermal policy for
fan-less boards. ``settings()`` is everything that changes a measured value, so its hash keys
stored measurements. Validation is strict and every error is one line: a typo must not silently
fall back to a default and measure something else.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.hashing import settings_hash
from ltsedge.ortcompat import parse_version
from ltsedge.precision import check_precision
from ltsedge.validate import is_int, is_number, reject_unknown, toml_repr

GRAPH_OPTIMIZATIONS = ("disable", "basic", "extended", "all")
EXECUTION_MODES = ("sequential", "parallel")

# Fields that change a measured value: the store key. Not limits, budgets, thermal policy or export
# target (an exported model's bytes already identify its opset).
SETTINGS = ("execution_provider", "provider_options", "intra_op_threads", "inter_op_threads",
            "graph_optimization", "execution_mode", "enable_cpu_mem_arena", "enable_mem_pattern",
            "allow_spinning", "batch", "sequence", "warmup", "min_runs", "max_runs", "max_seconds", "tolerance")
# Settings added after stores held figures, with the value every figure before them was measured at: in
# the key only when set to something else, so those figures keep their keys.
LATER_SETTINGS = {"malloc_mmap_threshold_kb": 0, "decode_reference": "bandwidth", "workers": 1,
                  "huge_pages": False}
MAX_WORKERS = 9
# What a decode step is timed beside (runners/timing.py): the bandwidth reference, or nothing (its own
# milliseconds through the pinned calibration). Which repeats better depends on the host: docs/measurement.md.
DECODE_REFERENCES = ("bandwidth", "none")
GENERATE_LOOPS = ("auto", "genai", "session")  # runners/loop.py
MAX_MMAP_THRESHOLD_KB = 32 * 1024  # glibc's ceiling on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str = ""
    source: str = "builtin"  # "builtin" or the TOML path
    # [runtime]
    execution_provider: str = "CPUExecutionProvider"
    provider_options: dict = field(default_factory=dict)  # passed to onnxruntime as strings
    intra_op_threads: int = 0  # 0 = onnxruntime's default (one per physical core)
    inter_op_threads: int = 0
    graph_optimization: str = "all"  # disable | basic | extended | all
    execution_mode: str = "sequential"  # sequential | parallel
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    allow_spinning: bool = True  # idle intra-op threads busy-wait (onnxruntime's default)
    # glibc's mmap threshold in the measuring worker, fixed at this many KiB (runners/memory.py): peaks
    # that repeat. 0 = glibc's own, which moves with what was freed: an app's default, whose peak varies
    # between runs (docs/benchmarks.md, "Memory that holds still"). No effect without glibc.
    malloc_mmap_threshold_kb: int = 0
    # The measuring worker's large blocks (weights, the arena) on transparent huge pages, through glibc's
    # tunable glibc.malloc.hugetlb=1 (runners/process.py): a figure then moves less with where in physical
    # memory a worker's pages landed. An app gets the same with GLIBC_TUNABLES=glibc.malloc.hugetlb=1.
    # No effect without glibc, or where the kernel's transparent huge pages are "never".
    huge_pages: bool = False
    # [workload]: one forward pass of batch x sequence tokens (LiteTransformerSearch protocol)
    batch: int = 1
    sequence: int = 192
    context: int = 192  # decode: tokens already in the cache when one more is generated
    # What times a generation bundle (runners/loop.py): "auto" (onnxruntime-genai's Generator, the loop apps run
    # bundles in, wherever it is installed; else a plain session), "genai" (required) or "session" (a plain
    # onnxruntime session fed a past, for bundles aimed at other runtimes). Forward models: always a session.
    generate_loop: str = "auto"
    # [repeats]
    warmup: int = 2
    min_runs: int = 5
    max_runs: int = 50
    max_seconds: float = 30.0  # of timed runs
    tolerance: float = 0.02  # stop once the median is known within +-2% (95% confidence)
    drift_check_every: int = 10  # re-time the reference model every N models (0 = never)
    decode_reference: str = "bandwidth"  # bandwidth | none: what a decode step is timed beside
    # Fresh workers each model is measured in, its figures the median across them (runners/pooling.py):
    # a figure that repeats better between runs, at that many times the timing. A search's own timing
    # keeps to one (coarse()); publishing, profile and check pool.
    workers: int = 1
    # [limits]
    timeout_s: float = 600.0  # per model: load + warm-up + timed runs
    memory_limit_mb: float | None = None  # kill the worker above this RSS
    # [budgets]: optional defaults for the search
    max_latency_ms: float | None = None
    max_memory_mb: float | None = None
    max_prefill_ms: float | None = None
    max_decode_ms: float | None = None
    # [thermal]
    cooldown_s: float = 0.0  # sleep between models
    max_temperature_c: float | None = None  # and wait until cooler than this
    max_cooldown_wait_s: float = 120.0
    # [export]
    target_ort: str | None = None  # onnxruntime version the exported models must load in
    precision: str | None = None  # fp32 | int8 | int4 | fp16 (CUDA): what architectures are exported at

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = check_type(f.name, getattr(self, f.name), f.name, self.label)
            object.__setattr__(self, f.name, value)
        _check_ranges(self)

    def __hash__(self) -> int:  # provider_options is a dict: hash the canonical form instead
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    @property
    def label(self) -> str:
        return f"device profile {self.name!r}"

    def settings(self) -> dict[str, Any]:
        """Every field that changes measured values (a store key); a later setting only where it is not
        the value of the figures before it (``LATER_SETTINGS``)."""
        out = {k: (dict(sorted(v.items())) if isinstance(v, dict) else v)
               for k, v in ((k, getattr(self, k)) for k in SETTINGS)}
        out.update({k: getattr(self, k) for k, before in LATER_SETTINGS.items() if getattr(self, k) != before})
        return out

    def settings_hash(self) -> str:
        return settings_hash(self.settings())

    def replace(self, **changes: Any) -> DeviceProfile:
        """A validated copy with some fields changed, e.g. ``profile.replace(sequence=32)``."""
        try:
            reject_unknown("setting", changes, (f.name for f in dataclasses.fields(self)))
        except LtsedgeError as e:
            raise LtsedgeError(f"{self.label}: {e}") from None
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["provider_options"] = dict(self.provider_options)
        return out


# A search's own measurements with a cost model: +-5% at 95% from 3 to 12 samples, a quarter of the time cap.
COARSE_TOLERANCE, COARSE_MIN_RUNS, COARSE_MAX_RUNS = 0.05, 3, 12


def coarse(profile: DeviceProfile) -> DeviceProfile:
    """The repeat policy a search times its candidates with (``--search-timing coarse``): never stricter
    than the profile's. Under load, +-2% is rarely reached and most candidates ran to the profile's cap
    (50 samples: 426 of 577 in the study's search here); the cost model averages the noise of coarse
    figures, and publishing re-measures the frontier at the profile's own policy (strictly where a
    decision hangs on it), so precision is spent on the models a user receives."""
    min_runs = min(profile.min_runs, COARSE_MIN_RUNS)
    return profile.replace(tolerance=max(profile.tolerance, COARSE_TOLERANCE), min_runs=min_runs,
                           max_runs=max(min_runs, min(profile.max_runs, COARSE_MAX_RUNS)),
                           max_seconds=profile.max_seconds / 4, workers=1)


def strict(profile: DeviceProfile) -> DeviceProfile:
    """A stricter repeat policy for re-measuring the final frontier: half the tolerance, twice the runs."""
    min_runs = profile.min_runs * 2
    return profile.replace(tolerance=profile.tolerance / 2, min_runs=min_runs,
                           max_runs=max(profile.max_runs * 2, min_runs), max_seconds=profile.max_seconds * 2)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
# Field -> (base type, optional), from the annotations: "float | None" -> ("float", True).
_FIELD_TYPES = {f.name: (f.type.split(" | ")[0], f.type.endswith("| None")) for f in dataclasses.fields(DeviceProfile)}
_EXPECTED = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
             "dict": "a table of options"}
_OPTION_TYPES = (str, int, float, bool)


def _has_type(base: str, value: Any) -> bool:
    if base == "str":
        return isinstance(value, str)
    if base == "bool":
        return isinstance(value, bool)
    if base == "dict":
        return isinstance(value, dict)
    return is_number(value) if base == "float" else is_int(value)


def check_type(name: str, value: Any, key: str, where: str) -> Any:
    """The value, normalised (ints accepted for floats); a one-line error naming key, value and type."""
    base, optional = _FIELD_TYPES[name]
    if value is None and optional:
        return None
    if not _has_type(base, value):
        raise LtsedgeError(f"{where}: {key} = {toml_repr(value)} has the wrong type: expected {_EXPECTED[base]}")
    if base == "float":
        return float(value)
    if base == "dict":
        for option, option_value in value.items():
            if not isinstance(option_value, _OPTION_TYPES):
                raise LtsedgeError(f"{where}: {key}.{option} = {toml_repr(option_value)} has the wrong type: "
                                   f"expected a string, number or boolean")
        return {str(k): v for k, v in value.items()}
    return value


def _check_ranges(p: DeviceProfile) -> None:
    def bad(key: str, rule: str) -> LtsedgeError:
        return LtsedgeError(f"{p.label}: {key} = {toml_repr(getattr(p, key))} is out of range: must be {rule}")

    if not p.name.strip():
        raise LtsedgeError("device profile: name must not be empty")
    if not p.execution_provider:
        raise bad("execution_provider", "the name of an onnxruntime execution provider")
    if p.graph_optimization not in GRAPH_OPTIMIZATIONS:
        raise bad("graph_optimization", f"one of {', '.join(GRAPH_OPTIMIZATIONS)}")
    if p.execution_mode not in EXECUTION_MODES:
        raise bad("execution_mode", f"one of {', '.join(EXECUTION_MODES)}")
    if p.generate_loop not in GENERATE_LOOPS:
        raise bad("generate_loop", f"one of {', '.join(GENERATE_LOOPS)}")
    if p.decode_reference not in DECODE_REFERENCES:
        raise bad("decode_reference", f"one of {', '.join(DECODE_REFERENCES)}")
    for key, low in (("intra_op_threads", 0), ("inter_op_threads", 0), ("batch", 1), ("sequence", 1), ("context", 0),
                     ("warmup", 0), ("min_runs", 1), ("drift_check_every", 0)):
        if getattr(p, key) < low:
            raise bad(key, f">= {low}")
    for key in ("max_seconds", "timeout_s", "memory_limit_mb", "max_latency_ms", "max_memory_mb",
                "max_prefill_ms", "max_decode_ms"):
        value = getattr(p, key)
        if value is not None and not 0 < value < float("inf"):
            raise bad(key, "a positive number")
    for key in ("cooldown_s", "max_cooldown_wait_s"):
        if not 0 <= getattr(p, key) < float("inf"):
            raise bad(key, ">= 0")
    if not 0 <= p.malloc_mmap_threshold_kb <= MAX_MMAP_THRESHOLD_KB:
        raise bad("malloc_mmap_threshold_kb", f"between 0 and {MAX_MMAP_THRESHOLD_KB} (KiB; 0 = glibc's own threshold)")
    if not 1 <= p.workers <= MAX_WORKERS:
        raise bad("workers", f"between 1 and {MAX_WORKERS}")
    if p.max_runs < p.min_runs:
        raise bad("max_runs", f">= min_runs ({p.min_runs})")
    if not 0 < p.tolerance < 1:
        raise bad("tolerance", "between 0 and 1 (a fraction: 0.02 = +-2%)")
    if p.max_temperature_c is not None and not 20 <= p.max_temperature_c <= 125:
        raise bad("max_temperature_c", "between 20 and 125 degrees Celsius")
    if p.target_ort is not None:
        try:
            parse_version(p.target_ort)
        except LtsedgeError as e:
            raise LtsedgeError(f"{p.label}: target_ort: {e}") from None
    if p.precision is not None:
        try:  # a precision its provider or target runtime cannot run is refused on load, not mid-search
            check_precision(p.precision, p.target_ort or "99.0", p.execution_provider)
        except LtsedgeError as e:
            raise LtsedgeError(f"{p.label}: precision: {str(e).replace('--precision ', '')}") from None
