"""GPT-2 decoder with per-layer heads and FFN width: the reference model for every candidate.

Pre-LayerNorm blocks, causal self-attention and a GELU MLP, all with biases; learned positions;
a final LayerNorm; an output layer tied to the token embedding, or the tied adaptive softmax when
the architecture uses adaptive input embeddings. Written to be read top to bottom, after nanoGPT.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ltsedge.architecture import Architecture
from ltsedge.backbones.adaptive.model import AdaptiveEmbedding, AdaptiveLogits
from ltsedge.backbones.weights import materialize

LAYER_NORM_EPS = 1e-5


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, d_inner)
        self.gelu = nn.GELU()  # exact (erf) GELU
        self.c_proj = nn.Linear(d_inner, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_inner: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.mlp = MLP(d_model, d_inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """``forward(input_ids [B, T]) -> logits [B, T, vocab_size]``.

    The decoder is ``h`` (the blocks) and ``ln_f``: exactly what the decoder-parameter proxy counts.
    """

    DECODER_MODULES = ("h", "ln_f")

    def __init__(self, arch: Architecture):
        super().__init__()
        self.arch = arch
        d = arch.d_model
        self.wte = AdaptiveEmbedding(arch) if arch.adaptive else nn.Embedding(arch.vocab_size, d)
        self.wpe = nn.Embedding(arch.n_positions, d)
        self.h = nn.ModuleList(Block(d, nh, di) for nh, di in zip(arch.n_head, arch.d_inner))
        self.ln_f = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.lm_head = AdaptiveLogits(arch, self.wte) if arch.adaptive else None

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.size(1)
        pos = torch.arange(T, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if self.lm_head is None:
            return F.linear(x, self.wte.weight)  # tied output layer, no bias
        return self.lm_head(x)


def build_model(arch: Architecture, seed: int = 0, shared_weights: bool = False) -> GPT2:
    """The model with deterministic random weights (see ``ltsedge.backbones.weights.materialize``)."""
    with torch.device("meta"):
        model = GPT2(arch)
    return materialize(model, seed, shared_weights)
