"""The cost-model commands: ``costmodel`` (measure a sample and fit this machine's cost model) and
``predict`` (an architecture's figures from it, without measuring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ltsedge.architecture import Architecture
from ltsedge.cli.options import DEVICE_HELP, PRECISION_HELP, STORE_HELP

SEQUENCE_HELP = "Sequence length to measure at (default: the preset's), as `ltsedge search --sequence`."


def predict(
    arch_file: Path = typer.Argument(..., metavar="ARCH.json", help="An architecture JSON."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    preset: str = typer.Option("default", "--preset", help="The workload and repeat settings of this preset's search."),
    variant: Optional[str] = typer.Option(None, "--variant", help="forward | generate (default: generate where the "
                                          "backbone exports it)."),
    target_ort: Optional[str] = typer.Option(None, "--target-ort", help="onnxruntime version the models are exported for."),
    precision: Optional[str] = typer.Option(None, "--precision", help=PRECISION_HELP),
    sequence: Optional[int] = typer.Option(None, "--sequence", min=1, help=SEQUENCE_HELP),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict latency and peak memory of an architecture on this machine from its cost model (no measuring)."""
    from ltsedge.extras import require

    require("scipy", "predict")
    from ltsedge.costmodel.api import Setting, predict as predict_figures

    arch = Architecture.load(arch_file)
    setting = Setting(device, preset, arch.backbone, variant, target_ort, precision, sequence)
    result = predict_figures(arch, setting, store_path, arch_file)
    if as_json:
        typer.echo(json.dumps(result))
        return
    if result["extrapolated"]:
        typer.echo("warning: outside the range of the architectures the cost model was fitted on: it extrapolates "
                   "(intervals widened)", err=True)
    typer.echo(f"{result['id']} ({result['variant']} variant)  predicted from {result['samples']} measured "
               f"architectures ({result['coverage']:.0%} intervals)")
    for name, w in result["workloads"].items():
        typer.echo(f"  {name + ' latency':<18} {w['latency_ms']:10.3f} ms   [{w['latency_low_ms']:.3f}, "
                   f"{w['latency_high_ms']:.3f}]")
    typer.echo(f"  {'peak memory':<18} {result['peak_memory_mb']:10.1f} MB   [{result['memory_low_mb']:.1f}, "
               f"{result['memory_high_mb']:.1f}]")


def costmodel(
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    preset: str = typer.Option("default", "--preset", help="The space, workload and repeat settings of this preset."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="gpt2 | transfo_xl | opt (default: the preset's)."),
    variant: Optional[str] = typer.Option(None, "--variant", help="forward | generate (default: generate where the "
                                          "backbone exports it)."),
    samples: int = typer.Option(40, "--samples", min=1, max=100000, help="Architectures to measure (space-filling)."),
    seed: int = typer.Option(0, "--seed", min=0),
    target_ort: Optional[str] = typer.Option(None, "--target-ort", help="onnxruntime version to export for."),
    precision: Optional[str] = typer.Option(None, "--precision", help=PRECISION_HELP),
    sequence: Optional[int] = typer.Option(None, "--sequence", min=1, help=SEQUENCE_HELP),
    store_path: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Measure a sample of the space on this machine so that searches and `predict` can start from a cost model."""
    from ltsedge.extras import require

    require("torch", "costmodel")
    require("scipy", "costmodel")
    from ltsedge.costmodel.api import Setting, build

    log = (lambda _: None) if as_json else (lambda m: typer.echo(m, err=True))
    setting = Setting(device, preset, backbone, variant, target_ort, precision, sequence)
    result = build(setting, samples, seed, store_path, log=log)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"cost model: {result['samples']} measured architectures ({result['failed']} failed), "
               f"held-out (leave-one-out) accuracy:")
    for target, a in result["accuracy"].items():
        typer.echo(f"  {target:<8} median error {a['median_error']:.1%}, 90th percentile {a['p90_error']:.1%}, "
                   f"{a['coverage']:.0%} interval [{a['interval'][0]:+.1%}, {a['interval'][1]:+.1%}]")
