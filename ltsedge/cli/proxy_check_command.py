"""``ltsedge proxy-check``: train a spread sample of the space on the user's text and say how well the
decoder-parameter count (and the other counts) rank held-out loss there."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def proxy_check(
    text: Path = typer.Option(..., "--text", help="The text to train on: a file, or a folder of text files."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="A tokenizers JSON (tokenizer.json) whose "
                                             "ids fit the space's vocab_size; default: a byte-level BPE trained on "
                                             "the text."),
    space_file: Optional[Path] = typer.Option(None, "--space", help="Search-space TOML (as `ltsedge search --space`)."),
    preset: str = typer.Option("default", "--preset", help="default | quick | smoke | opt: the preset's space."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="gpt2 | transfo_xl | opt | llama (default: the "
                                           "space file's or the preset's, else gpt2)."),
    models: int = typer.Option(12, "--models", min=2, max=1000, help="Models sampled from the space, spread over "
                               "its decoder-parameter range."),
    control_models: Optional[int] = typer.Option(None, "--control-models", min=0, max=1000, help="Control models of "
                                                 "standard GPT-2 layers, for a PAR or non-GPT-2 space (default: as "
                                                 "many as --models; 0: none)."),
    depths: int = typer.Option(4, "--depths", min=0, max=32, help="Depths of the equal-parameter set (0: none)."),
    tokens_per_model: Optional[int] = typer.Option(None, "--tokens-per-model", min=1, help="Training tokens per "
                                                   "model (default: 20,000,000 on a GPU, 2,000,000 on a CPU)."),
    max_params: Optional[int] = typer.Option(None, "--max-params", min=1, help="Largest decoder-parameter count "
                                             "sampled (a CPU trains a 100 M model for hours)."),
    batch: Optional[int] = typer.Option(None, "--batch", min=1, max=65536, help="Sequences per step (default: 64 "
                                        "on a GPU, 8 on a CPU)."),
    sequence: Optional[int] = typer.Option(None, "--sequence", min=8, max=65536, help="Tokens per sequence "
                                           "(default: 256 on a GPU, 64 on a CPU, or the space's n_positions if "
                                           "fewer)."),
    lr: Optional[float] = typer.Option(None, "--lr", min=1e-6, max=1.0, help="Peak learning rate of the recipe "
                                       "(default: 1e-3)."),
    device: str = typer.Option("auto", "--device", help="auto | cuda | cpu (auto: cuda where torch sees a GPU)."),
    parallel: Optional[int] = typer.Option(None, "--parallel", min=1, max=64, help="Models trained at once, each in "
                                           "a process (default: 4 on a GPU; on a CPU one per core)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, max=1024, help="CPU threads per model "
                                          "(default: every core, shared by the models trained at once; on a busy "
                                          "machine fewer can be faster)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the sample, the held-out chunks, the inits and the "
                             "batches."),
    out: Path = typer.Option(Path("ltsedge-proxy-check"), "--out", help="Output directory (also holds what a rerun "
                             "resumes from)."),
    restart: bool = typer.Option(False, "--restart", help="Discard a check in --out and start over."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display and no line per model."),
) -> None:
    """Check on your own text whether the decoder-parameter count ranks held-out loss for your space."""
    from ltsedge.extras import require

    require("torch", "proxy-check")
    require("tokenizers", "proxy-check")
    if device not in ("auto", "cuda", "cpu"):
        from ltsedge.errors import LtsedgeError

        raise LtsedgeError(f"--device {device!r} is not one of auto, cuda, cpu")
    from ltsedge.proxycheck import report
    from ltsedge.proxycheck.run import CheckOptions, run_check

    options = CheckOptions(text=text, tokenizer=tokenizer, space_file=space_file, preset=preset, backbone=backbone,
                           models=models, control_models=control_models, depths=depths,
                           tokens_per_model=tokens_per_model, max_params=max_params, batch=batch, sequence=sequence, lr=lr,
                           device=device, parallel=parallel, threads=threads, seed=seed, out=out, restart=restart,
                           quiet=quiet)
    summary = run_check(options, log=lambda m: typer.echo(m, err=True))
    for line in report.lines(summary):
        typer.echo(line)
    if summary["missing"]:
        typer.echo(f"error: {len(summary['missing'])} models failed to train; run the same command again to retry "
                   f"them", err=True)
        raise typer.Exit(1)
    typer.echo(f"wrote {out / 'proxy-check.json'} and {out / 'proxy-check.png'}")
