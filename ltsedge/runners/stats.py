"""When to stop timing: a distribution-free confidence interval for the median, with its true coverage.

Latencies are skewed (a run that caught a context switch is long), so the mean and its normal
interval are the wrong summary. The median's interval comes from order statistics: with n sorted
samples, [x_(j), x_(n+1-j)] covers the true median with probability 1 - 2 P(B <= j-1), B ~ Bin(n, 1/2).
That probability is only ever a few values for small n: below 6 samples even [min, max] covers less
than 95% (n = 2..5: 50, 75, 87.5, 93.75%), so an interval here always carries the coverage it really
has, and "converged" is claimed only when that coverage reaches what is claimed.

Stopping when the interval first looks narrow enough, after every new sample, would make the
claimed confidence a lie (many looks, one of them lucky). The stop rule therefore looks only at a
fixed schedule of sample counts (6, 9, 13, 19, 28, ... each ~1.5x the last) and spends the 5% error
over those looks (Bonferroni: each look at confidence 1 - 0.05 / looks), so the stopping median is
within tolerance with at least 95% confidence overall.

Pure Python: the worker imports it, and the worker imports nothing heavy.
"""

from __future__ import annotations

import math
import statistics

CONFIDENCE = 0.95
EXACT_UP_TO = 1000  # above this, the normal approximation of the binomial is exact enough
FIRST_LOOK = 6  # the smallest n whose [min, max] covers the median with >= 95% (96.9%)
LOOK_GROWTH = 1.5


def coverage(n: int, j: int) -> float:
    """P(true median in [x_(j), x_(n+1-j)]) for n samples: 1 - 2 P(Bin(n, 1/2) <= j - 1)."""
    p, cdf = 0.5**n, 0.0
    for i in range(j):
        cdf += p
        p *= (n - i) / (i + 1)
    return max(0.0, 1 - 2 * cdf)


def median_interval(sorted_x: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The tightest order-statistic interval of the median covering ``confidence``; with too few samples
    for that, [min, max] (whose real coverage ``interval_with_coverage`` reports)."""
    return interval_with_coverage(sorted_x, confidence)[:2]


def interval_with_coverage(sorted_x: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, high, coverage): the interval of ``median_interval`` and the probability it really covers."""
    n = len(sorted_x)
    if n > EXACT_UP_TO:
        j = max(1, math.floor((n - _z(confidence) * math.sqrt(n)) / 2))
        return sorted_x[j - 1], sorted_x[n - j], confidence
    j, p, cdf = 0, 0.5**n, 0.0  # p = P(B = i), walked up i = 0, 1, ...
    alpha_half = (1 - confidence) / 2
    for i in range(n):
        cdf += p
        if cdf > alpha_half:
            break
        j = i + 1
        p *= (n - i) / (i + 1)
    j = max(j, 1)
    return sorted_x[j - 1], sorted_x[n - j], coverage(n, j)


def _z(confidence: float) -> float:
    return statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def relative_half_width(samples: list[float], confidence: float = CONFIDENCE) -> float:
    """Half the median interval's width over the median: 0.02 means "known within +-2%"."""
    if len(samples) < 2:
        return math.inf
    x = sorted(samples)
    low, high = median_interval(x, confidence)
    median = statistics.median(x)
    return (high - low) / 2 / median if median > 0 else math.inf


def looks(max_runs: int) -> list[int]:
    """The sample counts at which the stop rule looks: 6, 9, 13, 19, 28, ..., and ``max_runs``."""
    counts, n = [], FIRST_LOOK
    while n < max_runs:
        counts.append(n)
        n = math.ceil(n * LOOK_GROWTH)
    return counts + [max_runs]


def per_look_confidence(max_runs: int, confidence: float = CONFIDENCE) -> float:
    return 1 - (1 - confidence) / len(looks(max_runs))


def converged(samples: list[float], min_runs: int, tolerance: float, max_runs: int | None = None,
              timed: int | None = None) -> bool:
    """Stop now? Only at a scheduled look of the ``timed`` samples (default: all of ``samples``), never
    below ``min_runs`` nor 6 of them, and only when the median's interval of ``samples`` (the ratios a
    figure is made of: ``figure_ratios``) at the per-look confidence is within +-``tolerance``."""
    n = len(samples) if timed is None else timed
    max_runs = max(max_runs or n, n)
    if n < max(min_runs, FIRST_LOOK) or n not in looks(max_runs) or len(samples) < FIRST_LOOK:
        return False
    return relative_half_width(samples, per_look_confidence(max_runs)) <= tolerance


# A sample pair is "quiet" when its reference sample ran within QUIET_WITHIN of the reference's fast end
# (its QUIET_QUANTILE among the model's pairs). A neighbour that computes, streams memory or idles in
# turn slows a model and the compute reference unequally phase by phase, so the median of all pairs'
# ratios moves with the phases a measurement happened to catch: between a quiet and a loaded run a
# forward ratio moved a median 2.9% (max 22%), its quiet pairs' 1.3% (max 17%); prefill 4.5% and 4.1%.
# A decode step beside the bandwidth reference did worse on its quiet pairs (9.2% -> 13.3%; its two
# quiet runs were 6.8% apart either way: its spread is not the neighbour's), so its figure stays the
# median of every pair (docs/benchmarks.md, "Repeatability").
QUIET_WITHIN = 0.10
QUIET_QUANTILE = 0.10
QUIET_AT_LEAST = 5  # with fewer quiet pairs, the pairs with the fastest reference samples
QUIET_REFERENCES = ("compute",)  # the references whose quiet pairs make the figure
# In the store key of every figure (keys.measurement_settings): figures made otherwise never answer.
PAIRS_METHOD = f"quiet-q{QUIET_QUANTILE:g}+{QUIET_WITHIN:g}:" + ",".join(QUIET_REFERENCES)


def figure_ratios(model_ms: list[float], reference_ms: list[float], reference: str = "compute") -> list[float]:
    """The ratios a workload's figure is made of: the quiet pairs' beside a reference of
    ``QUIET_REFERENCES``, every pair's beside another."""
    if reference in QUIET_REFERENCES:
        return quiet_ratios(model_ms, reference_ms)
    return [m / r for m, r in zip(model_ms, reference_ms) if r > 0]


def quiet_ratios(model_ms: list[float], reference_ms: list[float]) -> list[float]:
    """The model/reference ratios of the quiet pairs, in the order they were timed. On a quiet machine
    nearly every pair is quiet (the reference wanders by a few percent); under a neighbour, the pairs
    timed while it slowed the reference are left out."""
    pairs = [(m, r) for m, r in zip(model_ms, reference_ms) if r > 0]
    if not pairs:
        return []
    references = sorted(r for _, r in pairs)
    limit = (1 + QUIET_WITHIN) * references[round(QUIET_QUANTILE * (len(references) - 1))]
    if sum(r <= limit for _, r in pairs) < QUIET_AT_LEAST:
        limit = references[min(QUIET_AT_LEAST, len(references)) - 1]
    return [m / r for m, r in pairs if r <= limit]


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, 90th percentile, minimum and coefficient of variation of the timed runs (ms)."""
    x = sorted(samples)
    p90 = x[min(len(x) - 1, math.ceil(0.9 * len(x)) - 1)]  # nearest-rank
    mean = statistics.fmean(x)
    cv = statistics.stdev(x) / mean if len(x) > 1 and mean > 0 else 0.0
    return {"latency_ms": statistics.median(x), "latency_p90_ms": p90, "latency_min_ms": x[0], "latency_cv": cv}
