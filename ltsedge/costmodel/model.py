"""A device's cost model: each workload's latency ratio and the peak memory of an architecture,
predicted from this machine's own measurements of other architectures, with intervals.

It is only ever fitted on figures of one machine fingerprint, one set of measurement settings, one
onnxruntime and one way of exporting (``samples.py`` selects them by the store's keys), so a model
from another machine or other settings cannot be used by mistake: it would have no samples.
Latency is predicted as a ratio to the reference model, the unit that travels between runs; the
milliseconds follow from a run's calibration like every measured figure's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltsedge.costmodel.features import LATENCY_FEATURES, MEMORY_FEATURES, Shapes, latency_features, memory_features
from ltsedge.costmodel.fit import MIN_SAMPLES, Prediction, RelativeLinearFit
from ltsedge.runners.measurement import Measurement

MEMORY = "memory"


def workloads_of(variant: str) -> tuple[str, ...]:
    return ("prefill", "decode") if variant == "generate" else ("forward",)


def complete_samples(samples: list[tuple], variant: str) -> list[tuple]:
    """The (Architecture, Measurement) pairs with every figure a model of ``variant`` is fitted on: as
    many of them as ``MIN_SAMPLES`` make a model (found without fitting one)."""
    return [(a, m) for a, m in samples if m.ok and m.peak_memory_mb
            and all((m.ratio(w) or 0) > 0 for w in workloads_of(variant))]


@dataclass(frozen=True)
class Reach:
    """How far beyond the fitted range an architecture lies: its count of ``feature`` (for ``target``) is
    ``factor`` times the largest among the samples (a factor <= 1: within the range)."""

    factor: float
    target: str
    feature: str
    value: float
    largest: float


@dataclass(frozen=True)
class Estimate:
    """Predicted figures of one architecture: per workload its latency ratio, and peak memory (MB)."""

    ratios: dict[str, Prediction]
    memory_mb: Prediction

    @property
    def extrapolated(self) -> bool:
        return self.memory_mb.extrapolated or any(p.extrapolated for p in self.ratios.values())


class CostModel:
    def __init__(self, samples: list[tuple], profile, variant: str, coverage: float = 0.9):
        """``samples``: (Architecture, Measurement) pairs measured with ``profile`` and ``variant``."""
        self.variant, self.coverage = variant, coverage
        self.workloads = workloads_of(variant)
        self.shapes = {w: Shapes.of(w, profile) for w in self.workloads}
        self.samples = [(a, m) for a, m in samples if m.ok and m.peak_memory_mb]
        self.fits: dict[str, RelativeLinearFit] = {}
        for target in (*self.workloads, MEMORY):
            rows = [(self._features(a, target), self._figure(m, target)) for a, m in self.samples]
            rows = [(x, y) for x, y in rows if y is not None and y > 0]
            if len(rows) >= MIN_SAMPLES:
                X, y = zip(*rows)
                names = MEMORY_FEATURES if target == MEMORY else LATENCY_FEATURES
                self.fits[target] = RelativeLinearFit(np.array(X), np.array(y), names, coverage)

    @property
    def ready(self) -> bool:
        return all(t in self.fits for t in (*self.workloads, MEMORY))

    def predict(self, arch) -> Estimate:
        if not self.ready:
            raise ValueError(f"the cost model has {len(self.samples)} samples; it needs {MIN_SAMPLES}")
        ratios = {w: self.fits[w].predict(self._features(arch, w)) for w in self.workloads}
        return Estimate(ratios, self.fits[MEMORY].predict(self._features(arch, MEMORY)))

    def reach(self, arch) -> Reach:
        """The count of ``arch`` that lies farthest beyond the range of the samples, over every fit."""
        farthest = None
        for target, fit in self.fits.items():
            x = self._features(arch, target)
            factor, i = fit.reach(x)
            if farthest is None or factor > farthest.factor:
                farthest = Reach(factor, target, fit.names[i], x[i], float(fit.high_bounds[i]))
        return farthest

    def accuracy(self) -> dict:
        """Leave-one-out accuracy per target (see ``RelativeLinearFit.accuracy``)."""
        return {target: fit.accuracy() for target, fit in self.fits.items()}

    def _features(self, arch, target: str) -> list[float]:
        if target == MEMORY:
            values = memory_features(arch, self.shapes)
            return [values[k] for k in MEMORY_FEATURES]
        values = latency_features(arch, self.shapes[target])
        return [values[k] for k in LATENCY_FEATURES]

    @staticmethod
    def _figure(measurement: Measurement, target: str) -> float | None:
        return measurement.peak_memory_mb if target == MEMORY else measurement.ratio(target)
