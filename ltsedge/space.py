"""The search space: which architectures a search may visit.

``SearchSpace``'s own defaults are the LiteTransformerSearch GPT-2 space: n_layer 2..16, d_model 128..1024
step 64, per layer n_head in {2, 4, 8} and d_inner 2*d_model..4096 step 64, d_embed in {128, 256, 512} and
adaptive-embedding factor div_val in {1, 2, 4}. A backbone's default space changes some of them
(``Backbone.default_space``: GPT-2's holds its baseline's own block, 1 layer and 16 heads); every range can
be changed in a TOML file. Optional genes: PAR block types per layer (``block_types``, ``par_rules``), and
for a backbone that declares the architecture fields, grouped key/value heads per layer, one head size and
a tied or untied output layer.

Here: the space's ranges and checks, sampling, and its description. Its integer encoding for pymoo and
the repair (``decode``/``encode``) are ``space_encoding.py``; counting its size (exactly, and in
logarithms for spaces of 10^40000 architectures) is ``space_size.py``, which counts what ``decode`` can
produce; reading a space's TOML file, value by value, is ``space_file.py`` (at most
``space_file.MAX_CHOICES`` choices per key; n_layer at most MAX_LAYERS).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ltsedge import space_size
from ltsedge.architecture import BLOCK_TYPES, DEFAULT_N_POSITIONS, DEFAULT_VOCAB_SIZE, Architecture
from ltsedge.backbones import get_backbone
from ltsedge.backbones.base import grid
from ltsedge.errors import LtsedgeError
from ltsedge.files import read_toml
from ltsedge.space_encoding import SpaceEncoding
from ltsedge.space_file import parse_value
from ltsedge.validate import reject_unknown

FAMILY_GENES = ("n_kv_head", "head_dim", "tie_embeddings")  # architecture.FAMILY_FIELDS a space may vary
MAX_LAYERS = 10_000  # deepest architecture a space may hold: its encoding has 2 to 4 genes per layer
EXACT_SIZE_DIGITS = 40  # describe() counts the size exactly below 10^this (the CLI prints it in full)


@dataclass(frozen=True)
class SearchSpace(SpaceEncoding):
    n_layer: tuple[int, ...] = grid(2, 16, 1)
    d_model: tuple[int, ...] = grid(128, 1024, 64)
    n_head: tuple[int, ...] = (2, 4, 8)
    d_inner: tuple[int, ...] = grid(256, 4096, 64)
    d_inner_min_ratio: float = 2.0  # per-layer d_inner >= ratio * d_model (avoids training collapse)
    d_embed: tuple[int, ...] = (128, 256, 512)  # () = always d_model (plain, non-adaptive embeddings)
    div_val: tuple[int, ...] = (1, 2, 4)
    vocab_size: int = DEFAULT_VOCAB_SIZE
    n_positions: int = DEFAULT_N_POSITIONS
    cutoffs: tuple[int, ...] = ()  # adaptive-embedding clusters; () = Architecture's default for vocab_size
    backbone: str = "gpt2"
    mem_len: int | None = None  # recurrence memory of every architecture (None: the backbone's default)
    block_types: tuple[str, ...] = ()  # per-layer block-type choices (PAR); () = every layer standard
    par_rules: bool = False  # repair block types by the PAR study's rules
    # Fields some backbones have (Backbone.architecture_fields); () = no such gene, the architecture's default:
    n_kv_head: tuple[int, ...] = ()  # per layer key/value heads: of these, the ones dividing the layer's n_head
    head_dim: tuple[int, ...] = ()  # one head size per architecture (() = each layer's d_model / n_head)
    tie_embeddings: tuple[bool, ...] = ()  # the output layer tied to the token embedding, or its own
    source: str = field(default="default", compare=False)

    def __post_init__(self) -> None:
        for name in ("n_layer", "d_model", "n_head", "d_inner", "d_embed", "div_val", *FAMILY_GENES):
            values = getattr(self, name)
            if not values and name not in ("d_embed", *FAMILY_GENES):
                raise LtsedgeError(f"search space: {name} has no choices")
            object.__setattr__(self, name, tuple(sorted(set(values))))
        self._check_block_types()
        self._check_family_genes()
        if self.max_layers > MAX_LAYERS:
            raise LtsedgeError(f"search space: n_layer {self.max_layers} is over the {MAX_LAYERS:,} layers an "
                               f"architecture of a search may have")
        for d in self.d_model:
            if not self._n_inner(d):
                raise LtsedgeError(
                    f"search space: no d_inner choice is >= {self.d_inner_min_ratio} x d_model = {d} "
                    f"(d_inner max is {max(self.d_inner)})"
                )
            bad = [h for h in self.n_head if d % h] if not self.head_dim else []
            if bad:
                raise LtsedgeError(f"search space: n_head {bad[0]} does not divide d_model {d}")
        self._check_head_sizes()
        # Build one architecture per extreme to surface invalid fixed fields (vocab, cutoffs) now.
        self.decode(np.zeros(self.n_genes, dtype=int))
        self.decode(np.array(self.upper_bounds))

    def _check_block_types(self) -> None:
        types = tuple(self.block_types)
        reject_unknown("block type", types, BLOCK_TYPES, sort_known=False, where="search space")
        # Canonical order, so equal spaces compare equal.
        object.__setattr__(self, "block_types", tuple(t for t in BLOCK_TYPES if t in types))
        if self.par_rules and "ffn" not in self.block_types:
            raise LtsedgeError("search space: par_rules need the block type 'ffn' among block_types")
        if self.par_rules and self.block_types == ("ffn",):
            raise LtsedgeError("search space: par_rules need a block type with attention among block_types")

    def _check_family_genes(self) -> None:
        fields_ = get_backbone(self.backbone).architecture_fields
        for name in FAMILY_GENES:
            if getattr(self, name) and name not in fields_:
                raise LtsedgeError(f"search space: {name} is not a field of backbone {self.backbone}")
        if self.n_kv_head:
            for h in self.n_head:
                if not self.kv_choices(h):
                    raise LtsedgeError(f"search space: no n_kv_head choice divides n_head {h} (query heads share "
                                       f"key/value heads in equal groups; 1 divides every n_head)")

    def _check_head_sizes(self) -> None:
        """One architecture per head size the space makes, so a backbone's rule on it (e.g. Llama's even
        rotary pairs) is refused with the space, not mid-search."""
        x = np.zeros(self.n_genes, dtype=int)
        if self.head_dim:
            for i in range(len(self.head_dim)):
                x[self._tail_gene("head_dim")] = i
                self._checked(x, "")
            return
        sizes = {}
        for i, d in enumerate(self.d_model):
            for j, h in enumerate(self.n_head):
                sizes.setdefault(d // h, (i, j))
        for size, (i, j) in sizes.items():
            x[1], x[self._layer_genes("n_head", self.max_layers)] = i, j
            self._checked(x, f"d_model {self.d_model[i]} / n_head {self.n_head[j]} = {size}: ")

    def _checked(self, x, where: str) -> None:
        try:
            self.decode(x)
        except LtsedgeError as e:
            raise LtsedgeError(f"search space: {where}{e}") from None

    @classmethod
    def default(cls, backbone: str = "gpt2", **changes: Any) -> SearchSpace:
        """The backbone's default space (the study's ranges unless the backbone has its own), with ``changes``."""
        return cls(**{**get_backbone(backbone).default_space(), **changes, "backbone": backbone})

    # --- choices -------------------------------------------------------------------------------
    @property
    def max_layers(self) -> int:
        return max(self.n_layer)

    @property
    def d_embed_choices(self) -> tuple[int | None, ...]:
        return self.d_embed or (None,)  # None: the architecture's d_embed defaults to its d_model

    def d_inner_choices(self, d_model: int) -> tuple[int, ...]:
        return self.d_inner[len(self.d_inner) - self._n_inner(d_model):]

    def kv_choices(self, n_head: int) -> tuple[int, ...]:
        """The key/value-head choices of a layer of ``n_head`` query heads (() where the space has none)."""
        return tuple(kv for kv in self.n_kv_head if n_head % kv == 0)

    def _n_inner(self, d_model: int) -> int:
        """How many d_inner choices d_model allows (d_inner is sorted)."""
        return len(self.d_inner) - bisect.bisect_left(self.d_inner, self.d_inner_min_ratio * d_model)

    def size(self) -> int:
        """The exact number of distinct architectures in the space (``space_size.size``)."""
        return space_size.size(self)

    def size_log10(self) -> float:
        """log10 of size(), summed in logarithms (``space_size.size_log10``)."""
        return space_size.size_log10(self)

    # --- sampling ------------------------------------------------------------------------------
    def sample(self, n: int, seed: int | None = None) -> list[Architecture]:
        """Uniform per choice: n_layer, d_model, then each layer's n_head and d_inner (within its bound)."""
        rng = random.Random(seed)
        return [self._sample_one(rng) for _ in range(n)]

    def _sample_one(self, rng: random.Random) -> Architecture:
        n_layer, d_model = rng.choice(self.n_layer), rng.choice(self.d_model)
        heads = [rng.choice(self.n_head) for _ in range(n_layer)]
        inner = [rng.choice(self.d_inner_choices(d_model)) for _ in range(n_layer)]
        d_embed, div_val = rng.choice(self.d_embed_choices), rng.choice(self.div_val)
        # The optional genes are drawn only where the space has them: other spaces sample as they did.
        family = {}
        if self.n_kv_head:
            family["kv"] = [rng.choice(self.kv_choices(h)) for h in heads]
        for name in self.tail_genes:
            family[name] = rng.choice(getattr(self, name))
        if not self.block_types:
            return self._architecture(n_layer, d_model, heads, inner, d_embed, div_val, **family)
        # Built with its block types, so a space without the standard block (e.g. ffn and attn only) samples
        types = [self.block_types[rng.randrange(len(self.block_types))] for _ in range(n_layer)]
        arch = self._architecture(n_layer, d_model, heads, inner, d_embed, div_val, types, **family)
        return self.decode(self.encode(arch))  # canonical genes (and the PAR rules)

    def _architecture(self, n_layer, d_model, heads, inner, d_embed, div_val, block_types=(), kv=(), head_dim=None,
                      tie_embeddings=None) -> Architecture:
        return Architecture(
            n_layer=n_layer, d_model=d_model, n_head=tuple(heads), d_inner=tuple(inner), d_embed=d_embed,
            div_val=div_val, vocab_size=self.vocab_size, n_positions=self.n_positions, cutoffs=self.cutoffs,
            backbone=self.backbone, mem_len=self.mem_len, block_types=tuple(block_types), n_kv_head=tuple(kv),
            head_dim=head_dim, tie_embeddings=tie_embeddings,
        )

    # --- description and configuration -----------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What the space holds; "size" is exact below 10^EXACT_SIZE_DIGITS, else None ("size_log10" always)."""
        log10 = self.size_log10()
        return {
            "source": self.source,
            "n_layer": _describe(self.n_layer),
            "d_model": _describe(self.d_model),
            "n_head (per layer)": _describe(self.n_head),
            "d_inner (per layer)": f"{_describe(self.d_inner)}, at least {self.d_inner_min_ratio:g} x d_model",
            "d_embed": _describe(self.d_embed) if self.d_embed else "= d_model",
            "div_val": _describe(self.div_val),
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            **({"block types (per layer)": _describe_types(self.block_types)
                + (", PAR rules" if self.par_rules else "")} if self.block_types else {}),
            **({"mem_len": self.mem_len} if self.mem_len is not None else {}),
            **({"n_kv_head (per layer)": f"{_describe(self.n_kv_head)}, those dividing the layer's n_head"}
               if self.n_kv_head else {}),
            **({"head_dim": _describe(self.head_dim)} if self.head_dim else {}),
            **({"tie_embeddings": "{" + ", ".join(str(t).lower() for t in self.tie_embeddings) + "}"}
               if self.tie_embeddings else {}),
            "size": self.size() if log10 < EXACT_SIZE_DIGITS else None,
            "size_log10": round(log10, 2),
        }

    def to_dict(self) -> dict[str, Any]:
        """Its fields; the optional genes only where set, so every other space's dict (a checkpoint's
        identity) is what it was."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if k != "source" and not (k in FAMILY_GENES and not v)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config", backbone: str | None = None) -> SearchSpace:
        """A space from TOML data; ``backbone`` (e.g. ``--backbone``) is the default of its ``backbone`` key
        and must agree with it when both are given."""
        try:
            reject_unknown("search-space key", data, (f.name for f in fields(cls) if f.name != "source"))
        except LtsedgeError as e:
            raise LtsedgeError(f"{source}: {e}") from None
        values = {k: parse_value(k, v, source) for k, v in data.items()}
        given = values.pop("backbone", None)
        if backbone is not None and given is not None and given != backbone:
            raise LtsedgeError(f"{source}: backbone = {given!r} contradicts --backbone {backbone}")
        try:
            return cls.default(given or backbone or "gpt2", **values, source=source)
        except LtsedgeError as e:
            raise LtsedgeError(f"{source}: {e}") from None

    @classmethod
    def load(cls, path: str | Path, backbone: str | None = None) -> SearchSpace:
        data = read_toml(path, "search-space file")
        return cls.from_dict(data.get("space", data), source=str(path), backbone=backbone)


def _describe_types(types: tuple[str, ...]) -> str:
    return "{" + ", ".join(types) + "}"


def _describe(values: tuple[int, ...]) -> str:
    steps = {b - a for a, b in zip(values, values[1:])}
    if len(values) > 3 and len(steps) == 1:
        return f"{values[0]}..{values[-1]} step {steps.pop()} ({len(values)} choices)"
    return "{" + ", ".join(map(str, values)) + "}"
