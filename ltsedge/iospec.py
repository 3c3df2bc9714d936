"""Declared inputs and outputs of an exported model (the idea of Optimum's per-model ``OnnxConfig``).

Every export names its variant and declares each input and output: name, dtype, dims (an int is
static, a string a symbolic axis) and a role that says what the values mean. The spec is written
into the model's metadata (``ltsedge.io_spec``), so whoever runs the model — ltsedge's own
measuring worker, an app, a test — builds its inputs from what the model declares instead of
guessing from names.

Symbolic axes: ``batch``, ``sequence`` (new tokens), ``past_sequence`` (tokens already in the
cache) and ``total_sequence`` (their sum); a backbone may declare others (e.g. a memory length).
Roles: ``input_ids``, ``attention_mask``, ``position_ids``, ``past`` (a cache fed back), ``logits``,
``present`` (a cache returned). JSON and numpy only: the measuring worker imports this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.validate import is_int

DTYPES = ("int64", "int32", "float32", "float16")
INPUT_ROLES = ("input_ids", "attention_mask", "position_ids", "past")
OUTPUT_ROLES = ("logits", "present")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    dims: tuple[int | str, ...]
    role: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims), "role": self.role}

    def value_info(self):
        """The ONNX ValueInfoProto that declares this tensor in a graph."""
        from onnx import helper

        elem = helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype))
        return helper.make_tensor_value_info(self.name, elem, list(self.dims))


@dataclass(frozen=True)
class ExportSpec:
    variant: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, role: str) -> list[TensorSpec]:
        return [t for t in self.inputs if t.role == role]

    def output(self, role: str) -> list[TensorSpec]:
        return [t for t in self.outputs if t.role == role]

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ExportSpec:
        """Raises LtsedgeError for anything that is not a well-formed spec."""
        try:
            data = json.loads(text)
            spec = cls(variant=str(data["variant"]),
                       inputs=tuple(_tensor(t, INPUT_ROLES) for t in data["inputs"]),
                       outputs=tuple(_tensor(t, OUTPUT_ROLES) for t in data["outputs"]))
        except (ValueError, KeyError, TypeError) as e:
            raise LtsedgeError(f"malformed ltsedge.io_spec metadata: {e}") from None
        return spec


def _tensor(data: dict, roles: tuple[str, ...]) -> TensorSpec:
    dims = tuple(data["dims"])
    if data["dtype"] not in DTYPES or data["role"] not in roles:
        raise ValueError(f"tensor {data.get('name')!r}: dtype {data['dtype']!r} or role {data['role']!r} unknown")
    if not all(isinstance(d, str) or (is_int(d) and d >= 1) for d in dims):
        raise ValueError(f"tensor {data.get('name')!r}: dims {list(dims)} must be axis names or positive integers")
    return TensorSpec(str(data["name"]), data["dtype"], dims, data["role"])


def axis_sizes(spec: ExportSpec, base: dict[str, int], overrides: dict[str, list[int]] | None = None
               ) -> dict[str, int]:
    """Every symbolic axis of ``spec`` sized: ``base`` (from the workload), then axes bound by the
    ``overrides`` (input name -> full shape), then ``total_sequence = past_sequence + sequence``.

    An axis nobody sized is an error naming it; an override whose rank or static dims disagree with
    the declaration, or that binds one axis to two sizes, too.
    """
    sizes = dict(base)
    by_name = {t.name: t for t in spec.inputs}
    for name, shape in (overrides or {}).items():
        declared = by_name.get(name)
        if declared is None:
            raise LtsedgeError(f"shape given for {name!r}, which is not an input of the model "
                               f"(inputs: {', '.join(by_name) or 'none'})")
        if len(shape) != len(declared.dims):
            raise LtsedgeError(f"input {name!r}: shape {shape} has {len(shape)} dimensions, the model declares "
                               f"{len(declared.dims)} ({_show(declared.dims)})")
        for size, dim in zip(shape, declared.dims):
            if isinstance(dim, int) and size != dim:
                raise LtsedgeError(f"input {name!r}: shape {shape} does not match the model's {_show(declared.dims)}")
    bound: dict[str, tuple[int, str]] = {}
    for name, shape in (overrides or {}).items():
        for size, dim in zip(shape, by_name[name].dims):
            if isinstance(dim, str):
                if dim in bound and bound[dim][0] != size:
                    raise LtsedgeError(f"input {name!r}: axis {dim!r} = {size} contradicts {bound[dim][0]} "
                                       f"from input {bound[dim][1]!r}")
                bound[dim] = (size, name)
    sizes.update({axis: size for axis, (size, _) in bound.items()})
    if "total_sequence" not in bound and "sequence" in sizes:
        sizes["total_sequence"] = sizes.get("past_sequence", 0) + sizes["sequence"]
    for t in spec.inputs:
        for dim in t.dims:
            if isinstance(dim, str) and dim not in sizes:
                raise LtsedgeError(f"input {t.name!r}: nothing gives the size of axis {dim!r}")
    return sizes


def shape_of(tensor: TensorSpec, sizes: dict[str, int]) -> list[int]:
    return [d if isinstance(d, int) else sizes[d] for d in tensor.dims]


def _show(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"
