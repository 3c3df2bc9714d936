"""The candidate commands: ``space`` (describe or sample a search space), ``params`` (decoder, embedding
and total parameters) and ``export`` (an architecture as ONNX or a generation bundle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ltsedge.architecture import Architecture
from ltsedge.cli.options import (
    ACCURACY_LEVEL_HELP,
    BLOCK_SIZE_HELP,
    PER_CHANNEL_HELP,
    PRECISION_HELP,
    SYMMETRIC_HELP,
    quantization_options,
)


def space(
    config: Optional[Path] = typer.Option(None, "--config", help="Search-space TOML file (default: the preset's "
                                          "space, else the backbone's default space, else the LTS GPT-2 space)."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="The backbone's default space (as search "
                                           "--backbone; default: the file's or the preset's, else gpt2)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="The space a search with this preset searches."),
    sample: int = typer.Option(0, "--sample", min=0, help="Print N sampled architectures as JSON lines."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Seed for --sample."),
) -> None:
    """Describe the search space and its size, or sample architectures from it."""
    from ltsedge.search.presets import get_preset
    from ltsedge.space import SearchSpace

    chosen = get_preset(preset) if preset else None
    backbone = chosen.backbone_for(backbone) if chosen else backbone
    if config:  # as search reads --space: it replaces the preset's space
        s = SearchSpace.load(config, backbone=backbone)
    else:
        s = chosen.space(backbone) if chosen else SearchSpace.default(backbone or "gpt2")
    if sample:
        for arch in s.sample(sample, seed=seed):
            typer.echo(arch.to_json())
        return
    description = s.describe()
    width = max(map(len, description))
    for key, value in description.items():
        if key == "size":  # exact while readable; a space of 10^4000 architectures gets its magnitude
            log10 = description["size_log10"]
            value = f"{value:,} (~10^{log10})" if value is not None else f"~10^{log10}"
        elif key == "size_log10":
            continue
        typer.echo(f"{key:>{width}}: {value}")


FROM_HELP = ("A Hugging Face model folder instead of ARCH.json: config.json (LlamaForCausalLM), model.safetensors "
             "(or sharded) and its tokenizer, as huggingface-cli download leaves it.")


def architecture_or_folder(arch_file: Path | None, from_dir: Path | None):
    """(the architecture, the Hugging Face folder it was read from or None): ARCH.json or --from DIR, one of them."""
    from ltsedge.errors import LtsedgeError

    if (arch_file is None) == (from_dir is None):
        raise LtsedgeError("give an architecture: ARCH.json or --from DIR (a Hugging Face model folder), one of them")
    if from_dir is None:
        return Architecture.load(arch_file), None
    from ltsedge.hf_folder import read_folder

    folder = read_folder(from_dir)
    return folder.arch, folder


def params(
    arch_file: Optional[Path] = typer.Argument(None, metavar="ARCH.json", help="Architecture JSON file."),
    from_dir: Optional[Path] = typer.Option(None, "--from", help=FROM_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Decoder (the proxy), embedding and total parameters of an architecture."""
    from ltsedge.proxy import count_params

    arch, _ = architecture_or_folder(arch_file, from_dir)
    counts = count_params(arch).to_dict()
    if as_json:
        typer.echo(json.dumps(counts))
        return
    typer.echo(f"architecture      {arch.id}")
    for key, value in counts.items():
        typer.echo(f"{key:<18}{value:>15,}")


def export(
    arch_file: Optional[Path] = typer.Argument(None, metavar="ARCH.json", help="Architecture JSON file."),
    from_dir: Optional[Path] = typer.Option(None, "--from", help=FROM_HELP + " Its weights and tokenizer go into "
                                            "the bundle (--weights and --tokenizer replace them)."),
    output: Path = typer.Option(..., "-o", "--output",
                                help="The ONNX file (forward), or the bundle directory (generate)."),
    variant: str = typer.Option("forward", "--variant", help="forward: input_ids -> logits over a whole sequence; "
                                "generate: a deployable bundle with a KV cache (onnxruntime-genai, Optimum naming)."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Trained weights, .pt or .safetensors: a "
                                           "state_dict of ltsedge's reference model, or of transformers' "
                                           "LlamaForCausalLM (its model.safetensors). Default: random weights."),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", help="A tokenizer.json, or the folder holding one, to put in the bundle: its "
        "tokenizer_config.json and special_tokens_map.json go with it (made from tokenizer.json when absent), and "
        "its chat template; the bundle's configs take its bos/eos/pad ids (from generation_config.json or "
        "config.json beside it first)."),
    external_data: Optional[bool] = typer.Option(None, "--external-data/--inline-data",
                                                 help="Weights in <model>_data beside the model (default: a "
                                                 "bundle's are, a forward model's only over 2 GB)."),
    target_ort: Optional[str] = typer.Option(
        None, "--target-ort", help="onnxruntime version the model must load in (default: 1.20, the oldest supported)."
    ),
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
    per_channel: Optional[bool] = typer.Option(None, "--per-channel/--per-tensor", help=PER_CHANNEL_HELP),
    block_size: Optional[int] = typer.Option(None, "--block-size", help=BLOCK_SIZE_HELP),
    symmetric: Optional[bool] = typer.Option(None, "--symmetric/--asymmetric", help=SYMMETRIC_HELP),
    accuracy_level: Optional[int] = typer.Option(None, "--accuracy-level", help=ACCURACY_LEVEL_HELP),
    cache_layout: Optional[str] = typer.Option(
        None, "--cache-layout", help="Generate variant: uniform (every layer's cache in one head count, which "
        "Optimum feeds; GPT-2/OPT's default) or per-layer (each layer's own heads; Llama's default, the least "
        "memory). onnxruntime-genai and transformers.js load both."),
    graph_form: Optional[str] = typer.Option(
        None, "--graph-form", help="Llama, GPT-2 and OPT: plain (standard ONNX operators, every --target-ort) or "
        "contrib (onnxruntime's fused GroupQueryAttention, and Llama's RMSNorm; --target-ort 1.22 or newer). "
        "Default: the backbone's default where the target runs it, else plain."),
) -> None:
    """Export an architecture to ONNX: one model file, or a generation bundle (--variant generate)."""
    from ltsedge.exporters.bundle import export_to_path
    from ltsedge.exporters.options import ExportOptions

    arch, folder = architecture_or_folder(arch_file, from_dir)
    if folder is not None:  # the folder's weights and tokenizer, unless given (a fine-tuned state dict, say)
        weights = weights or folder.weights
        tokenizer = tokenizer or folder.tokenizer
    quantization = quantization_options(precision, per_channel=per_channel, block_size=block_size,
                                        symmetric=symmetric, accuracy_level=accuracy_level)
    options = ExportOptions(variant=variant, target_ort=target_ort, precision=precision, quantization=quantization,
                            cache_layout=cache_layout, external_data=external_data, graph_form=graph_form)
    model, files = export_to_path(arch, output, options, weights=weights, tokenizer=tokenizer)
    t = model.target
    kind = "trained" if weights else "random"
    typer.echo(f"wrote {output} ({model.nbytes / 1e6:.1f} MB, {variant}, {kind} weights, {model.precision}, "
               f"opset {t.opset}, IR {t.ir_version})")
    made = set(getattr(files, "generated", ()))
    for path, sha in files.items():
        note = "  (made from tokenizer.json: none was beside it)" if path in made else ""
        typer.echo(f"  {path}  sha256 {sha[:16]}…{note}")
    from ltsedge.exporters.optimum import optimum_note

    unloadable = optimum_note(model)
    if unloadable:
        typer.echo(f"note: {unloadable}")
