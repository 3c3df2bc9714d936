"""A sub-network's speed on the device: decode latency (and prefill, peak memory) of its architecture,
measured in the runtime apps run bundles in (onnxruntime-genai's loop where installed), or predicted by the
device's cost model with an interval until it could matter.

Speed depends on the shape, not on the weights' values, so figures are per architecture: two sub-networks
dropping different layers of the same widths share one. Each is measured by the search's own machinery
(``search.evaluate.CandidateEvaluator``: exported as the search exports, timed coarsely, kept in the
measurement store under its full key), so a second run on the same device starts from the first one's figures
and the cost model learns from all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsedge.architecture import Architecture
from ltsedge.costmodel.samples import load_cost_model
from ltsedge.devices import DeviceProfile, coarse
from ltsedge.exporters.options import ExportOptions
from ltsedge.search.budgets import Budgets
from ltsedge.search.candidate import Candidate
from ltsedge.search.evaluate import CandidateEvaluator
from ltsedge.search.screening import predicted_measurement, prediction_record


@dataclass(frozen=True)
class Speed:
    decode_ms: float
    low_ms: float  # the interval's ends (the figure itself where measured)
    high_ms: float
    prefill_ms: float | None
    memory_mb: float | None
    measured: bool
    candidate: Candidate


class SpeedOracle:
    """Figures of architectures of one parent on one device: ``measure`` times them, ``speed`` answers from
    what was measured, else from the cost model, else by measuring."""

    def __init__(self, profile: DeviceProfile, runner, store, scratch, export: ExportOptions):
        """``scratch``: the run's OutputDir (its recorded .scratch/) or a folder, where candidates are written."""
        self.profile, self.runner, self.store, self.export = profile, runner, store, export
        self.evaluator = CandidateEvaluator(coarse(profile), runner, store, scratch, Budgets(), base_profile=profile,
                                            export=export, objective="decode")
        self.model = None
        self._fitted_on = -1
        self.predicted: dict[str, Candidate] = {}

    def measure(self, archs: list[Architecture]) -> list[Speed]:
        return [self._speed(c) for c in self.evaluator.evaluate(archs, generation=0)]

    def measured(self, arch: Architecture) -> Speed | None:
        c = self.evaluator.seen.get(arch.id)
        return self._speed(c) if c is not None else None

    def speed(self, arch: Architecture) -> Speed:
        known = self.measured(arch)
        if known is not None:
            return known
        self._refit(arch)
        if self.model is None or not self.model.ready:
            return self.measure([arch])[0]
        if arch.id not in self.predicted:
            calibration = self.runner.calibrate().reference_ms
            estimate = self.model.predict(arch)
            figures = predicted_measurement(estimate, "decode", "generate", calibration)
            from ltsedge.proxy import count_params

            self.predicted[arch.id] = Candidate(arch, count_params(arch), figures, "predicted", 0,
                                                "decode_latency_ms", prediction_record(estimate))
        return self._speed(self.predicted[arch.id])

    def _refit(self, like: Architecture) -> None:
        stats = self.evaluator.stats
        if stats.measured + stats.cached == self._fitted_on:
            return
        self._fitted_on = stats.measured + stats.cached
        calibration = self.runner.calibrate()
        self.model = load_cost_model(self.store, like, self.evaluator.fingerprint, self.profile, self.export,
                                     calibration.bandwidth_scale, calibration.reference_ms)
        self.predicted.clear()  # predictions of the older fit

    @staticmethod
    def _speed(c: Candidate) -> Speed:
        m = c.measurement
        if not m.ok:
            inf = float("inf")
            return Speed(inf, inf, inf, None, None, True, c)
        decode = m.decode_latency_ms
        low, high = (decode, decode) if not m.predicted else (
            m.workloads["decode"]["latency_low_ms"], m.workloads["decode"]["latency_high_ms"])
        return Speed(decode, low, high, m.prefill_latency_ms, m.peak_memory_mb, not m.predicted, c)
