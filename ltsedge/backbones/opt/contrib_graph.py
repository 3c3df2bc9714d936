"""OPT with onnxruntime's fused attention (the ``contrib`` graph form), from the same weights as ``graph.py``'s
standard-operator form, equal to the reference.

Attention: com.microsoft ``GroupQueryAttention`` on q, k and v from one packed projection (OPT's three, and
their biases, stacked into one product), as many key/value heads as query heads, no rotary (positions are
the learned table's at OPT's offset, from ``position_ids``, as in the plain form), its ``scale`` OPT's scaling
of the queries, the causal mask its own; padding masked through its ``attention_bias``, as GPT-2's contrib form
(``backbones.gpt2.contrib_graph``, whose rules for which layers attend fused, and for a shared past/present
buffer in onnxruntime-genai, it shares). LayerNorms, the FFN and the output layer are ``graph.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from ltsedge.backbones.gpt2.contrib_graph import CONTRIB_DOMAIN, cached_masks, fused, gqa_lengths
from ltsedge.backbones.kv_cache import PAST, PRESENT, cache_heads_of, cache_layers
from ltsedge.backbones.opt import graph as plain
from ltsedge.backbones.opt.model import LAYER_NORM_EPS
from ltsedge.backbones.opt.params import POSITION_OFFSET
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: every row a whole sequence, no cache."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    positions = g.op("Range", g.const(POSITION_OFFSET), g.op("Add", seq_len, g.const(POSITION_OFFSET)), g.const(1))
    x = plain._embed(g, arch, positions)
    layers = arch.attention_layers
    attend = (*gqa_lengths(g, ids_shape, seq_len), None) if any(fused(arch, i) for i in layers) else None
    allowed = plain._allowed(g, g.const(0), seq_len) if not all(fused(arch, i) for i in layers) else None
    stored = {i: None for i in layers}
    return _finish(g, arch, spec, x, ids_shape, attend, allowed, stored, None, f"ltsedge_{arch.backbone}_contrib")


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant, declaring graph.py's very inputs and outputs (``spec``, its cache layout)."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    x = plain._embed(g, arch, g.op("Add", "position_ids", g.const(POSITION_OFFSET)))
    caches = cache_layers(arch)
    stored = {layer: cache_heads_of(spec, k) for k, layer in enumerate(caches)}
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0) if caches else None
    attend, allowed = cached_masks(g, ids_shape, seq_len, [fused(arch, i, stored[i]) for i in caches])
    cache_of = {layer: k for k, layer in enumerate(caches)}
    return _finish(g, arch, spec, x, ids_shape, attend, allowed, stored, cache_of,
                   f"ltsedge_{arch.backbone}_generate_contrib")


def _finish(g: GraphBuilder, arch, spec: ExportSpec, x: str, ids_shape: str, attend: tuple | None,
            allowed: str | None, stored: dict, cache_of: dict | None, name: str
            ) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The layers (each attention fused where ``fused`` says), the final LayerNorm, the tied output layer."""
    for i in range(arch.n_layer):
        prefix = f"decoder.layers.{i}"
        if arch.has_attention(i):
            a = g.layer_norm(x, f"{prefix}.self_attn_layer_norm", LAYER_NORM_EPS)
            cache = None if cache_of is None else cache_of[i]
            if fused(arch, i, stored[i]):
                y = _attention(g, arch, i, a, ids_shape, attend, cache)
            else:
                y = plain._attention(g, arch, i, a, ids_shape, allowed, None if cache is None else (cache, stored[i]))
            x = g.op("Add", x, y)
        if arch.has_ffn(i):
            f = g.linear(g.layer_norm(x, f"{prefix}.final_layer_norm", LAYER_NORM_EPS), f"{prefix}.fc1")
            x = g.op("Add", x, g.linear(g.op("Relu", f), f"{prefix}.fc2"))
    x = g.layer_norm(x, "decoder.final_layer_norm", LAYER_NORM_EPS)
    logits = g.matmul_t(x, g.weight("decoder.embed_tokens.weight"))
    g.op("Reshape", logits, g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.rename_last("logits")
    return g.graph(name, [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs]), g.large


def _attention(g: GraphBuilder, arch, i: int, x: str, ids_shape: str, attend: tuple, cache: int | None) -> str:
    """Layer ``i``'s self-attention on ``x [B*T, d]`` (its LayerNorm applied): one packed projection of q, k and
    v with their biases, GroupQueryAttention (reading and extending cache ``cache`` where there is one), the
    output projection."""
    d, n_head = arch.d_model, arch.n_head[i]
    prefix = f"decoder.layers.{i}.self_attn"
    parts = ("q_proj", "k_proj", "v_proj")
    g.weight(f"{prefix}.qkv_proj.weight", np.concatenate([g.weights[f"{prefix}.{p}.weight"] for p in parts]))
    g.weight(f"{prefix}.qkv_proj.bias", np.concatenate([g.weights[f"{prefix}.{p}.bias"] for p in parts]))
    qkv = g.op("Reshape", g.linear(x, f"{prefix}.qkv_proj"), g.op("Concat", ids_shape, g.const([-1]), axis=0))
    seqlens, total, bias = attend
    past = (PAST.format(i=cache, kind="key"), PAST.format(i=cache, kind="value")) if cache is not None else ("", "")
    inputs = [qkv, "", "", *past, seqlens, total]
    if bias is not None:
        inputs += ["", "", "", bias]  # no rotary tables, no position_ids
    y, _, _ = g.op("GroupQueryAttention", *inputs, n_out=3, domain=CONTRIB_DOMAIN, num_heads=n_head,
                   kv_num_heads=n_head, scale=arch.d_head[i] ** -0.5)
    if cache is not None:
        g.nodes[-1].output[1:] = [PRESENT.format(i=cache, kind="key"), PRESENT.format(i=cache, kind="value")]
    return g.linear(g.op("Reshape", y, g.const([-1, d])), f"{prefix}.out_proj")
