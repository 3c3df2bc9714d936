"""What a candidate is: an immutable, validated description of one decoder-only Transformer.

Heterogeneous: every layer has its own number of heads and FFN width. The JSON form is the
exchange format (CLI input, ONNX metadata, frontier.json); the content id is a hash of its
canonical form, so the same architecture gets the same id in every process and on every machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.files import parse_json, read_text
from ltsedge.validate import is_int, is_number, reject_unknown

DEFAULT_VOCAB_SIZE = 50257
DEFAULT_N_POSITIONS = 1024

# Per-layer block types (the PAR Transformer's genes): a standard layer (attention then FFN), an FFN-only
# layer, or an attention-only layer. An architecture without block_types is all standard.
STANDARD_BLOCK = "attn_ffn"
BLOCK_TYPES = (STANDARD_BLOCK, "ffn", "attn")

# Fields only some families have (Llama's): a backbone reads those it declares (``Backbone.architecture_fields``)
# and fills the ones an architecture leaves unset (``Backbone.field_defaults``); set for any other, they are
# refused. Unset, they stay out of the JSON, so the ids of architectures without them are what they were.
FAMILY_FIELDS = ("n_kv_head", "head_dim", "tie_embeddings", "rope_theta", "rms_norm_eps")


def default_cutoffs(vocab_size: int) -> tuple[int, ...]:
    """Adaptive-embedding cluster boundaries: a head of the 40% most frequent tokens, then two tails.

    For GPT-2's 50257 tokens this gives (20102, 40205), close to Transformer-XL's 20k/40k split.
    """
    cutoffs = (vocab_size * 2 // 5, vocab_size * 4 // 5)
    return tuple(c for c in cutoffs if 0 < c < vocab_size)


@dataclass(frozen=True)
class Architecture:
    n_layer: int
    d_model: int
    n_head: tuple[int, ...]
    d_inner: tuple[int, ...]
    d_embed: int | None = None  # None means "same as d_model"
    div_val: int = 1
    vocab_size: int = DEFAULT_VOCAB_SIZE
    n_positions: int = DEFAULT_N_POSITIONS
    cutoffs: tuple[int, ...] = ()  # only meaningful with adaptive embeddings
    backbone: str = "gpt2"
    mem_len: int | None = None  # recurrence memory (Transformer-XL); None for backbones without one
    block_types: tuple[str, ...] = ()  # per layer, one of BLOCK_TYPES; () = every layer standard
    # FAMILY_FIELDS:
    n_kv_head: tuple[int, ...] = ()  # per layer, key/value heads each shared by n_head / n_kv_head query heads;
    #                                  () = as many as query heads
    head_dim: int | None = None  # one head size for every layer; None: each layer's d_model / n_head
    tie_embeddings: bool | None = None  # the output layer is the token embedding (None: tied, as every family was)
    rope_theta: float | None = None  # the base of rotary positions
    rms_norm_eps: float | None = None  # RMSNorm's epsilon

    def __post_init__(self) -> None:
        # Normalise before validating so equal architectures compare (and hash) equal.
        object.__setattr__(self, "n_head", _int_tuple("n_head", self.n_head))
        object.__setattr__(self, "d_inner", _int_tuple("d_inner", self.d_inner))
        object.__setattr__(self, "n_kv_head", _int_tuple("n_kv_head", self.n_kv_head))
        object.__setattr__(self, "cutoffs", _int_tuple("cutoffs", self.cutoffs))
        object.__setattr__(self, "block_types", _block_types(self.block_types, self.n_layer))
        if self.d_embed is None:
            object.__setattr__(self, "d_embed", self.d_model)
        _validate(self)
        if not self.adaptive:
            object.__setattr__(self, "cutoffs", ())
        elif not self.cutoffs:
            object.__setattr__(self, "cutoffs", default_cutoffs(self.vocab_size))
        _validate_cutoffs(self)
        backbone = _backbone(self.backbone)
        if self.mem_len is None and backbone.default_mem_len is not None:
            object.__setattr__(self, "mem_len", backbone.default_mem_len)
        _validate_backbone_fields(self, backbone)
        for name, value in backbone.field_defaults(self).items():
            if getattr(self, name) in (None, ()):
                object.__setattr__(self, name, value)
        backbone.validate(self)  # the family's own rules

    @property
    def adaptive(self) -> bool:
        """Adaptive input embeddings and a tied adaptive softmax (Baevski & Auli; Transformer-XL)."""
        return self.div_val > 1 or self.d_embed != self.d_model

    @property
    def d_head(self) -> tuple[int, ...]:
        if self.head_dim is not None:
            return (self.head_dim,) * self.n_layer
        return tuple(self.d_model // h for h in self.n_head)

    @property
    def kv_heads(self) -> tuple[int, ...]:
        """Each layer's key/value heads: ``n_kv_head``, or one per query head where it is unset."""
        return self.n_kv_head or self.n_head

    def block_type(self, layer: int) -> str:
        return self.block_types[layer] if self.block_types else STANDARD_BLOCK

    def has_attention(self, layer: int) -> bool:
        return self.block_type(layer) != "ffn"

    def has_ffn(self, layer: int) -> bool:
        return self.block_type(layer) != "attn"

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers with an attention block (all of them unless block_types say otherwise)."""
        return tuple(i for i in range(self.n_layer) if self.has_attention(i))

    def to_dict(self) -> dict[str, Any]:
        out = {
            "backbone": self.backbone,
            "n_layer": self.n_layer,
            "d_model": self.d_model,
            "n_head": list(self.n_head),
            "d_inner": list(self.d_inner),
            "d_embed": self.d_embed,
            "div_val": self.div_val,
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
        }
        if self.cutoffs:
            out["cutoffs"] = list(self.cutoffs)
        # Only where used: the ids of architectures without them stay what they were.
        if self.mem_len is not None:
            out["mem_len"] = self.mem_len
        if self.block_types:
            out["block_types"] = list(self.block_types)
        for name in FAMILY_FIELDS:
            value = getattr(self, name)
            if value not in (None, ()):
                out[name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @property
    def id(self) -> str:
        """Stable content id, e.g. ``gpt2-L3-d256-3f9a0c1b2d``: readable prefix, hash of the canonical JSON."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:10]
        return f"{self.backbone}-L{self.n_layer}-d{self.d_model}-{digest}"

    @classmethod
    def from_dict(cls, data: Any) -> Architecture:
        if not isinstance(data, dict):
            raise LtsedgeError(f"an architecture must be a JSON object, got {type(data).__name__}")
        reject_unknown("architecture field", data, (f.name for f in dataclasses.fields(cls)))
        missing = [k for k in ("n_layer", "d_model", "n_head", "d_inner") if k not in data]
        if missing:
            raise LtsedgeError(f"architecture field {missing[0]!r} is missing")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str, source: str = "architecture JSON") -> Architecture:
        data = parse_json(text, source)
        try:
            return cls.from_dict(data)
        except LtsedgeError as e:
            raise LtsedgeError(f"{source}: {e}") from None

    @classmethod
    def load(cls, path: str | Path) -> Architecture:
        return cls.from_json(read_text(path, "architecture file"), source=str(path))


def _int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value):
        raise LtsedgeError(f"architecture field {name!r} = {value!r} must be a list of integers")
    return tuple(value)


def _block_types(value: Any, n_layer: Any) -> tuple[str, ...]:
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


def _validate_backbone_fields(a: Architecture, backbone) -> None:
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


def _backbone(name: Any):
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


def _validate(a: Architecture) -> None:
    backbone = _backbone(a.backbone)
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


def _validate_cutoffs(a: Architecture) -> None:
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
