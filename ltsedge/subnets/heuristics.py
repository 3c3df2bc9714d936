"""The known ways to prune a trained model, as genes of its space: what a search of sub-networks must beat.

- ShortGPT: drop the layers of least block influence;
- uniform width pruning with the same importance, every layer alike: its SwiGLU channels, its key/value
  groups (each with its query heads), or the query heads of each group (its cache kept whole).
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


def uniform_q_heads(space: SubnetSpace, heads: int) -> SubnetGenes:
    """Every group of every layer keeping ``heads`` of its query heads (or all it has where it has no more)."""
    full = space.full()
    q_heads = tuple(min(heads, space.group_size(i)) for i in range(space.n_layer))
    return space.canonical(SubnetGenes(full.keep, full.kv_groups, full.ffn, q_heads))


LAYER_SHARES = (0.1, 0.2, 0.3, 0.4)  # of the layers ShortGPT drops
WIDTH_SHARES = (5 / 6, 2 / 3, 1 / 2, 1 / 3)  # of the widest SwiGLU uniform pruning keeps
KV_LADDER = 2  # uniform key/value groups (and query heads per group): the parent's count less one, less two


def known_prunings(space: SubnetSpace, importance: Importance) -> list[tuple[str, SubnetGenes]]:
    """The ladders a search is compared with, each point named: ShortGPT dropping a tenth to two fifths of
    the layers; every layer's SwiGLU at five sixths to a third of the widest (in the space's steps); every
    layer keeping one or two key/value groups fewer; every group keeping one or two query heads fewer."""
    n, step = space.n_layer, space.ffn_step
    points = [(f"shortgpt-drop-{k}", drop_least_influential(space, importance, k))
              for k in sorted({round(n * share) for share in LAYER_SHARES}) if 0 < k < n]
    widest = max(space.parent.d_inner)
    widths = sorted({max(step, step * round(widest * share / step)) for share in WIDTH_SHARES}, reverse=True)
    points += [(f"uniform-ffn-{w}", uniform_ffn(space, w)) for w in widths if w < widest]
    most = max(space.parent.kv_heads)
    points += [(f"uniform-kv-{g}", uniform_kv_groups(space, g)) for g in range(most - 1, max(0, most - 1 - KV_LADDER), -1)]
    group = max(space.group_size(i) for i in range(n))
    points += [(f"uniform-q-{h}", uniform_q_heads(space, h))
               for h in range(group - 1, max(0, group - 1 - KV_LADDER), -1)]
    full = space.full()
    return [(name, genes) for name, genes in points if genes != full]


def combined_prunings(space: SubnetSpace, importance: Importance) -> list[tuple[str, SubnetGenes]]:
    """Two known prunings at once, every layer alike: one or two key/value groups fewer with a tenth of the
    layers dropped or the SwiGLU at five sixths or two thirds of its width. Seeds of a search's first
    generation (not what it is compared with): points between the ladders, whose neighbours it refines."""
    n, step = space.n_layer, space.ffn_step
    full = space.full()
    most, widest = max(space.parent.kv_heads), max(space.parent.d_inner)
    kv_points = [uniform_kv_groups(space, g) for g in range(most - 1, max(0, most - 1 - KV_LADDER), -1)]
    others = []
    if round(n * LAYER_SHARES[0]) > 0:
        others.append(("drop", drop_least_influential(space, importance, round(n * LAYER_SHARES[0]))))
    for share in WIDTH_SHARES[:2]:
        width = max(step, step * round(widest * share / step))
        if width < widest:
            others.append((f"ffn-{width}", uniform_ffn(space, width)))
    points = []
    for kv in kv_points:
        for name, other in others:
            genes = SubnetGenes(other.keep, kv.kv_groups, other.ffn)
            if genes != full:
                points.append((f"kv-{min(kv.kv_groups)}+{name}", space.check(genes)))
    return points
