"""Writing a search's results (a ``SearchResult``): frontier.json/.csv, candidates.csv, baseline.csv, search.json."""

from __future__ import annotations

import csv
import json
import platform
from pathlib import Path
from typing import TYPE_CHECKING

from ltsedge.errors import LtsedgeError
from ltsedge.search.frontier import PublishedModel

if TYPE_CHECKING:
    from ltsedge.search.loop import SearchResult

FRONTIER_COLUMNS = ["id", "decoder_params", "total_params", "latency_ms", "latency_p90_ms", "prefill_latency_ms",
                    "decode_latency_ms", "kv_cache_mb", "peak_memory_mb",
                    "weights_mb", "onnx", "sha256", "n_layer", "d_model", "n_head", "d_inner", "d_embed", "div_val",
                    "block_types", "agent", "precision", "remeasured"]
# figures: "measured" or "predicted" (by the device's cost model; then low/high are its interval).
CANDIDATE_COLUMNS = ["id", "generation", "source", "figures", "ok", "feasible", "decoder_params", "total_params",
                     "latency_ms", "latency_low_ms", "latency_high_ms", "latency_p90_ms", "prefill_latency_ms",
                     "decode_latency_ms", "peak_memory_mb", "memory_low_mb", "memory_high_mb", "error", "violations",
                     "n_layer", "d_model", "n_head", "d_inner", "d_embed", "div_val", "block_types", "agent"]


def versions() -> dict:
    import numpy
    import onnx
    import onnxruntime
    import pymoo
    import torch

    import ltsedge

    return {"ltsedge": ltsedge.__version__, "python": platform.python_version(), "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "pymoo": pymoo.__version__}


def frontier_entry(p: PublishedModel, out_dir: Path) -> dict:
    c, m = p.candidate, p.candidate.measurement
    return {
        "id": c.arch.id, "architecture": c.arch.to_dict(),
        "decoder_params": c.params.decoder_params, "total_params": c.params.total_params,
        "latency_ms": m.latency_ms, "latency_p90_ms": m.latency_p90_ms, "latency_cv": m.latency_cv,
        "peak_memory_mb": m.peak_memory_mb, "weights_mb": m.weights_mb, "prefill_latency_ms": m.prefill_latency_ms,
        "decode_latency_ms": m.decode_latency_ms, "kv_cache_mb": m.kv_cache_mb,
        "onnx": str(p.path.relative_to(out_dir)), "sha256": p.sha256,
        "remeasured": p.remeasured,  # its figure's policy: "profile" (decided at the profile's policy) or "strict" (it was not)
        "bundle": str(p.bundle.relative_to(out_dir)) if p.bundle else None, "files": p.files, "measurement": m.to_dict(),
    }


def _flat_arch(arch) -> dict:
    return {"n_layer": arch.n_layer, "d_model": arch.d_model, "n_head": " ".join(map(str, arch.n_head)),
            "d_inner": " ".join(map(str, arch.d_inner)), "d_embed": arch.d_embed, "div_val": arch.div_val,
            "block_types": " ".join(arch.block_types)}


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _write_json(path: Path, data) -> None:
    """Strict JSON, which any parser reads: no NaN or Infinity. Every figure is finite upstream (a fitted
    proxy's predictions over the space, ``proxycheck.fitted.load_proxy``); one that is not ends the write
    in one line before the file is touched (the measurements stay in the store and the candidate log)."""
    try:
        text = json.dumps(data, indent=2, default=str, allow_nan=False)
    except ValueError as e:
        raise LtsedgeError(f"{path.name} not written: {e} (a figure is not finite)") from None
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)


def write_outputs(result: SearchResult) -> None:
    out_dir, summary, comparison = result.out_dir, result.summary, result.baseline
    entries = [frontier_entry(p, out_dir) for p in result.frontier]
    columns = FRONTIER_COLUMNS
    if result.proxy is not None:  # the quality the front was drawn with, beside the decoder parameters
        columns = columns[:2] + ["predicted_loss"] + columns[2:]
        for e, p in zip(entries, result.frontier):
            e["predicted_loss"] = round(result.proxy.predict(p.candidate.arch), 4)
    _write_json(out_dir / "frontier.json", {"device": summary["device"]["name"], "fingerprint": summary["fingerprint"],
                                            "export": summary.get("export", {}),
                                            "objective": summary["settings"]["objective"],
                                            "precision": summary["settings"].get("precision", "fp32"),
                                            "models": entries})
    _write_csv(out_dir / "frontier.csv", columns,
               [{**e, **_flat_arch(p.candidate.arch), "agent": p.candidate.measurement.agent or "",
                 "precision": summary["settings"].get("precision", "fp32")}
                for e, p in zip(entries, result.frontier)])
    rows = []
    for c in sorted(result.candidates, key=lambda c: (c.generation, c.arch.id)):
        record = c.to_record(result.budgets)
        m = c.measurement
        rows.append({**record, **_flat_arch(c.arch), "figures": "predicted" if c.predicted else "measured",
                     "latency_ms": m.latency_ms, "latency_low_ms": m.latency_low_ms,
                     "latency_high_ms": m.latency_high_ms, "memory_low_mb": m.memory_low_mb,
                     "memory_high_mb": m.memory_high_mb, "latency_p90_ms": m.latency_p90_ms,
                     "peak_memory_mb": m.peak_memory_mb, "prefill_latency_ms": m.prefill_latency_ms,
                     "decode_latency_ms": m.decode_latency_ms, "error": m.error or "",
                     "violations": " ".join(record["violations"]), "agent": m.agent or ""})
    _write_csv(out_dir / "candidates.csv", CANDIDATE_COLUMNS, rows)
    if comparison:
        _write_csv(out_dir / "baseline.csv", list(comparison[0]), comparison)
    _write_json(out_dir / "search.json", {**summary, "baseline_comparison": comparison})
