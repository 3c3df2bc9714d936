"""GPT-2's parameters, counted analytically: the proxy, instant and without torch.

Decoder = the blocks plus the final LayerNorm. Everything vocabulary- or position-sized (token and
position embeddings, adaptive-embedding projections, the output layer's own parameters) is
embedding. The tests prove these formulas equal to counting the PyTorch modules' parameters.
"""

from __future__ import annotations

from ltsedge.backbones.adaptive.params import adaptive_params


def block_params(d_model: int, d_inner: int) -> int:
    layer_norms = 2 * (2 * d_model)
    attention = (d_model * 3 * d_model + 3 * d_model) + (d_model * d_model + d_model)
    mlp = (d_model * d_inner + d_inner) + (d_inner * d_model + d_model)
    return layer_norms + attention + mlp


def decoder_params(arch) -> int:
    blocks = sum(block_params(arch.d_model, d_inner) for d_inner in arch.d_inner)
    return blocks + 2 * arch.d_model  # + final LayerNorm


def embedding_params(arch) -> int:
    positions = arch.n_positions * arch.d_model
    if not arch.adaptive:
        return positions + arch.vocab_size * arch.d_model  # output layer tied: nothing more
    return positions + adaptive_params(arch)
