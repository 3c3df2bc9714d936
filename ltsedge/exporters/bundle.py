"""A deployable bundle of the generate variant: what onnxruntime-genai and Hugging Face tooling load.

    DIR/model.onnx            the generate variant (KV cache), weights inline ...
    DIR/model.onnx.data       ... or here, when over protobuf's 2 GB (or asked for)
    DIR/genai_config.json     onnxruntime-genai: og.Model(DIR) / og.Generator load it as is (KV-cache
                              backbones; Transformer-XL's recurrence memory is fed by the app's own loop)
    DIR/config.json           Hugging Face style, with ltsedge's per-layer fields a standard config cannot say
    DIR/generation_config.json
    DIR/tokenizer.json ...    only when the user gives one (--tokenizer FILE or a folder holding it): never
                              fetched; with tokenizer_config.json and special_tokens_map.json, copied from
                              beside it or made from it (genai's og.Tokenizer needs the first)

Every file is written through ``claim`` (the search's output directory records them; a bundle of
``ltsedge export`` records them in its own manifest) and its sha256 returned, from the very bytes
written. Only regular files or new paths are written, never through a link.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.genai import genai_config, hf_config, hf_generation_config, shares_buffer, special_token_ids
from ltsedge.exporters.options import ExportOptions
from ltsedge.exporters.quantize import precision_fields
from ltsedge.precision import check_precision
from ltsedge.files import check_writable, read_capped, write_file

MODEL_FILE = "model.onnx"


def write_bundle(exported, directory: str | Path, *, tokenizer: str | Path | None = None,
                 external_data: bool | None = None, claim: Callable[[Path], Path] | None = None
                 ) -> BundleFiles:
    """Write the bundle into ``directory``; returns file name -> sha256 (``generated``: the tokenizer
    companions made from tokenizer.json, none being beside it).

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
    arch = exported.arch
    read = _tokenizer_files(tokenizer, directory, arch)
    tokenizer_files, tokenizer_data = read.files, read.data
    external = exported.external(external_data)
    documents = {"config.json": hf_config(arch, tokenizer_data, cache_layout=exported.cache_layout),
                 "generation_config.json": hf_generation_config(arch, tokenizer_data)}
    documents["config.json"]["ltsedge"].update(precision_fields(exported))  # genai_config: none needed on CPU
    if get_backbone(arch.backbone).genai_compatible:  # a recurrence memory is no KV cache genai could feed
        documents = {"genai_config.json": genai_config(arch, exported.spec, MODEL_FILE, tokenizer_data,
                                                       share_buffer=shares_buffer(arch, exported.proto)), **documents}
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
    written = BundleFiles(exported.save_files(directory / MODEL_FILE, external_data=external))
    for name, document in documents.items():
        written[name] = write_file(claim(directory / name), (json.dumps(document, indent=2) + "\n").encode())
    for name, data in tokenizer_files.items():
        written[name] = write_file(claim(directory / name), data)
    if outdir is not None and not external and outdir.owns(f"{MODEL_FILE}.data"):  # an earlier export's
        outdir.remove(f"{MODEL_FILE}.data")
    if read.generated:
        written.generated = read.generated
        log.info("%s: made from %s's special tokens (none was beside it)", ", ".join(read.generated), TOKENIZER_FILE)
    return written


TOKENIZER_LIMIT = 256 * 2**20  # the largest tokenizer.json files published are a few tens of MB
COMPANION_LIMIT = 16 * 2**20
COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")
TOKENIZER_FILE = "tokenizer.json"
log = logging.getLogger(__name__)


class BundleFiles(dict):
    """file -> sha256 of what was written; ``generated``: the tokenizer companions ltsedge made from
    tokenizer.json because none was beside it (their keys, as in the dict)."""

    generated: tuple[str, ...] = ()


@dataclass(frozen=True)
class TokenizerFiles:
    files: dict[str, bytes]  # name -> the bytes written into the bundle
    data: dict | None  # tokenizer.json's content: its special tokens name the bos/eos/pad ids
    generated: tuple[str, ...] = ()  # companions made from tokenizer.json: none was beside it


def _tokenizer_files(tokenizer: str | Path | None, directory: Path, arch) -> TokenizerFiles:
    """The tokenizer's files as written into the bundle. ``tokenizer`` is a tokenizer.json or a folder
    holding one (a Hugging Face model folder). tokenizer.json is copied as it is, once validated and
    checked to fit ``arch``'s vocabulary; the tokenizer_config.json / special_tokens_map.json beside it,
    when present, are read as JSON objects and written afresh, and made from tokenizer.json when absent
    (onnxruntime-genai's tokenizer does not load without tokenizer_config.json). A companion that is a
    link must stay in the tokenizer's folder (the one named, or the one tokenizer.json's own link leads
    to, as in a Hugging Face cache); each file is capped."""
    if tokenizer is None:
        return TokenizerFiles({}, None)
    path = _tokenizer_path(Path(tokenizer))
    raw = read_capped(path, "tokenizer file", TOKENIZER_LIMIT)
    data = _parse_json(raw, path, "tokenizer file", "is not a tokenizer.json (Hugging Face tokenizers)")
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise LtsedgeError(f"tokenizer file {path} is not a tokenizer.json (Hugging Face tokenizers): no 'model'")
    _check_added_tokens(data, path)
    _check_fits(data, path, arch.vocab_size)
    files = {TOKENIZER_FILE: raw}
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
        files[name] = _json_bytes(document)
        sources.append(companion)
    for source in sources:  # `--tokenizer DIR/tokenizer.json -o DIR`: it would be overwritten by itself
        if (directory / source.name).resolve() == source.resolve():
            raise LtsedgeError(f"the tokenizer {source} is already in {directory}: export the bundle to another "
                               f"directory (-o)")
    generated = tuple(name for name in COMPANIONS if name not in files)
    made = _companions(data, arch)
    files.update({name: _json_bytes(made[name]) for name in generated})
    return TokenizerFiles(files, data, generated)


