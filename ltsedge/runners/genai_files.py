"""What genai needs to time a model in its loop beside a bundle's files: a config for a bare candidate, and the
cache an app holds at the profile's context. Reads ltsedge's metadata (``ltsedge.exporters``), so it sits apart
from ``loop.py``, which the store keys import."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.runners.genai_loop import CONFIG_FILE
from ltsedge.runners.model_payload import data_locations, inside_model_dir
from ltsedge.runners.loop import bundle_config


def genai_dir(path: Path, scratch: Path) -> Path | None:
    """A directory genai loads ``path`` from: its own bundle's, or, for an ltsedge generation model alone (a
    search's candidate), one made in ``scratch`` with the genai_config.json its bundle would hold beside a
    link to it. None: genai cannot run it (a forward model, a foreign file without a config)."""
    if bundle_config(path) is not None:
        return path.parent
    from ltsedge.exporters import architecture_in, read_metadata

    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not a model onnx reads: the worker's session says why it does not load
        return None
    meta = read_metadata(graph)
    if meta.get("variant") != "generate" or "io_spec" not in meta:
        return None
    from ltsedge.backbones import get_backbone
    from ltsedge.exporters.genai import genai_config, shares_buffer
    from ltsedge.iospec import ExportSpec

    arch = architecture_in(meta, path)
    if arch is None or not get_backbone(arch.backbone).genai_compatible:
        return None
    folder = scratch / f"genai-{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / path.name
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(path, link)
    for location in data_locations(graph):  # its weights, linked where the graph names them (a fleet's agent
        data, target = path.parent / location, folder / location  # writes the model under a name of its own)
        if not inside_model_dir(location):
            continue  # outside the model's directory: onnxruntime refuses the model, and says so
        if data.exists() and not os.path.lexists(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(data.resolve(), target)
    document = genai_config(arch, ExportSpec.from_json(meta["io_spec"]), path.name, share_buffer=shares_buffer(arch, graph))
    (folder / CONFIG_FILE).write_text(json.dumps(document, indent=2))
    return folder


def kv_cache_mb(path: Path, profile) -> float | None:
    """The cache an app holds at the profile's context, from the past inputs an ltsedge model declares."""
    from ltsedge.exporters import read_metadata
    from ltsedge.iospec import ExportSpec, axis_sizes, shape_of
    from ltsedge.workloads import batch_axes

    try:
        text = read_metadata(path).get("io_spec")
    except LtsedgeError:
        return None
    if not text:
        return _genai_config_kv_mb(path, profile)
    spec = ExportSpec.from_json(text)
    sizes = axis_sizes(spec, {**batch_axes(profile.batch), "sequence": 1, "past_sequence": profile.context})
    import numpy as np

    total = sum(int(np.prod(shape_of(t, sizes))) * np.dtype(t.dtype).itemsize for t in spec.input("past"))
    return total / 2**20


def _genai_config_kv_mb(path: Path, profile) -> float | None:
    """A foreign bundle's cache (onnxruntime-genai's builder's): the heads its genai_config.json gives every layer,
    in fp32 as genai keeps it on a CPU (None where the config does not say)."""
    config = bundle_config(path)
    if config is None:
        return None
    try:
        decoder = json.loads(config.read_text())["model"]["decoder"]
        per_token = 2 * decoder["num_hidden_layers"] * decoder["num_key_value_heads"] * decoder["head_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    width = 2 if profile.execution_provider == "CUDAExecutionProvider" else 4  # genai's fp16 cache on a GPU
    return per_token * profile.batch * profile.context * width / 2**20
