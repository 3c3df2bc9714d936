"""Inputs for one run of any ONNX model, for one workload.

An ltsedge model declares its inputs (``ltsedge.io_spec`` metadata, see ``ltsedge.iospec``): each
symbolic axis is sized from the workload or bound by a ``shapes`` override, and each input's values
follow its declared role. The workloads (what is timed, how each sizes the axes) are declared in
``ltsedge.workloads``: ``forward`` (one full pass over ``sequence`` tokens), ``prefill`` (a prompt of
``sequence`` tokens, empty cache) and ``decode`` (one token after a cache of ``context`` tokens; a
recurrence memory, Transformer-XL's, holds ``min(context, mem_len)`` states: all it ever keeps).
A generate model is timed on prefill and decode, any other model on forward.

A foreign model gets inputs from the inputs its session declares, guessed by name.
Shapes: a fixed dimension is kept. A symbolic one is resolved by its name (lower-cased):
  - contains "batch"                                   -> profile.batch
  - contains "seq", "past", "len", "token" or "time"   -> profile.sequence
  - anything else, or unnamed                          -> 1
and ``shapes={"input_ids": [1, 192]}`` overrides an input's whole shape.

Values: integer inputs are token ids in [0, vocab) when the vocabulary is known (the last dimension
of a ``logits`` output, or the ``ltsedge.architecture`` metadata), otherwise small ints in [0, 2);
by name, ``*attention_mask*`` is all ones, ``position_ids`` counts 0..T-1, ``token_type_ids`` is 0.
Floats are standard normal, bools random. A fixed seed makes every run see the same inputs.

The worker imports this module: numpy only (an onnxruntime session is passed in, never imported).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.iospec import ExportSpec, axis_sizes, shape_of
from ltsedge.validate import is_int
from ltsedge.workloads import WORKLOADS, timed_on

DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint64)": np.uint64, "tensor(uint32)": np.uint32, "tensor(uint16)": np.uint16,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(string)": np.object_,
}
SMALL_INT_HIGH = 2  # ids for a model whose vocabulary is unknown: 0 and 1 index any table
SEQUENCE_WORDS = ("seq", "past", "len", "token", "time")


def workloads_of(session: Any) -> tuple[str, ...]:
    spec = declared_spec(session)
    return timed_on(spec.variant if spec is not None else "forward")


def past_inputs(session: Any) -> list[str]:
    spec = declared_spec(session)
    return [t.name for t in spec.input("past")] if spec is not None else []


def make_inputs(session_or_inputs: Any, profile: Any, shapes: dict[str, list[int]] | None = None, *,
                vocab_size: int | None = None, seed: int = 0, workload: str = "forward") -> dict[str, np.ndarray]:
    """Feeds for ``session.run``: one array per declared input.

    ``session_or_inputs`` is an onnxruntime ``InferenceSession`` (then the vocabulary and, for ltsedge
    models, the longest sequence come from it) or the list ``session.get_inputs()``. ``profile`` is
    anything with ``batch``, ``sequence`` and (for decode) ``context``.
    """
    limit = memory = None
    if hasattr(session_or_inputs, "get_inputs"):
        session = session_or_inputs
        declared = session.get_inputs()
        vocab_size = vocab_size or vocab_size_of(session)
        limit, memory = sequence_limits(session)
    else:
        declared = list(session_or_inputs)
    shapes = dict(shapes or {})
    unknown = sorted(set(shapes) - {i.name for i in declared})
    if unknown:
        known = ", ".join(i.name for i in declared) or "none"
        raise LtsedgeError(f"shape given for {unknown[0]!r}, which is not an input of the model (inputs: {known})")
    rng = np.random.default_rng(seed)
    spec = declared_spec(session_or_inputs)
    if spec is not None:
        axes = WORKLOADS[workload].axes(profile)
        if memory is not None and "past_sequence" in axes:  # a recurrence memory keeps at most mem_len states
            axes["past_sequence"] = min(axes["past_sequence"], memory)
        return _declared_inputs(spec, axes, shapes, vocab_size, limit, rng)
    feeds = {}
    for info in declared:
        shape = resolve_shape(info.name, info.shape, profile, shapes.get(info.name))
        if limit and "ids" in info.name and len(shape) >= 2 and shape[-1] > limit:
            raise LtsedgeError(f"input {info.name!r}: sequence {shape[-1]} is longer than the model's "
                               f"n_positions {limit}; use a profile with sequence <= {limit}")
        feeds[info.name] = _values(info.name, info.type, shape, vocab_size, rng)
    return feeds


def declared_spec(session: Any) -> ExportSpec | None:
    """The I/O spec an ltsedge model declares in its metadata (None for other models)."""
    if not hasattr(session, "get_modelmeta"):
        return None
    text = session.get_modelmeta().custom_metadata_map.get("ltsedge.io_spec")
    return ExportSpec.from_json(text) if text else None


def _declared_inputs(spec: ExportSpec, axes: dict[str, int], shapes: dict[str, list[int]], vocab_size: int | None,
                     limit: int | None, rng: np.random.Generator) -> dict[str, np.ndarray]:
    sizes = axis_sizes(spec, axes, shapes)
    total = sizes.get("total_sequence", 0)
    if limit and total > limit:  # positions past n_positions have no embedding
        ids = spec.input("input_ids")
        where = f"input {ids[0].name!r}: " if ids else ""
        knob = "context" if axes.get("past_sequence") else "sequence"
        raise LtsedgeError(f"{where}sequence {total} is longer than the model's n_positions {limit}; "
                           f"use a profile with {knob} <= {limit - (1 if knob == 'context' else 0)}")
    feeds = {}
    for t in spec.inputs:
        shape = shape_of(t, sizes)
        if t.role == "input_ids":
            values = rng.integers(0, vocab_size or SMALL_INT_HIGH, shape)
        elif t.role == "attention_mask":
            values = np.ones(shape)
        elif t.role == "position_ids":  # the new tokens follow the cached ones
            past = sizes.get("past_sequence", 0)
            values = np.broadcast_to(np.arange(past, past + shape[-1]), shape)
        else:  # "past": a cache or memory of activations
            values = rng.standard_normal(shape)
        feeds[t.name] = np.array(values, dtype=t.dtype)
    return feeds


def resolve_shape(name: str, declared: list | None, profile: Any, override: list[int] | None = None) -> list[int]:
    declared = list(declared or [])
    if override is not None:
        override = list(override)
        if not all(is_int(d) and d >= 1 for d in override):
            raise LtsedgeError(f"input {name!r}: shape {override} must be a list of positive integers")
        if declared and len(override) != len(declared):
            raise LtsedgeError(f"input {name!r}: shape {override} has {len(override)} dimensions, "
                               f"the model declares {len(declared)} ({_show(declared)})")
        for given, want in zip(override, declared):
            if isinstance(want, int) and want > 0 and given != want:
                raise LtsedgeError(f"input {name!r}: shape {override} does not match the model's {_show(declared)}")
        return override
    shape = []
    for dim in declared:
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
        elif isinstance(dim, int):  # 0 or negative: a tensor no run can be fed
            raise LtsedgeError(f"input {name!r}: declared shape {_show(declared)} has a dimension of {dim}; "
                               f"give a shape with shapes={{{name!r}: [...]}}")
        else:
            shape.append(_symbolic(dim, profile))
    return shape


def _symbolic(dim: Any, profile: Any) -> int:
    text = str(dim or "").lower()
    if "batch" in text:
        return profile.batch
    if any(word in text for word in SEQUENCE_WORDS):
        return profile.sequence
    return 1


def _show(shape: list) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in shape) + "]"


def _values(name: str, type_str: str, shape: list[int], vocab_size: int | None, rng: np.random.Generator) -> np.ndarray:
    dtype = DTYPES.get(type_str)
    if dtype is None:
        raise LtsedgeError(f"input {name!r} has type {type_str}, for which ltsedge cannot make values")
    # np.array copies: every feed is its own contiguous array, also for 0-d shapes (no numpy scalars).
    return np.array(_raw_values(name.lower(), dtype, shape, vocab_size, rng), dtype=dtype)


def _raw_values(name: str, dtype: type, shape: list[int], vocab_size: int | None, rng: np.random.Generator):
    if dtype == np.object_:
        return np.full(shape, "", dtype=object)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape)
    if "attention_mask" in name:
        return np.ones(shape)
    if "position_ids" in name:
        return np.broadcast_to(np.arange(shape[-1]), shape) if shape else 0
    if "token_type_ids" in name:
        return np.zeros(shape)
    high = vocab_size if vocab_size and vocab_size > 0 else SMALL_INT_HIGH
    return rng.integers(0, min(high, np.iinfo(dtype).max), shape)


def vocab_size_of(session: Any) -> int | None:
    """The vocabulary: the last dimension of a ``logits`` output, or ltsedge's architecture metadata."""
    for output in session.get_outputs():
        if output.name == "logits" and output.shape and isinstance(output.shape[-1], int):
            return output.shape[-1]
    arch = _architecture_metadata(session)
    return arch.get("vocab_size") if isinstance(arch.get("vocab_size"), int) else None


def sequence_limits(session: Any) -> tuple[int | None, int | None]:
    """(the longest past + sequence an ltsedge model embeds, its recurrence memory's length): None where
    there is no such bound (relative positions, no memory, a foreign model)."""
    arch = _architecture_metadata(session)
    declared = session.get_modelmeta().custom_metadata_map.get("ltsedge.max_sequence")
    if declared is not None:  # written by the exporter, which knows the backbone
        limit = int(declared) if declared.isdigit() else None
    else:  # a file from before that key: only learned positions then (GPT-2)
        limit = arch.get("n_positions") if isinstance(arch.get("n_positions"), int) else None
    memory = arch.get("mem_len")
    return limit, memory if isinstance(memory, int) and memory > 0 else None


def _architecture_metadata(session: Any) -> dict:
    try:
        text = session.get_modelmeta().custom_metadata_map.get("ltsedge.architecture")
        data = json.loads(text) if text else {}
    except Exception:  # noqa: BLE001 - metadata is a hint, never a reason to fail
        return {}
    return data if isinstance(data, dict) else {}
