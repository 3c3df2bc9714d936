"""Pareto maths over evaluated candidates: feasibility, the non-dominated front, its hypervolume.

Pure functions of the candidates' figures (anything with ``ok``, ``predicted``, ``arch``, ``params``,
``latency_ms`` and ``memory_mb``); nothing here exports, measures or imports the evaluator. Only
measured figures make a front: a predicted candidate guides the search but is never on it.

The quality axis is a *merit*, higher better: the decoder-parameter count (the study's proxy), or, with a
proxy a check fitted on the user's text (``--proxy FILE``), the count scaled by the fit's depth term
(``proxycheck.fitted.FittedProxy.merit``; ``ltsedge.proxy.decoder_merit``). Budgets stay in real
decoder parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pymoo.indicators.hv import HV
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from ltsedge.proxy import decoder_merit, merit_of
from ltsedge.search.budgets import Budgets


def objectives(candidates: list, merit=decoder_merit) -> np.ndarray:
    return np.array([[-merit_of(c, merit), c.latency_ms, c.memory_mb] for c in candidates], dtype=float)


def feasible(candidates: list, budgets: Budgets) -> list:
    """Measured candidates within the budgets (a prediction is never feasible: it was not measured)."""
    return [c for c in candidates
            if c.ok and not getattr(c, "predicted", False) and not budgets.violations(c.params.decoder_params, c.latency_ms, c.memory_mb)]


def pareto_front(candidates: list, budgets: Budgets, merit=decoder_merit) -> list:
    """Non-dominated feasible candidates (in merit, latency, memory), sorted by decoder parameters."""
    pool = feasible(candidates, budgets)
    if not pool:
        return []
    best = NonDominatedSorting().do(objectives(pool, merit), only_non_dominated_front=True)
    return sorted((pool[i] for i in best), key=lambda c: c.params.decoder_params)


def thin(front: list, resolution: float, keep: frozenset[str] | set[str] = frozenset(), merit=decoder_merit) -> list:
    """The models of ``front`` worth publishing at ``resolution`` (epsilon): every model left out has a
    kept one with at least 1 / (1 + epsilon) of its merit (decoder parameters, or a fitted proxy's, whose
    ratio is a difference of predicted loss) and at most (1 + epsilon) times its latency and its memory. A 3-objective front of a long search is dense (233 models, neighbours a few %
    apart, in the study's search here): models closer than the machine can time apart are one choice for
    a user, and each costs a bundle and a re-measurement. Greedy from the highest merit down, so of
    near-equals the one the proxy ranks best is kept; the ids in ``keep`` (the layer-scaled baseline's
    models the search started from: the report compares with them) are kept first, whatever covers them.
    Sorted by decoder parameters; 0: the whole front."""
    if resolution <= 0:
        return list(front)
    factor = 1 + resolution
    kept: list = [c for c in front if c.arch.id in keep] if keep else []
    for c in sorted(front, key=lambda c: -merit_of(c, merit)):
        if keep and c.arch.id in keep:
            continue
        if not any(merit_of(k, merit) * factor >= merit_of(c, merit) and k.latency_ms <= c.latency_ms * factor
                   and k.memory_mb <= c.memory_mb * factor for k in kept):
            kept.append(c)
    return sorted(kept, key=lambda c: c.params.decoder_params)


def spread(items: list, n: int) -> list:
    """At most n of ``items``, evenly spaced, the first and the last included."""
    if len(items) <= n:
        return list(items)
    if n == 1:
        return [items[-1]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def cap(kept: list, limit: int | None, keep: frozenset[str] | set[str] = frozenset(), merit=decoder_merit) -> list:
    """At most ``limit`` of the thinned front ``kept`` (sorted by decoder parameters; None: all): a user's
    disk, not the front, bounds what is written (a 3-objective front of 233 models wrote 44 GB). The ids in
    ``keep`` (what the baseline comparison reads) first, then the others spread evenly over the merit
    (the best by the proxy always among them); where ``keep`` alone is over the limit, it is spread the same
    way. Returned in the order of ``kept``."""
    if limit is None or len(kept) <= limit:
        return list(kept)
    ranked = sorted(kept, key=lambda c: merit_of(c, merit))
    must = [c for c in ranked if c.arch.id in keep]
    if len(must) >= limit:
        chosen = {c.arch.id for c in spread(must, limit)}
    else:
        chosen = {c.arch.id for c in must} | {c.arch.id for c in spread(
            [c for c in ranked if c.arch.id not in keep], limit - len(must))}
    return [c for c in kept if c.arch.id in chosen]


@dataclass(frozen=True)
class HypervolumeScale:
    """Fixed normalisation so hypervolumes of one search (or of compared searches) are comparable."""

    max_params: float  # the merit normalised to 1 (the space's largest decoder-parameter count)
    ref_latency_ms: float
    ref_memory_mb: float

    def __call__(self, candidates: list, merit=decoder_merit) -> float:
        if not candidates:
            return 0.0
        F = objectives(candidates, merit)
        normalised = np.column_stack([1 + F[:, 0] / self.max_params, F[:, 1] / self.ref_latency_ms,
                                      F[:, 2] / self.ref_memory_mb])
        return float(HV(ref_point=np.ones(3))(normalised))

    @classmethod
    def from_candidates(cls, candidates: list, max_params: int) -> HypervolumeScale:
        ok = [c for c in candidates if c.ok and not getattr(c, "predicted", False)]
        latency = max((c.latency_ms for c in ok), default=1.0)
        memory = max((c.memory_mb for c in ok), default=1.0)
        return cls(float(max_params), 1.1 * latency, 1.1 * memory)

    def to_dict(self) -> dict:
        return dict(self.__dict__)
