"""One model's measurement on one device: latency, memory, and the machine's state at the time."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.runners import stats
from ltsedge.validate import is_int, is_number, reject_unknown


@dataclass
class Measurement:
    ok: bool
    error: str | None = None  # one line, e.g. "timed out after 30 s"; None when ok
    # Why it failed: "model" (it does not load, its inputs cannot be made, it fails to run: it would
    # fail the same way again) or "environment" (a timeout, a memory limit, a crash, out of memory:
    # another run may succeed). Only the model's own failures are answered from the store.
    failure_kind: str | None = None
    # Latency (ms) of one run of the workload: every sample of the model is paired with a sample of
    # the reference model (runners/timing.py); the figure is the median ratio (latency_ratio; beside
    # the compute reference, of the pairs timed while it ran at its quiet speed: stats.figure_ratios)
    # times the run's calibration of the reference (calibration_ms). Also the 90th percentile, fastest and
    # CV of the ratios (in ms), the median's order-statistic interval and the coverage it really has
    # (latency_low/high_ms, latency_coverage); converged = that interval got within the tolerance at
    # 95% overall. runs = the quiet sample pairs of the pairs_timed (each of runs_per_sample runs);
    # stopped_early = raced out after a first estimate, dominated beyond its uncertainty (racing.py).
    # reference_ms: the reference's own median meanwhile; drift: its change against the calibration,
    # when beyond the run's noise.
    latency_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_min_ms: float | None = None
    latency_cv: float | None = None
    runs: int = 0
    pairs_timed: int = 0
    converged: bool = False
    latency_ratio: float | None = None
    latency_low_ms: float | None = None
    latency_high_ms: float | None = None
    latency_coverage: float | None = None
    runs_per_sample: int = 1
    stopped_early: bool = False
    reference_ms: float | None = None
    calibration_ms: float | None = None
    drift: float | None = None
    uncalibrated_latency_ms: float | None = None  # the model's own median, as a plain timer gives it
    agent: str | None = None  # the board that measured it, when a fleet did (runners/remote.py)
    # A generate model is timed on two workloads: the prompt's prefill (``sequence`` tokens, empty
    # cache) and decode (one token after ``context`` cached ones). Its latency_ms above is decode's,
    # per generated token; kv_cache_mb is the cache at that context. None for a forward model.
    workload: str = "forward"  # the workload latency_ms is the figure of
    prefill_latency_ms: float | None = None
    decode_latency_ms: float | None = None
    kv_cache_mb: float | None = None
    # What ran the model: "onnxruntime-genai <version> Generator" (a generation bundle in the loop apps run it
    # in, runners/genai_loop.py) or "onnxruntime session"; None in records older than the choice.
    loop: str | None = None
    workloads: dict | None = None  # per workload: median, p90, min, cv, runs, converged, reference (+ its scale)
    # Memory (MB = 2**20 bytes): the figure budgets, searches and reports judge is peak_memory_mb, of
    # the memory that bounds the device: on a CPU the peak RSS while loading and running, over the
    # worker's RSS before loading; on CUDA the GPU memory the model's session holds after its runs
    # (its arena keeps its peak), over the process's before loading it, with the host's RSS figure
    # kept beside it (host_peak_memory_mb). memory_of says which: "host" or "gpu" (a CUDA worker that
    # could read no GPU figure falls back to "host"). weights_mb: the initializers' total size.
    peak_memory_mb: float | None = None
    weights_mb: float | None = None
    device_peak_memory_mb: float | None = None  # the GPU figure on CUDA, also where peak_memory_mb is it
    host_peak_memory_mb: float | None = None  # the RSS figure where peak_memory_mb is the GPU's
    memory_of: str = "host"
    # How the peak was isolated: "fresh_process" (the model was the worker's first), "reset_peak" (the
    # worker's peak counter was reset, and checked to drop, after earlier models; a little less precise
    # on small models) or "no_reset" (the kernel would not reset it: a fresh worker per model, whose
    # figure is only valid above the few MB the worker itself peaked at before the model).
    memory_method: str | None = None
    # Where the time went: creating the session vs warm-up and timed runs.
    load_seconds: float = 0.0
    inference_seconds: float = 0.0
    # The machine's state right after the runs (None where the sensor is unreadable).
    load_avg: float | None = None
    cpu_freq_mhz: float | None = None
    temperature_c: float | None = None
    throttled: bool | None = None
    drift_remeasured: bool = False  # measured again after the reference model drifted
    workers: int = 1  # fresh workers whose figures were pooled into these (runners/pooling.py)
    # A search's prediction in the shape of a measurement (search/screening.py), never stored or
    # published as measured: its latencies' intervals are in latency_low/high_ms, its memory's here.
    predicted: bool = False
    extrapolated: bool = False  # predicted outside the range of the cost model's samples
    memory_low_mb: float | None = None
    memory_high_mb: float | None = None
    # A published model whose final measurement failed keeps its earlier figures, and this error.
    final_measurement_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """A measurement from a peer (an agent's reply): every field must be one this version knows."""
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            raise LtsedgeError("a measurement must be a JSON object with a boolean 'ok'")
        reject_unknown("measurement field", data, (f.name for f in dataclasses.fields(cls)))
        return cls(**data)

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Measurement:
        """A measurement as written earlier (the store, a search's candidate log), possibly by another
        version: fields it no longer has are left out rather than refused. A field it has must be of its
        type (``workloads`` too, entry by entry): a record edited or cut short raises, never a later reader."""
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            raise LtsedgeError("a measurement must be a JSON object with a boolean 'ok'")
        known = {k: v for k, v in data.items() if k in _FIELD_NAMES}
        _check_types(known, "")
        for name, workload in (known.get("workloads") or {}).items():
            if not isinstance(workload, dict):
                raise LtsedgeError(f"a measurement's workloads.{name} must be an object, got {type(workload).__name__}")
            _check_types(workload, f"workloads.{name}.")
        return cls(**known)

    @classmethod
    def failure(cls, error: str, kind: str = "environment", **fields: Any) -> Measurement:
        return cls(ok=False, error=error, failure_kind=kind, **fields)

    def figures(self, workload: str) -> dict[str, Any]:
        """One workload's figures (latency_ms, latency_ratio, its interval ...): its entry in
        ``workloads``, else the primary figures where it is the primary workload, else none."""
        if self.workloads and workload in self.workloads:
            return self.workloads[workload]
        return {k: getattr(self, k) for k in PRIMARY_FIELDS} if workload == self.workload else {}

    def ratio(self, workload: str) -> float | None:
        """The workload's latency as a ratio to the reference model: the unit that travels between runs."""
        return self.figures(workload).get("latency_ratio")

    @property
    def complete(self) -> bool:
        """Every workload timed to the profile's policy: not raced out after a first estimate, and none
        timed coarsely as a raced search's non-objective workload (runners/racing.py)."""
        return not self.stopped_early and not any(w.get("coarse") for w in (self.workloads or {}).values())

    def rescaled(self, calibration_ms: float, bandwidth_scale: float | None = None) -> Measurement:
        """This measurement in another run's units: milliseconds through that run's calibration and, given
        its ``bandwidth_scale``, the ratios of workloads timed beside the bandwidth reference in that
        scale's unit.

        Ratios to the reference travel between runs; milliseconds carry the calibration of the run that
        took them. A decode ratio's unit is also the compute/bandwidth scale its reference samples were
        recorded in (runners/reference.py): a machine pinned again gets another scale, and a stored
        decode figure is converted by the ratio of the two (one recorded without its scale, by an older
        version, cannot be and is kept as it is). A decode step timed alone keeps its milliseconds: its
        ratio is re-expressed in the new calibration. A failure is returned as it is."""
        old = self.calibration_ms
        if not self.ok or not old:
            return self
        scales = _reference_scales(bandwidth_scale, calibration_ms)
        units = {name: _unit_change(w, scales) for name, w in (self.workloads or {}).items()}
        if old == calibration_ms and all(u == 1.0 for u in units.values()):
            return self
        factor = calibration_ms / old
        primary = units.get(self.workload, 1.0)
        scaled = {k: getattr(self, k) * factor * units.get(workload, 1.0)
                  for k, workload in GENERATE_FIGURES.items() if getattr(self, k) is not None}
        scaled.update({k: getattr(self, k) * factor * primary for k in LATENCY_FIELDS if getattr(self, k) is not None})
        if self.latency_ratio is not None:
            scaled["latency_ratio"] = self.latency_ratio * primary
        workloads = None if self.workloads is None else {
            name: _rescaled_workload(w, factor, units[name], scales.get(w.get("reference")))
            for name, w in self.workloads.items()}
        return dataclasses.replace(self, calibration_ms=calibration_ms, workloads=workloads, **scaled)


def _reference_scales(bandwidth_scale: float | None, calibration_ms: float) -> dict[str, float | None]:
    """The scale a workload's reference samples are recorded in, by its reference: beside the bandwidth
    reference the compute/bandwidth scale; timed alone the calibration (its ratio is its ms over it, so its
    milliseconds stay as measured when re-pinned). Beside the compute reference none: its samples are
    its own."""
    return {"bandwidth": bandwidth_scale, "none": calibration_ms}


def _unit_change(workload: dict, scales: dict[str, float | None]) -> float:
    """The factor that takes a workload's ratio from the scale it was recorded in to the new one of
    ``scales`` (``_reference_scales``): 1 beside the compute reference, or for one recorded without its scale."""
    recorded = workload.get("reference_scale")
    new = scales.get(workload.get("reference"))
    if not recorded or not new:
        return 1.0
    return recorded / new  # samples recorded x scale: the ratio goes as 1 / scale


def _rescaled_workload(workload: dict, factor: float, unit: float, scale: float | None) -> dict:
    out = {**workload, **{k: workload[k] * factor * unit for k in LATENCY_FIELDS if workload.get(k) is not None}}
    if unit != 1.0:
        out["latency_ratio"] = workload["latency_ratio"] * unit
        out["reference_scale"] = scale
    return out


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Measurement))

