"""What several ``ltsedge`` commands share: the help of their common options, and the check of
``--scheduler``/``--machine``."""

from __future__ import annotations

from ltsedge.errors import LtsedgeError
from ltsedge.validate import scheduler_address

DEVICE_HELP = "Device profile: a built-in name (see `ltsedge devices`) or a path to a profile TOML."
STORE_HELP = "Measurement store (SQLite). Default: $LTSEDGE_STORE, else the user cache directory."
SCHEDULER_HELP = "Measure on the ltsedge agents of this Dask scheduler (tcp://HOST:8786), not on this machine."
MACHINE_HELP = "With agents of several kinds of machine: the fingerprint hash of those to measure on."
PRECISION_HELP = ("fp32 | int8 (onnxruntime's quantize_dynamic) | int4 (MatMulNBits, onnxruntime >= 1.17) | "
                  "fp16 (CUDA execution provider only).")


def check_fleet(scheduler: str | None, machine: str | None) -> None:
    """The one check of --scheduler and --machine every measuring command shares, before anything runs."""
    if scheduler is not None:
        scheduler_address(scheduler)
    elif machine is not None:
        raise LtsedgeError("--machine picks among the agents of a fleet: give --scheduler too")

