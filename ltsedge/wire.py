"""ONNX files at the protobuf wire level: writing a model around its weight buffers, and reading how
many bytes of weights a file holds, both without protobuf copying the weights.

Writing: protobuf's Python serializer takes seconds per GB (it copies every ``raw_data`` into the
message and again into the output). The model and graph are serialized by protobuf without their
weights, and each initializer is the serialized tensor header followed by its ``raw_data`` field
holding the array's bytes. The result parses to exactly the message protobuf would have built.

Reading: ``onnx.load`` would parse (and copy) every weight just to sum their sizes. Walking the file
(memory-mapped) and reading only each initializer's dims and data type costs nothing.

The tests compare both directions with onnx's own serializer and parser. No onnx import at module
level: the reader runs in processes that never load onnx.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

MB = 2**20

# Field numbers from onnx.proto, and protobuf wire types.
MODEL_GRAPH = 7
GRAPH_INITIALIZER = 5
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_STRING_DATA, TENSOR_RAW_DATA = 1, 2, 6, 9
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
EXTERNAL_ALIGNMENT = 4096  # bytes: page-aligned weights in an external data file can be memory-mapped

# TensorProto.DataType -> bits per element (STRING = 8 is sized from its data instead).
ELEMENT_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
                14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4}
STRING = 8


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------
def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_header(field: int, length: int) -> bytes:
    return _encode_varint(field << 3 | LENGTH_DELIMITED) + _encode_varint(length)


def serialize_with_weights(model: onnx.ModelProto, weights: Iterable[tuple[str, np.ndarray]]) -> bytes:
    return b"".join(serialized_parts(model, weights)[0])


def serialized_parts(model: onnx.ModelProto, weights: Iterable[tuple[str, np.ndarray]],
                     external_data: str | None = None) -> tuple[list[bytes | memoryview], list[bytes | memoryview]]:
    """The model file's bytes in pieces and, with ``external_data`` (the data file's name, relative to
    the model's directory), the data file's: weights as views of their arrays (write them in order).

    ``model`` must not already hold these initializers; ``weights`` are added as initializers, their
    bytes in the model (protobuf caps a file at 2 GB) or in the data file, each at an offset aligned to
    ``EXTERNAL_ALIGNMENT`` so that onnxruntime can map it.
    """
    import onnx

    if sys.byteorder != "little":  # ONNX raw_data is little-endian
        weights = [(name, array.astype(array.dtype.newbyteorder("<"))) for name, array in weights]
    graph = model.graph
    model_without_graph = onnx.ModelProto()
    model_without_graph.CopyFrom(model)
    model_without_graph.ClearField("graph")

    graph_parts: list[bytes | memoryview] = [graph.SerializeToString()]
    data_parts: list[bytes | memoryview] = []
    offset = 0
    for name, array in weights:
        array = np.ascontiguousarray(array)
        header = onnx.TensorProto(name=name, data_type=onnx.helper.np_dtype_to_tensor_dtype(array.dtype),
                                  dims=array.shape)
        raw = memoryview(array).cast("B")
        if external_data is None:
            header_bytes = header.SerializeToString()
            tensor_len = len(header_bytes) + len(_field_header(TENSOR_RAW_DATA, raw.nbytes)) + raw.nbytes
            graph_parts += [_field_header(GRAPH_INITIALIZER, tensor_len), header_bytes,
                            _field_header(TENSOR_RAW_DATA, raw.nbytes), raw]
            continue
        padding = -offset % EXTERNAL_ALIGNMENT
        if padding:
            data_parts.append(bytes(padding))
            offset += padding
        header.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", external_data), ("offset", str(offset)), ("length", str(raw.nbytes))):
            entry = header.external_data.add()
            entry.key, entry.value = key, value
        header_bytes = header.SerializeToString()
        graph_parts += [_field_header(GRAPH_INITIALIZER, len(header_bytes)), header_bytes]
        data_parts.append(raw)
        offset += raw.nbytes
    graph_len = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in graph_parts)
    return [model_without_graph.SerializeToString(), _field_header(MODEL_GRAPH, graph_len), *graph_parts], data_parts


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
def weights_mb(model: str | Path | bytes) -> float | None:
    """Total size of the graph's initializers in MB (2**20 bytes); None if the file is not valid ONNX."""
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            return initializer_bytes(memoryview(model)) / MB
        with open(model, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                return initializer_bytes(view) / MB
            finally:
                view.release()
    except (OSError, ValueError, IndexError):  # unreadable, empty (mmap) or not protobuf
        return None


def initializer_bytes(buf: memoryview) -> int:
    total = 0
    for field, _, start, end in _fields(buf, 0, len(buf)):
        if field != MODEL_GRAPH:
            continue
        for g_field, _, t_start, t_end in _fields(buf, start, end):
            if g_field == GRAPH_INITIALIZER:
                total += _tensor_bytes(buf, t_start, t_end)
    return total


def _tensor_bytes(buf: memoryview, start: int, end: int) -> int:
    dims, data_type, string_bytes = [], None, 0
    for field, wire, a, b in _fields(buf, start, end):
        if field == TENSOR_DIMS and wire == VARINT:
            dims.append(a)
        elif field == TENSOR_DIMS and wire == LENGTH_DELIMITED:  # packed
            pos = a
            while pos < b:
                value, pos = _varint(buf, pos)
                dims.append(value)
        elif field == TENSOR_DATA_TYPE and wire == VARINT:
            data_type = a
        elif field == TENSOR_STRING_DATA and wire == LENGTH_DELIMITED:
            string_bytes += b - a
    if data_type == STRING:
        return string_bytes
    count = 1
    for d in dims:
        count *= d
    return count * ELEMENT_BITS.get(data_type, 0) // 8


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: memoryview, start: int, end: int):
    """(field number, wire type, value or start, None or end) for each field in buf[start:end]."""
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, pos = _varint(buf, pos)
            yield field, wire, value, None
        elif wire == LENGTH_DELIMITED:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise ValueError("truncated field")
            yield field, wire, pos, pos + length
            pos += length
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    if pos != end:
        raise ValueError("truncated message")
