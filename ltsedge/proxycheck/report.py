"""What a check reports, from the models it trained: the rankings (JSON), the picture (PNG), the lines printed.

The rankings are over the random sample (the study's protocol); the fitted proxy is fitted on the sample
and the equal-parameter depth set together (the depth set is what tells depth's effect apart from size's),
and judged by its leave-one-out predictions on the sample, so it is compared with the counts on the same
models and never on models it was fitted to.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ltsedge.proxycheck import stats

COUNTS = ("decoder_params", "total_params", "attention_params")
FITTED = "fitted"
FORM = "held_out_loss = a + b ln(decoder_params) + c n_layer"
FORMAT = 1


def summarize(models: list[dict], plan: dict) -> dict:
    """The check's JSON: ``plan`` (text, tokenizer, space, recipe, warnings) and the rankings of ``models``."""
    ok = [m for m in models if m.get("held_out_loss") is not None]
    sample = [m for m in ok if m["role"] == "sample"]
    control = [m for m in ok if m["role"] == "control"]
    depth = [m for m in ok if m["role"] == "depth"]
    rankings = _rankings(sample)
    fitted = _fitted(sample, depth, plan)
    if fitted is not None:
        rankings[FITTED] = fitted.pop("ranking")
    # named only among rankings with evidence that they rank: with every interval wide, the highest point
    # value is noise, and one that "ranks poorly" ranks nothing (a flat fit's leave-one-out predictions
    # even anti-rank the losses, a narrow interval below zero)
    best = max((k for k, r in rankings.items() if r and r["spearman"] is not None
                and r["verdict"] in stats.RANKS), key=lambda k: rankings[k]["spearman"], default=None)
    main = rankings.get("decoder_params")
    return {
        "format": FORMAT, **plan,
        "models": models,
        "diverged": [m["id"] for m in models if m.get("held_out_loss") is None],
        "ranking": rankings,
        "verdict": main["verdict"] if main else stats.NO_EVIDENCE,
        "best_proxy": best,
        "fitted": fitted,
        "control": _rankings(control) if control else None,
        "checkpoints": _checkpoints(sample),
        "depth": _depth(depth, sample),
        "time": {"tokens": sum(m["tokens"] for m in models), "seconds": round(sum(m["seconds"] for m in models), 1)},
    }


def _rankings(models: list[dict]) -> dict:
    losses = [m["held_out_loss"] for m in models]
    return {k: stats.ranking([m[k] for m in models], losses) for k in COUNTS}


def _fitted(sample: list[dict], depth: list[dict], plan: dict) -> dict | None:
    models = sample + depth
    features = np.array([[math.log(m["decoder_params"]), m["n_layer"]] for m in models], dtype=float)
    fitted = stats.fit(features, [m["held_out_loss"] for m in models])
    if fitted is None:
        return None
    loo = fitted.pop("loo_predictions")[:len(sample)]
    a, b, c = fitted.pop("coefficients")
    # ranked as the counts are: a lower predicted loss is a better model, so -prediction against -loss
    ranking = stats.ranking([-p for p in loo], [m["held_out_loss"] for m in sample])
    return {"form": FORM, "coefficients": {"a": a, "b": b, "c": c}, "models": len(models),
            "backbone": plan["space"]["backbone"], **fitted, "ranking": ranking}


def _checkpoints(sample: list[dict]) -> list[dict]:
    """Spearman(decoder params, -held-out loss) at each checkpoint: a ranking still moving at the end says
    longer training may change it."""
    if not sample:
        return []
    out = []
    for i, mark in enumerate(sample[0]["checkpoints"]):
        losses = [m["checkpoints"][i]["held_out_loss"] for m in sample]
        trained = all(loss is not None for loss in losses)  # None: diverged by then
        ranked = stats.ranking([m["decoder_params"] for m in sample], losses) if trained else None
        out.append({"fraction": mark["fraction"], "tokens": mark["tokens"],
                    "spearman": ranked["spearman"] if ranked else None})
    return out


def _depth(depth: list[dict], sample: list[dict]) -> dict | None:
    if len(depth) < 2:
        return None
    losses = [m["held_out_loss"] for m in depth]
    best = min(depth, key=lambda m: m["held_out_loss"])
    return {"models": [{"n_layer": m["n_layer"], "d_model": m["d_model"], "decoder_params": m["decoder_params"],
                        "held_out_loss": m["held_out_loss"]} for m in sorted(depth, key=lambda m: m["n_layer"])],
            "spread": round(max(losses) - min(losses), 4), "best_n_layer": best["n_layer"],
            "gain_per_doubling": stats.gain_per_doubling([m["decoder_params"] for m in sample],
                                                         [m["held_out_loss"] for m in sample]) if sample else None}


