"""The ``ltsedge`` command line: a thin layer over the Python API.

Every command turns bad input into one line on stderr and exit code 2 (``LtsedgeError``); measuring
commands never lose what they already measured.
(Over 300 lines because it holds every command's options and help; each command's body is a few lines
over the Python API.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.validate import parse_shape_options, scheduler_address

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find small Transformer language models that fit a device: decoder-parameter proxy, "
    "latency and memory measured with onnxruntime on the device, Pareto frontier of deployable ONNX models.",
)


# ---------------------------------------------------------------------------------------------
# Candidates: space, params, export
# ---------------------------------------------------------------------------------------------
@app.command()
def space(
    config: Optional[Path] = typer.Option(None, "--config", help="Search-space TOML file (default: the LTS GPT-2 space)."),
    sample: int = typer.Option(0, "--sample", min=0, help="Print N sampled architectures as JSON lines."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Seed for --sample."),
) -> None:
    """Describe the search space and its size, or sample architectures from it."""
    from ltsedge.space import SearchSpace

    s = SearchSpace.load(config) if config else SearchSpace()
    if sample:
        for arch in s.sample(sample, seed=seed):
            typer.echo(arch.to_json())
        return
    description = s.describe()
    for key, value in description.items():
        if key == "size":  # exact while readable; a space of 10^4000 architectures gets its magnitude
            log10 = description["size_log10"]
            value = f"{value:,} (~10^{log10})" if value is not None else f"~10^{log10}"
        elif key == "size_log10":
            continue
        typer.echo(f"{key:>20}: {value}")


@app.command()
def params(
    arch_file: Path = typer.Argument(..., metavar="ARCH.json", help="Architecture JSON file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Decoder (the proxy), embedding and total parameters of an architecture."""
    from ltsedge.proxy import count_params

    arch = Architecture.load(arch_file)
    counts = count_params(arch).to_dict()
    if as_json:
        typer.echo(json.dumps(counts))
        return
    typer.echo(f"architecture      {arch.id}")
    for key, value in counts.items():
        typer.echo(f"{key:<18}{value:>15,}")


PRECISION_HELP = ("fp32 | int8 (onnxruntime's quantize_dynamic) | int4 (MatMulNBits, onnxruntime >= 1.17) | "
                  "fp16 (CUDA execution provider only).")


@app.command()
def export(
    arch_file: Path = typer.Argument(..., metavar="ARCH.json", help="Architecture JSON file."),
    output: Path = typer.Option(..., "-o", "--output",
                                help="The ONNX file (forward), or the bundle directory (generate)."),
    variant: str = typer.Option("forward", "--variant", help="forward: input_ids -> logits over a whole sequence; "
                                "generate: a deployable bundle with a KV cache (onnxruntime-genai, Optimum naming)."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Trained weights: a state_dict of ltsedge's "
                                           "reference model (.pt or .safetensors). Default: random weights."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="A tokenizer.json, or the folder holding one, to put in the bundle (its tokenizer_config.json and special_tokens_map.json go with it, made from tokenizer.json when absent)."),
    external_data: Optional[bool] = typer.Option(None, "--external-data/--inline-data",
                                                 help="Weights in <model>.data beside the model (default: over 2 GB)."),
    target_ort: Optional[str] = typer.Option(
        None, "--target-ort", help="onnxruntime version the model must load in (default: 1.20, the oldest supported)."
    ),
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
    cache_layout: Optional[str] = typer.Option(
        None, "--cache-layout", help="Generate variant of GPT-2/OPT: uniform (default: every layer's cache in one "
        "head count, which Optimum and transformers.js feed) or per-layer (each layer's own heads)."),
) -> None:
    """Export an architecture to ONNX: one model file, or a generation bundle (--variant generate)."""
    from ltsedge.exporters.bundle import export_to_path
    from ltsedge.exporters.options import ExportOptions

    arch = Architecture.load(arch_file)
    options = ExportOptions(variant=variant, target_ort=target_ort, precision=precision, cache_layout=cache_layout,
                            external_data=external_data)
    model, files = export_to_path(arch, output, options, weights=weights, tokenizer=tokenizer)
    t = model.target
    kind = "trained" if weights else "random"
    typer.echo(f"wrote {output} ({model.nbytes / 1e6:.1f} MB, {variant}, {kind} weights, {model.precision}, "
               f"opset {t.opset}, IR {t.ir_version})")
    made = set(getattr(files, "generated", ()))
    for path, sha in files.items():
        note = "  (made from tokenizer.json: none was beside it)" if path in made else ""
        typer.echo(f"  {path}  sha256 {sha[:16]}…{note}")


