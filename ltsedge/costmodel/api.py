"""``predict`` and ``build``: the Python API behind ``ltsedge predict`` and ``ltsedge costmodel``.

Both work on the settings a search would use (device profile, preset, backbone, variant), so a
prediction is made from the figures of exactly that kind of measurement on this machine.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.costmodel.fit import MIN_SAMPLES
from ltsedge.costmodel.model import CostModel
from ltsedge.costmodel.samples import load_samples
from ltsedge.devices import DeviceProfile, load_profile
from ltsedge.devices.fingerprint import machine_fingerprint
from ltsedge.errors import LtsedgeError
from ltsedge.ortcompat import target_for
from ltsedge.runners.policy import stored_pin
from ltsedge.store import MeasurementStore

DEFAULT_SAMPLES = 40


@dataclass(frozen=True)
class Setting:
    """What a cost model is for: a device profile (with a preset's workload), a backbone and variant."""

    device: str = "cpu"
    preset: str = "default"
    backbone: str | None = None
    variant: str | None = None  # None: generate where the backbone exports it, else forward
    target_ort: str | None = None

    def resolve(self) -> tuple[DeviceProfile, str, str]:
        from ltsedge.search.presets import get_preset

        preset = get_preset(self.preset)
        profile = preset.apply(load_profile(self.device))
        backbone = get_backbone(preset.backbone_for(self.backbone) or "gpt2")
        variant = self.variant or ("generate" if "generate" in backbone.variants else "forward")
        if variant not in backbone.variants:
            raise LtsedgeError(f"--variant {variant} is not one of backbone {backbone.name}'s: "
                               f"{', '.join(backbone.variants)}")
        return profile, backbone.name, variant


def how_to_build(setting: Setting) -> str:
    options = f"--device {setting.device}" + (f" --preset {setting.preset}" if setting.preset != "default" else "")
    if setting.backbone:
        options += f" --backbone {setting.backbone}"
    return f"ltsedge costmodel {options}"


def predict(arch: Architecture, setting: Setting, store_path: Path | None = None) -> dict:
    """Predicted figures of ``arch`` on this machine: per workload the latency (ms at the samples'
    median calibration, and as a ratio) with its interval, and peak memory (MB) with its interval."""
    profile, backbone, variant = setting.resolve()
    if arch.backbone != backbone:
        setting = Setting(setting.device, setting.preset, arch.backbone, setting.variant, setting.target_ort)
        profile, backbone, variant = setting.resolve()
    target = target_for(setting.target_ort or profile.target_ort)
    fingerprint = machine_fingerprint(profile)
    with MeasurementStore(store_path) as store:
        pinned = stored_pin(store, fingerprint, profile)  # decode ratios in the machine's current unit
        samples = load_samples(store, arch, fingerprint, profile, target, variant,
                               bandwidth_scale=pinned.calibration.bandwidth_scale if pinned else None,
                               calibration_ms=pinned.calibration.reference_ms if pinned else None)
    model = CostModel(samples, profile, variant)
    if not model.ready:
        raise LtsedgeError(f"no cost model for this machine and these settings ({len(model.samples)} measured "
                           f"architectures, {MIN_SAMPLES} needed); make one with `{how_to_build(setting)}`")
    estimate = model.predict(arch)
    calibration = statistics.median(m.calibration_ms for _, m in model.samples if m.calibration_ms)
    workloads = {name: {"latency_ms": p.value * calibration, "latency_low_ms": p.low * calibration,
                        "latency_high_ms": p.high * calibration, "latency_ratio": p.value}
                 for name, p in estimate.ratios.items()}
    return {"id": arch.id, "variant": variant, "predicted": True, "workloads": workloads,
            "peak_memory_mb": estimate.memory_mb.value, "memory_low_mb": estimate.memory_mb.low,
            "memory_high_mb": estimate.memory_mb.high, "extrapolated": estimate.extrapolated,
            "calibration_ms": calibration, "samples": len(model.samples), "accuracy": model.accuracy(),
            "coverage": model.coverage}


def build(setting: Setting, samples: int = DEFAULT_SAMPLES, seed: int = 0, store_path: Path | None = None,
          log: Callable[[str], None] = print, runner_factory=None) -> dict:
    """Measure ``samples`` architectures sampled uniformly from the setting's space (those the store
    already holds are not measured again), then report the cost model they make and its held-out
    accuracy. Measured in the machine's pinned scale, as a search measures: the decode ratio's unit
    (the bandwidth reference through the compute/bandwidth scale) is the pin's, so these samples and a
    search's teach one model in one unit (a run's own scale moved it ~20% between two runs here)."""
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.runners import Runner
    from ltsedge.runners.policy import pinned_calibration
    from ltsedge.search.budgets import Budgets
    from ltsedge.search.evaluate import CandidateEvaluator
    from ltsedge.search.presets import get_preset

    if samples < MIN_SAMPLES:
        raise LtsedgeError(f"--samples {samples}: a cost model needs at least {MIN_SAMPLES}")
    profile, backbone, variant = setting.resolve()
    space = get_preset(setting.preset).space(backbone)
    objective = "decode" if variant == "generate" else "forward"
    archs = space.sample(samples, seed=seed)
    with MeasurementStore(store_path) as store, (runner_factory or Runner)(profile, log=log) as runner, \
            tempfile.TemporaryDirectory(prefix="ltsedge-costmodel-") as scratch:
        if hasattr(runner, "use_pinned"):  # a fleet's agents pin their own
            runner.use_pinned(pinned_calibration(store, runner, log=log))
        export = ExportOptions(variant=variant, target_ort=setting.target_ort or profile.target_ort)
        evaluator = CandidateEvaluator(profile, runner, store, Path(scratch), Budgets(), export=export,
                                       objective=objective)
        for i in range(0, len(archs), 5):
            evaluator.evaluate(archs[i : i + 5], generation=0)
            log(f"{min(i + 5, len(archs))}/{len(archs)} architectures measured or found in the store")
        target = target_for(setting.target_ort or profile.target_ort)
        calibration = runner.calibrate()
        found = load_samples(store, archs[0], runner.fingerprint(), profile, target, variant,
                             bandwidth_scale=calibration.bandwidth_scale, calibration_ms=calibration.reference_ms)
    model = CostModel(found, profile, variant)
    failed = sum(not c.ok for c in evaluator.candidates())
    return {"samples": len(model.samples), "failed": failed, "variant": variant, "ready": model.ready,
            "accuracy": model.accuracy(), "coverage": model.coverage}
