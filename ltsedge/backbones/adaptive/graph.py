"""Adaptive embeddings and the tied adaptive softmax as ONNX nodes: mirrors of ``model.py``.

Weight names are the PyTorch state-dict names under the caller's prefixes (``wte`` for the
embedding, ``lm_head`` for the softmax in GPT-2), so the same code serves every backbone.
"""

from __future__ import annotations

from onnx import TensorProto

from ltsedge.backbones.adaptive.params import cluster_bounds
from ltsedge.onnx_graph import GraphBuilder


def adaptive_embed(g: GraphBuilder, arch, ids: str, prefix: str) -> str:
    """Token ids (any shape) -> ``[N, d_model]`` embeddings, N the number of ids."""
    bounds = cluster_bounds(arch)
    if arch.div_val == 1:
        e = g.op("Gather", g.weight(f"{prefix}.tables.0"), ids, axis=0)
        return g.matmul_t(g.op("Reshape", e, g.const([-1, arch.d_embed])), g.weight(f"{prefix}.projs.0"))
    total = None
    for i, (lo, hi) in enumerate(bounds):
        table = g.weight(f"{prefix}.tables.{i}")
        local = g.op("Min", g.op("Max", g.op("Sub", ids, g.const(lo)), g.const(0)), g.const(hi - lo - 1))
        e = g.op("Gather", table, local, axis=0)
        e = g.matmul_t(g.op("Reshape", e, g.const([-1, g.large[table].shape[1]])), g.weight(f"{prefix}.projs.{i}"))
        inside = g.op("And", g.op("GreaterOrEqual", ids, g.const(lo)), g.op("Less", ids, g.const(hi)))
        inside = g.op("Reshape", g.op("Cast", inside, to=TensorProto.FLOAT), g.const([-1, 1]))
        e = g.op("Mul", e, inside)
        total = e if total is None else g.op("Add", total, e)
    return total


def adaptive_logits(g: GraphBuilder, arch, x: str, embedding: str, head: str) -> str:
    """``[N, d_model]`` -> ``[N, vocab]`` log-probabilities: head softmax over cluster 0 plus one logit
    per tail cluster, as ``AdaptiveLogits.forward``."""
    bounds = cluster_bounds(arch)
    bias = g.weights[f"{head}.bias"]
    head_size = bounds[0][1]
    if arch.div_val == 1:  # one table and projection: compute every word logit at once, then split
        h = g.op("MatMul", x, g.weight(f"{embedding}.projs.0"))
        words = g.matmul_t(h, g.weight(f"{embedding}.tables.0"), g.weight(f"{head}.bias"))
        word_logits = g.op("Split", words, g.const([hi - lo for lo, hi in bounds]), axis=1, n_out=len(bounds))
        hidden = [h] * len(bounds)
    else:
        hidden, word_logits = [], []
        for i, (lo, hi) in enumerate(bounds):
            h = g.op("MatMul", x, g.weight(f"{embedding}.projs.{i}"))
            b = g.weight(f"{head}.bias.{i}", bias[lo:hi])
            hidden.append(h)
            word_logits.append(g.matmul_t(h, g.weight(f"{embedding}.tables.{i}"), b))
    clusters = g.matmul_t(hidden[0], g.weight(f"{head}.cluster_weight"), g.weight(f"{head}.cluster_bias"))
    log_head = g.op("LogSoftmax", g.op("Concat", word_logits[0], clusters, axis=1), axis=-1)
    pieces = [g.op("Slice", log_head, g.const([0]), g.const([head_size]), g.const([1]))]
    for i in range(1, len(bounds)):
        cluster_logprob = g.op("Slice", log_head, g.const([head_size + i - 1]), g.const([head_size + i]), g.const([1]))
        pieces.append(g.op("Add", g.op("LogSoftmax", word_logits[i], axis=-1), cluster_logprob))
    return g.op("Concat", *pieces, axis=1)
