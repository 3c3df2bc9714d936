"""GPT-2 with onnxruntime's fused attention (the ``contrib`` graph form), from the same weights as ``graph.py``'s
standard-operator form, equal to the reference.

Attention: com.microsoft ``GroupQueryAttention`` on the packed q/k/v projection (GPT-2's ``c_attn`` is one
already, with its bias), as many key/value heads as query heads, no rotary (positions are the learned table's,
from ``position_ids``, as in the plain form), the causal mask its own. Padding (the attention mask's zeros) is
masked through its ``attention_bias``; its sequence lengths are then every row's whole length. It reads and
extends the cache in place, so where every layer with a cache attends so, onnxruntime-genai runs the bundle
with one past/present buffer and a decode step copies no cache (``exporters.genai.shares_buffer``).

A layer keeps ``graph.py``'s attention where the fused kernel cannot take it: a head size that is no multiple of
16 (its CPU kernel's rule), or a cache stored in other heads than the layer's own (the uniform cache layout of a
model whose layers' head counts differ: ``backbones.kv_cache``). LayerNorm, the FFN and the output layer are
``graph.py``'s.

onnxruntime runs it from 1.22 (``attention_bias``), as Llama's contrib form (``exporters.options``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto

from ltsedge.backbones.adaptive.graph import adaptive_embed
from ltsedge.backbones.gpt2 import graph as plain
from ltsedge.backbones.gpt2.model import LAYER_NORM_EPS, MASKED_SCORE
from ltsedge.backbones.gpt2.fusion import fused
from ltsedge.backbones.kv_cache import PAST, PRESENT, cache_heads_of, cache_layers
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder

CONTRIB_DOMAIN = "com.microsoft"


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: every row a whole sequence, no cache."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    x = plain._embed(g, arch, "input_ids", ids_shape, seq_len)
    lengths, mask = None, None
    for i in arch.attention_layers:
        if fused(arch, i) and lengths is None:
            lengths = gqa_lengths(g, ids_shape, seq_len)
        if not fused(arch, i) and mask is None:
            mask = plain_causal_mask(g, seq_len)
    for i, n_head in enumerate(arch.n_head):
        if arch.has_attention(i):
            if fused(arch, i):
                x = _attention(g, arch, i, x, ids_shape, (*lengths, None), None)
            else:
                x = plain._attention(g, arch.d_model, n_head, f"h.{i}", x, ids_shape, mask)
        if arch.has_ffn(i):
            x = plain._ffn(g, f"h.{i}", x)
    return _finish(g, arch, spec, x, ids_shape, f"ltsedge_{arch.backbone}_contrib")


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant, declaring graph.py's very inputs and outputs (``spec``, its cache layout)."""
    g = GraphBuilder(weights, opset, gemm)
    d = arch.d_model
    caches = cache_layers(arch)
    ids_shape = g.op("Shape", "input_ids")
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    tok = g.op("Gather", g.weight("wte.weight"), "input_ids", axis=0) if not arch.adaptive else \
        g.op("Reshape", adaptive_embed(g, arch, "input_ids", "wte"), g.op("Concat", ids_shape, g.const([d]), axis=0))
    pos = g.op("Gather", g.weight("wpe.weight"), "position_ids", axis=0)
    x = g.op("Reshape", g.op("Add", tok, pos), g.const([-1, d]))
    stored = {layer: cache_heads_of(spec, c) for c, layer in enumerate(caches)}
    attend, allowed = cached_masks(g, ids_shape, seq_len, [fused(arch, i, stored[i]) for i in caches])
    for i, n_head in enumerate(arch.n_head):
        if arch.has_attention(i):
            cache = caches.index(i)
            if fused(arch, i, stored[i]):
                x = _attention(g, arch, i, x, ids_shape, attend, cache)
            else:
                x = plain._cached_attention(g, d, n_head, f"h.{i}", cache, stored[i], x, ids_shape, allowed)
        if arch.has_ffn(i):
            x = plain._ffn(g, f"h.{i}", x)
    return _finish(g, arch, spec, x, ids_shape, f"ltsedge_{arch.backbone}_generate_contrib")


