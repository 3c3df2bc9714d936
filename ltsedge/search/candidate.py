"""A candidate as the search holds it (``Candidate``: an architecture, its parameter counts, its figures and
where they came from) and what the evaluator counts while it evaluates them (``EvaluationStats``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsedge.architecture import Architecture
from ltsedge.proxy import ParamCounts
from ltsedge.runners.measurement import Measurement
from ltsedge.search.budgets import Budgets


@dataclass
class Candidate:
    arch: Architecture
    params: ParamCounts
    measurement: Measurement  # measured, or predicted (``measurement.predicted``, source "predicted")
    # Where its figures come from (the candidate log's and candidates.csv's "source"), one of:
    #   "measured"   measured by this search, on this machine or an agent
    #   "store"      measured earlier, answered from the measurement store
    #   "predicted"  predicted by the device's cost model, not measured (screening.py)
    #   "settled"    predicted, then measured because its prediction would enter the front (settle_front)
    #   "skipped"    not measured: outside the decoder-parameter window
    #   "final"      a published frontier model, re-measured from its file (frontier.py)
    source: str
    generation: int
    latency_field: str = "latency_ms"  # the measurement's figure the search optimises
    prediction: dict | None = None  # what the cost model predicted before it was measured, if it did

    @property
    def ok(self) -> bool:
        return self.measurement.ok

    @property
    def predicted(self) -> bool:
        return self.source == "predicted"

    @property
    def latency_ms(self) -> float | None:
        return getattr(self.measurement, self.latency_field)

    @property
    def memory_mb(self) -> float | None:
        return self.measurement.peak_memory_mb

    def to_record(self, budgets: Budgets) -> dict:
        violations = budgets.violations(self.params.decoder_params, self.latency_ms, self.memory_mb)
        return {
            "id": self.arch.id, "generation": self.generation, "source": self.source, "ok": self.ok,
            "feasible": self.ok and not violations, "violations": violations,
            "decoder_params": self.params.decoder_params, "total_params": self.params.total_params,
            "architecture": self.arch.to_dict(), "measurement": self.measurement.to_dict(), "prediction": self.prediction,
        }


@dataclass
class EvaluationStats:
    measured: int = 0
    cached: int = 0
    failed: int = 0
    skipped: int = 0
    predicted: int = 0
    export_seconds: float = 0.0
    load_seconds: float = 0.0
    inference_seconds: float = 0.0
    evaluate_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)
