"""A search's budgets: the decoder-parameter window and the latency and memory limits.

Parameter limits are known before measuring (a candidate outside them is never measured); latency
and memory limits are pymoo constraints, judged on the measured figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budgets:
    max_latency_ms: float | None = None
    max_memory_mb: float | None = None
    min_params: int | None = None
    max_params: int | None = None

    def active(self) -> list[str]:
        return [k for k, v in self.__dict__.items() if v is not None]

    def violations(self, params: int, latency_ms: float | None, memory_mb: float | None) -> dict[str, float]:
        """Positive amount by which each budget is exceeded (absent budgets are not listed)."""
        out = {}
        if self.max_latency_ms is not None and latency_ms is not None:
            out["max_latency_ms"] = latency_ms - self.max_latency_ms
        if self.max_memory_mb is not None and memory_mb is not None:
            out["max_memory_mb"] = memory_mb - self.max_memory_mb
        if self.min_params is not None:
            out["min_params"] = self.min_params - params
        if self.max_params is not None:
            out["max_params"] = params - self.max_params
        return {k: v for k, v in out.items() if v > 0}

    def to_dict(self) -> dict:
        return dict(self.__dict__)
