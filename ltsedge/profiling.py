"""``profile_model``: measure one model (an ONNX file or an architecture) on a device, through the store.

An ONNX file is keyed in the store by its sha256; an architecture by its id and export settings, so
``ltsedge profile arch.json`` and a search that met the same architecture share the measurement.

Milliseconds are the measured ratios times the machine's pinned calibration (from the store; made
by the first run that needs it, redone by ``ltsedge calibrate``), so two runs minutes apart agree
even when the machine was busy at one's start; that run's own calibration is reported beside it.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.check.model_files import check_shapes, inspect_model
from ltsedge.devices import DeviceProfile, load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import architecture_in, export_model, read_metadata
from ltsedge.exporters.options import ExportOptions
from ltsedge.precision import DEFAULT_PRECISION, check_precision
from ltsedge.keys import (DEFAULT_VARIANT, figure_settings, file_key, measurement_key,
                          measurement_settings)
from ltsedge.proxy import count_params
from ltsedge.runners import runner_factory
from ltsedge.runners.genai_loop import GENAI_REFUSED
from ltsedge.runners.loop import SESSION_LABEL, bundle_config, bundle_model, config_sha256, genai_runs
from ltsedge.runners.measurement import complete
from ltsedge.runners.policy import pinned_calibration
from ltsedge.store import MeasurementStore


def profile_model(model: str | Path, device: str | DeviceProfile = "cpu", *, store_path: str | Path | None = None,
                  fresh: bool = False, shapes: dict[str, list[int]] | None = None,
                  target_ort: str | None = None, variant: str | None = None, scheduler: str | None = None,
                  machine: str | None = None, precision: str | None = None, quantization=None,
                  architecture: Architecture | None = None) -> dict:
    """Measurement of ``model`` on ``device`` as a flat dict (the ``ltsedge profile --json`` object).

    ``precision`` (an architecture only; default: the profile's [export] precision, else fp32): the
    candidate is exported at it, and keyed by it in the store (one ``ExportOptions`` of the variant,
    target and precision makes both the export and its key). An ONNX file is measured as it is: its
    variant is the one it was exported as (``variant``, when given, must agree), ``shapes`` must name its
    inputs (checked before anything is measured or stored). ``quantization``: how the precision is reached
    (``precision.QuantOptions``; None: the defaults), an architecture's too. ``architecture``: measured as an
    ARCH.json is (``model`` then only names it: a Hugging Face folder's, ``--from``)."""
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    path = Path(model) if architecture is not None else bundle_model(model)  # a bundle's folder: its model
    if architecture is None and not path.is_file():
        raise LtsedgeError(f"model file not found: {path}")
    target_ort = target_ort or profile.target_ort
    sha256 = options = None
    if architecture is not None or path.suffix.lower() == ".json":
        options = ExportOptions(variant=variant or DEFAULT_VARIANT, target_ort=target_ort,
                                precision=precision or profile.precision or DEFAULT_PRECISION, quantization=quantization)
        variant, precision = options.variant, options.precision
        check_precision(precision, options.target.runtime, profile.execution_provider)  # before anything is measured
        arch = architecture or Architecture.load(path)
        key = options.model_key(arch)
    else:
        if precision is not None or quantization is not None:
            raise LtsedgeError(f"--precision is for an architecture (ARCH.json): {path} is measured as it is "
                               f"(quantize it before, or export the architecture with --precision)")
        arch, declared = _architecture_or_none(path)
        in_genai = not shapes and genai_runs(profile) and bundle_config(path) is not None
        if in_genai:  # a bundle (the builder's too) timed in genai's loop: its config is part of the figure
            declared = "generate"
        if variant is not None and variant != declared:
            raise LtsedgeError(f"--variant {variant} is for an architecture (ARCH.json): {path} is measured as it "
                               f"was exported ({declared})")
        variant = declared
        check_shapes(path, shapes or {}, profile, str(path))
        info = inspect_model(path)
        sha256, precision = info.sha256, info.precision["precision"] if info.precision else None
        key = file_key(sha256 if not in_genai else _bundle_sha256(sha256, config_sha256(path)))
    with MeasurementStore(store_path) as store, runner_factory(scheduler, machine)(profile) as runner, \
            tempfile.TemporaryDirectory(prefix="ltsedge-") as scratch:
        fingerprint = runner.fingerprint()
        store_key = measurement_key(key, fingerprint, profile, shapes, variant)
        measurement = None if fresh else store.get(*store_key)
        if measurement is not None and measurement.get("ok") and not complete(measurement):
            measurement = None  # a search's raced-out or coarse figure: profile times every workload in full
        if measurement is not None and measurement.get("ok") and not _reportable(measurement):
            measurement = None  # damaged: measured again, and the new figure replaces it
        cached = measurement is not None
        machine = {"run_calibration_ms": None, "machine_state": None}
        if measurement is None:
            onnx_path = path
            if options is not None:
                onnx_path = Path(scratch) / f"{arch.id}.onnx"
                exported = export_model(arch, options, execution_provider=profile.execution_provider)
                exported.save(onnx_path, digest=False)
                check_shapes(onnx_path, shapes or {}, profile, str(path))
            if hasattr(runner, "use_pinned"):  # after the input is checked; a fleet's agents pin their own
                runner.use_pinned(pinned_calibration(store, runner))
            measurement = runner.measure(onnx_path, shapes=shapes).to_dict()
            if (measurement.get("error") or "").startswith(GENAI_REFUSED):  # bad input: the bundle, not the machine
                raise LtsedgeError(f"{path}: {measurement['error']}")
            machine = _machine_state(runner)
            store.put(*store_key, measurement, fingerprint=fingerprint,
                      settings=measurement_settings(profile, shapes, variant))
    if measurement.get("ok") and measurement.get("loop") is None:  # a record older than the loop's choice
        measurement["loop"] = SESSION_LABEL
    counts = count_params(arch).to_dict() if arch else {}
    return {"model": str(path), "sha256": sha256, "variant": variant, "precision": precision,
            "settings": figure_settings(profile, variant), "device": profile.name,
            **measurement, **machine, **counts,
            "architecture_id": arch.id if arch else None, "shapes": shapes or None, "cached": cached,
            "execution_provider": profile.execution_provider, "fingerprint": fingerprint}


# What profile reports of a success; every success ltsedge stores holds them (peak memory None where the
# platform cannot read it).
REPORTED = ("latency_ms", "latency_p90_ms", "latency_min_ms", "latency_cv", "runs", "peak_memory_mb", "weights_mb")


def _reportable(measurement: dict) -> bool:
    """Whether a stored success holds every figure profile reports, its latencies as numbers (their types
    the store has checked)."""
    return all(k in measurement for k in REPORTED) and all(
        measurement[k] is not None for k in REPORTED if k.startswith("latency"))


def _machine_state(runner) -> dict:
    """This run's own calibration of the reference, and how far it is from the pinned one (a line, or
    None within the noise)."""
    own, pinned = getattr(runner, "run_calibration", None), getattr(runner, "pinned", None)
    return {"run_calibration_ms": own.reference_ms if own else None,
            "machine_state": pinned.state(own) if own and pinned else None}


def _bundle_sha256(model_sha256: str, config_sha256: str) -> str:
    """A bundle's key in genai's loop: its model and the genai_config.json that says how genai runs it."""
    return hashlib.sha256(f"{model_sha256}:{config_sha256}".encode()).hexdigest()


def _architecture_or_none(path: Path) -> tuple[Architecture | None, str]:
    """The architecture and export variant an ltsedge model declares; (None, "forward") for a foreign
    model or a file onnx cannot read (the runner then reports why it does not load). Malformed ltsedge
    metadata is bad input."""
    try:
        meta = read_metadata(path)
    except LtsedgeError:
        return None, DEFAULT_VARIANT
    return architecture_in(meta, path), meta.get("variant", DEFAULT_VARIANT)


def calibrate_machine(device: str | DeviceProfile = "cpu", *, store_path: str | Path | None = None) -> dict:
    """Measure the machine's pinned calibration for ``device``'s runtime settings again and keep it in the
    store (``ltsedge calibrate``): later runs' milliseconds are their ratios times it."""
    from ltsedge.keys import calibration_key
    from ltsedge.runners import Runner

    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    with MeasurementStore(store_path) as store, Runner(profile) as runner:
        previous = store.get_calibration(*calibration_key(runner.fingerprint(), profile))
        pinned = pinned_calibration(store, runner, redo=True)
    return {"device": profile.name, **pinned.to_dict(), "store": str(store.path),
            "previous_reference_ms": (previous or {}).get("reference_ms")}
