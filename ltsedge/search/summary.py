"""The one-screen summary printed at the end of ``ltsedge search``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ltsedge.runners.measurement import Measurement
from ltsedge.search.loop import SearchResult
from ltsedge.search.pareto import spread

MAX_ROWS = 12  # the summary fits one screen; frontier.csv has every model


def _p90(measurement: Measurement, objective: str) -> float:
    """The 90th percentile of the objective's runs (a generate model's prefill has its own)."""
    p90 = measurement.figures(objective).get("latency_p90_ms")
    return float("nan") if p90 is None else p90


def print_summary(result: SearchResult, console: Console | None = None) -> None:
    console = console or Console()
    s = result.summary
    ev = s["evaluation"]
    state = "interrupted" if result.interrupted else "done"
    console.print(
        f"[bold]ltsedge search {state}[/]: {s['generations_completed']} generations, "
        f"{ev['measured']} measured, {ev['cached']} from the store, {ev.get('predicted', 0)} predicted, "
        f"{ev['failed']} failed, "
        f"{ev['skipped']} outside the parameter budget, {s['wall_seconds'] / 60:.1f} min on {s['device']['name']}"
    )
    publish = s.get("publish")
    if publish and publish["front"]:
        thinned = publish.get("thinned", publish["front"])
        kept = (f"{thinned} of the search's {publish['front']} front models (resolution {publish['resolution']:.0%})"
                if thinned != publish["front"] else f"the search's {publish['front']} front models")
        if publish.get("contenders"):
            kept += f" and {publish['contenders']} of the baseline's models in the space"
        console.print(f"publishing: {kept} re-measured from their files, "
                      f"{publish['strict']} undecided ones again strictly, {publish['published']} published "
                      f"({(publish['remeasure_seconds'] + publish['strict_seconds']) / 60:.1f} min)"
                      + (f"; {publish['reused']} of these figures as an earlier run of this search took them"
                         if publish.get("reused") else ""))
        if publish.get("capped"):
            console.print(f"--max-bundles: {publish['capped']} front models left out (not written, not re-measured; "
                          f"frontier.csv lists the ones published; raise --max-bundles to publish more)")
    objective = s["settings"].get("objective", "forward")
    model = s.get("cost_model") or {}
    checked = [f"{name} {model[name]['median_error']:.1%} (interval held {model[name]['interval_coverage']:.0%})"
               for name in (objective, "memory_mb") if name in model]
    if checked:
        console.print(f"cost model, on the {model[objective]['checked']} candidates measured after being predicted: "
                      f"median error " + ", ".join(checked))
    latency = {"forward": "latency ms (p90)", "prefill": "prefill ms (p90)", "decode": "ms/token (p90)"}[objective]
    table = Table(title=f"Pareto frontier ({len(result.frontier)} models, objective: {objective})")
    for column in ("id", "decoder params", latency, "peak MB", "layers x d_model"):
        table.add_column(column, justify="right" if column != "id" else "left")
    for p in spread(result.frontier, MAX_ROWS):
        c, m = p.candidate, p.candidate.measurement
        table.add_row(c.arch.id, f"{c.params.decoder_params / 1e6:.2f}M",
                      f"{c.latency_ms:.3g} ({_p90(m, objective):.3g})", f"{m.peak_memory_mb:.3g}",
                      f"{c.arch.n_layer} x {c.arch.d_model}")
    console.print(table)
    if len(result.frontier) > MAX_ROWS:
        console.print(f"({MAX_ROWS} of {len(result.frontier)} models, spread over the range: all in frontier.csv)")
    compared = [r for r in result.baseline if r["speedup"] is not None]
    if result.baseline:
        quality = "predicted no worse by the fitted proxy" if result.proxy is not None else \
            "with at least its decoder params"
        console.print(_baseline_table(result.baseline, f"vs the layer-scaled baseline (frontier model {quality}, "
                                                       "fastest)"))
        outside = [r for r in result.baseline if r.get("stand_in")]
        if outside:
            console.print("* outside the space: measured as it is, and so is its stand-in, its nearest shape in "
                          "the space (baseline.csv: the stand_in columns)")
            console.print(_baseline_table(outside, "vs the baseline's stand-ins in the space (measured beside the "
                                                   "front)", prefix="stand_in_"))
        if not compared:
            console.print("no frontier model reaches the baseline's " + (
                "predicted loss" if result.proxy is not None else "decoder parameters"))
    console.print(f"outputs in {result.out_dir}/: frontier.json, frontier.csv, candidates.csv, "
                  f"{'baseline.csv, ' if result.baseline else ''}search.json, models/")


def _baseline_table(rows: list[dict], title: str, prefix: str = "") -> Table:
    """Each baseline point's model (``prefix`` "stand_in_": its stand-in, with what it changed) against the
    fastest frontier model with at least its decoder parameters."""
    base = Table(title=title)
    columns = ["baseline layers"] + (["stand-in"] if prefix else []) + \
        ["decoder params", "latency ms", "frontier latency ms", "speedup", "memory ratio"]
    for column in columns:
        base.add_column(column, justify="left" if column == "stand-in" else "right")
    for r in rows:
        cells = [f"{r['n_layer']}*" if r.get("stand_in") and not prefix else str(r["n_layer"])]
        cells += [r["stand_in"]] if prefix else []
        params, latency, speedup = (r.get(prefix + k) for k in ("decoder_params", "latency_ms", "speedup"))
        cells.append("-" if params is None else f"{params / 1e6:.2f}M")
        if speedup is None:
            cells += [f"{latency:.3g}" if latency else "failed", "-", "-", "-"]
        else:
            cells += [f"{latency:.3g}", f"{r[prefix + 'frontier_latency_ms']:.3g}", f"{speedup:.2f}x",
                      f"{r[prefix + 'memory_ratio']:.2f}x"]
        base.add_row(*cells)
    return base
