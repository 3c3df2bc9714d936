"""A cost model's training figures: this machine's measurements in the store, selected by its keys.

Every candidate a search (or ``ltsedge costmodel``) measures is stored under its full key — model
(architecture and export settings), machine fingerprint, measurement settings, onnxruntime — and
its architecture is remembered beside it. The samples of a cost model are exactly the rows whose
machine, settings, onnxruntime and export settings are the ones asked for, so a second search on
the same device starts from the first one's figures, and no other machine's figure is ever used.
"""

from __future__ import annotations

from collections.abc import Callable

from ltsedge.architecture import Architecture
from ltsedge.costmodel.model import CostModel
from ltsedge.devices import coarse, strict
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.options import ExportOptions
from ltsedge.keys import measurement_key
from ltsedge.runners.measurement import Measurement


def export_settings(model_key: str) -> str:
    """``arch:<id>:graph=1:ir=10...`` -> ``graph=1:ir=10...``: the part every architecture shares.

    The KV-cache layout (``cache=``) is named in a key only where it changes an architecture's graph
    (per-layer heads), so it is not shared: left out here. Every arch-keyed figure (search, costmodel,
    profile ARCH.json) is of the default layout, so the samples are all of one layout."""
    parts = model_key.split(":", 2)
    settings = parts[2] if len(parts) == 3 else ""
    return ":".join(p for p in settings.split(":") if not p.startswith("cache="))


def remember(store, arch: Architecture, model_key: str) -> None:
    store.put_architecture(model_key, export_settings(model_key), arch.to_dict())


def policies(profile) -> tuple:
    """The profile as ltsedge measures with it: its own repeat policy, a search's coarse one and
    publishing's strict one. Their figures are of one machine and settings, measured more or less
    precisely: all of them teach a cost model (a search timing coarsely warm-starts from
    ``ltsedge costmodel``'s figures, and ``predict`` uses a search's)."""
    return (profile, coarse(profile), strict(profile))


def load_samples(store, like: Architecture, fingerprint: dict, profile, export: ExportOptions,
                 bandwidth_scale: float | None = None, calibration_ms: float | None = None) -> list[tuple]:
    """(Architecture, measurement) pairs measured here as ``like`` would be exported with ``export`` (the
    same backbone graph and every export option: variant, target, precision and its quantization, graph
    form; the same machine, settings, onnxruntime) at any of the profile's ``policies``: the candidates a
    search exports with that one ``ExportOptions``, keyed by it. One sample per architecture: the most
    precise of its figures. Decode
    ratios in the unit of ``bandwidth_scale`` and ``calibration_ms`` (the machine's pin) where given:
    figures stored under an earlier pin are converted (``Measurement.rescaled``; a decode step timed alone
    has its ratio in the calibration's unit)."""
    variant, model_key = export.variant, export.model_key(like)
    found: dict[str, tuple] = {}
    own, rough, careful = policies(profile)
    for policy in (careful, own, rough):  # the first figure found of an architecture is kept
        key = measurement_key(model_key, fingerprint, policy, variant=variant)
        for arch, measurement in store.measured_architectures(*key[1:], export_settings(key[0])):
            try:
                arch = Architecture.from_dict(arch)
            except LtsedgeError:
                continue  # an architecture this version no longer accepts: not a sample
            measurement = Measurement.from_record(measurement)
            found.setdefault(arch.id, (arch, measurement.rescaled(calibration_ms or measurement.calibration_ms,
                                                                   bandwidth_scale)))
    return list(found.values())


def load_cost_model(store, like: Architecture, fingerprint: dict, profile, export: ExportOptions,
                    bandwidth_scale: float | None = None, calibration_ms: float | None = None) -> CostModel:
    return CostModel(load_samples(store, like, fingerprint, profile, export, bandwidth_scale, calibration_ms),
                     profile, export.variant)


def cost_models(store, fingerprint: dict, profile, export: ExportOptions, bandwidth_scale: float | None = None,
                calibration_ms: float | None = None) -> Callable[[Architecture], CostModel]:
    """The cost model of each architecture's export settings (``load_cost_model``), each loaded when first asked
    for: ``export`` gives some backbones' models other settings than others (a GPT-2 bundle is fused or not by its
    own heads: ``Backbone.generate_form``), and each form's figures teach only its own model."""
    models: dict[str, CostModel] = {}

    def model_of(arch: Architecture) -> CostModel:
        settings = export_settings(export.model_key(arch))
        if settings not in models:
            models[settings] = load_cost_model(store, arch, fingerprint, profile, export, bandwidth_scale,
                                               calibration_ms)
        return models[settings]

    return model_of
