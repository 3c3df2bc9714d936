"""The table ``ltsedge prune`` prints: the parent and the published models, then the known prunings beside
the search's best at their latency."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ltsedge.subnets.outputs import model_row, timed_row


def print_summary(result, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"{result.run.folder.path.name}: published sub-networks (measured side by side)")
    for column in ("model", "decode ms", "speed-up", "prefill ms", "peak MB", "loss (shipped)", "Δ loss",
                   "layers", "repaired"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for p in [result.parent, *result.models]:
        r = model_row(p, result.parent)
        table.add_row(p.name, _f(r["decode_ms"]), _f(r["decode_speedup"], "x"), _f(r["prefill_ms"], digits=0),
                      _f(r["peak_memory_mb"], digits=0), _f(r["loss_shipped"], digits=3),
                      _f(r["loss_shipped_delta"], digits=3, sign=True), str(r["layers"]), "yes" if p.repaired else "no")
    console.print(table)
    if result.timed:
        timed = Table(title="the front's models timed beside the parent to choose from")
        for column in ("timed", "search's speed-up", "beside the parent", "loss (shipped)", "layers", "published as"):
            timed.add_column(column, justify="left" if column in ("timed", "published as") else "right")
        for p in result.timed:
            r = timed_row(p, result.parent)
            timed.add_row(f"{r['candidate']} ({r['source']})", _f(r["search_speedup"], "x"), _f(r["decode_speedup"], "x"),
                          _f(r["loss_shipped"], digits=3), str(r["layers"]), r["published_as"] or "-")
        console.print(timed)
    if result.comparison:
        known = Table(title="known prunings against the search, at equal measured decode latency")
        for column in ("pruning", "decode ms", "its loss", "search's loss", "lower"):
            known.add_column(column, justify="left" if column == "pruning" else "right")
        for row in result.comparison:
            known.add_row(row["pruning"], _f(row["decode_ms"]), _f(row["loss"], digits=3),
                          _f(row["search_loss"], digits=3), "yes" if row["search_lower"] else "no")
        console.print(known)
    unloadable = [p for p in [result.parent, *result.models] if p.optimum]
    if unloadable:
        console.print(f"note: Optimum's ORTModelForCausalLM cannot load {', '.join(p.name for p in unloadable)} "
                      f"as published (it sizes every cache from config.json; onnxruntime-genai and transformers.js "
                      f"load them): frontier.json's optimum_note says why, and optimum_export how to export one it "
                      f"loads where the model has one")
    for target in result.missed:
        console.print(f"no sub-network reached {target:g}x the parent's decode speed")
    console.print(f"outputs in {result.run.options.out_dir}")


def _f(value, suffix: str = "", digits: int = 2, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}{suffix}" if sign else f"{value:.{digits}f}{suffix}"
