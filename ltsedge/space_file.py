"""Reading a search-space TOML file: each key's value checked and turned into the ``SearchSpace`` field
it sets (``parse_value``). A range table is counted before it is enumerated: at most ``MAX_CHOICES``
choices per key. Which keys exist, and what the values mean, is ``space.py``'s."""

from __future__ import annotations

from typing import Any

from ltsedge.architecture import BLOCK_TYPES
from ltsedge.errors import LtsedgeError
from ltsedge.validate import is_int

MAX_CHOICES = 10_000  # per key of a space file: more is a typo (and would take minutes to size)
CHOICE_KEYS = ("n_layer", "d_model", "n_head", "d_inner", "d_embed", "div_val", "cutoffs", "n_kv_head", "head_dim")
# Keys whose empty list is meaningful: no cutoffs, d_embed = d_model, as many key/value heads as query heads,
# a head size of d_model / n_head.
MAY_BE_EMPTY = ("cutoffs", "d_embed", "n_kv_head", "head_dim")


def parse_value(key: str, value: Any, source: str):
    """The value of ``key`` in the file ``source`` as the field takes it (a one-line error naming both if not)."""
    if key in CHOICE_KEYS:
        return _parse_choices(key, value, source)
    if key == "block_types":
        return _parse_block_types(value, source)
    if key == "tie_embeddings":
        return _parse_flags(key, value, source)
    return _parse_scalar(key, value, source)


def _parse_block_types(value: Any, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise LtsedgeError(f"{source}: block_types must be a list of block types ({', '.join(BLOCK_TYPES)}), "
                           f"got {value!r}")
    return tuple(value)


def _parse_flags(key: str, value: Any, source: str) -> tuple[bool, ...]:
    """A list of booleans (``[true, false]``: both choices), or one boolean (that choice only)."""
    if isinstance(value, bool):
        return (value,)
    if not isinstance(value, list) or not value or not all(isinstance(v, bool) for v in value):
        raise LtsedgeError(f"{source}: {key} must be true, false or a list of them, got {value!r}")
    return tuple(value)


def _parse_choices(key: str, value: Any, source: str) -> tuple[int, ...]:
    """A list of integers, or a range table ``{min = 128, max = 1024, step = 64}``."""
    if isinstance(value, dict):
        extra = set(value) - {"min", "max", "step"}
        if extra or not {"min", "max"} <= set(value):
            raise LtsedgeError(f"{source}: {key} range must be {{min = .., max = .., step = ..}}, got {value}")
        lo, hi, step = value["min"], value["max"], value.get("step", 1)
        if not all(is_int(v) for v in (lo, hi, step)) or step < 1 or lo > hi:
            raise LtsedgeError(f"{source}: {key} range {value} is invalid: integers with min <= max and step >= 1")
        choices = range(lo, hi + 1, step)
        if len(choices) > MAX_CHOICES:  # counted, not enumerated
            raise LtsedgeError(f"{source}: {key} range {value} has {len(choices):,} choices: a space may have at "
                               f"most {MAX_CHOICES:,} per key")
        value = list(choices)
    if not isinstance(value, list) or not all(is_int(v) for v in value):
        raise LtsedgeError(f"{source}: {key} must be a list of integers or a {{min, max, step}} range, got {value!r}")
    if key not in MAY_BE_EMPTY and not value or value and min(value) < 1:
        raise LtsedgeError(f"{source}: {key} = {value} is invalid: choices must be integers >= 1")
    return tuple(value)


def _parse_scalar(key: str, value: Any, source: str):
    expected = {"d_inner_min_ratio": (int, float), "vocab_size": int, "n_positions": int, "backbone": str,
                "mem_len": int, "par_rules": bool}[key]
    if key == "par_rules" and isinstance(value, bool):
        return value
    if isinstance(value, bool) or not isinstance(value, expected):
        raise LtsedgeError(f"{source}: {key} = {value!r} has the wrong type")
    if key == "mem_len" and value < 1:
        raise LtsedgeError(f"{source}: mem_len = {value} is invalid: must be >= 1")
    if key in ("vocab_size", "n_positions") and value < 2:
        raise LtsedgeError(f"{source}: {key} = {value} is invalid: must be >= 2")
    if key == "d_inner_min_ratio" and value < 0:
        raise LtsedgeError(f"{source}: d_inner_min_ratio = {value} is invalid: must be >= 0")
    return value
