"""How many bytes of weights an ONNX file holds, read without loading it.

``onnx.load`` would parse (and copy) every weight just to sum their sizes: for a 200 MB model that
is 200 MB more in the process and a few hundred ms. The protobuf wire format lets us walk the file
(memory-mapped) and read only each initializer's header: its dims and data type. The counterpart of
``ltsedge/exporters/serialize.py``, which writes the same fields; the tests check the sums against
onnx's own parse.
"""

from __future__ import annotations

import mmap
from pathlib import Path

MB = 2**20

# Field numbers from onnx.proto.
MODEL_GRAPH = 7
GRAPH_INITIALIZER = 5
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_STRING_DATA = 1, 2, 6
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5

# TensorProto.DataType -> bits per element (STRING = 8 is sized from its data instead).
ELEMENT_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
                14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4}
STRING = 8


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