def cached_masks(g: GraphBuilder, ids_shape: str, seq_len: str, fused_caches: list[bool]
                 ) -> tuple[tuple | None, str | None]:
    """What the generate variant's attention layers read, from ``attention_mask`` [B, P + T]: the fused ones
    GroupQueryAttention's (seqlens_k, total_sequence_length, attention_bias), the others graph.py's bool mask
    ``[B, 1, T, P + T]`` (causal, not padding); each None where no cache layer (``fused_caches``: fused or not,
    one per cache) needs it."""
    attend, allowed = None, None
    if fused_caches:
        total = g.op("Gather", g.op("Shape", "attention_mask"), g.const(1), axis=0)
        not_padding = g.op("Cast", "attention_mask", to=TensorProto.BOOL)  # [B, P + T]
    if any(fused_caches):
        # additive: 0 where a key may be attended to, the reference's masked score at padding; [B, 1, T, P + T]
        # (the kernel takes no broadcast over the queries)
        bias = g.op("Unsqueeze", additive_mask(g, not_padding), g.const([1, 2]))
        bias = g.op("Expand", bias, g.op("Concat", g.const([1, 1]), g.unsqueeze0(seq_len), g.const([1]), axis=0))
        attend = (*gqa_lengths(g, ids_shape, total), bias)
    if not all(fused_caches):
        causal = g.causal(g.op("Sub", total, seq_len), total)
        allowed = g.op("And", causal, g.op("Unsqueeze", not_padding, g.const([1, 2])))
    return attend, allowed


def plain_causal_mask(g: GraphBuilder, seq_len: str) -> str:
    """graph.py's forward mask: -inf above the diagonal, 0 elsewhere, ``[T, T]``."""
    from onnx import helper

    square = g.op("Concat", g.unsqueeze0(seq_len), g.unsqueeze0(seq_len), axis=0)
    minus_inf = helper.make_tensor("v", TensorProto.FLOAT, [1], [float("-inf")])
    return g.op("Trilu", g.op("ConstantOfShape", square, value=minus_inf), g.const(1), upper=1)


def additive_mask(g: GraphBuilder, allowed: str) -> str:
    """0 where a key may be attended to, the reference's masked score elsewhere (GroupQueryAttention's
    ``attention_bias``)."""
    return g.op("Where", allowed, g.const(0.0, np.float32), g.const(MASKED_SCORE, np.float32))


def gqa_lengths(g: GraphBuilder, ids_shape: str, total: str) -> tuple[str, str]:
    """GroupQueryAttention's ``seqlens_k`` (every row's ``total - 1``, int32 [B]) and ``total_sequence_length``
    (an int32 scalar)."""
    total32 = g.op("Cast", total, to=TensorProto.INT32)
    batch = g.unsqueeze0(g.op("Gather", ids_shape, g.const(0), axis=0))
    return g.op("Expand", g.op("Sub", total32, g.const(1, np.int32)), batch), total32


def _attention(g: GraphBuilder, arch, i: int, x: str, ids_shape: str, attend: tuple, cache: int | None) -> str:
    """``x + attn(ln_1(x))``: q, k and v from ``c_attn`` (one product and its bias), GroupQueryAttention
    (reading and extending cache ``cache``, where there is one), the output projection."""
    d, n_head = arch.d_model, arch.n_head[i]
    prefix = f"h.{i}"
    a = g.layer_norm(x, f"{prefix}.ln_1", LAYER_NORM_EPS)
    qkv = g.op("Reshape", g.linear(a, f"{prefix}.attn.c_attn"), g.op("Concat", ids_shape, g.const([-1]), axis=0))
    seqlens, total, bias = attend
    past = (PAST.format(i=cache, kind="key"), PAST.format(i=cache, kind="value")) if cache is not None else ("", "")
    inputs = [qkv, "", "", *past, seqlens, total]
    if bias is not None:
        inputs += ["", "", "", bias]  # no rotary tables, no position_ids
    y, key, value = g.op("GroupQueryAttention", *inputs, n_out=3, domain=CONTRIB_DOMAIN, num_heads=n_head,
                         kv_num_heads=n_head, scale=(d // n_head) ** -0.5)
    if cache is not None:
        g.nodes[-1].output[1:] = [PRESENT.format(i=cache, kind="key"), PRESENT.format(i=cache, kind="value")]
    y = g.linear(g.op("Reshape", y, g.const([-1, d])), f"{prefix}.attn.c_proj")
    return g.op("Add", x, y)


def _finish(g: GraphBuilder, arch, spec: ExportSpec, x: str, ids_shape: str, name: str
            ) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    x = g.layer_norm(x, "ln_f", LAYER_NORM_EPS)
    g.op("Reshape", plain._output(g, arch, x), g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.rename_last("logits")
    return g.graph(name, [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs]), g.large
