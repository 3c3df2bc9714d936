"""The deployable models that publish the Pareto frontier (its maths are in ``pareto.py``).

Publishing writes each frontier model (``models/<id>.onnx``, or a bundle ``models/<id>/``) and
re-measures it from the exact file the user receives: a fresh figure, because the search's figures of
the models it kept are biased low (among many noisy figures, the front holds those that came out
lowest). Precision is spent only where a decision depends on it (``undecided``): every model is first
re-measured at the device profile's own policy (however coarsely the search timed it); a model whose place on the front still hangs on the noise (its
latency interval overlaps that of a model that would dominate it or that it would dominate, or it
straddles the latency budget) is measured again with the strict policy. A front point far from its
neighbours keeps its fresh figure: more runs would not change what is published. The front is
recomputed with the final figures, and every kept file's sha256 checked against the one recorded when
it was measured.

Only the objective's workload is timed to the policy; a generate model's other workload (reported, not
optimised) is timed coarsely (``Race.secondary``) and says so (``coarse: true``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import MODEL_FILE, write_bundle
from ltsedge.exporters.options import ExportOptions
from ltsedge.files import data_file_name, sha256_of
from ltsedge.proxy import decoder_merit, merit_of
from ltsedge.runners import MeasuringRunner
from ltsedge.runners.racing import Race
from ltsedge.search.budgets import Budgets
from ltsedge.search.candidate import Candidate
from ltsedge.search.outdir import MODELS, OutputDir
from ltsedge.search.pareto import pareto_front


@dataclass
class PublishedModel:
    candidate: Candidate
    path: Path  # the ONNX model measured (in a bundle: its model.onnx)
    sha256: str  # of that file
    files: dict[str, str] = field(default_factory=dict)  # every file shipped, relative to OUT -> sha256
    remeasured: str | None = None  # the policy of its final figure: "profile" or "strict" (None: not yet)

    @property
    def bundle(self) -> Path | None:
        return self.path.parent if self.path.name == MODEL_FILE else None


def write_frontier(front: list[Candidate], outdir: OutputDir, options: ExportOptions | None = None, *,
                   execution_provider: str = "CPUExecutionProvider") -> list[PublishedModel]:
    """Export every front model into ``models/`` as ``options`` say, the ones its figures were measured
    with (the generate variant as a bundle ``models/<id>/``).

    Models an earlier (restarted or interrupted) search of this directory published are removed;
    only files the manifest records as ltsedge's are ever touched."""
    keep = {c.arch.id for c in front}
    for stale in outdir.files_under(MODELS):
        if _model_id(stale) not in keep:
            outdir.remove(stale)
    options = ExportOptions() if options is None else options
    written = []
    for c in front:
        exported = export_model(c.arch, options, execution_provider=execution_provider)
        if options.variant == "generate":
            files = write_bundle(exported, outdir.root / MODELS / c.arch.id, claim=_claimer(outdir))
            files = {f"{MODELS}/{c.arch.id}/{name}": sha for name, sha in files.items()}
            model_rel = f"{MODELS}/{c.arch.id}/{MODEL_FILE}"
        else:
            model_rel = f"{MODELS}/{c.arch.id}.onnx"
            if exported.external():
                outdir.path(data_file_name(model_rel))
            saved = exported.save_files(outdir.path(model_rel))
            files = {f"{MODELS}/{name}": sha for name, sha in saved.items()}
        written.append(PublishedModel(c, outdir.root / model_rel, files[model_rel], files))
    return written


