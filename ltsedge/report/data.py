"""What a report shows, read back from a search's output directory (finished or interrupted).

Only the files a search writes are read (frontier.json, candidates.jsonl, search.json), so a report
can be drawn on any machine, without torch, from a copied directory. Missing or malformed files, and
fields of the wrong type (a copied folder may be damaged or crafted), are one-line errors naming the file
and the field; a damaged line of the candidate log is skipped, as one cut short by a kill is.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.files import read_json, read_text
from ltsedge.validate import is_int, is_number
from ltsedge.workloads import WORKLOADS

# The latency figures a report may plot (each workload's), and their labels; each is drawn where the data has it.
LATENCIES = {w.figure: w.label for w in WORKLOADS.values()}
FORWARD = WORKLOADS["forward"].figure  # every model's latency_ms (a generate model's is its decode figure)
DRAWN = tuple(reversed(LATENCIES))  # the order figures are drawn in: per-token decode first, the forward pass last


@dataclass
class Point:
    """One candidate as a report draws it."""

    id: str
    params: int
    figures: dict  # latency fields and peak_memory_mb, where measured
    ok: bool
    feasible: bool
    source: str = ""
    generation: int = 0
    error: str = ""
    agent: str | None = None
    prediction: dict | None = None  # the cost model's, made before it was measured (or instead of it)

    @property
    def predicted(self) -> bool:
        """Its figures are the cost model's, not a measurement's."""
        return self.source == "predicted"


@dataclass
class SearchData:
    out_dir: Path
    name: str
    objective: str
    device: str
    fingerprint: dict
    settings: dict
    summary: dict
    frontier: list[dict]
    candidates: list[Point] = field(default_factory=list)
    baseline: list[dict] = field(default_factory=list)

    @property
    def budgets(self) -> dict:
        return self.settings.get("budgets") or {}

    def latencies(self) -> list[str]:
        """The latency fields measured in this search. A generate model's latency_ms is its decode
        figure, so such a search plots decode and prefill, a forward search its latency_ms."""
        measured = [k for k in DRAWN if any(p.figures.get(k) is not None for p in self.candidates)
                    or any(m.get(k) is not None for m in self.frontier)]
        return [k for k in measured if k != FORWARD] or measured

    @property
    def precision(self) -> str:
        """What every model of the search was exported and measured at (fp32 before precisions existed)."""
        value = self.settings.get("precision")
        return value if isinstance(value, str) else "fp32"

    def objective_field(self) -> str:
        return WORKLOADS[self.objective].figure if self.objective in WORKLOADS else FORWARD

    def frontier_points(self) -> list[Point]:
        return [Point(m["id"], m["decoder_params"], _figures(m), True, True, "frontier") for m in self.frontier]

    def baseline_points(self, field: str, stand_in: bool = False) -> list[tuple[int, float, Any]]:
        """(decoder parameters, figure, layers) of each baseline model measured, for ``field``: the objective's
        latency or peak memory (the baseline was measured for the objective only). ``stand_in``: each
        point's stand-in in the space instead, where it is not the baseline model (outside the space)."""
        if field not in (self.objective_field(), "peak_memory_mb"):
            return []
        prefix = "stand_in_" if stand_in else ""
        key = prefix + ("peak_memory_mb" if field == "peak_memory_mb" else "latency_ms")
        params = prefix + "decoder_params"
        return [(int(r[params]), float(r[key]), r["n_layer"]) for r in self.baseline
                if r.get(key) not in (None, "") and r.get(params) not in (None, "")
                and r.get(prefix + "ok") not in (False, "False") and (r.get("stand_in") or not stand_in)]


def load(out_dir: str | Path) -> SearchData:
    out = Path(out_dir)
    if not out.is_dir():
        raise LtsedgeError(f"search output directory not found: {out}")
    summary_file, frontier_file = out / "search.json", out / "frontier.json"
    summary = _json(summary_file, "search summary")
    frontier = _json(frontier_file, "frontier")
    if not isinstance(frontier.get("models"), list) or not isinstance(summary.get("settings"), dict):
        raise LtsedgeError(f"{out}: frontier.json or search.json is not an ltsedge search's")
    _check_summary(summary, f"search summary {summary_file}")
    _check_frontier(frontier, f"frontier {frontier_file}")
    data = SearchData(out, out.resolve().name, frontier.get("objective") or summary["settings"].get("objective")
                      or "forward", str(frontier.get("device") or (summary.get("device") or {}).get("name")),
                      summary.get("fingerprint") or {}, summary["settings"], summary, frontier["models"],
                      _candidates(out), _baseline_rows(summary.get("baseline_comparison") or []))
    return data


