"""What a report shows, read back from a search's output directory (finished or interrupted).

Only the files a search writes are read (frontier.json, candidates.jsonl, search.json), so a report
can be drawn on any machine, without torch, from a copied directory. Missing or malformed files are
one-line errors naming them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.files import read_text

# The latency figures a report may plot, and their labels; each is drawn where the data has it.
LATENCIES = {"latency_ms": "latency (ms)", "prefill_latency_ms": "prefill (ms)",
             "decode_latency_ms": "decode (ms / token)"}


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
        measured = {k for k in LATENCIES if any(p.figures.get(k) is not None for p in self.candidates)
                    or any(m.get(k) is not None for m in self.frontier)}
        if "decode_latency_ms" in measured or "prefill_latency_ms" in measured:
            return [k for k in ("decode_latency_ms", "prefill_latency_ms") if k in measured]
        return ["latency_ms"] if "latency_ms" in measured else []

    @property
    def precision(self) -> str:
        """What every model of the search was exported and measured at (fp32 before precisions existed)."""
        value = self.settings.get("precision")
        return value if isinstance(value, str) else "fp32"

    def objective_field(self) -> str:
        return {"decode": "decode_latency_ms", "prefill": "prefill_latency_ms"}.get(self.objective, "latency_ms")

    def frontier_points(self) -> list[Point]:
        return [Point(m["id"], m["decoder_params"], _figures(m), True, True, "frontier") for m in self.frontier]


def load(out_dir: str | Path) -> SearchData:
    out = Path(out_dir)
    if not out.is_dir():
        raise LtsedgeError(f"search output directory not found: {out}")
    summary = _json(out / "search.json", "search summary")
    frontier = _json(out / "frontier.json", "frontier")
    if not isinstance(frontier.get("models"), list) or not isinstance(summary.get("settings"), dict):
        raise LtsedgeError(f"{out}: frontier.json or search.json is not an ltsedge search's")
    data = SearchData(out, out.resolve().name, frontier.get("objective") or summary["settings"].get("objective")
                      or "forward", str(frontier.get("device") or summary.get("device", {}).get("name")),
                      summary.get("fingerprint") or {}, summary["settings"], summary, frontier["models"],
                      _candidates(out), summary.get("baseline_comparison") or [])
    return data


def _json(path: Path, what: str) -> dict:
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise LtsedgeError(f"{what} {path}: malformed JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict):
        raise LtsedgeError(f"{what} {path}: expected a JSON object")
    return data


def _candidates(out: Path) -> list[Point]:
    path = out / "candidates.jsonl"
    if not path.exists():
        return []
    points: dict[str, Point] = {}  # the last record of an id wins (a predicted candidate measured later)
    for line in read_text(path, "candidate log").splitlines()[1:]:
        try:
            r = json.loads(line)
            m = r["measurement"]
            prediction = r.get("prediction") if isinstance(r.get("prediction"), dict) else None
            points[r["id"]] = Point(r["id"], int(r["decoder_params"]), _figures(m), bool(r["ok"]),
                                    bool(r["feasible"]), r.get("source", ""), int(r.get("generation", 0)),
                                    m.get("error") or "", m.get("agent"), prediction)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # a line cut short by a kill
    return list(points.values())


def _figures(m: dict) -> dict:
    figures = {k: m.get(k) for k in (*LATENCIES, "peak_memory_mb") if m.get(k) is not None}
    for name, w in (m.get("workloads") or {}).items():  # ratios: what the cost model predicts
        if isinstance(w, dict) and isinstance(w.get("latency_ratio"), (int, float)):
            figures[f"{name}_ratio"] = w["latency_ratio"]
    if isinstance(m.get("latency_ratio"), (int, float)):
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
            pairs.append((float(guess["value"]), float(guess["low"]), float(guess["high"]), float(actual)))
        except (KeyError, TypeError, ValueError):
            continue
    return pairs
