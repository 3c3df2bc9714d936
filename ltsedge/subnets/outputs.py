"""A pruning run's files: ``frontier.json`` / ``frontier.csv`` (the published models and the parent, every
figure measured on the shipped files), ``candidates.csv`` (every sub-network evaluated, its speed measured or
predicted, said in its row), ``prune.json`` (settings, machine, versions, time) and ``report/loss_vs_decode.png``
(held-out loss against decode latency: the candidates, the front, the known prunings and the parent)."""

from __future__ import annotations

import csv
import io
import json
import math

from ltsedge.files import write_atomically

REPORT_PNG = "report/loss_vs_decode.png"
MODEL_COLUMNS = ["name", "target_speedup", "decode_ms", "decode_speedup", "prefill_ms", "peak_memory_mb",
                 "loss_shipped", "perplexity_shipped", "loss_shipped_delta", "loss_fp32", "loss_fp32_delta",
                 "repaired", "layers", "kv_heads", "query_heads", "ffn", "decoder_params", "bundle"]
CANDIDATE_COLUMNS = ["source", "generation", "loss_fp32", "loss_delta", "repaired", "decode_ms", "decode_figure",
                     "decode_low_ms", "decode_high_ms", "peak_memory_mb", "layers", "kept_layers", "kv_groups",
                     "q_heads", "ffn", "decoder_params", "architecture"]


def write_outputs(result, outdir) -> None:
    run, parent = result.run, result.parent
    rows = [{**model_row(p, parent), **runtimes(p, run.export.precision)} for p in [parent, *result.models]]
    document = {
        "parent": rows[0], "models": rows[1:], "missed_speedups": result.missed,
        "speedups": {f"{t:g}": name for t, name in result.targets.items()},
        "front": [candidate_row(e, run.parent) for e in result.front],
        "timed": [timed_row(p, parent) for p in result.timed],
        "known_prunings": result.comparison, "repair": {"used_in_search": run.use_repair, "probe": run.repair_probe},
        "figures": {
            "loss_shipped": "measured: the bundle's model in onnxruntime at its precision, on the held-out windows",
            "loss_fp32": "measured: the sub-network in PyTorch at float32, on the held-out windows",
            "decode_ms": "measured: the bundles side by side, " + _loop(run) + ", mean of the medians of "
                         f"{len(parent.rounds)} rounds",
            "front": "speed measured coarsely during the search (candidates.csv says which were predicted)",
            "timed": "the front's models timed beside the parent to choose from: the search's speed-up, the "
                     "measured one, the shipped loss; bundles of those not published are deleted",
            "loads_in": "the runtimes that load the bundle as written: onnxruntime-genai and transformers.js read "
                        "each cache's shape from the graph; Optimum sizes every cache from config.json (one key/value "
                        "head count, and a head size of hidden_size / num_attention_heads), so a model whose layers "
                        "keep different heads loads there only re-exported as optimum_export says (run in this "
                        "folder)"},
        "settings": _settings(run), "machine": run.oracle.evaluator.fingerprint, "seconds": result.seconds,
        "versions": _versions(),
    }
    _write(outdir, "frontier.json", json.dumps(document, indent=2, allow_nan=False))
    _write(outdir, "frontier.csv", _csv(MODEL_COLUMNS, rows))
    candidates = [candidate_row(e, run.parent) for e in run.evaluated.values()]
    _write(outdir, "candidates.csv", _csv(CANDIDATE_COLUMNS, candidates))
    summary = {"settings": _settings(run), "seconds": result.seconds, "candidates": len(candidates),
               "speed_measured": sum(e.speed.measured for e in run.evaluated.values()),
               "losses_measured": len(run.quality.losses), "published": [r["name"] for r in rows[1:]],
               "measured_in": _loop(run), "predictions": _prediction_quality(run.predictions)}
    _write(outdir, "prune.json", json.dumps(summary, indent=2, allow_nan=False))
    try:
        loss_vs_decode_png(result, outdir.path(REPORT_PNG))
    except Exception as e:  # noqa: BLE001 - a plotting failure never costs the run's other outputs
        print(f"warning: the report could not be drawn ({type(e).__name__}: {e})")