def _json(path: Path, what: str) -> dict:
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise LtsedgeError(f"{what} {path}: expected a JSON object")
    return data


# --- the types of what a report reads: a copied folder may be damaged or crafted -------------------------
def _finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


KINDS = {"an integer": is_int, "a finite number": _finite, "a string": lambda v: isinstance(v, str),
         "an object": lambda v: isinstance(v, dict), "a list": lambda v: isinstance(v, list)}
FIGURES = (*LATENCIES, "latency_p90_ms", "peak_memory_mb")
# A baseline row's figures: the baseline model's, and prefixed stand_in_, its stand-in's in the space.
BASELINE_FIGURES = ("latency_ms", "peak_memory_mb", "frontier_latency_ms", "speedup", "memory_ratio")


def _field(obj: dict, key: str, where: str, kind: str, *, required: bool = False) -> Any:
    """``obj[key]`` when it is of ``kind`` (a key of KINDS), None when absent or null; anything else is one
    line naming the file and the field (``where`` is "<file>: <path to obj>")."""
    value = obj.get(key)
    if value is None:
        if required:
            raise LtsedgeError(f"{where}{key} is missing")
        return None
    if not KINDS[kind](value):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise LtsedgeError(f"{where}{key} must be {kind}, not {shown}")
    return value


def _objective(obj: dict, where: str) -> None:
    value = _field(obj, "objective", where, "a string")
    if value is not None and value not in WORKLOADS:  # a search's objective is a workload's name
        raise LtsedgeError(f"{where}objective must be one of {', '.join(WORKLOADS)}, not {value[:40]!r}")


def _check_summary(summary: dict, file: str) -> None:
    settings = summary["settings"]
    _objective(settings, f"{file}: settings.")
    budgets = _field(settings, "budgets", f"{file}: settings.", "an object") or {}
    for key in ("max_latency_ms", "max_memory_mb", "min_params", "max_params"):
        _field(budgets, key, f"{file}: settings.budgets.", "a finite number")
    device = _field(summary, "device", f"{file}: ", "an object") or {}
    _field(device, "name", f"{file}: device.", "a string")
    _field(summary, "fingerprint", f"{file}: ", "an object")
    _field(summary, "wall_seconds", f"{file}: ", "a finite number")
    for i, h in enumerate(_field(summary, "hypervolume", f"{file}: ", "a list") or []):
        where = f"{file}: hypervolume[{i}]"
        if not isinstance(h, dict):
            raise LtsedgeError(f"{where} must be an object")
        for key, kind in (("generation", "an integer"), ("hypervolume", "a finite number"),
                          ("front_size", "an integer")):
            _field(h, key, f"{where}.", kind, required=True)
    for i, row in enumerate(_field(summary, "baseline_comparison", f"{file}: ", "a list") or []):
        where = f"{file}: baseline_comparison[{i}]"
        if not isinstance(row, dict):
            raise LtsedgeError(f"{where} must be an object")
        for key in ("n_layer", "decoder_params"):
            _field(row, key, f"{where}.", "an integer", required=True)
        _field(row, "stand_in", f"{where}.", "a string")
        _field(row, "stand_in_decoder_params", f"{where}.", "an integer")
        for key in BASELINE_FIGURES + tuple(f"stand_in_{k}" for k in BASELINE_FIGURES):
            _field(row, key, f"{where}.", "a finite number")


def _baseline_rows(rows: list[dict]) -> list[dict]:
    """The baseline comparison as written now: each point's baseline model, then its stand-in in the space
    (``stand_in_*``). A search written when a point outside the space was measured only as its stand-in
    (``stand_in`` naming a change, no ``stand_in_id``) holds the stand-in's figures unprefixed: they are read
    as the stand-in's, and the baseline model's as not measured, never as the baseline's."""
    upgraded = []
    for row in rows:
        if row.get("stand_in") and "stand_in_id" not in row:
            point = {k: row[k] for k in ("n_layer", "stand_in")}
            measured = {k: v for k, v in row.items() if k not in point}
            row = {**point, **dict.fromkeys(measured),
                   **{f"stand_in_{'id' if k == 'baseline_id' else k}": v for k, v in measured.items()}}
        upgraded.append(row)
    return upgraded


