"""Transformer-XL decoder with per-layer heads and FFN width: the reference model for every candidate.

As NVIDIA's PyTorch Transformer-XL (``mem_transformer.py``, the model LiteTransformerSearch searched),
in eval mode and batch-first: token embeddings scaled by sqrt(d_model) and no position table;
post-LayerNorm blocks of relative multi-head attention (``RelPartialLearnableMultiHeadAttn``) and a
ReLU FFN (``PositionwiseFF``); no final LayerNorm; an output layer tied to the token embedding, or the
tied adaptive softmax when the architecture uses adaptive input embeddings.

Segment-level recurrence: layer i attends over ``cat(mems[i], x_i)``, where ``mems[i]`` holds the last
``mem_len`` inputs of layer i from earlier segments, and returns the updated memory. A PAR layer may
lack attention ("ffn": then it has no memory) or the FFN ("attn"). Written top to bottom, after nanoGPT.
"""

from __future__ import annotations

import functools
import math
from decimal import Context, Decimal

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ltsedge.architecture import STANDARD_BLOCK, Architecture
from ltsedge.backbones.adaptive.model import AdaptiveEmbedding, AdaptiveLogits

LAYER_NORM_EPS = 1e-5
MASKED_SCORE = torch.finfo(torch.float32).min  # attention score of a key a query may not see


def inverse_frequencies(d_model: int) -> np.ndarray:
    """``1 / 10000^(2k / d)``, k = 0 .. d/2 - 1: the sinusoids' frequencies (the graph holds the same table).

    Each is the float32 nearest the exact value, so an architecture's exported bytes are the same on every
    machine: numpy's float32 power runs another implementation per CPU (Intel's SVML on AVX-512, libm's
    elsewhere), whose last bits differ."""
    return np.array(_nearest_inverse_frequencies(d_model), dtype=np.float32)


@functools.lru_cache(maxsize=None)
def _nearest_inverse_frequencies(d_model: int) -> tuple[float, ...]:
    exact = Context(prec=40)  # decimal arithmetic: integers underneath, no platform math library
    return tuple(_nearest_float32(exact.power(Decimal(10000), exact.divide(Decimal(-2 * k), Decimal(d_model))))
                 for k in range(d_model // 2))


def _nearest_float32(x: Decimal) -> float:
    guess = np.float32(float(x))  # rounded twice (to float64, then float32): at most one float32 step off
    steps = (np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf)))
    return float(min(steps, key=lambda f: abs(Decimal(float(f)) - x)))


def relative_positions(klen: int, d_model: int) -> torch.Tensor:
    """``[klen, d_model]``: row m embeds the relative distance klen - 1 - m (farthest key first)."""
    pos_seq = torch.arange(klen - 1, -1, -1.0)
    sinusoid = torch.outer(pos_seq, torch.from_numpy(inverse_frequencies(d_model)))
    return torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1)


