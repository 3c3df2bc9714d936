"""What an architecture costs on a workload, counted physically: the cost model's features.

A decoder is a sum of layers plus an output layer, and onnxruntime runs each as a handful of
kernels. So a run's time is close to a weighted sum of: a fixed cost per run and per kernel (layers,
heads, adaptive clusters), the multiply-adds of the dense projections and of attention at the
workload's shapes, the bytes of weights and KV cache read (a decode step is bound by them), and the
element-wise work. The weights (seconds per unit on this machine) are learned (``fit.py``); the
counts here are exact arithmetic on the architecture, no torch, no export.

Attention is counted at each layer's own widths: its queries ``n_head x head size`` wide, its cache
``n_kv_head x head size`` (grouped key/value heads; both are d_model in a backbone without those fields,
so its counts are what they were). At an app's context the cache a decode step reads and copies can
weigh as much as all the weights.

Peak memory likewise: the weights held, the KV cache at the workload's context, the largest
activations (logits over the vocabulary, the FFN's inner width; an adaptive softmax's per-cluster
log-probabilities) and a fixed part for the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsedge.backbones.adaptive.params import cluster_bounds, cluster_dims
from ltsedge.proxy import count_params

FLOAT_BYTES = 4
MB = 2**20

LATENCY_FEATURES = ("runs", "kernels", "heads", "dense_macs", "weight_bytes", "attention_macs", "cache_bytes",
                    "elementwise", "output_macs")
MEMORY_FEATURES = ("fixed", "decoder_mb", "embedding_mb", "output_mb", "cache_mb", "activation_mb", "logits_mb",
                   "adaptive_split_logits_mb", "adaptive_cluster_logits_mb")


@dataclass(frozen=True)
class Shapes:
    """A workload's sizes: ``tokens`` new tokens per sequence after ``past`` cached ones."""

    batch: int
    tokens: int
    past: int = 0

    @classmethod
    def of(cls, workload: str, profile) -> Shapes:
        if workload == "decode":
            return cls(profile.batch, 1, profile.context)
        return cls(profile.batch, profile.sequence, 0)  # forward, or a prompt's prefill


def output_weights(arch) -> int:
    """Weights the output layer multiplies per token: the tied embedding, or the adaptive softmax's
    clusters and their projections to d_model."""
    if not arch.adaptive:
        return arch.vocab_size * arch.d_model
    clusters = list(zip(cluster_bounds(arch), cluster_dims(arch)))
    tables = sum((hi - lo) * d for (lo, hi), d in clusters) + len(arch.cutoffs) * arch.d_embed
    projections = sum(arch.d_model * d for _, d in clusters) if arch.div_val > 1 else arch.d_model * arch.d_embed
    return tables + projections


def attention_width(arch) -> int:
    """The query width of every attention layer, summed: ``n_head x head size`` per layer."""
    return sum(arch.n_head[i] * arch.d_head[i] for i in arch.attention_layers)


def cache_width(arch) -> int:
    """Keys or values cached per token, summed over the attention layers: ``n_kv_head x head size`` each."""
    return sum(arch.kv_heads[i] * arch.d_head[i] for i in arch.attention_layers)


def latency_features(arch, shapes: Shapes) -> dict[str, float]:
    """Counts that a run of the workload costs, per feature of ``LATENCY_FEATURES``."""
    b, t, total = shapes.batch, shapes.tokens, shapes.past + shapes.tokens
    d = arch.d_model
    attention = arch.attention_layers
    decoder = count_params(arch).decoder_params
    kernels = 6 * arch.n_layer + 4 * len(attention) + 3 * (len(arch.cutoffs) + 1 if arch.adaptive else 1)
    return {
        "runs": 1.0,
        "kernels": float(kernels),
        "heads": float(b * sum(arch.n_head[i] for i in attention) * t * total),  # softmax entries
        "dense_macs": float(b * t * decoder),
        "weight_bytes": float(FLOAT_BYTES * (decoder + output_weights(arch))),
        "attention_macs": float(2 * b * t * total * attention_width(arch)),
        "cache_bytes": float(2 * FLOAT_BYTES * b * total * cache_width(arch)),  # keys and values, fp32
        "elementwise": float(b * t * sum(d + (arch.d_inner[i] if arch.has_ffn(i) else 0) for i in range(arch.n_layer))),
        "output_macs": float(b * t * output_weights(arch)),
    }


def memory_features(arch, workloads: dict[str, Shapes]) -> dict[str, float]:
    """Megabytes a model holds at its peak over the workloads it is run on (``MEMORY_FEATURES``)."""
    d = arch.d_model
    counts = count_params(arch)
    largest = max(workloads.values(), key=lambda s: (s.past + s.tokens, s.tokens))
    widest = max(workloads.values(), key=lambda s: s.tokens)
    inner = max((arch.d_inner[i] for i in range(arch.n_layer) if arch.has_ffn(i)), default=0)
    # Queries, keys and values at once: 3 x d_model unless heads are grouped or of a size of their own.
    qkv = max(((arch.n_head[i] + 2 * arch.kv_heads[i]) * arch.d_head[i] for i in arch.attention_layers), default=3 * d)
    cache = 2 * FLOAT_BYTES * largest.batch * (largest.past + largest.tokens) * cache_width(arch)
    logits_mb = FLOAT_BYTES * widest.batch * widest.tokens * arch.vocab_size / MB
    return {
        "fixed": 1.0,
        # Decoder weights are MatMul weights, which onnxruntime may pre-pack (a second copy); the
        # embedding tables are gathered from; the output layer multiplies by (a copy of) them.
        "decoder_mb": FLOAT_BYTES * counts.decoder_params / MB,
        "embedding_mb": FLOAT_BYTES * counts.embedding_params / MB,
        "output_mb": FLOAT_BYTES * output_weights(arch) / MB,
        "cache_mb": cache / MB,
        "activation_mb": FLOAT_BYTES * widest.batch * widest.tokens * max(qkv, inner) / MB,
        "logits_mb": logits_mb,
        # An adaptive softmax computes the head's and each tail cluster's log-probabilities and joins them:
        # logits-sized buffers a tied output does not hold. With div_val 1 it computes every word logit
        # at once and splits them (backbones/adaptive/graph.py): one such buffer more than with div_val
        # > 1, where each cluster's logits are computed on their own (fitted: about 3.8 against 2.7).
        # Without these terms the fit missed small models by up to 38%, with one term for both by up to
        # 15% (docs/benchmarks.md).
        "adaptive_split_logits_mb": logits_mb if arch.adaptive and arch.div_val == 1 else 0.0,
        "adaptive_cluster_logits_mb": logits_mb if arch.adaptive and arch.div_val > 1 else 0.0,
    }