def model_row(p, parent) -> dict:
    arch = p.evaluated.arch
    decode, base = p.figure("decode_latency_ms"), parent.figure("decode_latency_ms")
    shipped = p.shipped_loss.nats if p.shipped_loss else None
    return {"name": p.name, "target_speedup": p.target, "decode_ms": decode,
            "decode_speedup": base / decode if decode and base else None, "prefill_ms": p.figure("prefill_latency_ms"),
            "peak_memory_mb": p.figure("peak_memory_mb"), "loss_shipped": shipped,
            "perplexity_shipped": math.exp(shipped) if shipped is not None else None,
            "loss_shipped_delta": shipped - parent.shipped_loss.nats if shipped is not None and parent.shipped_loss
            else None, "loss_fp32": p.fp32_loss.nats, "loss_fp32_delta": p.fp32_loss.nats - parent.fp32_loss.nats,
            "repaired": p.repaired, "layers": arch.n_layer, "kv_heads": " ".join(map(str, arch.kv_heads)),
            "query_heads": " ".join(map(str, arch.n_head)), "ffn": " ".join(map(str, arch.d_inner)),
            "decoder_params": _params(arch), "bundle": f"models/{p.name}", "files": p.files}


def runtimes(p, precision: str) -> dict:
    """Where a published bundle loads, and how to export it for Optimum where it does not."""
    loads = ["onnxruntime-genai", "transformers.js"] + (["optimum"] if p.optimum is None else [])
    return {"loads_in": loads, "optimum_note": p.optimum, "optimum_export": optimum_export(p, precision)}


def optimum_export(p, precision: str) -> str | None:
    """The command that exports a published model Optimum cannot load in the layout it loads (None: it loads,
    or no layout of the model does): from the sources beside the bundle, with every key/value head count made
    the same (a larger KV cache; onnxruntime-genai and transformers.js load the bundle as published)."""
    if p.optimum is None or not p.optimum_uniform:
        return None
    return (f"ltsedge export models/{p.name}.json --weights models/{p.name}.safetensors --variant generate "
            f"--precision {precision} --cache-layout uniform -o {p.name}-uniform")


def timed_row(p, parent) -> dict:
    """A front model timed beside the parent, published or not."""
    decode, base = p.figure("decode_latency_ms"), parent.figure("decode_latency_ms")
    return {"candidate": p.candidate or p.name, "source": p.evaluated.source,
            "published_as": p.name if p.bundle else None,
            "search_speedup": parent.evaluated.decode_ms / p.evaluated.decode_ms,
            "decode_speedup": base / decode if decode and base else None, "decode_ms": decode,
            "loss_shipped": p.shipped_loss.nats if p.shipped_loss else None, "loss_fp32": p.fp32_loss.nats,
            "repaired": p.repaired, "layers": p.evaluated.arch.n_layer, "architecture": p.evaluated.arch.id}


