"""The search commands: ``search``, its outputs' ``report`` and ``compare``, and ``agent`` (measure for
searches elsewhere, on a fleet's scheduler)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ltsedge.cli.options import (
    ACCURACY_LEVEL_HELP,
    BLOCK_SIZE_HELP,
    DEVICE_HELP,
    MACHINE_HELP,
    PER_CHANNEL_HELP,
    SCHEDULER_HELP,
    SEARCH_LOST,
    STORE_HELP,
    SYMMETRIC_HELP,
    check_fleet,
    quantization_options,
    when_scheduler_lost,
)
from ltsedge.errors import LtsedgeError
from ltsedge.interrupts import exit_code
from ltsedge.validate import scheduler_address

SCHEDULER_WAIT_S = 30.0  # how long `agent` waits for its scheduler to answer (as long as a search or profile does)


def search(
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    preset: str = typer.Option("default", "--preset", help="default | study | quick | smoke | opt | llama-edge (see docs/search.md)."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="gpt2 | transfo_xl | opt | llama (default: the "
                                           "space file's or the preset's, else gpt2)."),
    space_file: Optional[Path] = typer.Option(None, "--space", help="Search-space TOML (overrides the preset's space)."),
    out: Path = typer.Option(Path("ltsedge-out"), "--out", help="Output directory (also holds the checkpoint)."),
    population: Optional[int] = typer.Option(None, "--population", min=2, help="NSGA-II population size."),
    generations: Optional[int] = typer.Option(None, "--generations", min=1, help="Number of generations."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed: the same seed samples the same sequence."),
    max_latency_ms: Optional[float] = typer.Option(None, "--max-latency-ms", min=0.0, help="Latency budget."),
    max_memory_mb: Optional[float] = typer.Option(None, "--max-memory-mb", min=0.0, help="Peak-memory budget."),
    min_params: Optional[int] = typer.Option(None, "--min-params", min=0, help="Lowest decoder-parameter count."),
    max_params: Optional[int] = typer.Option(None, "--max-params", min=0, help="Highest decoder-parameter count."),
    sequence: Optional[int] = typer.Option(None, "--sequence", min=1, help="Sequence length to measure at."),
    baseline: bool = typer.Option(True, "--baseline/--no-baseline", help="Measure the layer-scaled GPT-2 baseline."),
    baseline_d_model: Optional[int] = typer.Option(None, "--baseline-d-model", min=1),
    baseline_d_inner: Optional[int] = typer.Option(None, "--baseline-d-inner", min=1),
    baseline_n_head: Optional[int] = typer.Option(None, "--baseline-n-head", min=1),
    baseline_layers: Optional[int] = typer.Option(None, "--baseline-layers", min=1, help="Baseline with 1..N layers."),
    target_ort: Optional[str] = typer.Option(None, "--target-ort", help="onnxruntime version the models must load in."),
    objective: Optional[str] = typer.Option(
        None, "--objective", help="Latency to optimise: decode (per generated token, with a KV cache; the default "
        "where the backbone can generate), prefill (the prompt) or forward (one full pass: the study's protocol)."),
    racing: bool = typer.Option(True, "--racing/--no-racing", help="A first estimate for every candidate; full "
                                "precision only for those that could be on the front."),
    measure: str = typer.Option("front", "--measure", help="front: the device's cost model predicts every "
                                "candidate and only those that could enter the measured front (or sit near a "
                                "budget, or are audited) are measured; all: every candidate (the study's protocol)."),
    search_timing: Optional[str] = typer.Option(
        None, "--search-timing", help="coarse: candidates are timed to +-5% in at most 12 samples (the cost model "
        "averages the noise; the default with --measure front); profile: to the device profile's own policy (the "
        "default with --measure all). The published frontier is re-measured at the profile's policy either way."),
    resolution: float = typer.Option(0.1, "--resolution", min=0.0, max=1.0, help="Publish a thinned front: every "
                                     "front model left out has a published one within this factor in decoder "
                                     "parameters, latency and memory (0: the whole front)."),
    max_bundles: Optional[int] = typer.Option(None, "--max-bundles", min=1, help="Publish at most this many models "
                                              "(the baseline comparison's first, the rest spread over the decoder "
                                              "parameters); the summary says how many were left out. Default: "
                                              "the thinned front whole."),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32 | int8 | int4 (fp16 on CUDA): every "
                                            "candidate exported and measured as apps ship it (default: the "
                                            "profile's [export] precision, else fp32)."),
    per_channel: Optional[bool] = typer.Option(None, "--per-channel/--per-tensor", help=PER_CHANNEL_HELP),
    block_size: Optional[int] = typer.Option(None, "--block-size", help=BLOCK_SIZE_HELP),
    symmetric: Optional[bool] = typer.Option(None, "--symmetric/--asymmetric", help=SYMMETRIC_HELP),
    accuracy_level: Optional[int] = typer.Option(None, "--accuracy-level", help=ACCURACY_LEVEL_HELP),
    seed_baseline: bool = typer.Option(True, "--seed-baseline/--no-seed-baseline", help="Start from the "
                                       "layer-scaled baseline models the space holds (half the first "
                                       "generation at most), so the front can only improve on them."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    machine: Optional[str] = typer.Option(None, "--machine", help=MACHINE_HELP),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    fresh: bool = typer.Option(False, "--fresh", help="Ignore the store: measure every candidate on this run."),
    restart: bool = typer.Option(False, "--restart", help="Discard a checkpoint in --out and start over."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display; the summary only."),
    proxy: str = typer.Option("decoder", "--proxy", help="The quality objective: decoder (decoder parameters, the "
                              "study's proxy) or a proxy-check.json, whose proxy fitted on your text (held-out loss "
                              "from decoder parameters and depth) NSGA-II then minimises."),
) -> None:
    """Search the space for the Pareto frontier of decoder parameters vs latency vs memory on a device."""
    from ltsedge.extras import require

    check_fleet(scheduler, machine)
    require("pymoo", "search")
    require("torch", "search")
    from ltsedge.search.api import SearchOptions, run_search

    quantization = quantization_options(precision, per_channel=per_channel, block_size=block_size,
                                        symmetric=symmetric, accuracy_level=accuracy_level)
    options = SearchOptions(
        device=device, preset=preset, backbone=backbone, space_file=space_file, out=out, population=population, generations=generations,
        seed=seed, max_latency_ms=max_latency_ms, max_memory_mb=max_memory_mb, min_params=min_params,
        max_params=max_params, sequence=sequence, baseline=baseline, baseline_d_model=baseline_d_model,
        baseline_d_inner=baseline_d_inner, baseline_n_head=baseline_n_head, baseline_layers=baseline_layers,
        target_ort=target_ort, objective=objective, racing=racing, measure=measure, seed_baseline=seed_baseline, precision=precision,
        quantization=quantization, search_timing=search_timing, resolution=resolution, max_bundles=max_bundles,
        scheduler=scheduler,
        machine=machine, store_path=store_path, fresh=fresh, restart=restart, quiet=quiet, proxy=proxy,
    )
    with when_scheduler_lost(SEARCH_LOST):
        result = run_search(options)
    from ltsedge.search.summary import print_summary

    print_summary(result)
    if result.interrupted:
        raise typer.Exit(exit_code())  # 130 after Ctrl-C, 143 after SIGTERM
    failed = result.failure_reason()
    if failed:
        typer.echo(f"error: {failed}", err=True)
        raise typer.Exit(1)


def report(
    out: Path = typer.Argument(..., metavar="OUT", help="A search's output directory."),
    html: bool = typer.Option(False, "--html", help="The HTML page only."),
    png: bool = typer.Option(False, "--png", help="The PNG pictures only."),
    dest: Optional[Path] = typer.Option(None, "--out", help="Where to write it (default: OUT/report)."),
    proxy_check: Optional[Path] = typer.Option(None, "--proxy-check", help="An `ltsedge proxy-check` result to show "
                                               "(default: OUT/proxy-check.json or OUT/proxy-check/proxy-check.json)."),
) -> None:
    """Draw a search's report: PNG slices of the frontier and one self-contained HTML page."""
    from ltsedge.report import write_report

    both = not html and not png
    # Without --out, into OUT/report/, under OUT's manifest rules (write_report opens it so).
    files = write_report(out, dest, html=html or both, png=png or both, proxy_check=proxy_check)
    for path in files:
        typer.echo(str(path))


