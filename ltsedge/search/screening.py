"""Which new candidates a search measures, and the predicted figures of those it does not.

With ``--measure front`` (the default) a candidate is measured only where its measurement could
matter: when the cost model is not ready yet (too few samples of this machine and settings), when
its optimistic prediction (the low ends of its intervals) is not dominated by the front measured so
far, when its interval straddles a budget, or when it lies outside the range the model was fitted
on. Of those, a generation measures at most ``MEASURE_SHARE`` of its candidates, the most promising
first (the optimistic point furthest beyond the front, see ``promise``), re-judging the rest after
every chunk against the grown front. Apart from that budget, the audit share (a fixed, seeded
fraction measured whatever the prediction) checks the model on candidates it did not choose.
Everything else keeps its prediction, marked as such: NSGA-II ranks it, nothing publishes or
reports it as measured. ``--measure all`` measures every candidate, as the study did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from ltsedge.costmodel import CostModel, Estimate
from ltsedge.runners.measurement import Measurement
from ltsedge.proxy import decoder_merit, merit_of
from ltsedge.search.budgets import Budgets
from ltsedge.search.pareto import pareto_front

MEASURE_MODES = ("front", "all")
AUDIT_SHARE = 0.05
MEASURE_SHARE = 0.10  # of a generation's new candidates, once the cost model is ready (audits aside)


@dataclass(frozen=True)
class Verdict:
    measure: bool
    reason: str  # why: "no cost model yet", "could enter the front", "near a budget", "audit", ...
    estimate: Estimate | None = None
    promise: float = float("inf")  # how far its optimistic point lies beyond the front (> 1: not dominated)

    @property
    def budgeted(self) -> bool:
        """Measured within the generation's share (audits and a model not ready are not)."""
        return self.measure and self.reason not in ("audit", "no cost model yet")


