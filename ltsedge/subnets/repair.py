"""Training-free repair of a pruned layer: its output projections refitted by least squares on calibration
activations (as SliceGPT and FLAP compensate a pruning with a closed form, no gradient).

A layer that keeps the channels K of its SwiGLU (or the query heads K of its attention) writes ``W[:, K] x_K``
where the parent wrote ``W x``. The kept columns are refitted so that ``W' x_K`` is the least-squares
estimate of the parent's ``W x`` over the calibration tokens:

    W' G[K, K] = W G[:, K],   G = sum over tokens of x x^T (the input's second moments)

with a small ridge on G[K, K]. The pruned parts' mean contribution is absorbed where it correlates with what
stays; the shapes do not change, so the repaired child exports and runs like any other. Whether it helps is
measured, not assumed: a search keeps it only where held-out loss says so (``evaluate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ltsedge.architecture import Architecture
from ltsedge.subnets.genes import SubnetGenes, SubnetSpace
from ltsedge.subnets.importance import DEFAULT_BATCH, Importance
from ltsedge.subnets.parent import hooked_pass, model_of, torch
from ltsedge.subnets.slicing import LAYER, layer_rows, slice_state_dict

RIDGE = 1e-3  # of the kept inputs' mean second moment: keeps the solve well posed where inputs are collinear


@dataclass(frozen=True)
class Grams:
    """Per layer, the second moments (float64) of the inputs of o_proj (the heads' outputs) and of down_proj
    (the SwiGLU's channels) over the calibration tokens."""

    attention: tuple[torch.Tensor, ...]
    ffn: tuple[torch.Tensor, ...]
    tokens: int


def measure_grams(arch: Architecture, weights: Mapping, windows, batch: int = DEFAULT_BATCH,
                  threads: int | None = None) -> Grams:
    """The calibration ``windows``' second moments at every layer's output projections."""
    windows = torch.as_tensor(np.asarray(windows, dtype=np.int64))
    model = model_of(arch, weights)
    attention = [torch.zeros(h * arch.head_dim, h * arch.head_dim, dtype=torch.float64) for h in arch.n_head]
    ffn = [torch.zeros(d, d, dtype=torch.float64) for d in arch.d_inner]

    def adder(sums, i):
        def add(_, args):
            x = args[0].reshape(-1, args[0].size(-1))
            sums[i] += (x.T @ x).double()
        return add

    handles = [h for i, layer in enumerate(model.layers) for h in (
        layer.self_attn.o_proj.register_forward_pre_hook(adder(attention, i)),
        layer.mlp.down_proj.register_forward_pre_hook(adder(ffn, i)))]
    hooked_pass(model, windows, batch, threads, handles)
    return Grams(tuple(attention), tuple(ffn), windows.numel())


def repaired_state_dict(parent: Architecture, weights: Mapping, genes: SubnetGenes, importance: Importance,
                        grams: Grams) -> tuple[Architecture, dict]:
    """``slicing.slice_state_dict``'s child with each pruned layer's o_proj and down_proj refitted."""
    child, state = slice_state_dict(parent, weights, genes, importance)
    space = SubnetSpace(parent, ffn_step=1)
    for j, i in enumerate(genes.kept_layers):
        rows = layer_rows(space, i, genes, importance)
        for kept, name, gram in ((rows["q"], "self_attn.o_proj.weight", grams.attention[i]),
                                 (rows["ffn"], "mlp.down_proj.weight", grams.ffn[i])):
            if kept is not None:
                state[f"{LAYER}{j}.{name}"] = refit(weights[f"{LAYER}{i}.{name}"], gram, kept)
    return child, state


def refit(weight: torch.Tensor, gram: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """The columns ``kept`` of ``weight`` [out, in] refitted to reproduce ``weight`` on inputs of second
    moments ``gram`` [in, in]: solves W' G[K, K] = W G[:, K] (float64), returned as float32."""
    g_kk = gram[kept][:, kept]
    ridge = RIDGE * float(g_kk.diagonal().mean()) + 1e-12
    rhs = gram[kept] @ weight.double().T  # G[K, :] W^T = (W G[:, K])^T
    solved = torch.linalg.solve(g_kk + ridge * torch.eye(len(kept), dtype=torch.float64), rhs)
    return solved.T.to(torch.float32).contiguous()
