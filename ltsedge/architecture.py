"""What a candidate is: an immutable, validated description of one decoder-only Transformer.

Heterogeneous: every layer has its own number of heads and FFN width. The JSON form is the
exchange format (CLI input, ONNX metadata, frontier.json); the content id is a hash of its
canonical form, so the same architecture gets the same id in every process and on every machine.
The rules each field's value obeys are ``architecture_fields.py``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ltsedge.architecture_fields import (  # BLOCK_TYPES and the others are imported from this module too
    BLOCK_TYPES,  # noqa: F401
    FAMILY_FIELDS,
    STANDARD_BLOCK,
    backbone_of,
    canonical_block_types,
    int_tuple,
    validate,
    validate_backbone_fields,
    validate_cutoffs,
)
from ltsedge.errors import LtsedgeError
from ltsedge.files import parse_json, read_text
from ltsedge.validate import reject_unknown

DEFAULT_VOCAB_SIZE = 50257
DEFAULT_N_POSITIONS = 1024


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
        object.__setattr__(self, "n_head", int_tuple("n_head", self.n_head))
        object.__setattr__(self, "d_inner", int_tuple("d_inner", self.d_inner))
        object.__setattr__(self, "n_kv_head", int_tuple("n_kv_head", self.n_kv_head))
        object.__setattr__(self, "cutoffs", int_tuple("cutoffs", self.cutoffs))
        object.__setattr__(self, "block_types", canonical_block_types(self.block_types, self.n_layer))
        if self.d_embed is None:
            object.__setattr__(self, "d_embed", self.d_model)
        validate(self)
        if not self.adaptive:
            object.__setattr__(self, "cutoffs", ())
        elif not self.cutoffs:
            object.__setattr__(self, "cutoffs", default_cutoffs(self.vocab_size))
        validate_cutoffs(self)
        backbone = backbone_of(self.backbone)
        if self.mem_len is None and backbone.default_mem_len is not None:
            object.__setattr__(self, "mem_len", backbone.default_mem_len)
        validate_backbone_fields(self, backbone)
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
