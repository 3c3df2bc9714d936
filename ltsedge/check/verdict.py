"""Verdicts: one measured value against one limit, with the measurement's own uncertainty.

A limit is a budget (``max_latency_ms``) or a regression limit (the previous value x (1 +
max_regression)). A value within its uncertainty of the limit is *marginal*, marked "marginal pass" or
"marginal fail" so a reader knows the gate was close.

A doubtful verdict is measured again with a stricter repeat policy, in a fresh worker (``api.py``):
- a timed figure (latency, prefill, decode) that is marginal *or over its limit*, up to
  ``CONFIRMATIONS`` times while it stays so; the verdict is decided on the *lowest* of its figures.
  Contention mostly adds time (a neighbour streaming memory slows a model, not the compute reference):
  under the check-verdicts benchmark's neighbour a first measurement read up to 45% above a model's
  quiet figure, and up to 18% below it (docs/benchmarks-history.md). So a fail stands only when every
  measurement says so; the downward side is held only by the band and ``--marginal fail``.
- a marginal memory figure (it hardly moves between runs), once; it follows the new value, still marginal.

Between runs: a timed figure is ratio x the machine's pinned calibration, and its ratio still moves
between runs by more than one run's interval says (a busy neighbour does not slow the model and the
reference alike). The pinned calibration keeps the spread this machine showed between its windows;
a timed figure's interval is widened by it (/ (1 + spread), x (1 + spread)) before asking whether the
limit is inside. How a marginal check counts is the gate's policy (``--marginal pass|fail``): "pass"
or "fail" whatever side of the limit the value fell on this time, so the verdict does not flip from
one run to the next; without a policy (the API's default) it follows the value, as above.

Uncertainty of a value (where its true value lies, 95%):
  - latency (a median of n timed runs): +-the profile's tolerance when the runs converged (the
    runner stopped because the median's order-statistic 95% interval was within it); otherwise the
    half-width estimated from the coefficient of variation, 1.96 x 1.2533 x CV / sqrt(n) (1.2533 =
    sqrt(pi/2): the standard error of a median over that of a mean), at least the tolerance, and on
    each side no further than the fastest run and the 90th percentile;
  - peak memory: +-max(2% of the value, a floor): the allocator's arenas and page granularity move a
    peak between identical runs. The floor depends on how the peak was isolated: 0.25 MB for a model
    measured first in a fresh worker (as ``check`` does; five fresh runs of a 4.2 MB model read
    4.20-4.25 MB), 2 MB in a worker that measured other models before (pages a larger model left
    behind lowered the same model to 2.4-3.4 MB). A fixed 2 MB made every memory regression check
    of a model under ~20 MB "marginal", since 2 MB is more than 10% of it. For models of hundreds of
    MB the peak moves by more than 2% between runs (up to ~10%; docs/measurement.md, "Known gap").

Pure functions of numbers: the tests feed them made-up measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from ltsedge.runners import Measurement
from ltsedge.workloads import WORKLOADS

Z95 = 1.959964
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
MEMORY_RELATIVE = 0.02
MEMORY_ABSOLUTE_MB = {"fresh_process": 0.25}  # by Measurement.memory_method
MEMORY_ABSOLUTE_DEFAULT_MB = 2.0

# Metric -> (the Measurement field, its unit): each workload's latency and the peak memory.
METRICS = {**{w.metric: (w.figure, "ms") for w in WORKLOADS.values()}, "memory": ("peak_memory_mb", "MB")}
TIMED = tuple(w.metric for w in WORKLOADS.values())  # medians of timed runs
WORKLOAD_OF = {w.metric: w.name for w in WORKLOADS.values()}
# A metric only models of one export variant have (prefill, decode: a generate model's) -> that variant.
VARIANT_ONLY = {w.metric: w.variant for w in WORKLOADS.values() if w.variant != "forward"}
PASS, FAIL, MARGINAL_PASS, MARGINAL_FAIL, ERROR = "pass", "FAIL", "marginal pass", "marginal fail", "ERROR"
MARGINAL_POLICIES = ("pass", "fail")  # how a marginal check counts; None: by its value


def value_of(metric: str, m: Measurement) -> float | None:
    return getattr(m, METRICS[metric][0]) if m.ok else None


def latency_relative_bounds(m: Measurement, tolerance: float) -> tuple[float, float]:
    """How far below and above the median latency its 95% interval reaches, relative to the median.

    A converged measurement stopped because the median's order-statistic 95% interval was within the
    tolerance: +-tolerance. Otherwise the half-width is estimated from the CV, at least the
    tolerance; one slow run inflates the CV but hardly moves a median, so each side is capped by the
    runs themselves: the interval lies within [fastest run, 90th percentile].
    """
    if not m.ok or m.converged or m.latency_cv is None or m.runs < 2 or not m.latency_ms:
        return tolerance, tolerance
    from_cv = Z95 * MEDIAN_SE_FACTOR * m.latency_cv / math.sqrt(m.runs)
    below = above = from_cv
    if m.latency_min_ms is not None:
        below = min(below, (m.latency_ms - m.latency_min_ms) / m.latency_ms)
    if m.latency_p90_ms is not None:
        above = min(above, (m.latency_p90_ms - m.latency_ms) / m.latency_ms)
    return max(tolerance, below), max(tolerance, above)


def interval(metric: str, m: Measurement, tolerance: float, spread: float = 0.0) -> tuple[float, float] | None:
    """Where the true value of ``metric`` lies (95%), in ms or MB; None when not measured. ``spread``:
    the machine's relative between-run spread, widening a timed figure's interval on both sides. The
    run's own uncertainty (sampling within the run) and the spread (where the machine is between runs)
    are independent errors, so they add in quadrature, as factors (log scale: the bounds stay positive):
    added outright, a 2% tolerance and a 4% spread made every figure within 6% of its budget marginal,
    fail in CI (docs/benchmarks-history.md)."""
    value = value_of(metric, m)
    if value is None:
        return None
    if metric in TIMED:
        below, above = latency_relative_bounds(_timing_of(metric, m), tolerance)
        between = math.log1p(spread)
        return (value * math.exp(-math.hypot(-math.log1p(-below), between)),
                value * math.exp(math.hypot(math.log1p(above), between)))
    half = max(MEMORY_RELATIVE * value, MEMORY_ABSOLUTE_MB.get(m.memory_method, MEMORY_ABSOLUTE_DEFAULT_MB))
    return value - half, value + half


def _timing_of(metric: str, m: Measurement):
    """The runs behind a timed metric: the measurement's own, or one workload's of a generate model."""
    w = (m.workloads or {}).get(WORKLOAD_OF[metric])
    if w is None:  # "latency" (every model's): the primary workload's runs, the measurement's own
        return m
    return SimpleNamespace(ok=True, converged=w["converged"], latency_cv=w["latency_cv"], runs=w["runs"],
                           latency_ms=w["latency_ms"], latency_min_ms=w["latency_min_ms"],
                           latency_p90_ms=w["latency_p90_ms"])


def uncertainty(metric: str, m: Measurement, tolerance: float, limit: float | None = None,
                spread: float = 0.0) -> float | None:
    """Absolute uncertainty of ``m``'s value (ms or MB), on the side of ``limit`` when given."""
    bounds, value = interval(metric, m, tolerance, spread), value_of(metric, m)
    if bounds is None or value is None:
        return None
    low, high = bounds
    if limit is not None and limit < value:
        return value - low
    return high - value if limit is not None else max(value - low, high - value)


