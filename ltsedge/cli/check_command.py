"""``ltsedge check``: gate ONNX models on latency/memory budgets (exit 0 / 1 / 2), with JUnit and JSON reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ltsedge.cli.options import CHECK_LOST, DEVICE_HELP, MACHINE_HELP, SCHEDULER_HELP, check_fleet, when_scheduler_lost
from ltsedge.validate import parse_shape_options


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

    check_fleet(scheduler, machine)
    if marginal is None:
        marginal = "fail" if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on") else "pass"
    limits = {"max_latency_ms": max_latency_ms, "max_memory_mb": max_memory_mb,  # budget key -> flag's value
              "max_prefill_ms": max_prefill_ms, "max_decode_ms": max_decode_ms}
    with when_scheduler_lost(CHECK_LOST):
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
