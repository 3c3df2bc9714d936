"""Counting a search space's architectures: exactly (``size``) and as a base-10 logarithm
(``size_log10``), and the PAR rules' limits (``par_limits``) that the count and ``SearchSpace``'s
repair share.

What is counted is what ``SearchSpace.decode`` can produce: distinct layer stacks per n_layer and
d_model (a d_model allows the d_inner choices of at least ``d_inner_min_ratio`` x it; a layer's query
heads the key/value-head choices dividing them), times the embedding, head-size and tying choices;
under the PAR rules only the stacks the repair keeps. A change to the encoding or
the repair changes the count here.

The magnitude is summed in logarithms, so a space of 10^40000 architectures is sized at once; the
exact count (a Python integer of that many digits) is made only where it is printed
(``SearchSpace.describe``, below 10^EXACT_SIZE_DIGITS).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ltsedge.space import SearchSpace

PAR_ATTENTION_SHARE = 2 / 3  # PAR: attention is needed only in the first two thirds of the layers
PAR_LAYERS_PER_ATTENTION = 5  # PAR: about one attention layer per five layers suffices


def par_limits(n_layer: int) -> tuple[int, int]:
    """(layers that may hold attention, most attention layers) under the PAR rules."""
    return math.ceil(n_layer * PAR_ATTENTION_SHARE), max(1, math.ceil(n_layer / PAR_LAYERS_PER_ATTENTION))


def size(space: SearchSpace) -> int:
    """The exact number of distinct architectures in the space (a number of size_log10() digits)."""
    return _per_architecture(space) * sum(count * _stacks(space, n, inner)
                                          for inner, count in _inner_counts(space).items() for n in space.n_layer)


def size_log10(space: SearchSpace) -> float:
    """log10 of size(), summed in logarithms: no number of thousands of digits is made."""
    counts = _inner_counts(space)
    inner = np.array(list(counts), dtype=float)
    if space.par_rules:
        stacks = _log10_sum(np.array([_par_stacks_log10(space, n, inner) for n in space.n_layer]), axis=0)
    else:
        n = np.array(space.n_layer, dtype=float)
        stacks = np.array([_log10_sum(n * math.log10(sum(_bases(space, i)))) for i in counts])
    return math.log10(_per_architecture(space)) + float(_log10_sum(np.log10(list(counts.values())) + stacks))


def _per_architecture(space: SearchSpace) -> int:
    """Choices made once per architecture besides n_layer and d_model: embedding, head size, tying."""
    return (len(space.d_embed_choices) * len(space.div_val) * max(len(space.head_dim), 1)
            * max(len(space.tie_embeddings), 1))


def _inner_counts(space: SearchSpace) -> Counter:
    """d_inner choice counts -> how many d_model values have that many: stacks depend on d_model only so."""
    return Counter(len(space.d_inner_choices(d)) for d in space.d_model)


def _bases(space: SearchSpace, inner: int) -> tuple[int, int]:
    """Choices of one layer with attention, and of one FFN-only layer (0: no such block type)."""
    # A layer's attention choices: its query heads, each with the key/value heads dividing it.
    heads = sum(len(space.kv_choices(h)) for h in space.n_head) if space.n_kv_head else len(space.n_head)
    if not space.block_types:
        return heads * inner, 0
    per_type = {"attn_ffn": heads * inner, "ffn": inner, "attn": heads}
    return (sum(per_type[t] for t in space.block_types if t != "ffn"),
            per_type["ffn"] if "ffn" in space.block_types else 0)


def _stacks(space: SearchSpace, n: int, inner: int) -> int:
    """Distinct layer stacks of n layers at a d_model allowing ``inner`` d_inner choices."""
    with_attention, ffn = _bases(space, inner)
    if not space.par_rules:
        return (with_attention + ffn) ** n
    eligible, cap = par_limits(n)
    return ffn ** (n - eligible) * sum(math.comb(eligible, k) * with_attention**k * ffn ** (eligible - k)
                                       for k in range(1, cap + 1))


def _par_stacks_log10(space: SearchSpace, n: int, inner: np.ndarray) -> np.ndarray:
    """log10 of _stacks(n, i) for each i in ``inner``, under the PAR rules (an FFN-only block type is
    among the choices, so ffn >= 1)."""
    with_attention, ffn = (np.log10(np.broadcast_to(b, inner.shape)) for b in _bases(space, inner))
    eligible, cap = par_limits(n)
    k = np.arange(1, cap + 1)[:, None]
    log_comb = np.cumsum(np.log10((eligible - k + 1) / k), axis=0)  # log10 C(eligible, k)
    terms = log_comb + k * with_attention + (eligible - k) * ffn
    return (n - eligible) * ffn + _log10_sum(terms, axis=0)


def _log10_sum(logs, axis=None):
    """log10(sum(10 ** logs)) without overflow."""
    top = np.max(logs, axis=axis, keepdims=True)
    powers = np.exp((logs - top) * math.log(10))  # exp: a tenth of the time of 10.0 ** x
    return np.squeeze(top + np.log10(np.sum(powers, axis=axis, keepdims=True)), axis=axis)
