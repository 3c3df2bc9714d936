"""What several ``ltsedge`` commands share: the help of their common options, the check of
``--scheduler``/``--machine``, and what each says when the scheduler goes away."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ltsedge.errors import LostConnection, LtsedgeError
from ltsedge.validate import scheduler_address

DEVICE_HELP = "Device profile: a built-in name (see `ltsedge devices`) or a path to a profile TOML."
STORE_HELP = "Measurement store (SQLite). Default: $LTSEDGE_STORE, else the user cache directory."
SCHEDULER_HELP = "Measure on the ltsedge agents of this Dask scheduler (tcp://HOST:8786), not on this machine."
MACHINE_HELP = "With agents of several kinds of machine: the fingerprint hash of those to measure on."
PRECISION_HELP = ("fp32 | int8 (onnxruntime's quantize_dynamic) | int4 (MatMulNBits, onnxruntime >= 1.17) | "
                  "fp16 (CUDA execution provider only).")
# How a precision is reached (precision.QuantOptions): a flag left out keeps its default, and the
# store key names only options other than the defaults.
PER_CHANNEL_HELP = "int8: one scale per output channel (default: --per-tensor, one per weight)."
BLOCK_SIZE_HELP = "int4: weights per scale, 16 | 32 | 64 | 128 | 256 (default 32)."
SYMMETRIC_HELP = "int4: symmetric blocks, no zero points (the default), or --asymmetric."
ACCURACY_LEVEL_HELP = ("int4: MatMulNBits' compute type, 0 unset | 1 fp32 | 2 fp16 | 3 bf16 | 4 int8 "
                       "(default 4: activations quantized per block at run time).")
QUANT_FLAGS = {"int8": ("per_channel",), "int4": ("block_size", "symmetric", "accuracy_level")}


def quantization_options(precision: str | None, *, per_channel: bool | None, block_size: int | None,
                         symmetric: bool | None, accuracy_level: int | None):
    """The QuantOptions the flags give (None: none given, the defaults). A flag of another precision than
    an explicit --precision is refused in one line: it would change nothing."""
    from ltsedge.precision import QuantOptions

    given = {k: v for k, v in (("per_channel", per_channel), ("block_size", block_size), ("symmetric", symmetric),
                               ("accuracy_level", accuracy_level)) if v is not None}
    if not given:
        return None
    if precision is not None:
        other = sorted(set(given) - set(QUANT_FLAGS.get(precision, ())))
        if other:
            flags = ", ".join("--" + k.replace("_", "-") for k in other)
            owner = " or ".join(p for p, names in QUANT_FLAGS.items() if set(other) & set(names))
            raise LtsedgeError(f"{flags}: for --precision {owner}, not {precision}")
    return QuantOptions(**given)


def check_fleet(scheduler: str | None, machine: str | None) -> None:
    """The one check of --scheduler and --machine every measuring command shares, before anything runs."""
    if scheduler is not None:
        scheduler_address(scheduler)
    elif machine is not None:
        raise LtsedgeError("--machine picks among the agents of a fleet: give --scheduler too")



# What a command kept, and what to do, when its fleet's scheduler goes away (``when_scheduler_lost``).
SEARCH_LOST = "run the same command again to resume"  # from the checkpoint, with every figure stored
PROFILE_LOST = "no figure came back, so nothing was stored: run the same command again once the scheduler is back"
CHECK_LOST = "no model was judged (a check keeps no figures): run the same command again once the scheduler is back"


@contextmanager
def when_scheduler_lost(advice: str) -> Iterator[None]:
    """The fleet's one line for a lost scheduler (``runners.remote``), ended with ``advice``: what is true
    for this command (only a search resumes)."""
    try:
        yield
    except LostConnection as e:
        raise LostConnection(f"{e}; {advice}") from None
