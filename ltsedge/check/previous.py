"""Regression mode: the previous measurements given with ``--against``.

Accepted files:
  - the object printed by ``ltsedge check --json`` ({"fingerprint": {...}, "results": [...]});
  - the object printed by ``ltsedge profile --json`` ({"model": ..., "latency_ms": ...,
    "peak_memory_mb": ..., "fingerprint": {...}});
  - several of those, as a JSON array or one object per line (``ltsedge profile --json >> prev.jsonl``).

A model is matched to a previous entry by its path as given (normalised), else by sha256, else by
ltsedge architecture id, else by file name when exactly one previous entry has that name; each
previous model is claimed once, by its strongest match among the models of the run.

Measurements from another machine (a different ``fingerprint_hash``) are refused unless ``force``:
comparing them would report the machine, not the model. So is a matched entry of another precision or
measured with other settings (``keys.figure_settings``: runtime, workload, memory settings, and a
generate model's decode context and reference), and an entry of another export variant always: its
figure is of another workload (a decode step against a full forward pass).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from ltsedge.check.figure_kind import OTHER_VARIANT, SAME_KIND, FigureKind, precision_then, recorded_kind
from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LtsedgeError
from ltsedge.files import parse_json, read_text
from ltsedge.keys import DEFAULT_VARIANT
from ltsedge.validate import is_number


@dataclass(frozen=True)
class PreviousEntry:
    model: str
    latency_ms: float | None
    peak_memory_mb: float | None
    sha256: str | None
    architecture_id: str | None
    shapes: dict | None  # None: not recorded (profile --json)
    fingerprint: dict
    latency_ratio: float | None = None  # latency over the reference model timed beside it: drift-free
    memory_method: str | None = None  # how the peak was isolated (runners.measurement)
    kind: FigureKind = FigureKind(DEFAULT_VARIANT, None, {})


@dataclass(frozen=True)
class Previous:
    path: Path
    entries: list[PreviousEntry]

    def fingerprints(self) -> dict[str, dict]:
        """Distinct fingerprints by hash, in file order."""
        out: dict[str, dict] = {}
        for e in self.entries:
            out.setdefault(fingerprint_hash(e.fingerprint), e.fingerprint)
        return out

    def match_all(self, models: list[tuple[str, str | None, str | None]],
                  kinds: list[FigureKind] | None = None) -> list[tuple[PreviousEntry | None, str | None]]:
        """For each (model path, sha256, architecture id): its previous entry and how it was matched
        ("path", "sha256", "architecture id", "file name"), or (None, None).

        Matching goes tier by tier over all models, strongest first, and a previous model is claimed
        once: ``y/model.onnx`` is never compared with ``x/model.onnx`` by file name when
        ``x/model.onnx`` is itself in this run, matched by its path. Given each model's ``kinds``, the
        nearest entry is taken (``FigureKind.nearness``): the same kind, else the same variant and
        precision, else the same variant, else another variant, over all models of the tier before the
        next nearness, so a file of one architecture's fp32 and int8 generate and forward entries gives
        each model its own, in any order; whether the one taken compares is ``check_entry``'s to say.
        A precision an entry left out is read where its file says (``figure_kind.precision_then``).
        """
        tiers = (
            ("path", lambda e, path, sha, arch: normalise(e.model) == path),
            ("sha256", lambda e, path, sha, arch: sha is not None and e.sha256 == sha),
            ("architecture id", lambda e, path, sha, arch: arch is not None and e.architecture_id == arch),
            ("file name", lambda e, path, sha, arch: PurePosixPath(normalise(e.model)).name == PurePosixPath(path).name),
        )
        result: list[tuple[PreviousEntry | None, str | None]] = [(None, None)] * len(models)
        claimed: set[str] = set()  # previous models (normalised paths) already matched
        read = functools.cache(precision_then)  # each file a record names is read once

        def as_read(e: PreviousEntry, i: int) -> PreviousEntry:  # ``e`` as compared with model i
            if kinds is None or e.kind.precision is not None:
                return e
            precision = read(e.model, e.sha256, models[i][1], kinds[i].precision)
            return replace(e, kind=replace(e.kind, precision=precision)) if precision else e

        for how, fits in tiers:
            for nearness in range(OTHER_VARIANT + 1):
                for i, (model, sha, arch) in enumerate(models):
                    if result[i][0] is not None:
                        continue
                    path = normalise(model)
                    found = [as_read(e, i) for e in self.entries
                             if normalise(e.model) not in claimed and fits(e, path, sha, arch)]
                    # by file name only when it is unambiguous: one previous model of that name
                    if not found or (how == "file name" and len({normalise(e.model) for e in found}) > 1):
                        continue
                    ranks = [SAME_KIND if kinds is None else e.kind.nearness(kinds[i]) for e in found]
                    if min(ranks) > nearness:
                        continue  # left to a model of this tier it is nearer to
                    # several of the nearest (appended JSON lines): the newest, the last one
                    entry = [e for e, rank in zip(found, ranks) if rank == min(ranks)][-1]
                    result[i] = (entry, how)
                    claimed.add(normalise(entry.model))
        return result

    def match(self, model: str, sha256: str | None, architecture_id: str | None, kind: FigureKind | None = None
              ) -> tuple[PreviousEntry | None, str | None]:
        """The previous entry of one model on its own (see ``match_all``)."""
        return self.match_all([(model, sha256, architecture_id)], None if kind is None else [kind])[0]


def normalise(model: str) -> str:
    return PurePosixPath(os.path.normpath(model.replace("\\", "/")).replace("\\", "/")).as_posix()


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
def load_previous(path: str | Path) -> Previous:
    path = Path(path)
    where = f"--against file {path}"
    text = read_text(path, "--against file")
    documents = _documents(text, where)
    entries: list[PreviousEntry] = []
    for i, doc in enumerate(documents, 1):
        label = where if len(documents) == 1 else f"{where}, object #{i}"
        entries.extend(_entries(doc, label))
    if not entries:
        raise LtsedgeError(f"{where} holds no measurement to compare with")
    return Previous(path, entries)


def _documents(text: str, where: str) -> list[Any]:
    if not text.strip():
        raise LtsedgeError(f"{where} is empty (expected the output of `ltsedge check --json` or "
                           f"`ltsedge profile --json`)")
    try:
        data = parse_json(text, where)
    except LtsedgeError as whole:
        try:  # JSON lines?
            return [parse_json(line, where) for line in text.splitlines() if line.strip()]
        except LtsedgeError:
            raise whole from None
    return data if isinstance(data, list) else [data]


def _entries(doc: Any, where: str) -> list[PreviousEntry]:
    if not isinstance(doc, dict):
        raise LtsedgeError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    fingerprint = doc.get("fingerprint")
    if not isinstance(fingerprint, dict):
        raise LtsedgeError(f"{where}: missing the 'fingerprint' object of the machine that measured it "
                           f"(expected the output of `ltsedge check --json` or `ltsedge profile --json`)")
    if "results" in doc:  # ltsedge check --json
        results = doc["results"]
        if not isinstance(results, list):
            raise LtsedgeError(f"{where}: 'results' must be a list of per-model results")
        return [_entry(r, f"{where}: results[{i}]", fingerprint, shapes_known=True) for i, r in enumerate(results)]
    if "model" in doc:  # ltsedge profile --json (which does not record --shape)
        return [_entry(doc, where, fingerprint, shapes_known=False)]
    raise LtsedgeError(f"{where}: neither `ltsedge check --json` output (no 'results') "
                       f"nor `ltsedge profile --json` output (no 'model')")


def _entry(raw: Any, where: str, fingerprint: dict, *, shapes_known: bool) -> PreviousEntry:
    if not isinstance(raw, dict):
        raise LtsedgeError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise LtsedgeError(f"{where}: 'model' must be the model's path as a string")
    values = {}
    for key in ("latency_ms", "peak_memory_mb"):
        value = raw.get(key)
        if value is not None and (not is_number(value) or not math.isfinite(value) or value < 0):
            raise LtsedgeError(f"{where}: {key} = {json.dumps(value)} must be a non-negative number or null")
        values[key] = float(value) if value is not None else None
    optional = {}
    for key, kind in (("sha256", str), ("architecture_id", str), ("shapes", dict)):
        value = raw.get(key)
        if value is not None and not isinstance(value, kind):
            raise LtsedgeError(f"{where}: {key} = {json.dumps(value)} has the wrong type")
        optional[key] = value
    if shapes_known and optional["shapes"] is None:
        optional["shapes"] = {}  # check --json writes null for "the profile's default shapes"
    measured = raw.get("measurement") if isinstance(raw.get("measurement"), dict) else raw  # check / profile
    ratio = measured.get("latency_ratio")
    method = measured.get("memory_method")
    return PreviousEntry(model=model, fingerprint=fingerprint, **values, **optional,
                         latency_ratio=float(ratio) if isinstance(ratio, (int, float)) and ratio > 0 else None,
                         memory_method=method if isinstance(method, str) else None,
                         kind=recorded_kind(raw, measured, fingerprint, where))


# ---------------------------------------------------------------------------------------------
# Comparable?
# ---------------------------------------------------------------------------------------------
def describe_machine(fp: dict) -> str:
    parts = [str(fp.get("arch") or "?")]
    if fp.get("logical_cores"):
        parts.append(f"{fp['logical_cores']} cores")
    if fp.get("memory_total_gb"):
        parts.append(f"{fp['memory_total_gb']} GB")
    board = f", {fp['board']}" if fp.get("board") else ""
    return f"{fp.get('cpu_model') or 'unknown CPU'} ({', '.join(parts)}{board}; fingerprint {fingerprint_hash(fp)})"


def check_comparable(previous: Previous, current: dict, *, force: bool) -> list[str]:
    """Raise unless ``previous`` was measured on this machine; with ``force``, return the differences as
    notes instead. Also notes an onnxruntime upgrade (a real cause of regressions). Whether each matched
    entry was of the same kind of figure is ``check_entry``'s."""
    notes: list[str] = []
    here = fingerprint_hash(current)
    for h, fp in previous.fingerprints().items():
        if h != here:
            message = (f"{previous.path} was measured on {describe_machine(fp)}, this machine is "
                       f"{describe_machine(current)}")
            if not force:
                raise LtsedgeError(f"cannot compare: {message}; latencies from different machines are not "
                                   f"comparable (pass --force to compare anyway)")
            notes.append(f"--force: comparing across machines: {message}")
        then, now = fp.get("onnxruntime"), current.get("onnxruntime")
        if then and now and then != now:
            notes.append(f"onnxruntime changed since {previous.path}: {then} then, {now} now")
    return list(dict.fromkeys(notes))


def check_entry(previous: Previous, model: str, entry: PreviousEntry, how: str, now: FigureKind, *,
                force: bool) -> str | None:
    """Raise unless ``entry`` holds figures of the same kind as ``model``'s now: the same variant, precision
    and figure settings. With ``force``, a difference of precision or settings is returned as a note
    instead; one of variant never compares (a decode step's figure against a full forward pass's)."""
    differ = entry.kind.differences(now)
    if not differ:
        return None
    detail = "; ".join(differ)
    what = f"{model} with {entry.model} in {previous.path} (matched by {how})"
    if entry.kind.variant != now.variant:
        raise LtsedgeError(f"cannot compare {what}: {detail}; the figures of a {entry.kind.variant} model and "
                           f"a {now.variant} model are of different workloads")
    if not force:
        raise LtsedgeError(f"cannot compare {what}: measured as another model or with other settings "
                           f"({detail}); pass --force to compare anyway")
    return f"--force: comparing {what}, measured as another model or with other settings ({detail})"