# ---------------------------------------------------------------------------------------------
# Measurement: devices, profile
# ---------------------------------------------------------------------------------------------
DEVICE_HELP = "Device profile: a built-in name (see `ltsedge devices`) or a path to a profile TOML."
STORE_HELP = "Measurement store (SQLite). Default: $LTSEDGE_STORE, else the user cache directory."
SCHEDULER_HELP = "Measure on the ltsedge agents of this Dask scheduler (tcp://HOST:8786), not on this machine."
MACHINE_HELP = "With agents of several kinds of machine: the fingerprint hash of those to measure on."
SCHEDULER_WAIT_S = 30.0  # how long `agent` waits for its scheduler to answer (as long as a search or profile does)


def _fleet(scheduler: str | None, machine: str | None) -> None:
    """The one check of --scheduler and --machine every measuring command shares, before anything runs."""
    if scheduler is not None:
        scheduler_address(scheduler)
    elif machine is not None:
        raise LtsedgeError("--machine picks among the agents of a fleet: give --scheduler too")


@app.command()
def devices() -> None:
    """List the built-in device profiles."""
    from ltsedge.devices import builtin_profiles

    for profile in builtin_profiles():
        typer.echo(f"{profile.name:<8} {profile.description}")


@app.command()
def profile(
    model: Path = typer.Argument(..., metavar="MODEL.onnx|ARCH.json", help="An ONNX model, or an architecture JSON."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    fresh: bool = typer.Option(False, "--fresh", help="Measure again even if the store has this measurement."),
    shape: list[str] = typer.Option([], "--shape", help="Input shape override, e.g. input_ids=1x192 (repeatable)."),
    target_ort: Optional[str] = typer.Option(None, "--target-ort", help="For ARCH.json: onnxruntime version to export for."),
    variant: Optional[str] = typer.Option(None, "--variant", help="For ARCH.json: forward (one full pass, the "
                                          "default) or generate (KV cache: prefill and per-token decode are timed)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    machine: Optional[str] = typer.Option(None, "--machine", help=MACHINE_HELP),
    precision: Optional[str] = typer.Option(None, "--precision", help="For ARCH.json: " + PRECISION_HELP
                                            + " Default: the device profile's [export] precision, else fp32."),
) -> None:
    """Measure latency and peak memory of a model on a device (answered from the store when known)."""
    from ltsedge.profiling import profile_model

    _fleet(scheduler, machine)
    result = profile_model(model, device, store_path=store_path, fresh=fresh, shapes=parse_shape_options(shape),
                           target_ort=target_ort, variant=variant, scheduler=scheduler, machine=machine,
                           precision=precision)
    if as_json:
        typer.echo(json.dumps(result, default=str))
    else:
        _print_profile(result)
    if not result["ok"]:  # the model could not be measured (crash, timeout, load failure): say so in the exit code
        raise typer.Exit(1)


def _print_profile(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{r['model']} on {r['device']}", show_header=False)
    if not r["ok"]:
        table.add_row("error", str(r["error"]))
    else:
        if r.get("decode_latency_ms") is not None:
            table.add_row("prefill (median)", f"{r['prefill_latency_ms']:.2f} ms")
            table.add_row("decode per token (median)", f"{r['decode_latency_ms']:.3f} ms")
            table.add_row("KV cache", f"{r['kv_cache_mb']:.2f} MB")
        table.add_row("latency (median)", f"{r['latency_ms']:.2f} ms" + (" (decode)" if r.get("decode_latency_ms") else ""))
        table.add_row("latency p90", f"{r['latency_p90_ms']:.2f} ms")
        table.add_row("latency min", f"{r['latency_min_ms']:.2f} ms")
        table.add_row("coefficient of variation", f"{100 * r['latency_cv']:.1f} % over {r['runs']} runs"
                      + ("" if r.get("converged") else " (not converged)"))
        table.add_row("peak memory", f"{r['peak_memory_mb']:.1f} MB")
        table.add_row("weights", f"{r['weights_mb']:.1f} MB")
    for key in ("decoder_params", "total_params"):
        if r.get(key) is not None:
            table.add_row(key.replace("_", " "), f"{r[key]:,}")
    fp = r["fingerprint"]
    table.add_row("machine", f"{fp.get('cpu_model')} ({fp.get('arch')}, {fp.get('logical_cores')} cores)")
    table.add_row("onnxruntime", f"{fp.get('onnxruntime')} {r.get('execution_provider', '')}")
    table.add_row("from", "store" if r.get("cached") else "measured now")
    Console().print(table)
    if r.get("machine_state"):  # the run's own calibration, far from the pinned one: figures still in its scale
        typer.echo(r["machine_state"])


@app.command()
def calibrate(
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """Measure this machine's speed (the reference model alone, in several windows) again and pin it in the
    store: every later run's milliseconds are its ratios to the reference times this."""
    from ltsedge.profiling import calibrate_machine

    r = calibrate_machine(device, store_path=store_path)
    windows = ", ".join(f"{w:.3f}" for w in r["windows"])
    typer.echo(f"pinned calibration on {r['device']}: reference {r['reference_ms']:.3f} ms")
    typer.echo(f"windows: {windows} ms; spread between them {r['spread']:.1%}")
    if r["previous_reference_ms"]:
        typer.echo(f"previously pinned: {r['previous_reference_ms']:.3f} ms "
                   f"({r['reference_ms'] / r['previous_reference_ms'] - 1:+.1%})")
    typer.echo(f"kept in {r['store']}")


# ---------------------------------------------------------------------------------------------
# Search
# ---------------------------------------------------------------------------------------------
@app.command()
def search(
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    preset: str = typer.Option("default", "--preset", help="default | quick | smoke | opt (see README)."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="gpt2 | transfo_xl | opt (default: the space "
                                           "file's or the preset's, else gpt2)."),
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
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32 | int8 | int4 (fp16 on CUDA): every "
                                            "candidate exported and measured as apps ship it (default: the "
                                            "profile's [export] precision, else fp32)."),
    seed_baseline: bool = typer.Option(True, "--seed-baseline/--no-seed-baseline", help="Start from the "
                                       "layer-scaled baseline models the space holds (half the first "
                                       "generation at most), so the front can only improve on them."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    machine: Optional[str] = typer.Option(None, "--machine", help=MACHINE_HELP),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    fresh: bool = typer.Option(False, "--fresh", help="Ignore the store: measure every candidate on this run."),
    restart: bool = typer.Option(False, "--restart", help="Discard a checkpoint in --out and start over."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display; the summary only."),
) -> None:
    """Search the space for the Pareto frontier of decoder parameters vs latency vs memory on a device."""
    from ltsedge.extras import require

    _fleet(scheduler, machine)
    require("pymoo", "search")
    require("torch", "search")
    from ltsedge.search.api import SearchOptions, run_search

    options = SearchOptions(
        device=device, preset=preset, backbone=backbone, space_file=space_file, out=out, population=population, generations=generations,
        seed=seed, max_latency_ms=max_latency_ms, max_memory_mb=max_memory_mb, min_params=min_params,
        max_params=max_params, sequence=sequence, baseline=baseline, baseline_d_model=baseline_d_model,
        baseline_d_inner=baseline_d_inner, baseline_n_head=baseline_n_head, baseline_layers=baseline_layers,
        target_ort=target_ort, objective=objective, racing=racing, measure=measure, seed_baseline=seed_baseline, precision=precision,
        search_timing=search_timing, resolution=resolution, scheduler=scheduler,
        machine=machine, store_path=store_path, fresh=fresh, restart=restart, quiet=quiet,
    )
    result = run_search(options)
    from ltsedge.search.summary import print_summary

    print_summary(result)
    if result.interrupted:
        raise typer.Exit(130)
    failed = result.failure_reason()
    if failed:
        typer.echo(f"error: {failed}", err=True)
        raise typer.Exit(1)


@app.command()
def report(
    out: Path = typer.Argument(..., metavar="OUT", help="A search's output directory."),
    html: bool = typer.Option(False, "--html", help="The HTML page only."),
    png: bool = typer.Option(False, "--png", help="The PNG pictures only."),
    dest: Optional[Path] = typer.Option(None, "--out", help="Where to write it (default: OUT/report)."),
) -> None:
    """Draw a search's report: PNG slices of the frontier and one self-contained HTML page."""
    from ltsedge.report import write_report

    both = not html and not png
    # Without --out, into OUT/report/, under OUT's manifest rules (write_report opens it so).
    files = write_report(out, dest, html=html or both, png=png or both)
    for path in files:
        typer.echo(str(path))


@app.command()
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


@app.command()
def agent(
    scheduler: str = typer.Option(..., "--scheduler", help="The Dask scheduler to serve, e.g. tcp://laptop:8786."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    name: Optional[str] = typer.Option(None, "--name", help="This agent's name (default: Dask's)."),
) -> None:
    """Serve measurements to searches on another machine: a Dask worker that times one model at a time."""
    from ltsedge.devices import load_profile
    from ltsedge.devices.fingerprint import fingerprint_hash, machine_fingerprint
    from ltsedge.runners.remote import run_agent

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


# ---------------------------------------------------------------------------------------------
# Budgets in CI
# ---------------------------------------------------------------------------------------------
@app.command()
def check(
    models: list[Path] = typer.Argument(None, metavar="MODEL.onnx...", help="ONNX models to check (any ONNX model)."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    max_latency_ms: Optional[float] = typer.Option(None, "--max-latency-ms", min=0.0, help="Latency budget (median)."),
    max_memory_mb: Optional[float] = typer.Option(None, "--max-memory-mb", min=0.0, help="Peak-memory budget."),
    max_prefill_ms: Optional[float] = typer.Option(None, "--max-prefill-ms", min=0.0,
                                                   help="Prompt prefill budget (generate models)."),
    max_decode_ms: Optional[float] = typer.Option(None, "--max-decode-ms", min=0.0,
                                                  help="Per-token decode budget (generate models)."),
    budgets: Optional[Path] = typer.Option(None, "--budgets", help="TOML naming models and their budgets per device."),
    shape: list[str] = typer.Option([], "--shape", help="Input shape override, e.g. input_ids=1x192 (repeatable)."),
    against: Optional[Path] = typer.Option(None, "--against", help="Previous `check --json` or `profile --json` output."),
    max_regression: float = typer.Option(0.10, "--max-regression", min=0.0, help="Allowed regression vs --against."),
    force: bool = typer.Option(False, "--force", help="Compare with --against even across machine fingerprints."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here."),
    benchmark_json: Optional[Path] = typer.Option(None, "--benchmark-json", help="Write github-action-benchmark's "
                                                  "customSmallerIsBetter JSON here (one entry per model and figure)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the table."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    machine: Optional[str] = typer.Option(None, "--machine", help=MACHINE_HELP),
    marginal: Optional[str] = typer.Option(None, "--marginal", metavar="pass|fail",
                                           help="How a check counts whose limit lies within the figure's interval "
                                           "widened by this machine's between-run spread (a verdict that could flip "
                                           "between runs). Default: fail when the environment variable CI is set "
                                           "to a true value (1, true, yes, on), else pass."),
) -> None:
    """Gate models on latency/memory budgets: exit 0 within budget, 1 over budget or regressed, 2 bad input."""
    import os

    from ltsedge.check import run_check

    _fleet(scheduler, machine)
    if marginal is None:
        marginal = "fail" if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on") else "pass"
    limits = {"max_latency_ms": max_latency_ms, "max_memory_mb": max_memory_mb,  # budget key -> flag's value
              "max_prefill_ms": max_prefill_ms, "max_decode_ms": max_decode_ms}
    report = run_check(models or [], device, budgets=limits, budgets_file=budgets,
                       shapes=parse_shape_options(shape), against=against, max_regression=max_regression,
                       force=force, scheduler=scheduler, machine=machine, marginal=marginal)
    if as_json:
        typer.echo(json.dumps(report.to_json(), default=str))
    else:
        report.render()
    if junit:  # after the table: a report that cannot be written never hides the verdicts
        report.write_junit(junit)
    if benchmark_json:
        report.write_benchmark_json(benchmark_json)
    raise typer.Exit(report.exit_code)


# ---------------------------------------------------------------------------------------------
@app.command()
def predict(
    arch_file: Path = typer.Argument(..., metavar="ARCH.json", help="An architecture JSON."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    preset: str = typer.Option("default", "--preset", help="The workload and repeat settings of this preset's search."),
    variant: Optional[str] = typer.Option(None, "--variant", help="forward | generate (default: generate where the "
                                          "backbone exports it)."),
    target_ort: Optional[str] = typer.Option(None, "--target-ort", help="onnxruntime version the models are exported for."),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict latency and peak memory of an architecture on this machine from its cost model (no measuring)."""
    from ltsedge.extras import require

    require("scipy", "predict")
    from ltsedge.costmodel.api import Setting, predict as predict_figures

    arch = Architecture.load(arch_file)
    result = predict_figures(arch, Setting(device, preset, arch.backbone, variant, target_ort), store_path)
    if as_json:
        typer.echo(json.dumps(result))
        return
    if result["extrapolated"]:
        typer.echo("warning: outside the range of the architectures the cost model was fitted on: it extrapolates "
                   "(intervals widened)", err=True)
    typer.echo(f"{result['id']}  predicted from {result['samples']} measured architectures "
               f"({result['coverage']:.0%} intervals)")
    for name, w in result["workloads"].items():
        typer.echo(f"  {name + ' latency':<18} {w['latency_ms']:10.3f} ms   [{w['latency_low_ms']:.3f}, "
                   f"{w['latency_high_ms']:.3f}]")
    typer.echo(f"  {'peak memory':<18} {result['peak_memory_mb']:10.1f} MB   [{result['memory_low_mb']:.1f}, "
               f"{result['memory_high_mb']:.1f}]")


@app.command()
def costmodel(
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    preset: str = typer.Option("default", "--preset", help="The space, workload and repeat settings of this preset."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="gpt2 | transfo_xl | opt (default: the preset's)."),
    variant: Optional[str] = typer.Option(None, "--variant", help="forward | generate (default: generate where the "
                                          "backbone exports it)."),
    samples: int = typer.Option(40, "--samples", min=1, max=100000, help="Architectures to measure (space-filling)."),
    seed: int = typer.Option(0, "--seed", min=0),
    target_ort: Optional[str] = typer.Option(None, "--target-ort", help="onnxruntime version to export for."),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Measure a sample of the space on this machine so that searches and `predict` can start from a cost model."""
    from ltsedge.extras import require

    require("torch", "costmodel")
    require("scipy", "costmodel")
    from ltsedge.costmodel.api import Setting, build

    log = (lambda _: None) if as_json else (lambda m: typer.echo(m, err=True))
    result = build(Setting(device, preset, backbone, variant, target_ort), samples, seed, store_path, log=log)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"cost model: {result['samples']} measured architectures ({result['failed']} failed), "
               f"held-out (leave-one-out) accuracy:")
    for target, a in result["accuracy"].items():
        typer.echo(f"  {target:<8} median error {a['median_error']:.1%}, 90th percentile {a['p90_error']:.1%}, "
                   f"{a['coverage']:.0%} interval [{a['interval'][0]:+.1%}, {a['interval'][1]:+.1%}]")


# click's exception base class, whether typer uses click or (typer >= 0.2x) a vendored copy of it.
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `ltsedge`: the help was printed, as asked
            sys.exit(0)
        typer.echo(f"error: {e.format_message()}", err=True)  # a bad option value: one line, like ours
        sys.exit(2)
    except LtsedgeError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
