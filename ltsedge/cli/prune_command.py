"""``ltsedge prune``: a trained model's sub-networks searched on the user's text and device; bundles out."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def prune(
    from_dir: Path = typer.Option(..., "--from", help="The trained model: a Hugging Face Llama folder (config.json, "
                                  "model.safetensors or its shards, tokenizer.json, chat template)."),
    text: Path = typer.Option(..., "--text", help="Plain UTF-8 text like the model's use: some windows measure "
                              "importance (calibration), others, never seen by it, the held-out loss."),
    out: Path = typer.Option(..., "--out", "-o", help="Output directory: frontier.json/csv, candidates.csv, "
                             "models/ (bundles), report/."),
    device: str = typer.Option("cpu", "--device", help="Device profile: a built-in name or a profile TOML."),
    store: Optional[Path] = typer.Option(None, "--store", help="Measurement store (SQLite). Default: "
                                         "$LTSEDGE_STORE, else the user cache directory."),
    population: int = typer.Option(24, "--population", help="NSGA-II population."),
    generations: int = typer.Option(10, "--generations", help="NSGA-II generations."),
    window: int = typer.Option(512, "--window", help="Tokens per calibration or held-out window."),
    calibration: int = typer.Option(8, "--calibration", help="Calibration windows (importance, repair)."),
    held_out: int = typer.Option(4, "--held-out", help="Held-out windows the loss is measured on."),
    ffn_step: int = typer.Option(64, "--ffn-step", help="SwiGLU widths in steps of this many channels."),
    repair: bool = typer.Option(True, "--repair/--no-repair", help="Refit pruned layers' output projections by "
                                "least squares on calibration activations, kept only where the loss says it helps."),
    speedups: str = typer.Option("1.25,1.5", "--speedups", help="Decode speed-ups over the parent to publish a "
                                 "model at, comma-separated."),
    max_bundles: int = typer.Option(4, "--max-bundles", help="Bundles published at most (speed-up targets first)."),
    precision: str = typer.Option("int4", "--precision", help="The precision the bundles ship in: fp32, int8 or "
                                  "int4; speed is measured at it, and the published models' loss too."),
    context: int = typer.Option(2048, "--context", help="Tokens in the cache when decode is timed."),
    seed: int = typer.Option(0, "--seed", help="The search's seed."),
) -> None:
    """Make a trained model faster on this device: search its sub-networks (layers, key/value groups, query
    heads per group, SwiGLU widths) keeping its weights, held-out loss measured on your text and decode latency
    in the app's runtime; publish bundles at the asked speed-ups."""
    from rich.console import Console

    from ltsedge.errors import LtsedgeError
    from ltsedge.subnets.prune import PruneOptions, run_prune
    from ltsedge.subnets.summary import print_summary

    try:
        wanted = tuple(float(s) for s in speedups.split(",") if s.strip())
    except ValueError:
        raise LtsedgeError(f"--speedups {speedups!r}: give numbers above 1, comma-separated, e.g. 1.25,1.5") from None
    options = PruneOptions(from_dir, text, out, device=device, store_path=store, population=population,
                           generations=generations, window=window, calibration=calibration, held_out=held_out,
                           ffn_step=ffn_step, repair=repair, speedups=wanted, max_bundles=max_bundles,
                           precision=precision, context=context, seed=seed)
    console = Console(stderr=True)
    result = run_prune(options, log=lambda line: console.print(line, markup=False, highlight=False))
    print_summary(result)
