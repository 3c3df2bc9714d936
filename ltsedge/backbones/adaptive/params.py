"""The adaptive embedding's cluster layout and parameter counts (no torch: the proxy uses them).

The vocabulary is split at ``cutoffs`` into clusters of decreasing frequency. With ``div_val`` k > 1,
cluster i embeds its tokens in ``d_embed // k**i`` dimensions and projects them to ``d_model``;
with k == 1 there is one table of width ``d_embed`` and one projection, as in Transformer-XL.
"""

from __future__ import annotations


def cluster_bounds(arch) -> list[tuple[int, int]]:
    edges = [0, *arch.cutoffs, arch.vocab_size]
    return list(zip(edges[:-1], edges[1:]))


def cluster_dims(arch) -> list[int]:
    """Embedding width of each cluster; all equal to d_embed when div_val == 1."""
    n = len(arch.cutoffs) + 1
    return [arch.d_embed // arch.div_val**i for i in range(n)]


def adaptive_params(arch) -> int:
    """Tables, projections and the tied adaptive softmax's own parameters (token biases, one
    logit per tail cluster): everything vocabulary-sized, none of it decoder."""
    n_tails = len(arch.cutoffs)
    if arch.div_val == 1:
        tables = arch.vocab_size * arch.d_embed
        projections = arch.d_model * arch.d_embed
    else:
        tables = sum((hi - lo) * d for (lo, hi), d in zip(cluster_bounds(arch), cluster_dims(arch)))
        projections = sum(arch.d_model * d for d in cluster_dims(arch))
    output = arch.vocab_size + n_tails * arch.d_embed + n_tails
    return tables + projections + output