def audited(seed: int, arch_id: str, share: float = AUDIT_SHARE) -> bool:
    """A fixed share of candidates, the same ones for the same seed (resume replays it exactly)."""
    digest = hashlib.sha256(f"{seed}:{arch_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


class Screen:
    def __init__(self, objective: str, budgets: Budgets, seed: int, audit_share: float = AUDIT_SHARE,
                 share: float = MEASURE_SHARE, merit=decoder_merit):
        self.objective, self.budgets, self.seed, self.audit_share = objective, budgets, seed, audit_share
        self.share = share
        self.merit = merit  # the front's quality axis (pareto.py): decoder parameters or a fitted proxy's
        self.model: CostModel | Callable[[object], CostModel] | None = None

    def use(self, model: CostModel | Callable[[object], CostModel]) -> None:
        """The cost model to predict with: one, or a function of an architecture giving the one of its export
        settings (a backbone whose bundles' graph form is each model's own: the forms' costs differ)."""
        self.model = model

    def model_for(self, arch) -> CostModel | None:
        return self.model(arch) if callable(self.model) else self.model

    def verdict(self, arch, params: int, front: list[tuple[float, float, float]], calibration_ms: float) -> Verdict:
        """Whether ``arch`` (with ``params`` decoder parameters) must be measured, given the front
        measured so far (``front_points``, in merit)."""
        model = self.model_for(arch)
        if model is None or not model.ready:
            return Verdict(True, "no cost model yet")
        estimate = model.predict(arch)
        ratio, memory = estimate.ratios[self.objective], estimate.memory_mb
        if estimate.extrapolated:
            return Verdict(True, "outside the fitted range", estimate)
        budget = self._budget_verdict(params, ratio, memory, calibration_ms)
        if budget is not None:
            return Verdict(budget[0], budget[1], estimate)
        if audited(self.seed, arch.id, self.audit_share):
            return Verdict(True, "audit", estimate)
        score = promise(self.merit(arch, params), ratio.low, memory.low, front)
        if score <= 1.0:
            return Verdict(False, "dominated by the measured front", estimate, score)
        return Verdict(True, "could enter the front", estimate, score)

    def front_points(self, measured: list) -> list[tuple[float, float, float]]:
        """The measured front as (merit, objective ratio, peak MB)."""
        points = []
        for c in pareto_front(measured, self.budgets, self.merit):
            front_ratio = c.measurement.ratio(self.objective)
            if front_ratio is not None and c.memory_mb is not None:
                points.append((merit_of(c, self.merit), front_ratio, c.memory_mb))
        return points

    def _budget_verdict(self, params, ratio, memory, calibration_ms) -> tuple[bool, str] | None:
        b = self.budgets
        limits = []
        if b.max_latency_ms is not None:
            limits.append((ratio, b.max_latency_ms / calibration_ms))
        if b.max_memory_mb is not None:
            limits.append((memory, b.max_memory_mb))
        for prediction, limit in limits:
            if prediction.low > limit:
                return False, "over a budget"
        for prediction, limit in limits:
            if prediction.high > limit:
                return True, "near a budget"
        return None


def promise(params: float, ratio: float, memory: float, front: list[tuple[float, float, float]]) -> float:
    """How far (ratio, memory) lies beyond the front at merit ``params``: the smallest, over the front
    points of at least this merit, of the larger factor by which it beats them on latency or memory.
    <= 1: one of them dominates it; infinite: no front point has as much merit."""
    factors = [max(r / ratio, m / memory) for p, r, m in front if p >= params and ratio > 0 and memory > 0]
    return min(factors, default=float("inf"))


def plan(verdicts: dict, share_left: int) -> list[str]:
    """Ids to measure next: every unbudgeted one (audits, no model yet), then the most promising
    budgeted ones while the generation's share lasts."""
    free = [i for i, v in verdicts.items() if v.measure and not v.budgeted]
    ranked = sorted((i for i, v in verdicts.items() if v.budgeted), key=lambda i: -verdicts[i].promise)
    return free + ranked[:max(share_left, 0)]


def predicted_measurement(estimate: Estimate, objective: str, variant: str, calibration_ms: float) -> Measurement:
    """A candidate's predicted figures in the shape of a measurement, marked ``predicted``: ratios
    and intervals per workload, milliseconds through the run's calibration, memory with its interval."""
    workloads = {}
    for name, p in estimate.ratios.items():
        workloads[name] = {"latency_ratio": p.value, "latency_ms": p.value * calibration_ms,
                           "latency_low_ms": p.low * calibration_ms, "latency_high_ms": p.high * calibration_ms}
    primary = "decode" if variant == "generate" else "forward"
    generation = {}
    if variant == "generate":
        generation = dict(workloads=workloads, prefill_latency_ms=workloads["prefill"]["latency_ms"],
                          decode_latency_ms=workloads["decode"]["latency_ms"])
    return Measurement(ok=True, predicted=True, extrapolated=estimate.extrapolated, calibration_ms=calibration_ms,
                       workload=primary, **workloads[primary], peak_memory_mb=estimate.memory_mb.value,
                       memory_low_mb=estimate.memory_mb.low, memory_high_mb=estimate.memory_mb.high, **generation)


def prediction_record(estimate: Estimate) -> dict:
    """What was predicted for a candidate before it was measured (its figures then say how good)."""
    return {**{name: p.to_dict() for name, p in estimate.ratios.items()}, "memory_mb": estimate.memory_mb.to_dict()}


def screening_summary(evaluator) -> dict:
    """How the search spent its measurements, and how good the cost model's predictions were on the
    candidates measured after being predicted (held out: each prediction was made before its figure
    was known): median absolute relative error and the share inside the stated interval."""
    candidates = evaluator.candidates()
    out = {"measure": "front" if evaluator.screen is not None else "all", "evaluated": len(candidates),
           "measured": sum(c.source in ("measured", "store", "settled") for c in candidates),
           "predicted": sum(c.predicted for c in candidates),
           "settled": sum(c.source == "settled" for c in candidates)}
    checked = [c for c in candidates if c.prediction and c.ok and not c.predicted]
    for target in (evaluator.objective, "memory_mb"):
        errors, inside = [], 0
        for c in checked:
            p = c.prediction.get(target)
            actual = c.memory_mb if target == "memory_mb" else c.measurement.ratio(evaluator.objective)
            if not p or actual is None or not p["value"]:
                continue
            errors.append(abs(actual / p["value"] - 1))
            inside += p["low"] <= actual <= p["high"]
        if errors:
            errors.sort()
            out[target] = {"checked": len(errors), "median_error": errors[len(errors) // 2],
                           "interval_coverage": inside / len(errors)}
    return out
