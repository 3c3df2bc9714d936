"""What a model's figures are figures of: its export variant, the precision its weights run at and the
settings the figures depend on, as an ``--against`` entry records them and as a model is measured now;
how near a record is to a model now; and what an older record that left some of it out is read as."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ltsedge.check.model_files import inspect_model
from ltsedge.devices.profile import LATER_SETTINGS
from ltsedge.errors import LtsedgeError
from ltsedge.runners.loop import SESSION_LABEL
from ltsedge.keys import DEFAULT_VARIANT, FIGURE_SETTINGS, GENERATE_FIGURE_SETTINGS

NOT_RECORDED = "not recorded"
# How near a record's kind is to a model's now (FigureKind.nearness), nearest first. --force compares the
# middle two; another variant never compares (a decode step's figure against a full forward pass's).
SAME_KIND, OTHER_SETTINGS, OTHER_PRECISION, OTHER_VARIANT = range(4)


@dataclass(frozen=True)
class FigureKind:
    """What a model's figures are figures of: its export variant, the precision its weights run at (None:
    unknown, a file onnx cannot read, or a record that left it out) and the settings they depend on
    (``keys.figure_settings``; a setting an older record leaves out is absent)."""
    variant: str
    precision: str | None
    settings: dict

    def differences(self, now: FigureKind) -> list[str]:
        """What differs from ``now``, each as 'name = then then, now now' (a setting ``now`` has and this
        record left out is a difference only where it decides a generate model's figures)."""
        out = []
        if self.variant != now.variant:
            out.append(f"variant = {self.variant} then, {now.variant} now")
        if self.precision != now.precision:
            out.append(f"precision = {self.precision or NOT_RECORDED} then, {now.precision or 'unknown'} now")
        for key, value in now.settings.items():
            if key in self.settings:
                if self.settings[key] != value:
                    out.append(f"{key} = {self.settings[key]!r} then, {value!r} now")
            elif key in GENERATE_FIGURE_SETTINGS and self.variant == now.variant:
                out.append(f"{key} {NOT_RECORDED} then, {value!r} now")
        return out

    def nearness(self, now: FigureKind) -> int:
        """SAME_KIND, OTHER_SETTINGS (the same variant and precision), OTHER_PRECISION (the same variant)
        or OTHER_VARIANT: which previous entry of a model's architecture it is compared with."""
        if self.variant != now.variant:
            return OTHER_VARIANT
        if self.precision != now.precision:
            return OTHER_PRECISION
        return OTHER_SETTINGS if self.differences(now) else SAME_KIND


def recorded_kind(raw: dict, measured: dict, fingerprint: dict, where: str) -> FigureKind:
    """The variant, precision and figure settings an entry records. Records that predate them: the variant
    from the figures (a generate model's carry its decode figure), the settings from the fingerprint's
    profile settings (a later setting left out there was at its old value), the decode context unknown,
    the precision None (``precision_then`` reads it where the model's file says)."""
    for key, kind in (("variant", str), ("precision", str), ("settings", dict)):
        if raw.get(key) is not None and not isinstance(raw[key], kind):
            raise LtsedgeError(f"{where}: {key} = {json.dumps(raw[key])} has the wrong type")
    variant = raw.get("variant")
    if variant is None:
        generated = measured.get("workload") in ("decode", "prefill") or raw.get("decode_latency_ms") is not None
        variant = "generate" if generated else DEFAULT_VARIANT
    settings = raw.get("settings")
    if settings is None:
        profile = fingerprint.get("settings") if isinstance(fingerprint.get("settings"), dict) else {}
        settings = {k: profile.get(k, LATER_SETTINGS.get(k)) for k in FIGURE_SETTINGS
                    if k in profile or k in LATER_SETTINGS}
        if variant != DEFAULT_VARIANT:
            settings["decode_reference"] = profile.get("decode_reference", LATER_SETTINGS["decode_reference"])
    if variant != DEFAULT_VARIANT and "loop" not in settings:  # recorded before genai's loop timed bundles
        settings = {**settings, "loop": SESSION_LABEL}
    return FigureKind(variant, raw.get("precision"), settings)


def precision_then(model: str, sha256: str | None, sha256_now: str | None, precision_now: str | None
                   ) -> str | None:
    """The precision of a record that left it out (``profile --json`` of an ONNX file wrote null before it
    recorded one): a file's precision is in its bytes, so where the record's sha256 is the model's now, it
    is the model's precision now; else where the file the record names still holds those bytes, it is read
    from that file. None where neither says: the record compares only with --force."""
    if sha256 is None:
        return None
    if sha256 == sha256_now:
        return precision_now
    path = Path(model)
    if not path.is_file():
        return None
    try:
        info = inspect_model(path)
    except LtsedgeError:  # unreadable here: not the record's precision
        return None
    return info.precision["precision"] if info.sha256 == sha256 and info.precision else None
