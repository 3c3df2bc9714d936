"""GPT-2 as an ONNX graph, written node by node from the architecture and the reference model's weights.

The fast route to ONNX: no tracing, no second pass, no optimizer. Weights are read by their
state-dict names (``model.py``) and laid out without copies: linear layers use ``Gemm(transB=1)``
on PyTorch's ``[out, in]`` weights, and the tied output layer reuses the token-embedding
initializer. The tests prove its logits equal PyTorch's on random architectures, with and without
adaptive embeddings.

Activations stay 2-D (``[batch*sequence, d_model]``) between blocks; attention reshapes to heads.
Each layer is its attention sub-block then its FFN sub-block; a PAR layer (``arch.block_types``) writes
only the one it has, so an FFN-only layer has no attention node, weight or cache.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from ltsedge.backbones.adaptive.graph import adaptive_embed, adaptive_logits
from ltsedge.backbones.gpt2.model import LAYER_NORM_EPS, MASKED_SCORE
from ltsedge.backbones.kv_cache import PAST, PRESENT, cache_heads_of, cache_layers, cached_scores, cached_weighted
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: ``input_ids [batch, sequence] -> logits [batch, sequence, vocab]``."""
    g = GraphBuilder(weights, opset, gemm)
    ids = "input_ids"
    ids_shape = g.op("Shape", ids)  # [B, T]
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)

    x = _embed(g, arch, ids, ids_shape, seq_len)  # [B*T, d]
    mask = None
    if arch.attention_layers:  # an all-FFN model has no attention to mask
        # Causal mask, shared by every layer: -inf above the diagonal, 0 elsewhere.
        square = g.op("Concat", g.unsqueeze0(seq_len), g.unsqueeze0(seq_len), axis=0)
        minus_inf = helper.make_tensor("v", TensorProto.FLOAT, [1], [float("-inf")])
        mask = g.op("Trilu", g.op("ConstantOfShape", square, value=minus_inf), g.const(1), upper=1)

    for i, n_head in enumerate(arch.n_head):
        if arch.has_attention(i):
            x = _attention(g, arch.d_model, n_head, f"h.{i}", x, ids_shape, mask)
        if arch.has_ffn(i):
            x = _ffn(g, f"h.{i}", x)
    x = g.layer_norm(x, "ln_f", LAYER_NORM_EPS)
    logits = _output(g, arch, x)  # [B*T, V]
    g.op("Reshape", logits, g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.rename_last("logits")

    graph = g.graph(f"ltsedge_{arch.backbone}", [t.value_info() for t in spec.inputs],
                    [t.value_info() for t in spec.outputs])
    return graph, g.large


def _embed(g: GraphBuilder, arch, ids: str, ids_shape: str, seq_len: str) -> str:
    d = arch.d_model
    positions = g.op("Range", g.const(0), seq_len, g.const(1))
    pos = g.op("Gather", g.weight("wpe.weight"), positions, axis=0)  # [T, d]
    if arch.adaptive:
        tok = adaptive_embed(g, arch, ids, "wte")  # [B*T, d]
        tok = g.op("Reshape", tok, g.op("Concat", ids_shape, g.const([d]), axis=0))
    else:
        tok = g.op("Gather", g.weight("wte.weight"), ids, axis=0)  # [B, T, d]
    return g.op("Reshape", g.op("Add", tok, pos), g.const([-1, d]))


def _attention(g: GraphBuilder, d: int, n_head: int, prefix: str, x: str, ids_shape: str, mask: str) -> str:
    """``x + attn(ln_1(x))`` over the full sequence."""
    d_head = d // n_head
    a = g.layer_norm(x, f"{prefix}.ln_1", LAYER_NORM_EPS)
    qkv = g.linear(a, f"{prefix}.attn.c_attn")  # [B*T, 3d]
    q, k, v = g.op("Split", qkv, g.const([d, d, d]), axis=1, n_out=3)
    heads_shape = g.op("Concat", ids_shape, g.const([n_head, d_head]), axis=0)  # [B, T, h, dh]
    q = g.op("Transpose", g.op("Reshape", q, heads_shape), perm=[0, 2, 1, 3])  # [B, h, T, dh]
    k = g.op("Transpose", g.op("Reshape", k, heads_shape), perm=[0, 2, 3, 1])  # [B, h, dh, T]
    v = g.op("Transpose", g.op("Reshape", v, heads_shape), perm=[0, 2, 1, 3])
    scores = g.op("Mul", g.op("MatMul", q, k), g.const(1 / math.sqrt(d_head), np.float32))
    att = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
    y = g.op("Transpose", g.op("MatMul", att, v), perm=[0, 2, 1, 3])  # [B, T, h, dh]
    y = g.linear(g.op("Reshape", y, g.const([-1, d])), f"{prefix}.attn.c_proj")
    return g.op("Add", x, y)


def _ffn(g: GraphBuilder, prefix: str, x: str) -> str:
    """``x + mlp(ln_2(x))``; the same in both variants."""
    m = g.linear(g.layer_norm(x, f"{prefix}.ln_2", LAYER_NORM_EPS), f"{prefix}.mlp.c_fc")
    return g.op("Add", x, g.linear(g.gelu(m), f"{prefix}.mlp.c_proj"))


def _output(g: GraphBuilder, arch, x: str) -> str:
    if not arch.adaptive:
        return g.matmul_t(x, g.weight("wte.weight"))  # tied: reuses the embedding initializer
    return adaptive_logits(g, arch, x, embedding="wte", head="lm_head")


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant: new tokens after a KV cache, in the naming Optimum and onnxruntime-genai use.

    ``input_ids``, ``position_ids`` [batch, sequence]; ``attention_mask`` [batch, past + sequence] (0 at
    padding); per attention layer ``past_key_values.{k}.key/.value`` [batch, heads, past, head_dim] ->
    ``logits`` and ``present.{k}.key/.value`` [batch, heads, past + sequence, head_dim], k counting the
    layers with attention (``kv_cache.cache_layers``), in the heads ``spec`` declares (the cache layout).
    Prefill is the same graph with a past of length 0. Mirrors ``GPT2.forward_with_cache``. An all-FFN
    model has no cache and reads no ``attention_mask``.
    """
    g = GraphBuilder(weights, opset, gemm)
    d = arch.d_model
    caches = cache_layers(arch)
    ids_shape = g.op("Shape", "input_ids")  # [B, T]
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    if caches:
        past_len = g.op("Gather", g.op("Shape", "past_key_values.0.key"), g.const(2), axis=0)
        total_len = g.op("Add", past_len, seq_len)

    if arch.adaptive:
        tok = g.op("Reshape", adaptive_embed(g, arch, "input_ids", "wte"), g.op("Concat", ids_shape, g.const([d]), axis=0))
    else:
        tok = g.op("Gather", g.weight("wte.weight"), "input_ids", axis=0)  # [B, T, d]
    pos = g.op("Gather", g.weight("wpe.weight"), "position_ids", axis=0)  # [B, T, d]
    x = g.op("Reshape", g.op("Add", tok, pos), g.const([-1, d]))

    if caches:
        # May query t (absolute position past + t) attend to key j? j <= past + t, and j is not padding.
        causal = g.causal(past_len, total_len)  # [T, S]
        not_padding = g.op("Unsqueeze", g.op("Cast", "attention_mask", to=TensorProto.BOOL), g.const([1, 2]))
        allowed = g.op("And", causal, not_padding)  # [B, 1, T, S]

    for i, n_head in enumerate(arch.n_head):
        if arch.has_attention(i):
            cache = caches.index(i)
            x = _cached_attention(g, d, n_head, f"h.{i}", cache, cache_heads_of(spec, cache), x, ids_shape, allowed)
        if arch.has_ffn(i):
            x = _ffn(g, f"h.{i}", x)
    x = g.layer_norm(x, "ln_f", LAYER_NORM_EPS)
    g.op("Reshape", _output(g, arch, x), g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.rename_last("logits")
    graph = g.graph(f"ltsedge_{arch.backbone}_generate", [t.value_info() for t in spec.inputs],
                    [t.value_info() for t in spec.outputs])
    return graph, g.large


def _cached_attention(g: GraphBuilder, d: int, n_head: int, prefix: str, cache: int, stored: int, x: str,
                      ids_shape: str, allowed: str) -> str:
    """``x + attn(ln_1(x))`` for the new tokens, after cache number ``cache``, which it extends. The cache
    is stored in ``stored`` heads (``kv_cache``'s layouts), read in the layer's ``n_head``."""
    d_head = d // n_head
    a = g.layer_norm(x, f"{prefix}.ln_1", LAYER_NORM_EPS)
    q, k, v = g.op("Split", g.linear(a, f"{prefix}.attn.c_attn"), g.const([d, d, d]), axis=1, n_out=3)
    heads_shape = g.op("Concat", ids_shape, g.const([n_head, d_head]), axis=0)  # [B, T, h, dh]
    cache_shape = heads_shape if stored == n_head else g.op("Concat", ids_shape, g.const([stored, d // stored]), axis=0)
    q, k, v = (g.op("Transpose", g.op("Reshape", t, shape), perm=[0, 2, 1, 3])
               for t, shape in ((q, heads_shape), (k, cache_shape), (v, cache_shape)))
    g.op("Concat", PAST.format(i=cache, kind="key"), k, axis=2)  # [B, stored, P + T, d/stored]
    k = g.rename_last(PRESENT.format(i=cache, kind="key"))
    g.op("Concat", PAST.format(i=cache, kind="value"), v, axis=2)
    v = g.rename_last(PRESENT.format(i=cache, kind="value"))
    scores = g.op("Mul", cached_scores(g, q, k, stored, n_head, d), g.const(1 / math.sqrt(d_head), np.float32))
    scores = g.op("Where", allowed, scores, g.const(MASKED_SCORE, np.float32))  # finite: no NaN for padding
    y = cached_weighted(g, g.op("Softmax", scores, axis=-1), v, stored, n_head, d)  # [B, h, T, dh]
    y = g.op("Transpose", y, perm=[0, 2, 1, 3])  # [B, T, h, dh]
    return g.op("Add", x, g.linear(g.op("Reshape", y, g.const([-1, d])), f"{prefix}.attn.c_proj"))