def is_marginal(metric: str, m: Measurement, limit: float, tolerance: float, spread: float = 0.0) -> bool:
    """Is ``limit`` inside the value's 95% interval (widened by the between-run ``spread``)?"""
    bounds = interval(metric, m, tolerance, spread)
    return bounds is not None and bounds[0] <= limit <= bounds[1]


@dataclass
class Check:
    """One model x metric x limit. ``kind`` is "budget" or "regression"."""

    model: str
    metric: str  # a key of METRICS: "latency", "memory", "prefill", "decode"
    kind: str  # "budget" | "regression"
    limit: float
    source: str  # where the budget came from, or "previous x 1.10"
    value: float | None = None
    uncertainty: float | None = None  # absolute, of the value decided on
    marginal: bool = False  # within its uncertainty of the limit (timed: the decided measurement; memory: either)
    measurements: int = 1  # judged: the first and the re-measurements that succeeded
    decided_on: int = 0  # the measurement the value is from: 0 the first, k the k-th re-measurement
    first_value: float | None = None  # before re-measuring
    previous: float | None = None  # regression: the previous value
    error: str | None = None  # the model could not be measured
    notes: list[str] = field(default_factory=list)
    spread: float = 0.0  # the machine's relative between-run spread (timed metrics; pinned calibration)
    marginal_policy: str | None = None  # how a marginal check counts: "pass" | "fail"; None: by its value

    @property
    def unit(self) -> str:
        return METRICS[self.metric][1]

    @property
    def name(self) -> str:
        return f"{self.model} {self.metric}" + (" regression" if self.kind == "regression" else "")

    @property
    def label(self) -> str:
        return self.metric + (" vs previous" if self.kind == "regression" else "")

    @property
    def within(self) -> bool:
        """The value is at or under the limit (this time)."""
        return self.error is None and self.value is not None and self.value <= self.limit

    @property
    def passed(self) -> bool:
        if self.marginal and self.marginal_policy is not None and self.error is None and self.value is not None:
            return self.marginal_policy == "pass"
        return self.within

    @property
    def band(self) -> float:
        """The between-run spread that applies to this check's metric (memory: none)."""
        return self.spread if self.metric in TIMED else 0.0

    @property
    def verdict(self) -> str:
        if self.error is not None or self.value is None:
            return ERROR
        if self.marginal:
            return MARGINAL_PASS if self.passed else MARGINAL_FAIL
        return PASS if self.passed else FAIL

    @property
    def margin(self) -> float | None:
        """Headroom: limit - value (negative = over the limit)."""
        return None if self.value is None else self.limit - self.value

    @property
    def margin_pct(self) -> float | None:
        return None if self.value is None or self.limit <= 0 else 100 * (self.limit - self.value) / self.limit

    @property
    def change(self) -> float | None:
        """Regression checks: relative change from the previous value (+0.12 = 12% worse)."""
        if self.kind != "regression" or self.value is None or not self.previous:
            return None
        return (self.value - self.previous) / self.previous

    def decide(self, m: Measurement, tolerance: float, *, remeasured: int = 0) -> None:
        """Judge ``m``, the first measurement or (``remeasured``: its number) a re-measurement: a timed
        figure is decided on the lower figure, a memory figure on the new one (the module's docstring)."""
        if not m.ok:
            if remeasured:  # keep the verdict so far: a failed re-run says nothing about the value
                self.notes.append(f"re-measurement failed ({m.error}); verdict from the earlier measurement")
                return
            self.error = m.error or "measurement failed"
            return
        value = value_of(self.metric, m)
        if remeasured and value is None:  # e.g. the counter went unreadable: the earlier figure stands
            self.notes.append("re-measurement without this figure; verdict from the earlier measurement")
            return
        if remeasured:
            self.measurements += 1
            if self.metric in TIMED and self.value is not None and value >= self.value:
                return  # this one read slower: the lower figure still decides
            self.decided_on = remeasured
        else:
            self.first_value = value
        self.value = value
        self.uncertainty = uncertainty(self.metric, m, tolerance, self.limit, self.band)
        if self.value is None:  # e.g. no peak-memory counter on this platform
            variant = VARIANT_ONLY.get(self.metric)
            self.error = (f"no {self.metric} figure: not a {variant} model (export it with --variant {variant})"
                          if variant else f"no {self.metric} value measured on this platform")
            return
        close = is_marginal(self.metric, m, self.limit, tolerance, self.band)
        self.marginal = close if self.metric in TIMED else (self.marginal or close)

    @property
    def remeasured(self) -> bool:  # derived: a re-measurement that succeeded was judged
        return self.measurements > 1

    @property
    def doubtful(self) -> bool:
        """Worth measuring again: a timed figure marginal or over its limit, a memory figure marginal
        and not yet re-measured (how often is ``api.py``'s: CONFIRMATIONS)."""
        if self.error is not None or self.value is None:
            return False
        if self.metric in TIMED:
            return self.marginal or not self.within
        return self.marginal and not self.remeasured

    def message(self) -> str:
        """One line: "latency 53.1 ms > budget 50 ms", for JUnit and logs."""
        if self.error is not None:
            return f"{self.metric} not measured: {self.error}"
        what = "budget" if self.kind == "budget" else "regression limit"
        op = "<=" if self.within else ">"
        text = f"{self.metric} {fmt(self.value)} {self.unit} {op} {what} {fmt(self.limit)} {self.unit}"
        if self.kind == "regression":
            text += f" (previous {fmt(self.previous)} {self.unit}, {self.change:+.1%})"
        if self.metric in TIMED and self.measurements > 1:
            text += f" [lowest of {self.measurements} measurements, the first {fmt(self.first_value)} {self.unit}]"
        if self.marginal:
            again = ", re-measured" if self.remeasured and self.metric not in TIMED else ""
            band = f", this machine's between-run spread {self.band:.1%} included" if self.band else ""
            counted = f"; counted as {self.marginal_policy} (--marginal)" if self.marginal_policy else ""
            text += f" [marginal: within +-{fmt(self.uncertainty)} {self.unit} of the limit{band}{again}{counted}]"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "kind": self.kind, "unit": self.unit, "value": self.value,
                "limit": self.limit, "source": self.source, "margin": self.margin, "margin_pct": self.margin_pct,
                "uncertainty": self.uncertainty, "verdict": self.verdict, "passed": self.passed,
                "marginal": self.marginal, "remeasured": self.remeasured, "measurements": self.measurements,
                "decided_on": self.decided_on, "first_value": self.first_value,
                "previous": self.previous, "change": self.change, "error": self.error, "notes": list(self.notes),
                "within_limit": self.within, "between_run_spread": self.band, "marginal_policy": self.marginal_policy}


def signed(value: float | None) -> str:
    """fmt with a sign: "+38.0", "-0.488"."""
    if value is None:
        return "-"
    return ("+" if value >= 0 else "-") + fmt(abs(value))


def fmt(value: float | None) -> str:
    """A measured number with 3-4 significant digits, no exponent for everyday values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"
