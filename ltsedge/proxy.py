"""The training-free proxy: decoder (non-embedding) parameters, counted analytically.

Decoder = the blocks plus the final LayerNorm. Everything else (token and position embeddings,
adaptive-embedding projections, the output layer's own parameters) depends on the vocabulary and
is reported as ``embedding_params``. No torch here: counting is instant; the tests prove these
formulas equal to counting the PyTorch modules' parameters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsedge.architecture import Architecture


@dataclass(frozen=True)
class ParamCounts:
    decoder_params: int
    embedding_params: int

    @property
    def total_params(self) -> int:
        return self.decoder_params + self.embedding_params

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_params": self.total_params}


def block_params(d_model: int, d_inner: int) -> int:
    layer_norms = 2 * (2 * d_model)
    attention = (d_model * 3 * d_model + 3 * d_model) + (d_model * d_model + d_model)
    mlp = (d_model * d_inner + d_inner) + (d_inner * d_model + d_model)
    return layer_norms + attention + mlp


def decoder_params(arch: Architecture) -> int:
    blocks = sum(block_params(arch.d_model, d_inner) for d_inner in arch.d_inner)
    return blocks + 2 * arch.d_model  # + final LayerNorm


def embedding_params(arch: Architecture) -> int:
    positions = arch.n_positions * arch.d_model
    if not arch.adaptive:
        return positions + arch.vocab_size * arch.d_model  # output layer tied: nothing more
    n_tails = len(arch.cutoffs)
    if arch.div_val == 1:
        tables = arch.vocab_size * arch.d_embed
        projections = arch.d_model * arch.d_embed
    else:
        edges = [0, *arch.cutoffs, arch.vocab_size]
        dims = [arch.d_embed // arch.div_val**i for i in range(n_tails + 1)]
        tables = sum((hi - lo) * d for lo, hi, d in zip(edges[:-1], edges[1:], dims))
        projections = sum(arch.d_model * d for d in dims)
    # Tied adaptive softmax: its own are the token biases and one logit per tail cluster.
    output = arch.vocab_size + n_tails * arch.d_embed + n_tails
    return positions + tables + projections + output


def count_params(arch: Architecture) -> ParamCounts:
    return ParamCounts(decoder_params(arch), embedding_params(arch))