def causal_mask(qlen: int, mlen: int) -> torch.Tensor:
    """``[qlen, mlen + qlen]``, True where query i (absolute position mlen + i) may see key j."""
    return torch.arange(mlen + qlen)[None, :] <= torch.arange(qlen)[:, None] + mlen


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """NVIDIA's pad-and-reshape trick, batch-first: ``x[..., i, m]`` scores query i against relative
    position row m; the result's ``[..., i, j]`` is the score of key j, exact wherever j <= mlen + i."""
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0)).view(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


class RelPartialLearnableMultiHeadAttn(nn.Module):
    """Relative attention over memory and segment; post-LayerNorm: ``LayerNorm(x + o_net(attention))``."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head, self.d_head = n_head, d_model // n_head
        self.qkv_net = nn.Linear(d_model, 3 * d_model, bias=False)
        self.r_net = nn.Linear(d_model, d_model, bias=False)  # projects the relative position embeddings
        self.o_net = nn.Linear(d_model, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.r_w_bias = nn.Parameter(torch.empty(n_head, self.d_head))  # content bias (u in the paper)
        self.r_r_bias = nn.Parameter(torch.empty(n_head, self.d_head))  # position bias (v)

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, mask: torch.Tensor, mem: torch.Tensor | None
                ) -> torch.Tensor:
        """``x [B, T, C]``, ``mem [B, M, C]`` or None, ``pos_emb [M + T, C]``, ``mask [T, M + T]``."""
        B, T, C = x.shape
        cat = x if mem is None else torch.cat([mem, x], dim=1)
        K = cat.size(1)
        q, k, v = self.qkv_net(cat).split(C, dim=-1)
        q = q[:, -T:]  # queries of the segment only
        q, k, v = (t.reshape(B, t.size(1), self.n_head, self.d_head).transpose(1, 2) for t in (q, k, v))
        r = self.r_net(pos_emb).view(K, self.n_head, self.d_head).permute(1, 2, 0)  # [h, dh, K]
        content = (q + self.r_w_bias[:, None]) @ k.transpose(-2, -1)  # AC [B, h, T, K]
        position = rel_shift((q + self.r_r_bias[:, None]) @ r)  # BD
        score = (content + position) * (1.0 / math.sqrt(self.d_head))
        score = score.masked_fill(~mask, MASKED_SCORE)
        y = (score.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.layer_norm(x + self.o_net(y))


class PositionwiseFF(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.CoreNet = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Linear(d_inner, d_model))
        self.layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(x + self.CoreNet(x))


class DecoderLayer(nn.Module):
    """Attention then FFN; a PAR layer has only one of them (the other is None, without parameters)."""

    def __init__(self, d_model: int, n_head: int, d_inner: int, block_type: str = STANDARD_BLOCK):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(d_model, n_head) if block_type != "ffn" else None
        self.pos_ff = PositionwiseFF(d_model, d_inner) if block_type != "attn" else None

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, mask: torch.Tensor, mem: torch.Tensor | None
                ) -> torch.Tensor:
        if self.dec_attn is not None:
            x = self.dec_attn(x, pos_emb, mask, mem)
        if self.pos_ff is not None:
            x = self.pos_ff(x)
        return x


def update_mem(mem: torch.Tensor | None, x: torch.Tensor, mem_len: int) -> torch.Tensor:
    """The last ``mem_len`` positions of ``cat(mem, x)`` (NVIDIA's ``_update_mems``, ext_len 0)."""
    cat = x if mem is None else torch.cat([mem, x], dim=1)
    return cat[:, -mem_len:].detach()


class TransfoXL(nn.Module):
    """``forward(input_ids [B, T]) -> logits [B, T, vocab_size]``; ``forward_with_mems`` for recurrence.

    The decoder is ``layers``: exactly what the decoder-parameter proxy counts.
    """

    DECODER_MODULES = ("layers",)

    def __init__(self, arch: Architecture):
        super().__init__()
        self.arch = arch
        d = arch.d_model
        self.word_emb = AdaptiveEmbedding(arch) if arch.adaptive else nn.Embedding(arch.vocab_size, d)
        self.emb_scale = d**0.5  # NVIDIA's AdaptiveEmbedding scales by sqrt(d_proj)
        self.layers = nn.ModuleList(DecoderLayer(d, arch.n_head[i], arch.d_inner[i], arch.block_type(i))
                                    for i in range(arch.n_layer))
        self.crit = AdaptiveLogits(arch, self.word_emb) if arch.adaptive else None

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """One segment without memory (the ``forward`` export variant)."""
        return self.forward_with_mems(input_ids)[0]

    def forward_with_mems(self, input_ids: torch.Tensor, mems: list[torch.Tensor] | None = None
                          ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One segment ``input_ids [B, T]`` after the memory ``mems`` (per attention layer ``[B, M, C]``,
        M <= mem_len, all equal; None or M = 0 at the first segment) -> the logits and the new memory
        (per attention layer, the last mem_len inputs of that layer, memory included; the generate variant)."""
        x = self.word_emb(input_ids) * self.emb_scale
        T = x.size(1)
        M = mems[0].size(1) if mems else 0
        pos_emb = relative_positions(M + T, self.arch.d_model).to(x.device)
        mask = causal_mask(T, M).to(x.device)
        new_mems = []
        for layer in self.layers:
            mem = None
            if layer.dec_attn is not None:
                mem = mems[len(new_mems)] if mems else None
                new_mems.append(update_mem(mem, x, self.arch.mem_len))
            x = layer(x, pos_emb, mask, mem)
        return self.logits(x), new_mems

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.crit is None:
            return F.linear(x, self.word_emb.weight)  # tied output layer, no bias
        return self.crit(x)
