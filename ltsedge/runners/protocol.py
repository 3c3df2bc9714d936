"""The worker's wire format, and the settings a measure request carries.

Each message is an 8-byte big-endian length, then a pickled dict. Pickle is safe here: both ends
are ltsedge, and the pipe connects only the parent and its worker.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import BinaryIO

HEADER = struct.Struct(">Q")


@dataclass(frozen=True)
class RunSettings:
    """What the worker needs to load and time a model: a device profile's runtime options, workload
    and repeat policy (the fields of ``DeviceProfile.settings()``)."""

    execution_provider: str
    provider_options: dict
    intra_op_threads: int
    inter_op_threads: int
    graph_optimization: str
    execution_mode: str
    enable_cpu_mem_arena: bool
    enable_mem_pattern: bool
    allow_spinning: bool
    batch: int
    sequence: int
    warmup: int
    min_runs: int
    max_runs: int
    max_seconds: float
    tolerance: float
    context: int = 0  # decode workload: tokens in the cache (not in settings(): forward figures ignore it)
    malloc_mmap_threshold_kb: int = 0  # in settings() only when set (profile.LATER_SETTINGS)
    decode_reference: str = "bandwidth"  # likewise
    workers: int = 1  # likewise; the Runner's to act on (pooling.py), not the worker's
    huge_pages: bool = False  # likewise; the worker's environment from its start (process.py)

    @classmethod
    def from_profile(cls, profile) -> RunSettings:
        return cls(**profile.settings(), context=profile.context)


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
