"""GPT-2 decoder with per-layer heads, FFN width and block type: the reference model for every candidate.

Pre-LayerNorm blocks, causal self-attention and a GELU MLP, all with biases; learned positions;
a final LayerNorm; an output layer tied to the token embedding, or the tied adaptive softmax when
the architecture uses adaptive input embeddings. PAR layers (``arch.block_types``) keep only their
attention or only their MLP. Written to be read top to bottom, after nanoGPT.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ltsedge.architecture import STANDARD_BLOCK, Architecture
from ltsedge.backbones.adaptive.model import AdaptiveEmbedding, AdaptiveLogits

LAYER_NORM_EPS = 1e-5
MASKED_SCORE = torch.finfo(torch.float32).min  # attention score of a position that may not be attended to
KeyValue = tuple[torch.Tensor, torch.Tensor]


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, past: KeyValue | None = None, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, KeyValue]:
        """``x [B, T, C]`` -> (output, (keys, values) of past + new tokens, ``[B, h, past + T, C/h]``).

        ``mask`` ([B, 1, T, past + T], True = may attend) carries causality and padding; without it
        the plain causal mask of a full sequence."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if mask is None:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~causal, float("-inf"))
        else:  # a finite floor: a query with nothing to attend to (left padding) gets no NaN
            att = att.masked_fill(~mask, MASKED_SCORE)
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y), (k, v)


class MLP(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, d_inner)
        self.gelu = nn.GELU()  # exact (erf) GELU
        self.c_proj = nn.Linear(d_inner, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm attention then MLP, each added to the residual stream. A PAR layer has only one of
    the two: ``block_type`` "ffn" has no attention (and no ``ln_1``, no cache), "attn" no MLP (no ``ln_2``).
    Absent sub-blocks are None, so their parameters do not exist and the state-dict names stay GPT-2's."""

    def __init__(self, d_model: int, n_head: int, d_inner: int, block_type: str = STANDARD_BLOCK):
        super().__init__()
        attention, ffn = block_type != "ffn", block_type != "attn"
        self.ln_1 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS) if attention else None
        self.attn = CausalSelfAttention(d_model, n_head) if attention else None
        self.ln_2 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS) if ffn else None
        self.mlp = MLP(d_model, d_inner) if ffn else None

    def forward(self, x: torch.Tensor, past: KeyValue | None = None, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, KeyValue | None]:
        present = None  # an FFN-only layer keeps no cache
        if self.attn is not None:
            a, present = self.attn(self.ln_1(x), past, mask)
            x = x + a
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT2(nn.Module):
    """``forward(input_ids [B, T]) -> logits [B, T, vocab_size]``; ``forward_with_cache`` for generation.

    The decoder is ``h`` (the blocks) and ``ln_f``: exactly what the decoder-parameter proxy counts.
    """

    DECODER_MODULES = ("h", "ln_f")

    def __init__(self, arch: Architecture):
        super().__init__()
        self.arch = arch
        d = arch.d_model
        self.wte = AdaptiveEmbedding(arch) if arch.adaptive else nn.Embedding(arch.vocab_size, d)
        self.wpe = nn.Embedding(arch.n_positions, d)
        self.h = nn.ModuleList(Block(d, arch.n_head[i], arch.d_inner[i], arch.block_type(i))
                               for i in range(arch.n_layer))
        self.ln_f = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.lm_head = AdaptiveLogits(arch, self.wte) if arch.adaptive else None

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The full-sequence pass (the ``forward`` export variant)."""
        T = input_ids.size(1)
        x = self.wte(input_ids) + self.wpe(torch.arange(T, device=input_ids.device))
        for block in self.h:
            x, _ = block(x)
        return self.logits(x)

    def forward_with_cache(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                           past: list[KeyValue] | None = None) -> tuple[torch.Tensor, list[KeyValue]]:
        """One step of generation (the ``generate`` export variant): new tokens ``input_ids [B, T]`` at
        ``position_ids [B, T]``, after the cached ``past`` (per attention layer, keys and values
        ``[B, h, P, C/h]``);
        ``attention_mask [B, P + T]`` is 0 at padding. Returns the logits and the cache of all P + T tokens.
        ``past=None`` is the prefill; with a cache of P tokens it computes the same logits as a prefill
        of all P + T tokens would for the last T (the tests check it). Cache k belongs to the k-th layer
        with attention (``kv_cache.cache_layers``); a model without attention has none."""
        T = input_ids.size(1)
        P = attention_mask.size(1) - T
        x = self.wte(input_ids) + self.wpe(position_ids)
        causal = torch.arange(P + T, device=x.device)[None, :] <= torch.arange(P, P + T, device=x.device)[:, None]
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]  # [B, 1, T, P + T]
        presents = []
        for block in self.h:
            layer_past = past[len(presents)] if past and block.attn is not None else None
            x, present = block(x, layer_past, mask)
            if present is not None:
                presents.append(present)
        return self.logits(x), presents

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_f(x)
        if self.lm_head is None:
            return F.linear(x, self.wte.weight)  # tied output layer, no bias
        return self.lm_head(x)
