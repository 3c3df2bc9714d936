"""``predict`` and ``build``: the Python API behind ``ltsedge predict`` and ``ltsedge costmodel``.

Both work on the settings a search would use (``setting.Setting``: device profile, preset, backbone,
variant, onnxruntime target, precision, sequence), so a prediction is made from the figures of exactly
that kind of measurement on this machine.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ltsedge.architecture import Architecture
from ltsedge.costmodel.advice import no_model, settings_with_a_model
from ltsedge.costmodel.fit import MAX_REACH, MIN_SAMPLES
from ltsedge.costmodel.model import CostModel
from ltsedge.costmodel.samples import load_samples
from ltsedge.costmodel.setting import Setting
from ltsedge.errors import LtsedgeError
from ltsedge.proxy import count_params
from ltsedge.store import MeasurementStore

__all__ = ["DEFAULT_SAMPLES", "Setting", "build", "predict"]

DEFAULT_SAMPLES = 40


def predict(arch: Architecture, setting: Setting, store_path: Path | None = None,
            arch_file: Path | str = "ARCH.json") -> dict:
    """Predicted figures of ``arch`` on this machine: per workload the latency (ms at the samples'
    median calibration, and as a ratio) with its interval, and peak memory (MB) with its interval.
    Refused without a cost model for ``setting`` (naming the command that makes one, and the settings the
    store holds one for; ``arch_file`` names the architecture in them), and for an architecture beyond
    ``MAX_REACH`` times the fitted range."""
    setting = replace(setting, backbone=arch.backbone)  # a preset of another backbone is refused here
    profile, _, variant = setting.resolve()
    with MeasurementStore(store_path, read_only=True) as store:
        model = CostModel(setting.samples(store, arch), profile, variant)
        elsewhere = [] if model.ready else settings_with_a_model(store, arch, setting)
    if not model.ready:
        raise LtsedgeError(no_model(arch_file, setting, store_path, len(model.samples), elsewhere))
    _check_reach(arch, model)
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


def _check_reach(arch: Architecture, model: CostModel) -> None:
    reach = model.reach(arch)
    if reach.factor <= MAX_REACH:
        return
    params = sorted(count_params(a).decoder_params for a, _ in model.samples)
    raise LtsedgeError(
        f"{arch.id} is beyond what the cost model can predict: its {reach.feature} ({reach.target}) is "
        f"{reach.value:.3g}, {reach.factor:.3g}x the largest of the {len(params)} architectures it was fitted on "
        f"({reach.largest:.3g}; {params[0]:,}-{params[-1]:,} decoder parameters, this one "
        f"{count_params(arch).decoder_params:,}); predict answers up to {MAX_REACH:g}x the fitted range: measure "
        f"it (`ltsedge profile`) or fit the model on larger architectures")


def build(setting: Setting, samples: int = DEFAULT_SAMPLES, seed: int = 0, store_path: Path | None = None,
          log: Callable[[str], None] = print, runner_factory=None) -> dict:
    """Measure ``samples`` architectures sampled uniformly from the setting's space (those the store
    already holds are not measured again), then report the cost model they make and its held-out
    accuracy. Measured in the machine's pinned scale, as a search measures: the decode ratio's unit
    (the bandwidth reference through the compute/bandwidth scale) is the pin's, so these samples and a
    search's teach one model in one unit (a run's own scale moved it ~20% between two runs here)."""
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
        export = setting.export_options()
        evaluator = CandidateEvaluator(profile, runner, store, Path(scratch), Budgets(), export=export,
                                       objective=objective)
        for i in range(0, len(archs), 5):
            evaluator.evaluate(archs[i : i + 5], generation=0)
            log(f"{min(i + 5, len(archs))}/{len(archs)} architectures measured or found in the store")
        calibration = runner.calibrate()
        found = load_samples(store, archs[0], runner.fingerprint(), profile, export,
                             bandwidth_scale=calibration.bandwidth_scale, calibration_ms=calibration.reference_ms)
    model = CostModel(found, profile, variant)
    failed = sum(not c.ok for c in evaluator.candidates())
    return {"samples": len(model.samples), "failed": failed, "variant": variant, "ready": model.ready,
            "accuracy": model.accuracy(), "coverage": model.coverage}
