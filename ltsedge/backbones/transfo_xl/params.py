"""Transformer-XL's parameters, counted analytically: the proxy, instant and without torch.

Decoder = the blocks: per layer with attention the q/k/v projection, the positional projection
``r_net``, the output projection (none of them with a bias), the content and position biases
``r_w_bias``/``r_r_bias`` and the post-attention LayerNorm; per layer with an FFN its two linear
layers (with biases) and LayerNorm. Post-LayerNorm blocks: there is no final LayerNorm. Positions are
sinusoidal, so there is no position table: the embedding count is the token embedding (and the tied
output layer's own parameters when adaptive). The tests prove these formulas equal to counting the
PyTorch modules' parameters, and reproduce the LiteTransformerSearch study's figures.
"""

from __future__ import annotations

from ltsedge.backbones.adaptive.params import adaptive_params


def attention_params(d_model: int, n_head: int) -> int:
    d_head = d_model // n_head
    projections = d_model * 3 * n_head * d_head + d_model * n_head * d_head + n_head * d_head * d_model
    biases = 2 * n_head * d_head  # r_w_bias, r_r_bias
    return projections + biases + 2 * d_model  # + LayerNorm


def ffn_params(d_model: int, d_inner: int) -> int:
    return (d_model * d_inner + d_inner) + (d_inner * d_model + d_model) + 2 * d_model  # + LayerNorm


def layer_params(arch, i: int) -> int:
    attention = attention_params(arch.d_model, arch.n_head[i]) if arch.has_attention(i) else 0
    ffn = ffn_params(arch.d_model, arch.d_inner[i]) if arch.has_ffn(i) else 0
    return attention + ffn


def decoder_params(arch) -> int:
    return sum(layer_params(arch, i) for i in range(arch.n_layer))


def embedding_params(arch) -> int:
    if not arch.adaptive:
        return arch.vocab_size * arch.d_model  # output layer tied, no bias: nothing more
    return adaptive_params(arch)
