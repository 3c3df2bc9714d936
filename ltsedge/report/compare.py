"""Several searches side by side: their frontiers on the same axes, and who dominates whom.

Figures compare only when measured alike: the same machine (fingerprint), device settings, objective
and onnxruntime version; otherwise the comparison is refused unless forced (then the differences are
listed). Comparing two devices on purpose is what ``--force`` is for. Latencies are put on one scale
first (ratios to the reference model times one calibration): each search's milliseconds carry the
calibration of its own run. Searches at different precisions compare (that is the point of
running one at int4): each is labelled with its precision.
"""

from __future__ import annotations

import json
from pathlib import Path

from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LtsedgeError
from ltsedge.files import write_file
from ltsedge.report import make_folder
from ltsedge.report.data import DRAWN, LATENCIES, SearchData, load
from ltsedge.validate import is_number

MEASUREMENT_SETTINGS = ("execution_provider", "provider_options", "intra_op_threads", "inter_op_threads",
                        "graph_optimization", "execution_mode", "enable_cpu_mem_arena", "enable_mem_pattern",
                        "allow_spinning", "batch", "sequence", "context")


def differences(searches: list[SearchData]) -> list[str]:
    """How the searches' measurements differ (empty when they compare)."""
    first, out = searches[0], []
    for other in searches[1:]:
        pair = f"{first.name} vs {other.name}"
        if fingerprint_hash(first.fingerprint) != fingerprint_hash(other.fingerprint):
            out.append(f"{pair}: other machines ({first.fingerprint.get('cpu_model')} / {other.fingerprint.get('cpu_model')})")
        a, b = first.summary.get("device") or {}, other.summary.get("device") or {}
        changed = [k for k in MEASUREMENT_SETTINGS if a.get(k) != b.get(k)]
        if changed:
            out.append(f"{pair}: other device settings ({', '.join(changed)})")
        if first.objective != other.objective:
            out.append(f"{pair}: other objectives ({first.objective} / {other.objective})")
        if first.fingerprint.get("onnxruntime") != other.fingerprint.get("onnxruntime"):
            out.append(f"{pair}: other onnxruntime versions")
    return out


def dominance(searches: list[SearchData]) -> list[dict]:
    """Per search: how many of its frontier models dominate a frontier model of another search, quality
    ranked by ``quality_key``."""
    rows = []
    quality = quality_key(searches)
    for data in searches:
        field = data.objective_field()
        ours = [m for m in data.frontier if _comparable(m, field)]
        theirs = [(o.name, m) for o in searches if o is not data for m in o.frontier if _comparable(m, field)]
        winners = []
        for m in ours:
            beaten = [f"{name}:{t['id']}" for name, t in theirs if _dominates(m, t, field, quality)]
            if beaten:
                winners.append(f"{m['id']} > {beaten[0]}")
        rows.append({"search": data.name, "models": len(data.frontier), "dominating": len(winners),
                     "examples": winners[:3], "quality": quality})
    return rows


def _comparable(m: dict, field: str) -> bool:
    """Measured on every axis of the comparison (a model without its peak memory is not ranked)."""
    return m.get(field) is not None and m.get("peak_memory_mb") is not None


def quality_key(searches: list[SearchData]) -> str:
    """What ranks quality across the searches: the predicted held-out loss where every one drew its front
    with the same fitted proxy (``search --proxy FILE``, frontier.json's ``predicted_loss``), else the
    decoder parameters (the study's proxy; a fit ranks only the searches it drew)."""
    proxies = {json.dumps(s.settings.get("proxy"), sort_keys=True) for s in searches}
    fitted = len(proxies) == 1 and searches[0].settings.get("proxy") is not None
    if fitted and all(is_number(m.get("predicted_loss")) for s in searches for m in s.frontier):
        return "predicted_loss"
    return "decoder_params"


def _dominates(a: dict, b: dict, field: str, quality: str = "decoder_params") -> bool:
    def key(m: dict) -> tuple:
        better = m["predicted_loss"] if quality == "predicted_loss" else -m["decoder_params"]  # lower is better
        return better, m[field], m["peak_memory_mb"]

    ka, kb = key(a), key(b)
    return all(x <= y for x, y in zip(ka, kb)) and ka != kb


def _one_scale(searches: list[SearchData]) -> None:
    """Put every frontier's milliseconds on one scale: each was measured as ratios to the reference
    model and turned into ms with its own run's calibration, which drifts with the machine between
    runs; multiplied back by one common calibration (the first search's), the figures compare."""
    calibrations = [(m.get("measurement") or {}).get("calibration_ms") for s in searches for m in s.frontier]
    common = next((c for c in calibrations if c), None)
    if common is None:
        return
    for s in searches:
        for m in s.frontier:
            own = (m.get("measurement") or {}).get("calibration_ms")
            if own:
                for key in (*LATENCIES, "latency_p90_ms"):
                    if m.get(key) is not None:
                        m[key] = m[key] * common / own


def compare_searches(out_dirs: list[str | Path], dest: str | Path, *, force: bool = False,
                     log=print) -> tuple[list[dict], list[Path]]:
    if len(out_dirs) < 2:
        raise LtsedgeError("compare needs at least two search output directories")
    searches = [load(d) for d in out_dirs]
    names = [s.name for s in searches]
    for i, s in enumerate(searches):  # two directories of the same name: tell them apart
        if names.count(s.name) > 1:
            s.name = f"{s.name}#{i + 1}"
    if len({s.precision for s in searches}) > 1:  # e.g. an fp32 and an int4 search of one space: label them
        for s in searches:
            s.name = f"{s.name} ({s.precision})"
    _one_scale(searches)
    diffs = differences(searches)
    if diffs and not force:
        raise LtsedgeError(f"these searches were not measured alike ({diffs[0]}); pass --force to compare anyway")
    for d in diffs:
        log(f"--force: {d}")
    dest = Path(dest)
    make_folder(dest)
    rows = dominance(searches)
    from ltsedge.report.html import compare_html
    from ltsedge.report.png import compare_png

    written = []
    fields = [f for f in (*DRAWN, "peak_memory_mb")
              if f == "peak_memory_mb" or all(f in s.latencies() for s in searches)]
    for field in fields:
        written.append(compare_png(searches, field, dest / f"compare-{field.removesuffix('_ms').removesuffix('_mb')}.png"))
    write_file(dest / "compare.html", compare_html(searches, rows).encode())
    write_file(dest / "compare.json", (json.dumps({"searches": [str(d) for d in out_dirs], "differences": diffs,
                                                   "dominance": rows}, indent=2) + "\n").encode())
    written += [dest / "compare.html", dest / "compare.json"]
    return rows, written