def _check_frontier(frontier: dict, file: str) -> None:
    _objective(frontier, f"{file}: ")
    _field(frontier, "device", f"{file}: ", "a string")
    for i, m in enumerate(frontier["models"]):
        where = f"{file}: models[{i}]"
        if not isinstance(m, dict):
            raise LtsedgeError(f"{where} must be an object, not {type(m).__name__}")
        _field(m, "id", f"{where}.", "a string", required=True)
        _field(m, "decoder_params", f"{where}.", "an integer", required=True)
        for key in FIGURES:
            _field(m, key, f"{where}.", "a finite number")
        for key in ("bundle", "onnx"):
            _field(m, key, f"{where}.", "a string")
        arch = _field(m, "architecture", f"{where}.", "an object") or {}
        for key in ("n_layer", "d_model"):
            _field(arch, key, f"{where}.architecture.", "an integer")
        measurement = _field(m, "measurement", f"{where}.", "an object") or {}
        for key, kind in (("agent", "a string"), ("workload", "a string"), ("calibration_ms", "a finite number"),
                          ("workloads", "an object")):
            _field(measurement, key, f"{where}.measurement.", kind)


def _candidates(out: Path) -> list[Point]:
    path = out / "candidates.jsonl"
    if not path.exists():
        return []
    points: dict[str, Point] = {}  # the last record of an id wins (a predicted candidate measured later)
    for line in read_text(path, "candidate log").splitlines()[1:]:
        try:
            point = _point(json.loads(line))
        except (json.JSONDecodeError, RecursionError, KeyError, TypeError, ValueError, AttributeError):
            continue  # a line cut short by a kill (or damaged): the log is read as far as it is whole
        points[point.id] = point
    return list(points.values())


def _point(r: dict) -> Point:
    m = r["measurement"]
    if not isinstance(m, dict) or not isinstance(r["id"], str) or not is_int(r["decoder_params"]):
        raise TypeError("not a candidate record")
    source, error, agent = r.get("source", ""), m.get("error") or "", m.get("agent")
    if not (isinstance(source, str) and isinstance(error, str) and isinstance(agent, (str, type(None)))):
        raise TypeError("not a candidate record")
    prediction = r.get("prediction") if isinstance(r.get("prediction"), dict) else None
    return Point(r["id"], r["decoder_params"], _figures(m), bool(r["ok"]), bool(r["feasible"]), source,
                 int(r.get("generation", 0)), error, agent, prediction)


def _figures(m: dict) -> dict:
    figures = {k: m[k] for k in (*LATENCIES, "peak_memory_mb") if _finite(m.get(k))}
    for name, w in (m.get("workloads") or {}).items():  # ratios: what the cost model predicts
        if isinstance(w, dict) and _finite(w.get("latency_ratio")):
            figures[f"{name}_ratio"] = w["latency_ratio"]
    if _finite(m.get("latency_ratio")):
        figures.setdefault(f"{m.get('workload') or 'forward'}_ratio", m["latency_ratio"])
    return figures


def checked_predictions(data: SearchData, target: str) -> list[tuple[float, float, float, float]]:
    """(predicted, low, high, measured) of every candidate measured after the cost model predicted it:
    ``target`` is a workload ("decode": its latency ratio) or "memory_mb" (peak MB)."""
    pairs = []
    for p in data.candidates:
        guess = (p.prediction or {}).get(target)
        actual = p.figures.get("peak_memory_mb" if target == "memory_mb" else f"{target}_ratio")
        if p.predicted or not p.ok or not isinstance(guess, dict) or actual is None:
            continue
        try:
            value, low, high = (float(guess[k]) for k in ("value", "low", "high"))
        except (KeyError, TypeError, ValueError):
            continue
        if all(map(math.isfinite, (value, low, high))) and low <= value <= high:  # else not an interval to draw
            pairs.append((value, low, high, float(actual)))
    return pairs
