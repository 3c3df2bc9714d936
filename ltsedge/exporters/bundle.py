"""A deployable bundle of the generate variant: what onnxruntime-genai and Hugging Face tooling load.

    DIR/model.onnx            the generate variant (KV cache), weights inline ...
    DIR/model.onnx.data       ... or here, when over protobuf's 2 GB (or asked for)
    DIR/genai_config.json     onnxruntime-genai: og.Model(DIR) / og.Generator load it as is (KV-cache
                              backbones; Transformer-XL's recurrence memory is fed by the app's own loop)
    DIR/config.json           Hugging Face style, with ltsedge's per-layer fields a standard config cannot say
    DIR/generation_config.json
    DIR/tokenizer.json ...    only when the user gives one (--tokenizer): never fetched

Every file is written through ``claim`` (the search's output directory records them; a bundle of
``ltsedge export`` records them in its own manifest) and its sha256 returned, from the very bytes
written. Only regular files or new paths are written, never through a link.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.genai import genai_config, hf_config, hf_generation_config
from ltsedge.exporters.quantize import check_precision, precision_fields
from ltsedge.files import check_writable, read_capped, write_file

MODEL_FILE = "model.onnx"


def write_bundle(exported, directory: str | Path, *, tokenizer: str | Path | None = None,
                 external_data: bool | None = None, claim: Callable[[Path], Path] | None = None
                 ) -> dict[str, str]:
    """Write the bundle into ``directory``; returns file name -> sha256.

    ``claim(path)`` is called with each path before it is written (the search records its files).
    Without it the bundle directory keeps its own manifest (``.ltsedge-manifest.json``, as a search's
    output directory does): a file there that ltsedge did not write is never overwritten. Everything is
    checked (the tokenizer read and validated) before the first byte is written; no link is written
    through, no device or FIFO replaced."""
    if exported.spec.variant != "generate":
        raise LtsedgeError("a bundle holds the generate variant: export with variant='generate'")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise LtsedgeError(f"cannot write the bundle to {directory}: it is a file, not a directory")
    tokenizer_files, tokenizer_data = _tokenizer_files(tokenizer, directory)
    external = exported.needs_external_data() if external_data is None else external_data
    arch = exported.arch
    documents = {"config.json": hf_config(arch, tokenizer_data),
                 "generation_config.json": hf_generation_config(arch, tokenizer_data)}
    documents["config.json"]["ltsedge"].update(precision_fields(exported))  # genai_config: none needed on CPU
    if get_backbone(arch.backbone).genai_compatible:  # a recurrence memory is no KV cache genai could feed
        documents = {"genai_config.json": genai_config(arch, exported.spec, MODEL_FILE, tokenizer_data), **documents}
    model_files = [MODEL_FILE, f"{MODEL_FILE}.data"] if external else [MODEL_FILE]
    names = [*model_files, *documents, *tokenizer_files]
    outdir = None
    if claim is None:
        from ltsedge.search.outdir import OutputDir

        outdir = OutputDir(directory, outputs=tuple(names), owned_dirs=(), tool="ltsedge export", option="-o",
                           lock=False).open()
        claim = lambda path: outdir.path(path.relative_to(directory).as_posix())  # noqa: E731
    for name in model_files:  # written by the exporter: checked here, before anything is
        path = claim(directory / name)
        check_writable(path)
        check_writable(path.with_name(path.name + ".partial"))
    written = exported.save_files(directory / MODEL_FILE, external_data=external)
    for name, document in documents.items():
        written[name] = write_file(claim(directory / name), (json.dumps(document, indent=2) + "\n").encode())
    for name, data in tokenizer_files.items():
        written[name] = write_file(claim(directory / name), data)
    if outdir is not None and not external and outdir.owns(f"{MODEL_FILE}.data"):  # an earlier export's
        outdir.remove(f"{MODEL_FILE}.data")
    return written


TOKENIZER_LIMIT = 256 * 2**20  # the largest tokenizer.json files published are a few tens of MB
COMPANION_LIMIT = 16 * 2**20
COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")


def _tokenizer_files(tokenizer: str | Path | None, directory: Path) -> tuple[dict[str, bytes], dict | None]:
    """The tokenizer's files as written into the bundle (name -> bytes), and its content (its special
    tokens name the bos/eos/pad ids). tokenizer.json is copied as it is, once validated; the
    tokenizer_config.json / special_tokens_map.json beside it, when present, are read as JSON objects
    and written afresh. A companion that is a link must stay in the tokenizer's folder (the one named,
    or the one tokenizer.json's own link leads to, as in a Hugging Face cache); each file is capped."""
    if tokenizer is None:
        return {}, None
    path = Path(tokenizer)
    if not path.is_file():
        raise LtsedgeError(f"tokenizer file not found: {path}" if not path.exists() else
                           f"tokenizer file {path} is not a regular file")
    if path.name != "tokenizer.json":
        raise LtsedgeError(f"tokenizer file {path}: name it tokenizer.json (the name runtimes look for)")
    raw = read_capped(path, "tokenizer file", TOKENIZER_LIMIT)
    data = _parse_json(raw, path, "tokenizer file", "is not a tokenizer.json (Hugging Face tokenizers)")
    if not isinstance(data, dict) or "model" not in data:
        raise LtsedgeError(f"tokenizer file {path} is not a tokenizer.json (Hugging Face tokenizers): no 'model'")
    _check_added_tokens(data, path)
    files = {"tokenizer.json": raw}
    sources = [path]
    folders = {path.parent.resolve(), path.resolve().parent}
    for name in COMPANIONS:
        companion = path.with_name(name)
        if not os.path.lexists(companion):
            continue
        real = companion.resolve()
        if not any(real.parent == f or f in real.parents for f in folders):
            raise LtsedgeError(f"tokenizer companion {companion} is a link to {real}, outside the tokenizer's folder: "
                               f"refusing to copy it into the bundle")
        document = _parse_json(read_capped(companion, "tokenizer companion", COMPANION_LIMIT), companion,
                               "tokenizer companion", "is not JSON")
        if not isinstance(document, dict):
            raise LtsedgeError(f"tokenizer companion {companion} is not a JSON object")
        files[name] = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()
        sources.append(companion)
    for source in sources:  # `--tokenizer DIR/tokenizer.json -o DIR`: it would be overwritten by itself
        if (directory / source.name).resolve() == source.resolve():
            raise LtsedgeError(f"the tokenizer {source} is already in {directory}: export the bundle to another "
                               f"directory (-o)")
    return files, data


