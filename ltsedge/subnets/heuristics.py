"""The known ways to prune a trained model, as genes of its space: what a search of sub-networks must beat.

- ShortGPT: drop the layers of least block influence;
- uniform width pruning with the same importance, every layer alike: its SwiGLU channels, or its key/value
  groups (each with its query heads).
"""

from __future__ import annotations

from ltsedge.errors import LtsedgeError
from ltsedge.subnets.genes import SubnetGenes, SubnetSpace
from ltsedge.subnets.importance import Importance, ranked


def drop_least_influential(space: SubnetSpace, importance: Importance, layers: int) -> SubnetGenes:
    """The parent without its ``layers`` layers of least block influence (ShortGPT)."""
    if not 0 <= layers < space.n_layer:
        raise LtsedgeError(f"{layers} layers cannot be dropped from a model of {space.n_layer}: at least one stays")
    kept = set(ranked(importance.block_influence, space.n_layer - layers).tolist()) if layers else None
    full = space.full()
    keep = full.keep if kept is None else tuple(i in kept for i in range(space.n_layer))
    return space.check(SubnetGenes(keep, full.kv_groups, full.ffn))


def uniform_ffn(space: SubnetSpace, width: int) -> SubnetGenes:
    """Every layer's SwiGLU narrowed to ``width`` channels (or kept whole where it is no wider)."""
    full = space.full()
    return space.check(SubnetGenes(full.keep, full.kv_groups, tuple(min(width, d) for d in full.ffn)))


def uniform_kv_groups(space: SubnetSpace, groups: int) -> SubnetGenes:
    """Every layer keeping ``groups`` key/value groups (or all it has where it has no more)."""
    full = space.full()
    return space.check(SubnetGenes(full.keep, tuple(min(groups, g) for g in full.kv_groups), full.ffn))
