"""A search space's integer encoding for pymoo, and its repair.

A fixed-length integer vector of choice indices, ``[n_layer, d_model, d_embed, div_val, n_head_1..n_head_L,
d_inner_1..d_inner_L]`` with L the largest n_layer. Genes of layers beyond n_layer are ignored; a d_inner
below the space's floor at d_model is raised to it. So every vector in the bounds decodes to a valid
architecture (``decode`` is the repair), and ``encode(decode(x))`` is the canonical vector of that
architecture.

PAR block types (``block_types``): one more gene per layer, appended after the d_inner genes, so spaces
without them encode as before. A gene a layer's block type does not use (heads of an FFN-only layer,
d_inner of an attention-only one) decodes to the first choice, so one model has one architecture.
``par_rules`` adds the PAR study's findings as a repair: attention only in the first two thirds of the
layers, at most one attention layer per five layers (rounded up), at least one.

Grouped heads and head size (``n_kv_head``, ``head_dim``, ``tie_embeddings``): one more gene per layer for its
key/value heads, then one gene for the head size and one for the tied output layer, appended last, so
spaces without them encode as before. A layer's key/value-head gene decodes to the largest choice at most
its value that divides the layer's query heads (else the smallest that does): every vector is a valid
architecture.

``SpaceEncoding`` is a part of ``space.SearchSpace``: it reads the space's choices (its fields,
``max_layers``, ``d_embed_choices``, ``d_inner_choices``, ``kv_choices``) and builds architectures with its
``_architecture``.
"""

from __future__ import annotations

import numpy as np

from ltsedge import space_size
from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError

N_GLOBAL_GENES = 4  # n_layer, d_model, d_embed, div_val