# The type of each field, and of a workload's own entries beside the fields it shares (``calibrated``).
_TYPES = {**typing.get_type_hints(Measurement), "coarse": bool, "reference": str, "reference_scale": float | None}
# JSON's values per Python type: a float field takes an int (json writes 2.0 as 2.0, a hand edit as 2).
_ACCEPTS = {bool: lambda v: isinstance(v, bool), int: is_int, float: is_number, str: lambda v: isinstance(v, str),
            dict: lambda v: isinstance(v, dict), type(None): lambda v: v is None}


def _check_types(record: dict, prefix: str) -> None:
    """Raise for the first known entry of ``record`` that is not of its type."""
    for name, value in record.items():
        kind = _TYPES.get(name)
        if kind is not None and not any(_ACCEPTS[t](value) for t in typing.get_args(kind) or (kind,)):
            raise LtsedgeError(f"a measurement's {prefix}{name} must be {getattr(kind, '__name__', kind)}, "
                               f"got {type(value).__name__}")


def complete(record: dict) -> bool:
    """``Measurement.complete`` of a stored record."""
    return Measurement.from_record(record).complete


# A generate measurement's per-workload latencies, by the workload each is the figure of.
GENERATE_FIGURES = {"prefill_latency_ms": "prefill", "decode_latency_ms": "decode"}