def write_json(summary: dict, path: Path, write) -> None:
    """Strict JSON: every figure of a summary is finite or None (``stats._round``, ``training._finite``)."""
    write(path, (json.dumps(summary, indent=1, allow_nan=False) + "\n").encode())


def write_png(summary: dict, path: Path, write) -> None:
    """Held-out loss against decoder parameters, one mark per model: the sample, the control, the depth set."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    styles = {"sample": ("o", "tab:blue", "sample of the space"),
              "control": ("s", "tab:orange", "control: standard GPT-2 layers"),
              "depth": ("^", "tab:green", "equal parameters, several depths")}
    for role, (marker, colour, label) in styles.items():
        models = [m for m in summary["models"] if m["role"] == role and m.get("held_out_loss") is not None]
        if models:
            ax.scatter([m["decoder_params"] for m in models], [m["held_out_loss"] for m in models], marker=marker,
                       color=colour, label=label, s=36, alpha=0.85)
            if role == "depth":
                for m in models:
                    ax.annotate(f"{m['n_layer']}L", (m["decoder_params"], m["held_out_loss"]), fontsize=7,
                                xytext=(4, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("decoder parameters")
    ax.set_ylabel("held-out loss (nats per token)")
    ax.set_title(f"{summary['space']['backbone']}: {headline(summary)}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    write(path, buffer.getvalue())


def headline(summary: dict, key: str = "decoder_params", rankings: dict | None = None) -> str:
    r = (rankings or summary["ranking"]).get(key)
    if not r or r["spearman"] is None:
        return "too few models for a ranking"
    return (f"Spearman({key.replace('_', ' ')}, -held-out loss) {r['spearman']:.2f} "
            f"[{_num(r['low'])}, {_num(r['high'])}] ({r['models']} models): {r['verdict']}")


def lines(summary: dict) -> list[str]:
    """The result as printed: the models, the rankings, the depth spread, what the check cannot say."""
    out = [f"{'role':8} {'model':28} {'layers':>6} {'d_model':>7} {'decoder':>9} {'held-out':>9} {'tokens':>10} "
           f"{'seconds':>8} {'tokens/s':>9}"]
    for m in summary["models"]:
        loss = f"{m['held_out_loss']:.4f}" if m.get("held_out_loss") is not None else "diverged"
        out.append(f"{m['role']:8} {m['id']:28} {m['n_layer']:>6} {m['d_model']:>7} "
                   f"{_millions(m['decoder_params']):>9} {loss:>9} {m['tokens']:>10,} {m['seconds']:>8.1f} "
                   f"{m.get('tokens_per_second') or 0:>9,.0f}")
    out.append("")
    for key in (*COUNTS, FITTED):
        if summary["ranking"].get(key):
            out.append(headline(summary, key))
    if summary["fitted"]:
        f = summary["fitted"]
        c = f["coefficients"]
        out.append(f"fitted on {f['models']} models: held-out loss = {c['a']:.3f} {c['b']:+.4f} ln(decoder params) "
                   f"{c['c']:+.4f} n_layer; leave-one-out error {f['loo_rmse']:.4f} nats")
    if summary["best_proxy"]:
        out.append(f"best ranking here: {summary['best_proxy'].replace('_', ' ')}")
    elif any(summary["ranking"].values()):
        out.append("best ranking here: none ranks the held-out loss with evidence (more models, or more tokens "
                   "per model)")
    if summary["control"]:
        out.append("control (standard GPT-2 layers): " + headline(summary, "decoder_params", summary["control"]))
    marks = [c for c in summary["checkpoints"] if c["spearman"] is not None]
    if marks:
        out.append("ranking along the way: " + ", ".join(f"{c['tokens']:,} tokens {c['spearman']:.2f}" for c in marks))
    d = summary["depth"]
    if d:
        at = ", ".join(f"{m['n_layer']}x{m['d_model']} {m['held_out_loss']:.3f}" for m in d["models"])
        gain = f"; doubling decoder parameters gained {d['gain_per_doubling']:.3f} nats in the sample" \
            if d["gain_per_doubling"] is not None else ""
        out.append(f"equal parameters, several depths ({at}): spread {d['spread']:.3f} nats{gain}")
    for line in summary.get("limits", []):
        out.append(f"limit: {line}")
    return out


def _millions(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}K"


def _num(value) -> str:
    return "?" if value is None else f"{value:.2f}"