class SpaceEncoding:
    """The gene layout of a ``SearchSpace``, ``decode`` (any vector in the bounds -> a valid architecture),
    ``encode`` and ``contains``."""

    @property
    def layer_genes(self) -> tuple[str, ...]:
        """The fields with a gene per layer, in the order of the encoding (the optional ones last)."""
        return ("n_head", "d_inner", *(name for name in ("block_types", "n_kv_head") if getattr(self, name)))

    @property
    def tail_genes(self) -> tuple[str, ...]:
        """The optional fields with one gene, after every layer's."""
        return tuple(name for name in ("head_dim", "tie_embeddings") if getattr(self, name))

    @property
    def n_genes(self) -> int:
        return N_GLOBAL_GENES + len(self.layer_genes) * self.max_layers + len(self.tail_genes)

    @property
    def upper_bounds(self) -> list[int]:
        globals_ = [len(self.n_layer), len(self.d_model), len(self.d_embed_choices), len(self.div_val)]
        per_layer = [len(getattr(self, name)) for name in self.layer_genes]
        tail = [len(getattr(self, name)) for name in self.tail_genes]
        return [n - 1 for n in globals_ + [n for n in per_layer for _ in range(self.max_layers)] + tail]

    def _layer_genes(self, name: str, n_layer: int) -> slice:
        """The genes of ``name`` (one of ``layer_genes``) of the first ``n_layer`` layers."""
        start = N_GLOBAL_GENES + self.layer_genes.index(name) * self.max_layers
        return slice(start, start + n_layer)

    def _tail_gene(self, name: str) -> int:
        return N_GLOBAL_GENES + len(self.layer_genes) * self.max_layers + self.tail_genes.index(name)

    def decode(self, x) -> Architecture:
        """Any integer vector within the bounds -> a valid architecture (this is the repair)."""
        g = [int(round(v)) for v in x]
        g = np.array([min(max(v, 0), hi) for v, hi in zip(g, self.upper_bounds)])
        n_layer, d_model = self.n_layer[g[0]], self.d_model[g[1]]
        heads = [self.n_head[i] for i in g[self._layer_genes("n_head", n_layer)]]
        lowest = self.d_inner_choices(d_model)[0]
        inner = [max(self.d_inner[i], lowest) for i in g[self._layer_genes("d_inner", n_layer)]]
        types = [self.block_types[i] for i in g[self._layer_genes("block_types", n_layer)]] if self.block_types else []
        if self.par_rules:
            types = self._par_repair(types)
        for i, t in enumerate(types):  # genes a block type does not use: the first choice
            if t == "ffn":
                heads[i] = self.n_head[0]
            elif t == "attn":
                inner[i] = lowest
        kv = []
        if self.n_kv_head:  # a layer without attention: the first choice, as for its heads
            genes = g[self._layer_genes("n_kv_head", n_layer)]
            kv = [self._kv_repair(self.n_kv_head[0 if types and types[i] == "ffn" else k], h)
                  for i, (k, h) in enumerate(zip(genes, heads))]
        return self._architecture(n_layer, d_model, heads, inner, self.d_embed_choices[g[2]], self.div_val[g[3]],
                                  types, kv, self._tail_choice("head_dim", g), self._tail_choice("tie_embeddings", g))

    def _kv_repair(self, wanted: int, n_head: int) -> int:
        """The largest key/value-head choice at most ``wanted`` that divides ``n_head``, else the smallest."""
        allowed = self.kv_choices(n_head)
        return max((kv for kv in allowed if kv <= wanted), default=allowed[0])

    def _tail_choice(self, name: str, g):
        choices = getattr(self, name)
        return choices[g[self._tail_gene(name)]] if choices else None

    def _par_repair(self, types: list[str]) -> list[str]:
        """Attention only in the first two thirds, at most one attention layer per five, at least one."""
        eligible, cap = space_size.par_limits(len(types))
        out, kept = [], 0
        for i, t in enumerate(types):
            if t != "ffn" and (i >= eligible or kept >= cap):
                t = "ffn"
            kept += t != "ffn"
            out.append(t)
        if not kept:
            out[0] = next(t for t in self.block_types if t != "ffn")
        return out

    def encode(self, arch: Architecture, fill=None) -> np.ndarray:
        """The vector of ``arch``; genes of absent layers, and genes a layer's block type does not use,
        are copied from ``fill`` (or 0)."""
        x = np.zeros(self.n_genes, dtype=int) if fill is None else np.array(fill, dtype=int)
        n = arch.n_layer
        try:
            if arch.backbone != self.backbone or (arch.block_types and not self.block_types):
                raise ValueError
            x[:N_GLOBAL_GENES] = [
                self.n_layer.index(arch.n_layer), self.d_model.index(arch.d_model),
                self.d_embed_choices.index(arch.d_embed if self.d_embed or arch.d_embed != arch.d_model else None),
                self.div_val.index(arch.div_val),
            ]
            for i in range(n):
                if arch.has_attention(i) or not self.block_types:
                    x[self._layer_genes("n_head", n).start + i] = self.n_head.index(arch.n_head[i])
                    if self.n_kv_head:
                        x[self._layer_genes("n_kv_head", n).start + i] = self.n_kv_head.index(arch.kv_heads[i])
                if arch.has_ffn(i) or not self.block_types:
                    x[self._layer_genes("d_inner", n).start + i] = self.d_inner.index(arch.d_inner[i])
                if self.block_types:
                    x[self._layer_genes("block_types", n).start + i] = self.block_types.index(arch.block_type(i))
            self._encode_family_genes(arch, x)
        except ValueError:
            raise LtsedgeError(f"architecture {arch.id} is not in the search space ({self.source})") from None
        return x

    def _encode_family_genes(self, arch: Architecture, x: np.ndarray) -> None:
        """The head-size and tying genes; an architecture whose grouped heads, head size or tying the space
        does not vary must have the values the space's architectures get (ValueError if not)."""
        if not self.n_kv_head and arch.kv_heads != arch.n_head:
            raise ValueError
        if self.head_dim:
            x[self._tail_gene("head_dim")] = self.head_dim.index(arch.head_dim)
        elif arch.d_head != tuple(arch.d_model // h for h in arch.n_head):
            raise ValueError
        if self.tie_embeddings:
            x[self._tail_gene("tie_embeddings")] = self.tie_embeddings.index(arch.tie_embeddings)
        elif arch.tie_embeddings is False:  # every backbone's default output layer is tied
            raise ValueError

    def repair(self, x) -> np.ndarray:
        return self.encode(self.decode(x), fill=np.clip(np.round(x), 0, self.upper_bounds))

    def contains(self, arch: Architecture) -> bool:
        try:
            return self.decode(self.encode(arch)) == arch
        except LtsedgeError:
            return False