LATENCY_FIELDS = ("latency_ms", "latency_p90_ms", "latency_min_ms", "latency_low_ms", "latency_high_ms")


# The figures of a success that come from its primary workload's (the forward pass's, else the first).
PRIMARY_FIELDS = ("latency_ms", "latency_p90_ms", "latency_min_ms", "latency_cv", "runs", "pairs_timed", "converged",
                  "latency_ratio", "latency_low_ms", "latency_high_ms", "latency_coverage", "reference_ms",
                  "stopped_early", "runs_per_sample", "uncalibrated_latency_ms")


def calibrated(samples: dict, calibration_ms: float, bandwidth_scale: float | None = None) -> dict:
    """A workload's paired samples -> its figures: the median ratio to the reference (beside the compute
    reference, of its quiet pairs: ``stats.figure_ratios``; ``runs`` of the ``pairs_timed``), in ms
    through the run's calibration, with the median's interval and the coverage it really has. A
    workload timed beside the bandwidth reference also records the scale its reference samples were
    recorded in (``bandwidth_scale``), and one timed alone the calibration it was recorded with (its
    "reference samples"), so its ratio can be converted when the machine is pinned again."""
    reference = samples.get("reference", "compute")
    scales = _reference_scales(bandwidth_scale, calibration_ms)
    ratios = stats.figure_ratios(samples["model_ms"], samples["reference_ms"], reference)
    summary = stats.summarize(ratios)
    low, high, coverage = stats.interval_with_coverage(sorted(ratios))
    return {"latency_ms": summary["latency_ms"] * calibration_ms, "latency_ratio": summary["latency_ms"],
            "latency_p90_ms": summary["latency_p90_ms"] * calibration_ms,
            "latency_min_ms": summary["latency_min_ms"] * calibration_ms, "latency_cv": summary["latency_cv"],
            "latency_low_ms": low * calibration_ms, "latency_high_ms": high * calibration_ms,
            "latency_coverage": coverage, "runs": len(ratios), "pairs_timed": len(samples["model_ms"]),
            "converged": samples["converged"],
            "stopped_early": samples["stopped_early"], "runs_per_sample": samples["runs_per_sample"],
            "reference_ms": stats.summarize(samples["reference_ms"])["latency_ms"],
            "uncalibrated_latency_ms": stats.summarize(samples["model_ms"])["latency_ms"],
            "coarse": samples.get("coarse", False), "reference": reference,
            **({"reference_scale": scales[reference]} if reference in scales else {})}
