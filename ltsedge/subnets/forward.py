"""The reference Llama's full-sequence pass, for scoring many windows: its modules and weights, its math, with
torch's fused causal attention (``scaled_dot_product_attention``, key/value heads shared by their query heads
without copies) instead of a masked score matrix, and stopping at the final norm: the loss computes the
vocabulary's logits a slice at a time. It equals ``Llama.forward`` up to float32 rounding (tests/test_subnets.py).
"""

from __future__ import annotations

from ltsedge.backbones.llama.model import rotary, rotate
from ltsedge.subnets.parent import torch

F = torch.nn.functional


def final_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """``ids [B, T]`` at positions 0 .. T-1, causal -> the final norm's output ``[B, T, d_model]``."""
    B, T = ids.shape
    head_dim = model.arch.head_dim
    cos, sin = (t[:, None] for t in rotary(torch.arange(T)[None], head_dim, model.arch.rope_theta))
    heads = lambda t, n: t.view(B, T, n, head_dim).transpose(1, 2)  # noqa: E731
    x = model.embed_tokens(ids)
    for layer in model.layers:
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        q = rotate(heads(attn.q_proj(h), attn.n_head), cos, sin)
        k = rotate(heads(attn.k_proj(h), attn.n_kv_head), cos, sin)
        y = F.scaled_dot_product_attention(q, k, heads(attn.v_proj(h), attn.n_kv_head), is_causal=True,
                                           enable_gqa=True)
        x = x + attn.o_proj(y.transpose(1, 2).reshape(B, T, attn.n_head * head_dim))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.norm(x)


def output_weight(model) -> torch.Tensor:
    """The output layer's ``[vocab, d_model]`` matrix: the token embedding where they are tied."""
    return model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
