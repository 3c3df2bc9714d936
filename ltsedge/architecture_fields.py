"""An architecture's fields: the block types and the family fields there are, and the rules every field's
value obeys (types, ranges, one entry per layer, a backbone's own fields and rules, adaptive cutoffs), each
broken rule one ``LtsedgeError`` naming the field. ``architecture.Architecture`` applies them when built.
"""

from __future__ import annotations

import math
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.validate import is_int, is_number

# Per-layer block types (the PAR Transformer's genes): a standard layer (attention then FFN), an FFN-only
# layer, or an attention-only layer. An architecture without block_types is all standard.
STANDARD_BLOCK = "attn_ffn"
BLOCK_TYPES = (STANDARD_BLOCK, "ffn", "attn")

# Fields only some families have (Llama's): a backbone reads those it declares (``Backbone.architecture_fields``)
# and fills the ones an architecture leaves unset (``Backbone.field_defaults``); set for any other, they are
# refused. Unset, they stay out of the JSON, so the ids of architectures without them are what they were.
FAMILY_FIELDS = ("n_kv_head", "head_dim", "tie_embeddings", "rope_theta", "rms_norm_eps")


def int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value):
        raise LtsedgeError(f"architecture field {name!r} = {value!r} must be a list of integers")
    return tuple(value)


def canonical_block_types(value: Any, n_layer: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise LtsedgeError(f"architecture field 'block_types' = {value!r} must be a list of strings")
    for i, v in enumerate(value):
        if v not in BLOCK_TYPES:
            raise LtsedgeError(f"architecture field 'block_types[{i}]' = {v!r} is invalid: must be one of "
                               f"{', '.join(BLOCK_TYPES)}")
    if value and is_int(n_layer) and len(value) != n_layer:
        raise LtsedgeError(f"architecture field 'block_types' has {len(value)} entries: must have one per layer "
                           f"(n_layer = {n_layer})")
    # All standard is the same architecture as no block types: one canonical form, one id.
    return () if all(v == STANDARD_BLOCK for v in value) else tuple(value)


def validate_backbone_fields(a: Architecture, backbone) -> None:
    if a.mem_len is not None:
        if backbone.default_mem_len is None:
            raise LtsedgeError(f"architecture field 'mem_len' is invalid: backbone {a.backbone} has no recurrence "
                               f"memory")
        _check_int("mem_len", a.mem_len, 1)
    if a.adaptive and not backbone.supports_adaptive:
        raise LtsedgeError(f"architecture is invalid for backbone {a.backbone}: it has plain embeddings, so d_embed "
                           f"must equal d_model = {a.d_model} and div_val be 1 (got d_embed = {a.d_embed}, "
                           f"div_val = {a.div_val})")
    if a.block_types and not backbone.supports_block_types:
        raise LtsedgeError(f"architecture field 'block_types' is invalid: backbone {a.backbone} has no per-layer "
                           f"block types")
    for name in FAMILY_FIELDS:
        if getattr(a, name) not in (None, ()) and name not in backbone.architecture_fields:
            raise LtsedgeError(f"architecture field {name!r} is invalid: backbone {a.backbone} has no such field")


def backbone_of(name: Any):
    from ltsedge.backbones import (  # the registry imports this module: import here
        backbone_names,
        get_backbone,
    )

    if not isinstance(name, str) or name not in backbone_names():
        raise LtsedgeError(f"architecture field 'backbone' = {name!r} is invalid: must be one of {backbone_names()}")
    return get_backbone(name)


def _check_int(name: str, value: Any, low: int, what: str = "") -> None:
    if not is_int(value) or value < low:
        allowed = what or f"an integer >= {low}"
        raise LtsedgeError(f"architecture field {name!r} = {value!r} is invalid: must be {allowed}")


def validate(a: Architecture) -> None:
    backbone = backbone_of(a.backbone)
    _check_int("n_layer", a.n_layer, 1)
    _check_int("d_model", a.d_model, 1)
    _check_int("d_embed", a.d_embed, 1)
    _check_int("div_val", a.div_val, 1)
    _check_int("vocab_size", a.vocab_size, 2)
    _check_int("n_positions", a.n_positions, 1)
    for name in ("n_head", "d_inner"):
        values = getattr(a, name)
        if len(values) != a.n_layer:
            raise LtsedgeError(
                f"architecture field {name!r} has {len(values)} entries: must have one per layer (n_layer = {a.n_layer})"
            )
        for i, v in enumerate(values):
            _check_int(f"{name}[{i}]", v, 1)
    if a.head_dim is None:  # each layer's heads split d_model
        hint = " (or give head_dim)" if "head_dim" in backbone.architecture_fields else ""
        for i, h in enumerate(a.n_head):
            if a.d_model % h:
                raise LtsedgeError(
                    f"architecture field 'n_head[{i}]' = {h} is invalid: must divide d_model = {a.d_model}{hint}"
                )
    else:
        _check_int("head_dim", a.head_dim, 1)
    _validate_family_fields(a)


def _validate_family_fields(a: Architecture) -> None:
    """The types and ranges of FAMILY_FIELDS that are set (which backbone may have them is checked later)."""
    if a.n_kv_head:
        if len(a.n_kv_head) != a.n_layer:
            raise LtsedgeError(f"architecture field 'n_kv_head' has {len(a.n_kv_head)} entries: must have one per "
                               f"layer (n_layer = {a.n_layer})")
        for i, (kv, h) in enumerate(zip(a.n_kv_head, a.n_head)):
            _check_int(f"n_kv_head[{i}]", kv, 1)
            if h % kv:
                raise LtsedgeError(f"architecture field 'n_kv_head[{i}]' = {kv} is invalid: n_head[{i}] = {h} must be "
                                   f"a multiple of it (query heads share key/value heads in equal groups)")
    if a.tie_embeddings is not None and not isinstance(a.tie_embeddings, bool):
        raise LtsedgeError(f"architecture field 'tie_embeddings' = {a.tie_embeddings!r} is invalid: must be true "
                           f"or false")
    for name in ("rope_theta", "rms_norm_eps"):
        value = getattr(a, name)
        if value is None:
            continue
        if not _positive_float(value):
            raise LtsedgeError(f"architecture field {name!r} = {value!r} is invalid: must be a finite number > 0")
        object.__setattr__(a, name, float(value))  # 100000 and 100000.0 are one architecture, one id


def _positive_float(value: Any) -> bool:
    try:
        return is_number(value) and math.isfinite(float(value)) and value > 0
    except OverflowError:  # an integer beyond any float
        return False


def validate_cutoffs(a: Architecture) -> None:
    if not a.adaptive:
        return
    c = a.cutoffs
    if any(x <= 0 or x >= a.vocab_size for x in c) or list(c) != sorted(set(c)):
        raise LtsedgeError(
            f"architecture field 'cutoffs' = {list(c)} is invalid: must be strictly increasing, "
            f"each in 1..{a.vocab_size - 1}"
        )
    smallest = a.d_embed // a.div_val ** len(c)
    if smallest < 1:
        raise LtsedgeError(
            f"architecture field 'div_val' = {a.div_val} is invalid: d_embed {a.d_embed} / div_val^{len(c)} "
            f"leaves the last cluster with no embedding dimension"
        )