def _tokenizer_path(path: Path) -> Path:
    """The tokenizer.json named, or the one in the folder named."""
    if path.is_dir():
        if not os.path.lexists(path / TOKENIZER_FILE):
            raise LtsedgeError(f"tokenizer folder {path} has no {TOKENIZER_FILE}: give a tokenizer.json or the "
                               f"folder holding one")
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise LtsedgeError(f"tokenizer file not found: {path}" if not path.exists() else
                           f"tokenizer file {path} is not a regular file")
    if path.name != TOKENIZER_FILE:
        raise LtsedgeError(f"tokenizer file {path}: name it {TOKENIZER_FILE} (the name runtimes look for)")
    return path


def _check_fits(data: dict, path: Path, vocab_size: int) -> None:
    """Every token id the tokenizer can produce must have a row in the model's embedding and logits."""
    vocab = data["model"].get("vocab") or {}
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        ids = list(vocab.values())
        if not all(type(i) is int and i >= 0 for i in ids):  # not a bool
            raise LtsedgeError(f"tokenizer file {path}: model.vocab must map tokens to non-negative integer ids")
    elif isinstance(vocab, list):  # Unigram: [token, score] pairs, the id is the position
        ids = [len(vocab) - 1] if vocab else []
    else:
        raise LtsedgeError(f"tokenizer file {path}: model.vocab must be an object or a list, not "
                           f"{type(vocab).__name__}")
    ids += [token["id"] for token in data.get("added_tokens", [])]  # checked: non-negative integers
    largest = max(ids, default=-1)
    if largest >= vocab_size:
        raise LtsedgeError(f"tokenizer file {path} does not fit the model: its token ids go up to {largest}, the "
                           f"architecture's vocab_size is {vocab_size} (ids must be below it)")


def _companions(data: dict, arch) -> dict[str, dict]:
    """tokenizer_config.json and special_tokens_map.json as a Hugging Face folder has them, from
    tokenizer.json: its special tokens (the bos/eos/pad the bundle's configs name, and unk) and the
    model's context as model_max_length."""
    special = {t["id"]: t["content"] for t in data.get("added_tokens", [])
               if t.get("special") and isinstance(t.get("content"), str)}
    ids = special_token_ids(arch, data)
    tokens = {f"{kind}_token": special[ids[f"{kind}_token_id"]] for kind in ("bos", "eos", "pad")
              if ids[f"{kind}_token_id"] in special}
    unk = data["model"].get("unk_token")
    unk = unk if isinstance(unk, str) else next((c for c in special.values() if "unk" in c.lower()), None)
    if unk is not None:
        tokens["unk_token"] = unk
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": arch.n_positions,
              "clean_up_tokenization_spaces": False,  # decode as tokenizers does
              **tokens}
    return {"tokenizer_config.json": config, "special_tokens_map.json": tokens}


def _json_bytes(document: dict) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


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


def export_to_path(arch, output: str | Path, options: ExportOptions | None = None, *,
                   weights: str | Path | None = None, tokenizer: str | Path | None = None):
    """What ``ltsedge export`` does: exported as ``options`` say (``exporters.options.ExportOptions``;
    None: the defaults), the forward variant as one file (``output``), the generate variant as a bundle
    directory (``output/``), its weights inline or in a data file as ``options.external_data`` says;
    random weights, or the trained ones of a weights file. Returns (the ExportedModel, file path ->
    sha256; a bundle's ``generated`` names the tokenizer companions made from tokenizer.json)."""
    from ltsedge.exporters import export_model
    from ltsedge.exporters.trained_weights import load_state_dict

    options = ExportOptions() if options is None else options
    check_precision(options.precision, options.target.runtime)  # before any file is read or written
    variant = options.variant
    output = Path(output)
    if tokenizer is not None and variant != "generate":
        raise LtsedgeError("--tokenizer belongs in a bundle: export with --variant generate")
    if variant != "generate" and output.name and not output.is_dir():  # before the export's seconds
        check_writable(output)
    if tokenizer is not None:  # read again by write_bundle: checked here before the export's seconds
        _tokenizer_files(tokenizer, output, arch)
    state = load_state_dict(weights) if weights is not None else None
    exported = export_model(arch, options, weights=state, weights_source=f"weights file {weights}")
    if variant == "generate":
        files = write_bundle(exported, output, tokenizer=tokenizer)
        paths = BundleFiles({str(output / name): sha for name, sha in files.items()})
        paths.generated = tuple(str(output / name) for name in files.generated)
        return exported, paths
    if output.name and not output.is_dir():  # (a directory: save_files says to give a file name)
        for path in [output, output.with_name(output.name + ".data")] if exported.external() else [output]:
            check_writable(path)  # a device, FIFO or link is never replaced or written through
            check_writable(path.with_name(path.name + ".partial"))
    files = exported.save_files(output)
    return exported, {str(output.with_name(name)): sha for name, sha in files.items()}
