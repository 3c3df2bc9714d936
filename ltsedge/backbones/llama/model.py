"""Llama decoder with per-layer query heads, key/value heads and SwiGLU width: the reference model.

Hugging Face's ``LlamaForCausalLM`` (no attention or MLP biases, default rotary scaling), written to be
read top to bottom: pre-RMSNorm blocks of grouped-query self-attention with rotary positions (the
``rotate_half`` convention: a head's first and second halves are the pairs rotated) and a SwiGLU MLP
``down(silu(gate(x)) * up(x))``; a final RMSNorm; an output layer tied to the token embedding or its own.
Each layer's query heads share its key/value heads in equal groups (head j reads key/value head
j // (n_head / n_kv_head), as transformers' ``repeat_kv``). One head size for all layers (``head_dim``),
so a layer's attention may be narrower or wider than d_model. Parameter names are Hugging Face's with
``model.`` stripped, so a ``LlamaForCausalLM`` state_dict maps by name (``trained_weights`` strips it).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ltsedge.architecture import Architecture

MASKED_SCORE = torch.finfo(torch.float32).min  # attention score of a position that may not be attended to
KeyValue = tuple[torch.Tensor, torch.Tensor]


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """The rotary angle per position of each of a head's ``head_dim / 2`` pairs, computed as transformers does
    (float32): the graph reads these very values, so both rotate alike at every position."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rotary(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[..., head_dim]`` of ``positions [...]``: each pair's angle twice (both halves)."""
    freqs = positions.float()[..., None] * inverse_frequencies(head_dim, theta).to(positions.device)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x [B, h, T, hd]`` rotated: ``x * cos + rotate_half(x) * sin``, rotate_half(x) = (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class LlamaAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, n_kv_head: int, head_dim: int):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, head_dim
        self.q_proj = nn.Linear(d_model, n_head * head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_head * head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_head * head_dim, bias=False)
        self.o_proj = nn.Linear(n_head * head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: KeyValue | None,
                mask: torch.Tensor) -> tuple[torch.Tensor, KeyValue]:
        """``x [B, T, C]`` -> (output, (keys, values) of past + new tokens ``[B, n_kv_head, past + T, head_dim]``,
        keys rotated). ``cos``/``sin`` [B or 1, 1, T, head_dim]; ``mask`` [B or 1, 1, T, past + T]: True where
        a query may attend to a key."""
        B, T, _ = x.shape
        heads = lambda t, n: t.view(B, T, n, self.head_dim).transpose(1, 2)  # noqa: E731
        q = rotate(heads(self.q_proj(x), self.n_head), cos, sin)
        k = rotate(heads(self.k_proj(x), self.n_kv_head), cos, sin)
        v = heads(self.v_proj(x), self.n_kv_head)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        group = self.n_head // self.n_kv_head
        keys, values = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = (q @ keys.transpose(-2, -1)) * self.head_dim ** -0.5
        att = att.masked_fill(~mask, MASKED_SCORE)  # finite: a query with nothing to attend to gets no NaN
        y = (att.softmax(dim=-1) @ values).transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)
        return self.o_proj(y), (k, v)


class LlamaMLP(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_inner, bias=False)
        self.up_proj = nn.Linear(d_model, d_inner, bias=False)
        self.down_proj = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-RMSNorm: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, arch: Architecture, i: int):
        super().__init__()
        d, eps = arch.d_model, arch.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(d, eps=eps)
        self.self_attn = LlamaAttention(d, arch.n_head[i], arch.kv_heads[i], arch.d_head[i])
        self.post_attention_layernorm = nn.RMSNorm(d, eps=eps)
        self.mlp = LlamaMLP(d, arch.d_inner[i])

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: KeyValue | None,
                mask: torch.Tensor) -> tuple[torch.Tensor, KeyValue]:
        a, present = self.self_attn(self.input_layernorm(x), cos, sin, past, mask)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), present


class Llama(nn.Module):
    """``forward(input_ids [B, T]) -> logits [B, T, vocab_size]``; ``forward_with_cache`` for generation.

    The decoder parameters the proxy counts are ``DECODER_MODULES``: the layers and the final RMSNorm; the
    token embedding and an untied ``lm_head`` are the rest.
    """

    DECODER_MODULES = ("layers", "norm")

    def __init__(self, arch: Architecture):
        super().__init__()
        self.arch = arch
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.d_model)
        self.layers = nn.ModuleList(LlamaDecoderLayer(arch, i) for i in range(arch.n_layer))
        self.norm = nn.RMSNorm(arch.d_model, eps=arch.rms_norm_eps)
        self.lm_head = None if arch.tie_embeddings else nn.Linear(arch.d_model, arch.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The full-sequence pass (the ``forward`` export variant): positions 0 .. T-1, causal."""
        T = input_ids.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        logits, _ = self._run(input_ids, torch.arange(T, device=input_ids.device)[None], causal, None)
        return logits

    def forward_with_cache(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                           past: list[KeyValue] | None = None) -> tuple[torch.Tensor, list[KeyValue]]:
        """One step of generation (the ``generate`` export variant): new tokens ``input_ids [B, T]`` at the
        0-based ``position_ids [B, T]``, after the cached ``past`` (one entry per layer: rotated keys and
        values ``[B, n_kv_head, P, head_dim]``); ``attention_mask [B, P + T]`` is 0 at padding. Returns the
        logits and the caches of all P + T tokens. ``past=None`` is the prefill; with a cache of P tokens it
        computes the logits a prefill of all P + T tokens would."""
        T = input_ids.size(1)
        P = attention_mask.size(1) - T
        causal = torch.arange(P + T, device=input_ids.device)[None, :] <= \
            torch.arange(P, P + T, device=input_ids.device)[:, None]
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]  # [B, 1, T, P + T]
        return self._run(input_ids, position_ids, mask, past)

    def _run(self, input_ids, position_ids, mask, past) -> tuple[torch.Tensor, list[KeyValue]]:
        x = self.embed_tokens(input_ids)
        angles = {}  # head size -> cos, sin [B, 1, T, head size]: shared by the layers of that size
        presents = []
        for i, layer in enumerate(self.layers):
            head_dim = self.arch.d_head[i]
            if head_dim not in angles:
                angles[head_dim] = tuple(t[:, None] for t in rotary(position_ids, head_dim, self.arch.rope_theta))
            x, present = layer(x, *angles[head_dim], past[i] if past else None, mask)
            presents.append(present)
        return self.logits(x), presents

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        return F.linear(x, self.embed_tokens.weight) if self.lm_head is None else self.lm_head(x)
