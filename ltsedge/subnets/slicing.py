"""A sub-network's weights: slices of the parent's, no training.

In each kept layer the most important key/value groups, the most important query heads of each kept group and
the most important SwiGLU channels fill its counts, kept in the parent's order. A group takes its key and value
rows; a query head its rows of q_proj and its columns of o_proj; a channel its gate and up rows and its
down_proj column. Norms, the embedding and the output layer are the parent's. Keeping everything gives the
parent's tensors themselves, so the child is the parent.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.subnets.genes import SubnetGenes, SubnetSpace
from ltsedge.subnets.importance import Importance, ranked
from ltsedge.subnets.parent import torch

LAYER = "layers."


def slice_state_dict(parent: Architecture, weights: Mapping[str, torch.Tensor], genes: SubnetGenes,
                     importance: Importance) -> tuple[Architecture, dict]:
    """The child's architecture and state_dict (in the reference model's names, its layers renumbered) for
    ``genes`` over ``parent`` with ``weights`` (``parent.parent_weights``), filled by ``importance``. Any
    count up to the parent's is sliced: the search's step is its space's (``SubnetSpace.ffn_step``)."""
    space = SubnetSpace(parent, ffn_step=1)
    child = space.architecture(genes)
    _check_importance(parent, importance)
    out = {name: tensor for name, tensor in weights.items() if not name.startswith(LAYER)}
    for j, i in enumerate(genes.kept_layers):
        rows = layer_rows(space, i, genes, importance)
        for name, dim, kept in _slices(rows):
            tensor = weights[f"{LAYER}{i}.{name}"]
            out[f"{LAYER}{j}.{name}"] = tensor if kept is None else tensor.index_select(dim, kept).contiguous()
    return child, out


def layer_rows(space: SubnetSpace, i: int, genes: SubnetGenes, importance: Importance) -> dict:
    """Layer ``i``'s kept rows (None: all of them): of q/o (query heads), k/v (key/value heads), the SwiGLU.
    The query heads of a kept group stay together, so query head j of the child reads its group j // q_heads."""
    parent = space.parent
    head_dim, group, q_heads = parent.head_dim, space.group_size(i), space.q_heads(genes, i)
    rows = {"q": None, "kv": None, "ffn": None}
    groups = ranked(importance.kv_groups[i], genes.kv_groups[i])
    if genes.kv_groups[i] < parent.kv_heads[i]:
        rows["kv"] = _feature_rows(groups, head_dim)
    if rows["kv"] is not None or q_heads < group:
        heads = [g * group + (ranked(_q_scores(importance, i)[g * group:(g + 1) * group], q_heads)
                              if q_heads < group else np.arange(group)) for g in groups]
        rows["q"] = _feature_rows(np.concatenate(heads), head_dim)
    if genes.ffn[i] < parent.d_inner[i]:
        rows["ffn"] = torch.from_numpy(ranked(importance.ffn[i], genes.ffn[i]))
    return rows


def _slices(rows: dict) -> list[tuple[str, int, torch.Tensor | None]]:
    """(tensor name in the layer, dimension sliced, indices kept) for every tensor of a layer."""
    return [("input_layernorm.weight", 0, None), ("post_attention_layernorm.weight", 0, None),
            ("self_attn.q_proj.weight", 0, rows["q"]), ("self_attn.o_proj.weight", 1, rows["q"]),
            ("self_attn.k_proj.weight", 0, rows["kv"]), ("self_attn.v_proj.weight", 0, rows["kv"]),
            ("mlp.gate_proj.weight", 0, rows["ffn"]), ("mlp.up_proj.weight", 0, rows["ffn"]),
            ("mlp.down_proj.weight", 1, rows["ffn"])]


def _q_scores(importance: Importance, i: int) -> np.ndarray:
    if importance.q_heads is None:
        raise LtsedgeError("this importance holds no figures per query head: measure it again to prune query heads")
    return importance.q_heads[i]


def _feature_rows(heads: np.ndarray, head_dim: int) -> torch.Tensor:
    """The rows of a projection holding ``heads``, each ``head_dim`` rows."""
    return torch.from_numpy((heads[:, None] * head_dim + np.arange(head_dim)).reshape(-1))


def _check_importance(parent: Architecture, importance: Importance) -> None:
    """Importance measured on this parent: one figure per layer, group, query head and channel."""
    shapes = ([len(v) for v in importance.kv_groups], [len(v) for v in importance.ffn],
              len(importance.block_influence))
    heads = list(parent.n_head) if importance.q_heads is None else [len(v) for v in importance.q_heads]
    if shapes != (list(parent.kv_heads), list(parent.d_inner), parent.n_layer) or heads != list(parent.n_head):
        raise LtsedgeError("the importance was measured on another model: its layers, groups, heads or channels "
                           "differ from this one's")
