"""OPT's parameters, counted analytically: the proxy, instant and without torch.

Decoder = the blocks, the learned position table and the final LayerNorm. Unlike GPT-2, the
position table counts as decoder: OPT's code keeps it inside its decoder module, and the study's
table (OPT-350M's shape -> 304.4 M decoder parameters) counts it there. The table has
``n_positions + 2`` rows: OPT reads position p at row p + 2. Only the token embedding (tied to the
output layer) is embedding. A PAR layer counts only the sub-blocks it has. The tests prove these
formulas equal to counting the PyTorch modules' parameters.
"""

from __future__ import annotations

from ltsedge.backbones.gpt2.params import block_params  # q/k/v/out with biases = GPT-2's c_attn + c_proj

POSITION_OFFSET = 2  # OPT's learned positions start at row 2 (a relic of fairseq's padding index)


def decoder_params(arch) -> int:
    blocks = sum(block_params(arch.d_model, arch.d_inner[i], arch.has_attention(i), arch.has_ffn(i))
                 for i in range(arch.n_layer))
    positions = (arch.n_positions + POSITION_OFFSET) * arch.d_model
    return blocks + positions + 2 * arch.d_model  # + final LayerNorm


def embedding_params(arch) -> int:
    return arch.vocab_size * arch.d_model  # the output layer is tied to it: nothing more
