"""When to stop timing: a distribution-free confidence interval for the median.

Latencies are skewed (a run that caught a context switch is long), so the mean and its normal
interval are the wrong summary. The median's interval comes from order statistics: with n sorted
samples, [x_(j), x_(n+1-j)] covers the true median with probability 1 - 2 P(B <= j-1), B ~ Bin(n, 1/2).
Pure Python: the worker imports it, and the worker imports nothing heavy.
"""

from __future__ import annotations

import math
import statistics

CONFIDENCE = 0.95
EXACT_UP_TO = 1000  # above this, the normal approximation of the binomial is exact enough


def median_interval(sorted_x: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The order-statistic confidence interval of the median. Too few samples: [min, max]."""
    n = len(sorted_x)
    alpha_half = (1 - confidence) / 2
    if n > EXACT_UP_TO:
        j = math.floor((n - 1.959964 * math.sqrt(n)) / 2)
    else:
        j, p, cdf = 0, 0.5**n, 0.0  # p = P(B = i), walked up i = 0, 1, ...
        for i in range(n):
            cdf += p
            if cdf > alpha_half:
                break
            j = i + 1
            p *= (n - i) / (i + 1)
    j = max(j, 1)
    return sorted_x[j - 1], sorted_x[n - j]


def relative_half_width(samples: list[float]) -> float:
    """Half the median interval's width over the median: 0.02 means "known within +-2%"."""
    if len(samples) < 2:
        return math.inf
    x = sorted(samples)
    low, high = median_interval(x)
    median = statistics.median(x)
    return (high - low) / 2 / median if median > 0 else math.inf


def converged(samples: list[float], min_runs: int, tolerance: float) -> bool:
    return len(samples) >= min_runs and relative_half_width(samples) <= tolerance


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, 90th percentile, minimum and coefficient of variation of the timed runs (ms)."""
    x = sorted(samples)
    p90 = x[min(len(x) - 1, math.ceil(0.9 * len(x)) - 1)]  # nearest-rank
    mean = statistics.fmean(x)
    cv = statistics.stdev(x) / mean if len(x) > 1 and mean > 0 else 0.0
    return {"latency_ms": statistics.median(x), "latency_p90_ms": p90, "latency_min_ms": x[0], "latency_cv": cv}