def remeasure(models: list[PublishedModel], runner: MeasuringRunner, objective: str, policy: str,
              log=print) -> list[PublishedModel]:
    """A fresh figure of each model from its published file, the objective's workload timed to the
    runner's policy (named ``policy`` in the result), the others coarsely. A model whose measurement
    fails keeps the figure it had, and the error beside it."""
    if not models:
        return []
    races = [Race(objective, p.candidate.params.decoder_params, (), runner.profile.tolerance)
             for p in models]  # no front to race against: only the coarse other workloads
    measured = runner.measure_many([p.path for p in models], race=lambda i: races[i])
    calibration = runner.calibrate()
    out = []
    for p, m in zip(models, measured):
        if not m.ok:
            log(f"warning: {p.candidate.arch.id} failed its final measurement ({m.error}); keeping its earlier figures")
            earlier = p.candidate.measurement.rescaled(calibration.reference_ms, calibration.bandwidth_scale)
            m = replace(earlier, final_measurement_error=m.error)
        out.append(replace(p, candidate=replace(p.candidate, measurement=m, source="final"), remeasured=policy))
    return out


def _interval(c: Candidate, objective: str) -> tuple[float, float] | None:
    """The objective latency's interval (ms) from the candidate's measurement, if it has one."""
    w = c.measurement.figures(objective)
    low, high = w.get("latency_low_ms"), w.get("latency_high_ms")
    if low is None or high is None or c.latency_ms is None:
        return None
    return min(low, c.latency_ms), max(high, c.latency_ms)


def undecided(models: list[PublishedModel], budgets: Budgets, objective: str, merit=decoder_merit) -> set[str]:
    """Ids of the models whose place on the front could change within their latency intervals.

    Merit (decoder parameters, or a fitted proxy's) is exact and peak memory is not made more precise by
    more runs, so a pair's dominance hangs on latency alone: it is undecided when one model has at least
    the other's merit and at most its memory and their latency intervals overlap. A model straddling the
    latency budget is undecided too; so is one without an interval (e.g. a failed re-measurement)."""
    ok = [p.candidate for p in models if p.candidate.ok]
    intervals = {c.arch.id: _interval(c, objective) for c in ok}
    doubtful = {cid for cid, iv in intervals.items() if iv is None}
    limit = budgets.max_latency_ms
    if limit is not None:
        doubtful |= {cid for cid, iv in intervals.items() if iv is not None and iv[0] <= limit < iv[1]}
    for a in ok:
        for b in ok:
            if a is b or merit_of(b, merit) < merit_of(a, merit) or b.memory_mb > a.memory_mb:
                continue
            ia, ib = intervals[a.arch.id], intervals[b.arch.id]
            if ia is not None and ib is not None and ib[0] <= ia[1] and ia[0] <= ib[1]:
                doubtful |= {a.arch.id, b.arch.id}  # would b dominate a? Their latency cannot tell yet
    return doubtful


def keep_front(models: list[PublishedModel], outdir: OutputDir, budgets: Budgets, merit=decoder_merit
               ) -> list[PublishedModel]:
    """The front recomputed on the final figures: the files of models it no longer holds are removed,
    every kept file's sha256 verified; sorted by decoder parameters."""
    kept_ids = {c.arch.id for c in pareto_front([p.candidate for p in models], budgets, merit)}
    for p in models:
        if p.candidate.arch.id not in kept_ids:  # dominated once measured afresh
            for rel in p.files:
                outdir.remove(rel)
    published = [p for p in models if p.candidate.arch.id in kept_ids]
    for p in published:
        for rel, sha in p.files.items():
            verify_sha256(outdir.root / rel, sha)
    return sorted(published, key=lambda p: p.candidate.params.decoder_params)


def _model_id(rel: str) -> str:
    """``models/<id>.onnx[_data]`` (or ``.data``, as earlier versions named it) or ``models/<id>/<file>`` ->
    ``<id>``."""
    name = rel.split("/")[1]
    return name.split(".onnx")[0]


def _claimer(outdir: OutputDir):
    return lambda path: outdir.path(path.relative_to(outdir.root).as_posix())


def verify_sha256(path: Path, expected: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise LtsedgeError(f"{path} changed after it was measured (sha256 {actual[:12]} != {expected[:12]})")
