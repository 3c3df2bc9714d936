"""A deployable bundle of the generate variant: what onnxruntime-genai and Hugging Face tooling load.

    DIR/model.onnx            the generate variant (KV cache), weights inline ...
    DIR/model.onnx.data       ... or here, when over protobuf's 2 GB (or asked for)
    DIR/genai_config.json     onnxruntime-genai: og.Model(DIR) / og.Generator load it as is (KV-cache
                              backbones; Transformer-XL's recurrence memory is fed by the app's own loop)
    DIR/config.json           Hugging Face style, with ltsedge's per-layer fields a standard config cannot say
    DIR/generation_config.json
    DIR/tokenizer.json ...    only when the user gives one (--tokenizer): never fetched

Every file is written through ``open_file`` (the search's output directory records them) and its
sha256 returned, from the very bytes written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.genai import genai_config, hf_config, hf_generation_config
from ltsedge.exporters.quantize import check_precision, precision_fields
from ltsedge.files import sha256_of

MODEL_FILE = "model.onnx"


def write_bundle(exported, directory: str | Path, *, tokenizer: str | Path | None = None,
                 external_data: bool | None = None, claim: Callable[[Path], Path] | None = None
                 ) -> dict[str, str]:
    """Write the bundle into ``directory``; returns file name -> sha256.

    ``claim(path)`` is called with each path before it is written (the search records its files)."""
    if exported.spec.variant != "generate":
        raise LtsedgeError("a bundle holds the generate variant: export with variant='generate'")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise LtsedgeError(f"cannot write the bundle to {directory}: it is a file, not a directory")
    claim = claim or (lambda path: path)
    tokenizer_files, tokenizer_data = _tokenizer_files(tokenizer)
    external = exported.needs_external_data() if external_data is None else external_data
    claim(directory / MODEL_FILE)
    if external:
        claim(directory / f"{MODEL_FILE}.data")
    written = exported.save_files(directory / MODEL_FILE, external_data=external)
    arch = exported.arch
    documents = {"config.json": hf_config(arch, tokenizer_data),
                 "generation_config.json": hf_generation_config(arch, tokenizer_data)}
    documents["config.json"]["ltsedge"].update(precision_fields(exported))  # genai_config: none needed on CPU
    if get_backbone(arch.backbone).genai_compatible:  # a recurrence memory is no KV cache genai could feed
        documents = {"genai_config.json": genai_config(arch, exported.spec, MODEL_FILE, tokenizer_data), **documents}
    for name, document in documents.items():
        written[name] = _write_json(claim(directory / name), document)
    for source in tokenizer_files:
        target = claim(directory / source.name)
        try:
            shutil.copyfile(source, target)
        except OSError as e:
            raise LtsedgeError(f"cannot copy {source} to {target}: {e.strerror or e}") from None
        written[source.name] = sha256_of(target)
    return written


def _tokenizer_files(tokenizer: str | Path | None) -> tuple[list[Path], dict | None]:
    """tokenizer.json, and the tokenizer_config.json / special_tokens_map.json beside it when present;
    and the tokenizer's content (its special tokens name the bos/eos/pad ids)."""
    if tokenizer is None:
        return [], None
    path = Path(tokenizer)
    if not path.is_file():
        raise LtsedgeError(f"tokenizer file not found: {path}")
    if path.name != "tokenizer.json":
        raise LtsedgeError(f"tokenizer file {path}: name it tokenizer.json (the name runtimes look for)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LtsedgeError(f"tokenizer file {path} is not a tokenizer.json (Hugging Face tokenizers): {e}") from None
    if not isinstance(data, dict) or "model" not in data:
        raise LtsedgeError(f"tokenizer file {path} is not a tokenizer.json (Hugging Face tokenizers): no 'model'")
    companions = [path.with_name(n) for n in ("tokenizer_config.json", "special_tokens_map.json")]
    return [path] + [p for p in companions if p.is_file()], data


def _write_json(path: Path, document: dict) -> str:
    data = (json.dumps(document, indent=2) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as e:
        raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None
    return hashlib.sha256(data).hexdigest()


def export_to_path(arch, output: str | Path, *, variant: str = "forward", weights: str | Path | None = None,
                   tokenizer: str | Path | None = None, target_ort: str | None = None,
                   external_data: bool | None = None, precision: str = "fp32"):
    """What ``ltsedge export`` does: the forward variant as one file (``output``), the generate variant
    as a bundle directory (``output/``); random weights, or the trained ones of a weights file; at
    ``precision`` (fp32, or quantized by onnxruntime's tools). Returns (the ExportedModel, file path -> sha256)."""
    from ltsedge.exporters import export_model
    from ltsedge.exporters.weights import load_state_dict
    from ltsedge.ortcompat import target_for

    check_precision(precision, target_for(target_ort).runtime)  # before any file is read or written
    output = Path(output)
    if tokenizer is not None and variant != "generate":
        raise LtsedgeError("--tokenizer belongs in a bundle: export with --variant generate")
    state = load_state_dict(weights) if weights is not None else None
    exported = export_model(arch, target_ort=target_ort, variant=variant, weights=state,
                            weights_source=f"weights file {weights}", precision=precision)
    if variant == "generate":
        files = write_bundle(exported, output, tokenizer=tokenizer, external_data=external_data)
        return exported, {str(output / name): sha for name, sha in files.items()}
    files = exported.save_files(output, external_data=external_data)
    return exported, {str(output.with_name(name)): sha for name, sha in files.items()}
