"""GPT-2's parameters, counted analytically: the proxy, instant and without torch.

Decoder = the blocks plus the final LayerNorm. Everything vocabulary- or position-sized (token and
position embeddings, adaptive-embedding projections, the output layer's own parameters) is
embedding. A PAR layer counts only the sub-blocks it has (an FFN-only layer has no attention and no
``ln_1``, an attention-only layer no MLP and no ``ln_2``). The tests prove these formulas equal to
counting the PyTorch modules' parameters.
"""

from __future__ import annotations

from ltsedge.backbones.adaptive.params import adaptive_params


def attention_params(d_model: int) -> int:
    layer_norm = 2 * d_model
    return layer_norm + (d_model * 3 * d_model + 3 * d_model) + (d_model * d_model + d_model)


def ffn_params(d_model: int, d_inner: int) -> int:
    layer_norm = 2 * d_model
    return layer_norm + (d_model * d_inner + d_inner) + (d_inner * d_model + d_model)


def block_params(d_model: int, d_inner: int, attention: bool = True, ffn: bool = True) -> int:
    return attention * attention_params(d_model) + ffn * ffn_params(d_model, d_inner)


def decoder_params(arch) -> int:
    blocks = sum(block_params(arch.d_model, arch.d_inner[i], arch.has_attention(i), arch.has_ffn(i))
                 for i in range(arch.n_layer))
    return blocks + 2 * arch.d_model  # + final LayerNorm


def embedding_params(arch) -> int:
    positions = arch.n_positions * arch.d_model
    if not arch.adaptive:
        return positions + arch.vocab_size * arch.d_model  # output layer tied: nothing more
    return positions + adaptive_params(arch)