def compare(
    outs: list[Path] = typer.Argument(..., metavar="OUT...", help="Two or more search output directories."),
    dest: Path = typer.Option(Path("ltsedge-compare"), "--out", help="Where to write the comparison."),
    force: bool = typer.Option(False, "--force", help="Compare searches measured differently (other machines, "
                               "settings, objectives)."),
) -> None:
    """Frontiers of several searches on the same axes, and which models of each dominate the others'."""
    from rich.console import Console
    from rich.table import Table

    from ltsedge.report.compare import compare_searches

    rows, files = compare_searches(outs, dest, force=force, log=lambda m: typer.echo(m, err=True))
    table = Table(title="frontier models that dominate another search's")
    for column in ("search", "frontier models", "dominating", "for example"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["search"], str(r["models"]), str(r["dominating"]), "; ".join(r["examples"][:2]))
    Console().print(table)
    typer.echo(f"wrote {', '.join(str(p) for p in files)}")


def agent(
    scheduler: str = typer.Option(..., "--scheduler", help="The Dask scheduler to serve, e.g. tcp://laptop:8786."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    name: Optional[str] = typer.Option(None, "--name", help="This agent's name (default: Dask's)."),
) -> None:
    """Serve measurements to searches on another machine: a Dask worker that times one model at a time."""
    from ltsedge.devices import load_profile
    from ltsedge.devices.fingerprint import fingerprint_hash, machine_fingerprint
    from ltsedge.runners.agent import run_agent

    scheduler_address(scheduler)
    profile = load_profile(device)
    _wait_for_scheduler(scheduler, SCHEDULER_WAIT_S)
    machine = fingerprint_hash(machine_fingerprint(profile))

    def ready(address: str) -> None:
        typer.echo(f"ltsedge agent {address}: measuring for {scheduler} on {profile.name} (machine {machine})",
                   err=True)

    run_agent(scheduler, profile, name=name, ready=ready)


def _wait_for_scheduler(address: str, timeout_s: float) -> None:
    """A bounded wait for the scheduler: a Dask worker would wait for it silently, forever."""
    import asyncio

    from ltsedge.extras import require

    comm = require("distributed", "measuring on a fleet").comm

    async def probe() -> None:
        await (await comm.connect(address, timeout=timeout_s)).close()

    try:
        asyncio.run(probe())
    except (OSError, TimeoutError, asyncio.TimeoutError) as e:
        raise LtsedgeError(f"cannot reach the scheduler {address}: {e}") from None
