"""The deployable models that publish the Pareto frontier (its maths are in ``pareto.py``).

Publishing writes each frontier model (``models/<id>.onnx``, or a bundle ``models/<id>/``) and
re-measures it from the exact file the user receives, with a stricter repeat policy: a fresh figure,
because the search's figures of the models it kept are biased low (among many noisy figures, the
front holds those that came out lowest). The front is recomputed with those figures, and every kept
file's sha256 checked against the one recorded when it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import MODEL_FILE, write_bundle
from ltsedge.files import sha256_of
from ltsedge.runners import Runner
from ltsedge.runners.measurement import rescaled
from ltsedge.search.budgets import Budgets
from ltsedge.search.evaluate import Candidate
from ltsedge.search.outdir import MODELS, OutputDir
from ltsedge.search.pareto import pareto_front


@dataclass
class PublishedModel:
    candidate: Candidate
    path: Path  # the ONNX model measured (in a bundle: its model.onnx)
    sha256: str  # of that file
    files: dict[str, str] = field(default_factory=dict)  # every file shipped, relative to OUT -> sha256

    @property
    def bundle(self) -> Path | None:
        return self.path.parent if self.path.name == MODEL_FILE else None


def publish(front: list[Candidate], runner: Runner, outdir: OutputDir, budgets: Budgets,
            target_ort: str | None = None, log=print, variant: str = "forward",
            precision: str = "fp32") -> list[PublishedModel]:
    """Write, re-measure and verify the frontier models; return the front recomputed on the new figures.

    The forward variant ships as ``models/<id>.onnx``, the generate variant as a bundle ``models/<id>/``.
    Models an earlier (restarted or interrupted) search of this directory published are removed;
    only files the manifest records as ltsedge's are ever touched."""
    keep = {c.arch.id for c in front}
    for stale in outdir.files_under(MODELS):
        if _model_id(stale) not in keep:
            outdir.remove(stale)
    written = []
    for c in front:
        exported = export_model(c.arch, target_ort=target_ort, variant=variant, precision=precision,
                                execution_provider=runner.profile.execution_provider)
        if variant == "generate":
            files = write_bundle(exported, outdir.root / MODELS / c.arch.id, claim=_claimer(outdir))
            files = {f"{MODELS}/{c.arch.id}/{name}": sha for name, sha in files.items()}
            model_rel = f"{MODELS}/{c.arch.id}/{MODEL_FILE}"
        else:
            model_rel = f"{MODELS}/{c.arch.id}.onnx"
            if exported.needs_external_data():
                outdir.path(model_rel + ".data")
            saved = exported.save_files(outdir.path(model_rel))
            files = {f"{MODELS}/{name}": sha for name, sha in saved.items()}
        written.append((c, model_rel, files))
    remeasured = runner.measure_many([outdir.root / rel for _, rel, _ in written])
    calibration = runner.calibrate().reference_ms
    published = []
    for (c, rel, files), m in zip(written, remeasured):
        record = m.to_dict()
        if not record.get("ok"):
            log(f"warning: {c.arch.id} failed its final measurement ({record.get('error')}); keeping the search figures")
            record = {**rescaled(c.measurement, calibration), "final_measurement_error": record.get("error")}
        final = replace(c, measurement=record, source="final")
        published.append(PublishedModel(final, outdir.root / rel, files[rel], files))
    kept_ids = {c.arch.id for c in pareto_front([p.candidate for p in published], budgets)}
    for p in published:
        if p.candidate.arch.id not in kept_ids:  # dominated once measured strictly
            for rel in p.files:
                outdir.remove(rel)
    published = [p for p in published if p.candidate.arch.id in kept_ids]
    for p in published:
        for rel, sha in p.files.items():
            verify_sha256(outdir.root / rel, sha)
    return sorted(published, key=lambda p: p.candidate.params.decoder_params)


def _model_id(rel: str) -> str:
    """``models/<id>.onnx[.data]`` or ``models/<id>/<file>`` -> ``<id>``."""
    name = rel.split("/")[1]
    return name.split(".onnx")[0]


def _claimer(outdir: OutputDir):
    return lambda path: outdir.path(path.relative_to(outdir.root).as_posix())


def verify_sha256(path: Path, expected: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise LtsedgeError(f"{path} changed after it was measured (sha256 {actual[:12]} != {expected[:12]})")
