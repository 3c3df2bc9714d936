"""The measuring commands on this machine: ``devices`` (the built-in profiles), ``profile`` (latency and
peak memory of one model) and ``calibrate`` (pin this machine's speed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ltsedge.cli.options import (
    ACCURACY_LEVEL_HELP,
    BLOCK_SIZE_HELP,
    DEVICE_HELP,
    MACHINE_HELP,
    PER_CHANNEL_HELP,
    PRECISION_HELP,
    PROFILE_LOST,
    SCHEDULER_HELP,
    STORE_HELP,
    SYMMETRIC_HELP,
    check_fleet,
    quantization_options,
    when_scheduler_lost,
)
from ltsedge.validate import parse_shape_options


def devices() -> None:
    """List the built-in device profiles."""
    from ltsedge.devices import builtin_profiles

    profiles = builtin_profiles()
    width = max(len(p.name) for p in profiles)
    for profile in profiles:
        typer.echo(f"{profile.name:<{width}} {profile.description}")


def profile(
    model: Optional[Path] = typer.Argument(None, metavar="MODEL.onnx|BUNDLE|ARCH.json",
                                           help="An ONNX model, a generation bundle's folder, or an architecture JSON."),
    from_dir: Optional[Path] = typer.Option(None, "--from", help="A Hugging Face model folder (config.json of a "
                                            "LlamaForCausalLM): its architecture, exported as ARCH.json is."),
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
    per_channel: Optional[bool] = typer.Option(None, "--per-channel/--per-tensor", help="For ARCH.json: "
                                               + PER_CHANNEL_HELP),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="For ARCH.json: " + BLOCK_SIZE_HELP),
    symmetric: Optional[bool] = typer.Option(None, "--symmetric/--asymmetric", help="For ARCH.json: " + SYMMETRIC_HELP),
    accuracy_level: Optional[int] = typer.Option(None, "--accuracy-level", help="For ARCH.json: "
                                                 + ACCURACY_LEVEL_HELP),
) -> None:
    """Measure latency and peak memory of a model on a device (answered from the store when known)."""
    from ltsedge.profiling import profile_model

    check_fleet(scheduler, machine)
    architecture = None
    if from_dir is not None or model is None:
        from ltsedge.cli.candidate_commands import architecture_or_folder

        architecture, _ = architecture_or_folder(model, from_dir)
        model = from_dir
    quantization = quantization_options(precision, per_channel=per_channel, block_size=block_size,
                                        symmetric=symmetric, accuracy_level=accuracy_level)
    with when_scheduler_lost(PROFILE_LOST):
        result = profile_model(model, device, store_path=store_path, fresh=fresh, shapes=parse_shape_options(shape),
                               target_ort=target_ort, variant=variant, scheduler=scheduler, machine=machine,
                               precision=precision, quantization=quantization, architecture=architecture)
    if as_json:
        typer.echo(json.dumps(result, default=str))
    else:
        _print_profile(result)
    if not result["ok"]:  # the model could not be measured (crash, timeout, load failure): say so in the exit code
        raise typer.Exit(1)


def _figure(value: float | None, unit: str, digits: int = 2) -> str:
    """A figure for the table; 'unknown' where the platform gave none (a peak it cannot read)."""
    return "unknown" if value is None else f"{value:.{digits}f} {unit}"


def _print_profile(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{r['model']} on {r['device']}", show_header=False)
    # Which export was measured: profile ARCH.json times the forward pass unless --variant generate, where
    # search and predict default to a generate model's decode step.
    table.add_row("variant", f"{r.get('variant') or 'forward'}" + (f", {r['precision']}" if r.get("precision") else ""))
    if r.get("loop"):
        table.add_row("timed in", r["loop"])
    if not r["ok"]:
        table.add_row("error", str(r["error"]))
    else:
        if r.get("decode_latency_ms") is not None:
            table.add_row("prefill (median)", _figure(r["prefill_latency_ms"], "ms"))
            table.add_row("decode per token (median)", _figure(r["decode_latency_ms"], "ms", 3))
            table.add_row("KV cache", _figure(r["kv_cache_mb"], "MB"))
        table.add_row("latency (median)", _figure(r["latency_ms"], "ms") + (" (decode)" if r.get("decode_latency_ms") else ""))
        table.add_row("latency p90", _figure(r["latency_p90_ms"], "ms"))
        table.add_row("latency min", _figure(r["latency_min_ms"], "ms"))
        cv = "unknown" if r["latency_cv"] is None else f"{100 * r['latency_cv']:.1f} %"
        table.add_row("coefficient of variation", f"{cv} over {r['runs']} runs"
                      + ("" if r.get("converged") else " (not converged)"))
        table.add_row("peak memory" + (" (GPU)" if r.get("memory_of") == "gpu" else ""), _figure(r["peak_memory_mb"], "MB", 1))
        if r.get("host_peak_memory_mb") is not None:
            table.add_row("host peak memory", _figure(r["host_peak_memory_mb"], "MB", 1))
        table.add_row("weights", _figure(r["weights_mb"], "MB", 1))
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