def candidate_row(e, parent) -> dict:
    s = e.speed
    return {"source": e.source, "generation": e.generation, "loss_fp32": e.loss.nats,
            "loss_delta": e.loss.nats - parent.loss.nats, "repaired": e.repaired,
            "decode_ms": _finite(s.decode_ms), "decode_figure": "measured" if s.measured else "predicted",
            "decode_low_ms": _finite(s.low_ms), "decode_high_ms": _finite(s.high_ms), "peak_memory_mb": s.memory_mb,
            "layers": e.arch.n_layer, "kept_layers": " ".join(map(str, e.genes.kept_layers)),
            "kv_groups": " ".join(str(e.genes.kv_groups[i]) for i in e.genes.kept_layers),
            "q_heads": " ".join(str(e.arch.n_head[j] // e.arch.kv_heads[j]) for j in range(e.arch.n_layer)),
            "ffn": " ".join(str(e.genes.ffn[i]) for i in e.genes.kept_layers), "decoder_params": _params(e.arch),
            "architecture": e.arch.id}


def loss_vs_decode_png(result, path) -> None:
    from ltsedge.report.png import BASELINE, CANDIDATE, FRONT, SERIES, _pyplot, _save

    plt = _pyplot()
    run = result.run
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=100)
    found = [e for e in run.evaluated.values() if e.source == "search"]
    for measured, style in ((True, dict(s=14, alpha=0.5, c=CANDIDATE)),
                            (False, dict(s=14, alpha=0.35, facecolors="none", edgecolors=CANDIDATE))):
        points = [e for e in found if e.speed.measured == measured and math.isfinite(e.decode_ms)]
        ax.scatter([e.decode_ms for e in points], [e.loss.nats for e in points],
                   label="candidates" + ("" if measured else " (speed predicted)"), **style)
    front = result.front
    ax.plot([e.decode_ms for e in front], [e.loss.nats for e in front], "o-", c=FRONT, ms=4, lw=1.4, label="front")
    families = {}
    for h in run.heuristics:
        families.setdefault(h.source.rsplit("-", 1)[0], []).append(h)
    for (family, points), colour in zip(sorted(families.items()), SERIES[1:]):
        points = sorted(points, key=lambda e: e.decode_ms)
        ax.plot([e.decode_ms for e in points], [e.loss.nats for e in points], "s--", c=colour, ms=4, lw=1.0,
                label=family)
    ax.scatter([run.parent.decode_ms], [run.parent.loss.nats], marker="*", s=160, c=BASELINE, label="parent", zorder=5)
    for p in result.models:
        ax.annotate(p.name, (p.evaluated.decode_ms, p.fp32_loss.nats), textcoords="offset points", xytext=(5, 5),
                    fontsize=7)
    ax.set_xlabel(f"decode (ms / token after {run.profile.context} tokens, {run.export.precision})")
    ax.set_ylabel("held-out loss (nats / token, float32)")
    ax.set_title(f"sub-networks of {run.folder.path.name} on {run.profile.name}", fontsize=10)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    _save(fig, path)


def _prediction_quality(pairs: list[dict]) -> dict:
    """How the cost model's decode predictions of the settled candidates met their measurements."""
    finite = [p for p in pairs if math.isfinite(p["measured_ms"]) and p["measured_ms"] > 0]
    if not finite:
        return {"settled": len(pairs)}
    errors = sorted(abs(p["predicted_ms"] / p["measured_ms"] - 1) for p in finite)
    inside = sum(p["low_ms"] <= p["measured_ms"] <= p["high_ms"] for p in finite)
    return {"settled": len(pairs), "median_abs_error": errors[len(errors) // 2], "within_interval": inside / len(finite),
            "pairs": finite}


def _loop(run) -> str:
    from ltsedge.runners.loop import loop_label

    return loop_label(run.profile, "generate")


def _settings(run) -> dict:
    o = run.options
    return {"folder": str(o.folder), "text": str(o.text), "device": run.profile.name, "context": run.profile.context,
            "prefill_tokens": run.profile.sequence, "precision": run.export.precision,
            "graph_form": run.export.graph_form, "target_ort": run.export.target_ort, "population": o.population,
            "generations": o.generations, "window": o.window, "calibration_windows": o.calibration,
            "held_out_windows": o.held_out, "ffn_step": o.ffn_step, "repair": o.repair,
            "speedups": list(o.speedups), "max_bundles": o.max_bundles, "seed": o.seed}


def _versions() -> dict:
    from ltsedge.search.outputs import versions

    return versions()


def _params(arch) -> int:
    from ltsedge.proxy import count_params

    return count_params(arch).decoder_params


def _finite(value):
    return value if value is not None and math.isfinite(value) else None


def _csv(columns: list[str], rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _write(outdir, name: str, text: str) -> None:
    write_atomically(outdir.path(name), text)
