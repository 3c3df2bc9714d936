"""The statistics of a check: how well a count ranks held-out loss (Spearman, with a bootstrap interval), a
small fitted proxy with its leave-one-out error, and the spread between depths beside the gain of size.

Ranks are taken against the *negative* held-out loss, so 1.0 means "more of the count, lower loss" as the
proxy assumes. The interval resamples the models (with replacement): with a dozen models it is wide, and a
wide interval is reported as not enough evidence, whatever the point value.
"""

from __future__ import annotations

import math

import numpy as np

BOOTSTRAP = 2000
LEVEL = 0.90
WIDE = 0.5  # an interval wider than this says nothing: "not enough evidence"
MIN_MODELS = 4  # fewer give no ranking at all
# Fewer give no verdict: the bootstrap cannot show the uncertainty of a few models (4 in a perfect order, one
# chance in 24 for a random ranking, resample to an interval of [1, 1]); 8 in order happen by chance once in 40,320.
MIN_VERDICT_MODELS = 8
GOOD = 0.8  # the low end at or above it: the count ranks held-out loss well here
NO_EVIDENCE = "not enough evidence"


def ranks(x) -> np.ndarray:
    """Ranks from 1, ties given their mean rank (as Spearman's definition needs)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranked = np.empty(len(x))
    ranked[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tied = x == value
        if tied.sum() > 1:
            ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(x, y) -> float:
    """Spearman's rank correlation; NaN when either side is constant."""
    rx, ry = ranks(x), ranks(y)
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def ranking(counts, losses, seed: int = 0) -> dict | None:
    """Spearman(count, -loss) with its bootstrap interval and a verdict; None below MIN_MODELS."""
    x, y = np.asarray(counts, dtype=float), -np.asarray(losses, dtype=float)
    if len(x) < MIN_MODELS:
        return None
    rng = np.random.default_rng(seed)
    draws = [spearman(x[i], y[i]) for i in rng.integers(0, len(x), (BOOTSTRAP, len(x)))]
    draws = np.array([d for d in draws if math.isfinite(d)])
    low, high = (np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2]) if len(draws) else (math.nan, math.nan))
    value = spearman(x, y)
    return {"spearman": _round(value), "low": _round(low), "high": _round(high), "level": LEVEL, "models": len(x),
            "verdict": verdict(value, low, high, len(x))}


RANKS = ("ranks well", "ranks fairly")  # the verdicts of a count that ranks the loss


def verdict(value: float, low: float, high: float, models: int) -> str:
    if models < MIN_VERDICT_MODELS or not all(map(math.isfinite, (value, low, high))) or high - low > WIDE:
        return NO_EVIDENCE
    if low >= GOOD:
        return "ranks well"
    if high < GOOD:
        return "ranks poorly"
    return "ranks fairly"


def fit(features: np.ndarray, losses) -> dict | None:
    """Least squares of loss on [1, features...] and its leave-one-out predictions (from the hat matrix:
    residual / (1 - leverage), exact for least squares); None without two models more than coefficients."""
    X = np.column_stack([np.ones(len(features)), features])
    y = np.asarray(losses, dtype=float)
    if len(y) < X.shape[1] + 2 or np.linalg.matrix_rank(X) < X.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    hat = np.diag(X @ np.linalg.pinv(X.T @ X) @ X.T)
    leverage_ok = hat < 1 - 1e-9
    if not leverage_ok.all():
        return None  # a model the fit passes through exactly: no leave-one-out prediction for it
    loo = y - (y - X @ coef) / (1 - hat)
    return {"coefficients": [float(c) for c in coef], "loo_predictions": [float(v) for v in loo],
            "loo_rmse": _round(float(np.sqrt(np.mean((loo - y) ** 2)))),
            "rmse": _round(float(np.sqrt(np.mean((X @ coef - y) ** 2))))}


def gain_per_doubling(decoder_params, losses) -> float | None:
    """How much held-out loss (nats) doubling the decoder parameters bought in the sample (a log-linear fit)."""
    fitted = fit(np.log2(np.asarray(decoder_params, dtype=float))[:, None], losses)
    return None if fitted is None else _round(-fitted["coefficients"][1])


def _round(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)
