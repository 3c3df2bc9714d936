"""OPT decoder with per-layer heads, FFN width and block type: the reference model for every candidate.

Hugging Face's ``OPTForCausalLM`` with ``do_layer_norm_before=True``, written to be read top to bottom
after nanoGPT: pre-LayerNorm blocks of self-attention (separate q, k, v and out projections, all with
biases, q scaled by head_dim**-0.5) and a ReLU FFN; learned positions read at row p + 2 (OPT's
offset); a final LayerNorm; the output layer tied to the token embedding. Parameter names are
Hugging Face's under ``decoder.``, so an OPT-shaped state_dict (``model.`` stripped) maps by name.

PAR block types: a layer may have only its FFN sub-block ("ffn": no attention, no KV cache) or only
its attention sub-block ("attn"); the sub-block it lacks is simply not built.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ltsedge.architecture import Architecture
from ltsedge.backbones.opt.params import POSITION_OFFSET

LAYER_NORM_EPS = 1e-5
MASKED_SCORE = torch.finfo(torch.float32).min  # attention score of a position that may not be attended to
KeyValue = tuple[torch.Tensor, torch.Tensor]


class OPTAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.scaling = (d_model // n_head) ** -0.5
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, past: KeyValue | None, mask: torch.Tensor) -> tuple[torch.Tensor, KeyValue]:
        """``x [B, T, C]`` -> (output, (keys, values) of past + new tokens, ``[B, h, past + T, C/h]``).

        ``mask`` [B or 1, 1, T, past + T]: True where a query may attend to a key."""
        B, T, C = x.shape
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # noqa: E731
        q = heads(self.q_proj(x) * self.scaling)  # scaled before the product, as OPT does
        k, v = heads(self.k_proj(x)), heads(self.v_proj(x))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)).masked_fill(~mask, MASKED_SCORE)  # finite: padding gets no NaN
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.out_proj(y), (k, v)


class OPTDecoderLayer(nn.Module):
    """Pre-LayerNorm: ``x + attn(ln(x))``, then ``x + fc2(relu(fc1(ln(x))))``; either half may be absent."""

    def __init__(self, d_model: int, n_head: int, d_inner: int, attention: bool = True, ffn: bool = True):
        super().__init__()
        if attention:
            self.self_attn_layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
            self.self_attn = OPTAttention(d_model, n_head)
        if ffn:
            self.final_layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
            self.fc1 = nn.Linear(d_model, d_inner)
            self.fc2 = nn.Linear(d_inner, d_model)
        self.has_attention, self.has_ffn = attention, ffn

    def forward(self, x: torch.Tensor, past: KeyValue | None, mask: torch.Tensor
                ) -> tuple[torch.Tensor, KeyValue | None]:
        present = None
        if self.has_attention:
            a, present = self.self_attn(self.self_attn_layer_norm(x), past, mask)
            x = x + a
        if self.has_ffn:
            x = x + self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))
        return x, present


class OPTDecoder(nn.Module):
    """What OPT's code calls the decoder: embeddings, layers and the final LayerNorm."""

    def __init__(self, arch: Architecture):
        super().__init__()
        d = arch.d_model
        self.embed_tokens = nn.Embedding(arch.vocab_size, d)
        self.embed_positions = nn.Embedding(arch.n_positions + POSITION_OFFSET, d)  # row p + 2 = position p
        self.layers = nn.ModuleList(
            OPTDecoderLayer(d, arch.n_head[i], arch.d_inner[i], arch.has_attention(i), arch.has_ffn(i))
            for i in range(arch.n_layer))
        self.final_layer_norm = nn.LayerNorm(d, eps=LAYER_NORM_EPS)


class OPT(nn.Module):
    """``forward(input_ids [B, T]) -> logits [B, T, vocab_size]``; ``forward_with_cache`` for generation.

    The decoder parameters the proxy counts are ``DECODER_MODULES``: the layers, the position table
    (OPT keeps it in its decoder) and the final LayerNorm; the token embedding is the rest.
    """

    DECODER_MODULES = ("decoder.layers", "decoder.embed_positions", "decoder.final_layer_norm")

    def __init__(self, arch: Architecture):
        super().__init__()
        self.arch = arch
        self.decoder = OPTDecoder(arch)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The full-sequence pass (the ``forward`` export variant): positions 0 .. T-1, causal."""
        T = input_ids.size(1)
        positions = torch.arange(T, device=input_ids.device)
        causal = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        x = self.embed(input_ids, positions)
        for layer in self.decoder.layers:
            x, _ = layer(x, None, causal)
        return self.logits(x)

    def forward_with_cache(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                           past: list[KeyValue] | None = None) -> tuple[torch.Tensor, list[KeyValue]]:
        """One step of generation (the ``generate`` export variant): new tokens ``input_ids [B, T]`` at the
        0-based ``position_ids [B, T]``, after the cached ``past`` (one entry per attention layer, in order:
        keys and values ``[B, h, P, C/h]``); ``attention_mask [B, P + T]`` is 0 at padding. Returns the
        logits and the caches of all P + T tokens, again one per attention layer. ``past=None`` is the
        prefill; with a cache of P tokens it computes the logits a prefill of all P + T tokens would."""
        T = input_ids.size(1)
        P = attention_mask.size(1) - T  # not from past: an all-FFN model has no cache
        causal = torch.arange(P + T, device=input_ids.device)[None, :] <= \
            torch.arange(P, P + T, device=input_ids.device)[:, None]
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]  # [B, 1, T, P + T]
        x = self.embed(input_ids, position_ids)
        caches = iter(past or [])
        presents = []
        for layer in self.decoder.layers:
            x, present = layer(x, next(caches) if past and layer.has_attention else None, mask)
            if present is not None:
                presents.append(present)
        return self.logits(x), presents

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.decoder.embed_tokens(input_ids) + self.decoder.embed_positions(positions + POSITION_OFFSET)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.decoder.final_layer_norm(x), self.decoder.embed_tokens.weight)  # tied, no bias