def _parse_json(raw: bytes, path: Path, what: str, meaning: str):
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LtsedgeError(f"{what} {path} {meaning}: {e}") from None
    except RecursionError:
        raise LtsedgeError(f"{what} {path} {meaning}: nested too deeply") from None


def _check_added_tokens(data: dict, path: Path) -> None:
    """The special tokens are read for the bos/eos/pad ids: a list of objects with an integer id."""
    tokens = data.get("added_tokens", [])
    if not isinstance(tokens, list):
        raise LtsedgeError(f"tokenizer file {path}: 'added_tokens' must be a list of tokens, not "
                           f"{type(tokens).__name__ if tokens is not None else 'null'}")
    for i, token in enumerate(tokens):
        if not isinstance(token, dict):
            raise LtsedgeError(f"tokenizer file {path}: added_tokens[{i}] must be an object with 'id' and 'content'")
        tid = token.get("id")
        if not isinstance(tid, int) or isinstance(tid, bool) or tid < 0:
            raise LtsedgeError(f"tokenizer file {path}: added_tokens[{i}].id must be a non-negative integer, "
                               f"not {json.dumps(tid)}")


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
    if variant != "generate" and output.name and not output.is_dir():  # before the export's seconds
        check_writable(output)
    state = load_state_dict(weights) if weights is not None else None
    exported = export_model(arch, target_ort=target_ort, variant=variant, weights=state,
                            weights_source=f"weights file {weights}", precision=precision)
    if variant == "generate":
        files = write_bundle(exported, output, tokenizer=tokenizer, external_data=external_data)
        return exported, {str(output / name): sha for name, sha in files.items()}
    if output.name and not output.is_dir():  # (a directory: save_files says to give a file name)
        external = exported.needs_external_data() if external_data is None else external_data
        for path in [output, output.with_name(output.name + ".data")] if external else [output]:
            check_writable(path)  # a device, FIFO or link is never replaced or written through
            check_writable(path.with_name(path.name + ".partial"))
    files = exported.save_files(output, external_data=external_data)
    return exported, {str(output.with_name(name)): sha for name, sha in files.items()}
