"""The genes of a sub-network of a trained Llama model, and the architecture they describe.

Every layer chooses for itself (heterogeneous, as the search's other spaces): whether it is kept, how many of
its key/value groups it keeps, how many of the query heads that read each kept group (the same count in every
group of a layer, so it stays grouped-query attention), and how many SwiGLU channels, in steps of
``ffn_step`` (64 by default: widths the matrix kernels like) or all of them. A gene is a count: which groups,
heads and channels fill it is the importance's choice (``slicing``).

Query heads are a gene of their own because a decode step reads the cache once per query head in
onnxruntime's grouped-query attention: at a 2048-token past, SmolLM2-135M keeping one query head of each group
decodes in 0.58x the time, its cache unchanged (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.validate import is_int

DEFAULT_FFN_STEP = 64


@dataclass(frozen=True)
class SubnetGenes:
    """Per layer of the parent: kept or dropped, key/value groups kept, SwiGLU channels kept, query heads kept
    in each kept group (None: every group keeps all of them, in every layer). A dropped layer's counts are not
    read."""

    keep: tuple[bool, ...]
    kv_groups: tuple[int, ...]
    ffn: tuple[int, ...]
    q_heads: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("keep", "kv_groups", "ffn") + (("q_heads",) if self.q_heads is not None else ()):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def kept_layers(self) -> tuple[int, ...]:
        """The parent's indices of the layers kept, in order."""
        return tuple(i for i, kept in enumerate(self.keep) if kept)

    def to_dict(self) -> dict:
        """The lists keep, kv_groups and ffn, and q_heads where a group loses query heads."""
        data = {"keep": list(self.keep), "kv_groups": list(self.kv_groups), "ffn": list(self.ffn)}
        return data if self.q_heads is None else {**data, "q_heads": list(self.q_heads)}

    @classmethod
    def from_dict(cls, data: dict) -> SubnetGenes:
        if not isinstance(data, dict) or sorted(set(data) - {"q_heads"}) != ["ffn", "keep", "kv_groups"] or \
                not all(isinstance(v, list) for v in data.values()):
            raise LtsedgeError("sub-network genes must be an object with the lists keep, kv_groups and ffn "
                               "(and optionally q_heads)")
        return cls(data["keep"], data["kv_groups"], data["ffn"], data.get("q_heads"))


@dataclass(frozen=True)
class SubnetSpace:
    """The sub-networks of ``parent`` (a ``llama`` architecture with one head size)."""

    parent: Architecture
    ffn_step: int = DEFAULT_FFN_STEP

    def __post_init__(self) -> None:
        check_parent(self.parent)
        if not is_int(self.ffn_step) or self.ffn_step < 1:
            raise LtsedgeError(f"the FFN step {self.ffn_step!r} must be an integer >= 1")

    @property
    def n_layer(self) -> int:
        return self.parent.n_layer

    def group_size(self, layer: int) -> int:
        """The query heads that read one key/value head of ``layer``."""
        return self.parent.n_head[layer] // self.parent.kv_heads[layer]

    def kv_choices(self, layer: int) -> tuple[int, ...]:
        return tuple(range(1, self.parent.kv_heads[layer] + 1))

    def q_choices(self, layer: int) -> tuple[int, ...]:
        """Query heads a kept group of ``layer`` may keep."""
        return tuple(range(1, self.group_size(layer) + 1))

    def q_heads(self, genes: SubnetGenes, layer: int) -> int:
        """The query heads each kept group of ``layer`` keeps."""
        return self.group_size(layer) if genes.q_heads is None else genes.q_heads[layer]

    def ffn_choices(self, layer: int) -> tuple[int, ...]:
        """Multiples of the step below the parent's width, and the parent's width (which need not be one)."""
        width = self.parent.d_inner[layer]
        return tuple(range(self.ffn_step, width, self.ffn_step)) + (width,)

    def full(self) -> SubnetGenes:
        """Everything kept: the parent itself."""
        return SubnetGenes((True,) * self.n_layer, self.parent.kv_heads, self.parent.d_inner)

    def check(self, genes: SubnetGenes) -> SubnetGenes:
        """``genes``, or a one-line error naming the first gene outside this space."""
        for name in ("keep", "kv_groups", "ffn") + (("q_heads",) if genes.q_heads is not None else ()):
            if len(getattr(genes, name)) != self.n_layer:
                raise LtsedgeError(f"sub-network gene {name!r} has {len(getattr(genes, name))} entries: the parent "
                                   f"has {self.n_layer} layers")
        if not all(isinstance(k, bool) for k in genes.keep):
            raise LtsedgeError("sub-network gene 'keep' must hold true or false for each layer")
        if not any(genes.keep):
            raise LtsedgeError("a sub-network must keep at least one layer")
        for i in genes.kept_layers:
            for name, choices in (("kv_groups", self.kv_choices(i)), ("ffn", self.ffn_choices(i)),
                                  ("q_heads", self.q_choices(i))):
                if getattr(genes, name) is None:
                    continue
                value = getattr(genes, name)[i]
                if not is_int(value) or value not in choices:
                    raise LtsedgeError(f"sub-network gene '{name}[{i}]' = {value!r} is invalid: must be one of "
                                       f"{_span(choices)}")
        return genes

    def canonical(self, genes: SubnetGenes) -> SubnetGenes:
        """``genes`` with a dropped layer's counts set to the parent's, and q_heads None where every group keeps
        all its query heads: one form for one sub-network."""
        self.check(genes)
        whole = {"kv_groups": self.parent.kv_heads, "ffn": self.parent.d_inner,
                 "q_heads": tuple(self.group_size(i) for i in range(self.n_layer))}
        counts = {name: tuple(value if kept else parent for value, parent, kept in
                              zip(getattr(genes, name) or whole[name], whole[name], genes.keep)) for name in whole}
        q_heads = None if counts["q_heads"] == whole["q_heads"] else counts["q_heads"]
        return SubnetGenes(genes.keep, counts["kv_groups"], counts["ffn"], q_heads)

    def architecture(self, genes: SubnetGenes) -> Architecture:
        """The child's architecture: the kept layers, each with its kept groups' kept query heads and its
        channels; everything else (width, head size, vocabulary, context, rotary base, epsilon, tying) the
        parent's."""
        self.check(genes)
        layers = genes.kept_layers
        n_head = tuple(genes.kv_groups[i] * self.q_heads(genes, i) for i in layers)
        return dataclasses.replace(
            self.parent, n_layer=len(layers), n_head=n_head,
            n_kv_head=tuple(genes.kv_groups[i] for i in layers), d_inner=tuple(genes.ffn[i] for i in layers))


def check_parent(arch: Architecture) -> None:
    """Sub-networks are cut from a ``llama`` model whose layers share one head size (as Hugging Face's do)."""
    if arch.backbone != "llama":
        raise LtsedgeError(f"sub-networks are cut from a llama model, not a {arch.backbone} one")
    if arch.head_dim is None:
        raise LtsedgeError(f"sub-networks need one head size in every layer (head_dim); this model's layers have "
                           f"{sorted(set(arch.d_head))}")


def _span(choices: tuple[int, ...]) -> str:
    if len(choices) <= 6:
        return ", ".join(map(str, choices))
    return f"{choices[0]}, {choices[1]}, ..., {choices[-2]}, {choices[-1]}"
