"""Adaptive input embeddings and the tied adaptive softmax (Baevski & Auli 2019; Transformer-XL).

Clusters as in ``params.py``. The output layer reuses (ties) the tables and projections: a head
softmax over the first cluster's tokens plus one logit per tail cluster, and a softmax per tail
cluster. Its output is the log-probability of every token, so it is still ``[..., vocab_size]``
logits for the full vocabulary.

Both modules compute every cluster for every position and select with masks: wasteful by a factor of
the cluster count on the (cheap) embedding side, but export-friendly (no data-dependent shapes).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ltsedge.architecture import Architecture
from ltsedge.backbones.adaptive.params import cluster_bounds, cluster_dims


class AdaptiveEmbedding(nn.Module):
    def __init__(self, arch: Architecture):
        super().__init__()
        self.bounds = cluster_bounds(arch)
        dims = cluster_dims(arch)
        if arch.div_val == 1:  # one table, one projection
            self.tables = nn.ParameterList([nn.Parameter(torch.empty(arch.vocab_size, arch.d_embed))])
            self.projs = nn.ParameterList([nn.Parameter(torch.empty(arch.d_model, arch.d_embed))])
        else:
            self.tables = nn.ParameterList(
                [nn.Parameter(torch.empty(hi - lo, d)) for (lo, hi), d in zip(self.bounds, dims)]
            )
            self.projs = nn.ParameterList([nn.Parameter(torch.empty(arch.d_model, d)) for d in dims])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if len(self.tables) == 1:
            return F.linear(F.embedding(idx, self.tables[0]), self.projs[0])
        out = 0
        for (lo, hi), table, proj in zip(self.bounds, self.tables, self.projs):
            local = (idx - lo).clamp(0, hi - lo - 1)
            in_cluster = ((idx >= lo) & (idx < hi)).unsqueeze(-1).to(table.dtype)
            out = out + F.linear(F.embedding(local, table), proj) * in_cluster
        return out


class AdaptiveLogits(nn.Module):
    """Tied adaptive softmax: log-probabilities over the full vocabulary."""

    def __init__(self, arch: Architecture, embedding: AdaptiveEmbedding):
        super().__init__()
        self.embedding = [embedding]  # a plain list: tied weights are not registered twice
        self.bounds = cluster_bounds(arch)
        n_tails = len(arch.cutoffs)
        self.cluster_weight = nn.Parameter(torch.empty(n_tails, arch.d_embed))
        self.cluster_bias = nn.Parameter(torch.empty(n_tails))
        self.bias = nn.Parameter(torch.empty(arch.vocab_size))

    def cluster_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(table, projection) for each cluster; slices of the single table when div_val == 1."""
        emb = self.embedding[0]
        if len(emb.tables) == 1:
            return [(emb.tables[0][lo:hi], emb.projs[0]) for lo, hi in self.bounds]
        return list(zip(emb.tables, emb.projs))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weights = self.cluster_weights()
        head_table, head_proj = weights[0]
        lo, hi = self.bounds[0]
        head_w = torch.cat([head_table, self.cluster_weight], dim=0)
        head_b = torch.cat([self.bias[lo:hi], self.cluster_bias], dim=0)
        head = F.log_softmax(F.linear(h @ head_proj, head_w, head_b), dim=-1)
        head_size = hi - lo
        pieces = [head[..., :head_size]]
        # The head's last entries are one log-probability per tail cluster, in cluster order.
        for i, ((table, proj), (lo, hi)) in enumerate(zip(weights[1:], self.bounds[1:])):
            tail = F.log_softmax(F.linear(h @ proj, table, self.bias[lo:hi]), dim=-1)
            pieces.append(tail + head[..., head_size + i : head_size + i + 1])
        return torch.cat(pieces, dim=-1)
