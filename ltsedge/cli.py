"""The ``ltsedge`` command line: a thin layer over the Python API.

Every command turns bad input into one line on stderr and exit code 2 (``LtsedgeError``); measuring
commands never lose what they already measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find small Transformer language models that fit a device: decoder-parameter proxy, "
    "latency and memory measured with onnxruntime on the device, Pareto frontier of deployable ONNX models.",
)


def fail(message: str) -> None:
    raise LtsedgeError(message)


# ---------------------------------------------------------------------------------------------
# Candidates: space, params, export
# ---------------------------------------------------------------------------------------------
@app.command()
def space(
    config: Optional[Path] = typer.Option(None, "--config", help="Search-space TOML file (default: the LTS GPT-2 space)."),
    sample: int = typer.Option(0, "--sample", min=0, help="Print N sampled architectures as JSON lines."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for --sample."),
) -> None:
    """Describe the search space and its size, or sample architectures from it."""
    from ltsedge.space import SearchSpace

    s = SearchSpace.load(config) if config else SearchSpace()
    if sample:
        for arch in s.sample(sample, seed=seed):
            typer.echo(arch.to_json())
        return
    for key, value in s.describe().items():
        if key == "size":
            value = f"{value:,} (~10^{s.describe()['size_log10']})"
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


@app.command()
def export(
    arch_file: Path = typer.Argument(..., metavar="ARCH.json", help="Architecture JSON file."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the ONNX model."),
    target_ort: Optional[str] = typer.Option(
        None, "--target-ort", help="onnxruntime version the model must load in (default: the local one)."
    ),
) -> None:
    """Export an architecture with random weights to ONNX (input_ids -> logits)."""
    from ltsedge.exporters import export_model

    arch = Architecture.load(arch_file)
    model = export_model(arch, target_ort=target_ort)
    sha = _save(model, output)
    t = model.target
    typer.echo(f"wrote {output} ({model.nbytes / 1e6:.1f} MB, opset {t.opset}, IR {t.ir_version}, sha256 {sha[:16]}…)")


def _save(model, path: Path) -> str:
    try:
        return model.save(path)
    except OSError as e:
        raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None


# ---------------------------------------------------------------------------------------------
def main() -> None:
    try:
        app()
    except LtsedgeError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
