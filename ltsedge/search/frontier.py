"""The Pareto frontier, its hypervolume, and the deployable models that publish it.

Publishing re-measures each frontier model from the exact file the user receives
(``models/<id>.onnx``), with a stricter repeat policy, recomputes the front with those figures, and
checks every kept file's sha256 against the one recorded when it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pymoo.indicators.hv import HV
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.files import sha256_of
from ltsedge.runners import Runner
from ltsedge.search.budgets import Budgets
from ltsedge.search.evaluate import Candidate
from ltsedge.search.outdir import MODELS, OutputDir


def objectives(candidates: list[Candidate]) -> np.ndarray:
    return np.array([[-c.params.decoder_params, c.latency_ms, c.memory_mb] for c in candidates], dtype=float)


def feasible(candidates: list[Candidate], budgets: Budgets) -> list[Candidate]:
    return [c for c in candidates
            if c.ok and not budgets.violations(c.params.decoder_params, c.latency_ms, c.memory_mb)]


def pareto_front(candidates: list[Candidate], budgets: Budgets) -> list[Candidate]:
    """Non-dominated feasible candidates, sorted by decoder parameters."""
    pool = feasible(candidates, budgets)
    if not pool:
        return []
    best = NonDominatedSorting().do(objectives(pool), only_non_dominated_front=True)
    return sorted((pool[i] for i in best), key=lambda c: c.params.decoder_params)


@dataclass(frozen=True)
class HypervolumeScale:
    """Fixed normalisation so hypervolumes of one search (or of compared searches) are comparable."""

    max_params: float
    ref_latency_ms: float
    ref_memory_mb: float

    def __call__(self, candidates: list[Candidate]) -> float:
        if not candidates:
            return 0.0
        F = objectives(candidates)
        normalised = np.column_stack([1 + F[:, 0] / self.max_params, F[:, 1] / self.ref_latency_ms,
                                      F[:, 2] / self.ref_memory_mb])
        return float(HV(ref_point=np.ones(3))(normalised))

    @classmethod
    def from_candidates(cls, candidates: list[Candidate], max_params: int) -> HypervolumeScale:
        ok = [c for c in candidates if c.ok]
        latency = max((c.latency_ms for c in ok), default=1.0)
        memory = max((c.memory_mb for c in ok), default=1.0)
        return cls(float(max_params), 1.1 * latency, 1.1 * memory)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PublishedModel:
    candidate: Candidate
    path: Path
    sha256: str


def publish(front: list[Candidate], runner: Runner, outdir: OutputDir, budgets: Budgets,
            target_ort: str | None = None, log=print) -> list[PublishedModel]:
    """Write, re-measure and verify the frontier models; return the front recomputed on the new figures.

    Models an earlier (restarted or interrupted) search of this directory published are removed;
    only files the manifest records as ltsedge's are ever touched."""
    keep = {f"{MODELS}/{c.arch.id}.onnx" for c in front}
    for stale in outdir.files_under(MODELS):
        if stale not in keep:
            outdir.remove(stale)
    written = []
    for c in front:
        rel = f"{MODELS}/{c.arch.id}.onnx"
        sha = export_model(c.arch, target_ort=target_ort).save(outdir.path(rel))
        written.append((c, rel, sha))
    remeasured = runner.measure_many([outdir.root / rel for _, rel, _ in written])
    published = []
    for (c, rel, sha), m in zip(written, remeasured):
        record = m.to_dict()
        if not record.get("ok"):
            log(f"warning: {c.arch.id} failed its final measurement ({record.get('error')}); keeping the search figures")
            record = {**c.measurement, "final_measurement_error": record.get("error")}
        published.append(PublishedModel(Candidate(c.arch, c.params, record, "final", c.generation),
                                        outdir.root / rel, sha))
    kept_ids = {c.arch.id for c in pareto_front([p.candidate for p in published], budgets)}
    for p in published:
        if p.candidate.arch.id not in kept_ids:  # dominated once measured strictly
            outdir.remove(p.path.relative_to(outdir.root).as_posix())
    published = [p for p in published if p.candidate.arch.id in kept_ids]
    for p in published:
        verify_sha256(p.path, p.sha256)
    return sorted(published, key=lambda p: p.candidate.params.decoder_params)


def verify_sha256(path: Path, expected: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise LtsedgeError(f"{path} changed after it was measured (sha256 {actual[:12]} != {expected[:12]})")
