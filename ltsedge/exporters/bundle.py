"""A deployable bundle of the generate variant: what onnxruntime-genai and Hugging Face tooling load.

    DIR/model.onnx            the generate variant (KV cache) ...
    DIR/model.onnx_data       ... and its weights (inline in model.onnx only when asked for: an app's runtime
                              holds a model read with inline weights larger, ``options.default_external``)
    DIR/genai_config.json     onnxruntime-genai: og.Model(DIR) / og.Generator load it as is (KV-cache
                              backbones; Transformer-XL's recurrence memory is fed by the app's own loop)
    DIR/config.json           Hugging Face style, with ltsedge's per-layer fields a standard config cannot say
    DIR/generation_config.json
    DIR/tokenizer.json ...    only when the user gives one (--tokenizer FILE or a folder holding it): never
                              fetched; with tokenizer_config.json and special_tokens_map.json, copied from
                              beside it or made from it (genai's og.Tokenizer needs the first), and its chat
                              template (chat_template.jinja); the configs name its bos/eos/pad ids
                              (``exporters.tokenizer``)

Every file is written through ``claim`` (the search's output directory records them; a bundle of
``ltsedge export`` records them in its own manifest) and its sha256 returned, from the very bytes
written. Only regular files or new paths are written, never through a link.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.genai import genai_config, hf_config, hf_generation_config, shares_buffer
from ltsedge.exporters.options import ExportOptions
from ltsedge.exporters.quantize import precision_fields
from ltsedge.exporters.tokenizer import TOKENIZER_FILE, read_tokenizer
from ltsedge.precision import check_precision
from ltsedge.files import EARLIER_DATA_SUFFIX, check_writable, data_file_name, write_file

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
    read = read_tokenizer(tokenizer, directory, arch)
    tokenizer_files, tokens = read.files, read.token_ids(arch)
    external = exported.external(external_data)
    documents = {"config.json": hf_config(arch, tokens, cache_layout=exported.cache_layout),
                 "generation_config.json": hf_generation_config(arch, tokens)}
    documents["config.json"]["ltsedge"].update(precision_fields(exported))  # genai_config: none needed on CPU
    if external:  # transformers.js fetches a data file only where config.json says the model has one
        documents["config.json"]["transformers.js_config"] = {"use_external_data_format": {MODEL_FILE: 1}}
    if get_backbone(arch.backbone).genai_compatible:  # a recurrence memory is no KV cache genai could feed
        documents = {"genai_config.json": genai_config(arch, exported.spec, MODEL_FILE, tokens,
                                                       share_buffer=shares_buffer(arch, exported.proto)), **documents}
    data_file = data_file_name(MODEL_FILE)
    model_files = [MODEL_FILE, data_file] if external else [MODEL_FILE]
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
    if outdir is not None:  # an earlier export's data file, where this one has none or another name
        for stale in [MODEL_FILE + EARLIER_DATA_SUFFIX, *([] if external else [data_file])]:
            if outdir.owns(stale):
                outdir.remove(stale)
    if read.generated:
        written.generated = read.generated
        log.info("%s: made from %s's special tokens (none was beside it)", ", ".join(read.generated), TOKENIZER_FILE)
    return written


log = logging.getLogger(__name__)


class BundleFiles(dict):
    """file -> sha256 of what was written; ``generated``: the tokenizer companions ltsedge made from
    tokenizer.json because none was beside it (their keys, as in the dict)."""

    generated: tuple[str, ...] = ()


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
        read_tokenizer(tokenizer, output, arch)
    state = load_state_dict(weights) if weights is not None else None
    exported = export_model(arch, options, weights=state, weights_source=f"weights file {weights}")
    if variant == "generate":
        files = write_bundle(exported, output, tokenizer=tokenizer)
        paths = BundleFiles({str(output / name): sha for name, sha in files.items()})
        paths.generated = tuple(str(output / name) for name in files.generated)
        return exported, paths
    if output.name and not output.is_dir():  # (a directory: save_files says to give a file name)
        for path in [output, output.with_name(data_file_name(output.name))] if exported.external() else [output]:
            check_writable(path)  # a device, FIFO or link is never replaced or written through
            check_writable(path.with_name(path.name + ".partial"))
    files = exported.save_files(output)
    return exported, {str(output.with_name(name)): sha for name, sha in files.items()}
