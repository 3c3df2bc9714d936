"""What a cost model is for: the settings a search measures with, and the store's figures of them.

A cost model's samples are filed under everything that changes a figure (``samples.py``): the device
profile (with the preset's workload and a ``--sequence``), the backbone, the variant, the onnxruntime
target and the precision. ``Setting`` names them as ``ltsedge search``, ``costmodel`` and ``predict``
take them, and resolves them the same way for all three, so that the figures one command stores are
the ones the others look up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsedge.backbones import get_backbone
from ltsedge.devices import DeviceProfile, load_profile
from ltsedge.errors import LtsedgeError


@dataclass(frozen=True)
class Setting:
    """A device profile (with a preset's workload), a backbone, variant, onnxruntime target and precision."""

    device: str = "cpu"
    preset: str = "default"
    backbone: str | None = None
    variant: str | None = None  # None: generate where the backbone exports it, else forward
    target_ort: str | None = None  # None: the profile's [export], else ortcompat.OLDEST_ORT
    precision: str | None = None  # None: the profile's [export], else fp32 (as a search resolves it)
    sequence: int | None = None  # None: the preset's, else the profile's

    def resolve(self) -> tuple[DeviceProfile, str, str]:
        """(profile, backbone, variant) as a search with these options would measure."""
        from ltsedge.search.presets import get_preset

        preset = get_preset(self.preset)
        profile = preset.apply(load_profile(self.device))
        if self.sequence is not None:
            profile = profile.replace(sequence=self.sequence)
        backbone = get_backbone(preset.backbone_for(self.backbone) or "gpt2")
        variant = self.variant or ("generate" if "generate" in backbone.variants else "forward")
        if variant not in backbone.variants:
            raise LtsedgeError(f"--variant {variant} is not one of backbone {backbone.name}'s: "
                               f"{', '.join(backbone.variants)}")
        return profile, backbone.name, variant

    def target_ort_for(self, profile: DeviceProfile) -> str | None:
        return self.target_ort or profile.target_ort

    def precision_for(self, profile: DeviceProfile) -> str:
        """The precision every architecture is exported at, refused where the target or provider cannot run it."""
        from ltsedge.precision import check_precision
        from ltsedge.ortcompat import target_for

        precision = self.precision or profile.precision or "fp32"
        check_precision(precision, target_for(self.target_ort_for(profile)).runtime, profile.execution_provider)
        return precision

    def key(self) -> tuple:
        """What the figures of this setting are filed under, as far as the options decide it."""
        profile, backbone, variant = self.resolve()
        return (profile.settings_hash(), backbone, variant, self.target_ort_for(profile), self.precision_for(profile))

    def export_options(self):
        """How this setting's architectures are exported and keyed: one ``ExportOptions``."""
        from ltsedge.exporters.options import ExportOptions

        profile, _, variant = self.resolve()
        return ExportOptions(variant=variant, target_ort=self.target_ort_for(profile),
                             precision=self.precision_for(profile))

    def samples(self, store, like) -> list[tuple]:
        """(Architecture, Measurement) pairs the store holds for this setting on this machine, decode ratios
        in the machine's pinned unit (``samples.load_samples``)."""
        from ltsedge.costmodel.samples import load_samples
        from ltsedge.devices.fingerprint import machine_fingerprint
        from ltsedge.runners.policy import stored_pin

        profile, _, _ = self.resolve()
        fingerprint = machine_fingerprint(profile)
        pinned = stored_pin(store, fingerprint, profile)  # decode ratios in the machine's current unit
        return load_samples(store, like, fingerprint, profile, self.export_options(),
                            bandwidth_scale=pinned.calibration.bandwidth_scale if pinned else None,
                            calibration_ms=pinned.calibration.reference_ms if pinned else None)
