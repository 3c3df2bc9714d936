"""The worker's wire format: each message is an 8-byte big-endian length, then a pickled dict.

Pickle is safe here: both ends are ltsedge, and the pipe connects only the parent and its worker.
"""

from __future__ import annotations

import pickle
import struct
from typing import BinaryIO

HEADER = struct.Struct(">Q")


def write_message(stream: BinaryIO, message: dict) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def read_message(stream: BinaryIO) -> dict | None:
    """The next message, or None at the end of the stream (the other side is gone)."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    data = stream.read(length)
    return pickle.loads(data) if len(data) == length else None
