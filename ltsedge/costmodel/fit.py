"""One figure predicted from physical counts: a non-negative linear fit in relative error, with a
split-conformal interval from leave-one-out residuals.

Non-negative, because each count costs time or memory and none saves any: the fit cannot learn a
negative seconds-per-byte from noise, and it extrapolates to larger models the way the machine does.
Relative error, because figures span two orders of magnitude and a 5% error matters the same on a
small model as on a large one. Leave-one-out residuals are honest held-out errors of the very fit
used (refitting a small linear model n times costs milliseconds), and their quantile gives an
interval whose coverage holds for exchangeable data (conformal prediction); the coverage is checked
on held-out measurements in the tests and benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

MIN_SAMPLES = 8  # fewer: no prediction (the interval would be meaningless)
EXTRAPOLATION_WIDEN = 2.0  # an interval outside the fitted range is widened this much
# ``ltsedge predict`` refuses an architecture with a count beyond this multiple of the largest fitted: a
# linear fit of counts carried far past them is arithmetic, not a prediction (10^12 parameters came
# out with a decode step slower than the whole prompt's prefill).
MAX_REACH = 4.0


@dataclass(frozen=True)
class Prediction:
    value: float
    low: float
    high: float
    extrapolated: bool = False  # a feature outside the range the fit saw

    def to_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "extrapolated": self.extrapolated}


class RelativeLinearFit:
    """y ~ X @ w with w >= 0, minimising sum(((X @ w) / y - 1) ** 2)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, names: tuple[str, ...], coverage: float = 0.9):
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        if len(y) < MIN_SAMPLES:
            raise ValueError(f"{len(y)} samples; a fit needs at least {MIN_SAMPLES}")
        self.names, self.coverage, self.n = names, coverage, len(y)
        self.scale = np.where(X.max(axis=0) > 0, X.max(axis=0), 1.0)  # features to [0, 1]: a well-posed NNLS
        self.low_bounds, self.high_bounds = X.min(axis=0), X.max(axis=0)
        self.weights = self._solve(X, y)
        self.loo_errors = self._leave_one_out(X, y)  # signed: measured / predicted - 1
        self.q_low, self.q_high = _conformal_bounds(self.loo_errors, coverage)

    def _solve(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        A = (X / self.scale) / y[:, None]
        w, _ = nnls(A, np.ones(len(y)), maxiter=50 * X.shape[1])
        return w / self.scale

    def _leave_one_out(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        errors = np.empty(len(y))
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            predicted = float(X[i] @ self._solve(X[keep], y[keep]))
            errors[i] = y[i] / predicted - 1 if predicted > 0 else math.inf
        return errors

    def predict(self, x: np.ndarray) -> Prediction:
        x = np.asarray(x, dtype=float)
        value = float(x @ self.weights)
        span = self.high_bounds - self.low_bounds
        outside = bool(np.any((x < self.low_bounds - 0.01 * span) | (x > self.high_bounds + 0.01 * span)))
        widen = EXTRAPOLATION_WIDEN if outside else 1.0
        return Prediction(value, value * max(0.0, 1 + widen * self.q_low), value * (1 + widen * self.q_high), outside)

    def reach(self, x) -> tuple[float, int]:
        """(factor, feature index): the feature of ``x`` farthest above the largest fitted, as a multiple of it
        (features the fit never saw above 0 have no scale to measure against: they count as marked
        ``extrapolated`` only)."""
        x = np.asarray(x, dtype=float)
        factors = np.divide(x, self.high_bounds, out=np.zeros_like(x), where=self.high_bounds > 0)
        i = int(np.argmax(factors))
        return float(factors[i]), i

    def accuracy(self) -> dict:
        """Held-out (leave-one-out) accuracy of this fit: median and 90th-percentile absolute relative
        error, and the interval's half-widths."""
        absolute = np.abs(self.loo_errors)
        return {"samples": self.n, "median_error": float(np.median(absolute)),
                "p90_error": float(np.quantile(absolute, 0.9)), "interval": [self.q_low, self.q_high],
                "coverage": self.coverage}


def _conformal_bounds(errors: np.ndarray, coverage: float) -> tuple[float, float]:
    """Relative bounds (low <= 0 <= high) holding a fresh point's error with probability >= coverage:
    the split-conformal rank ceil((n + 1)(1 - alpha / 2)) on each side (the largest error where n is
    too small for that rank: then the interval is only as wide as anything seen)."""
    n = len(errors)
    alpha = 1 - coverage
    rank = min(n, math.ceil((n + 1) * (1 - alpha / 2)))
    ordered = np.sort(errors)
    return min(0.0, float(ordered[n - rank])), max(0.0, float(ordered[rank - 1]))
