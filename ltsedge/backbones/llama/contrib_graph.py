"""Llama in onnxruntime's fused operators (the ``contrib`` graph form): what onnxruntime-genai's model builder
emits for CPUs, from the same weights as ``graph.py``'s standard-operator form, equal to the reference.

- attention: com.microsoft ``GroupQueryAttention`` on the packed q/k/v projection (one MatMul), rotary
  positions fused (``do_rotary``, cos/sin tables of ``n_positions`` rows computed as the reference computes
  them), grouped key/value heads read in place, the causal mask its own. Padding (the attention mask's
  zeros) is masked through its ``attention_bias``; its sequence lengths are then every row's whole length.
  Its rotary angles are those of the cache slots, not of ``position_ids`` (an unread input here): for a
  prompt without padding they are the same; with left padding every position of a row is shifted by its
  padding, which rotary attention, depending only on the distance between a query and a key, does not see.
  Layers whose head size is no multiple of 16 (GroupQueryAttention's CPU kernel refuses those) keep
  ``graph.py``'s attention;
- RMSNorm: com.microsoft ``SkipSimplifiedLayerNormalization``, the residual add folded in (two per layer);
  the first one has no residual to fold and stays in standard operators;
- the tied output layer at int4: ``exporters.quantize`` reads the token embedding from the output layer's
  4-bit blocks (``GatherBlockQuantized``), so the table is stored once, quantized.

onnxruntime runs these from 1.22 (``attention_bias``; ``GatherBlockQuantized`` of uint8 blocks): the
``contrib`` form is refused for older targets (``exporters.options``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto

from ltsedge.backbones.kv_cache import PAST, PRESENT
from ltsedge.backbones.llama import graph as plain
from ltsedge.backbones.llama.model import rotary
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder

CONTRIB_DOMAIN = "com.microsoft"
GQA_HEAD_MULTIPLE = 16  # GroupQueryAttention's CPU kernel: "head_size shall be a multiple of 16"


def fused_attention(head_dim: int) -> bool:
    """Does a layer of this head size run GroupQueryAttention (else graph.py's attention)?"""
    return head_dim % GQA_HEAD_MULTIPLE == 0


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: every row a whole sequence, no cache."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    fused, plain_attention = None, None
    if any(fused_attention(d) for d in arch.d_head):
        fused = (*_lengths(g, ids_shape, seq_len), None)
    if not all(fused_attention(d) for d in arch.d_head):
        plain_attention = (g.op("Range", g.const(0), seq_len, g.const(1)),
                           plain.additive_mask(g, g.causal(g.const(0), seq_len)))
    return _finish(g, arch, spec, ids_shape, fused, plain_attention, cached=False,
                   name=f"ltsedge_{arch.backbone}_contrib")


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant, declaring graph.py's very inputs and outputs (``spec``)."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    total = g.op("Gather", g.op("Shape", "attention_mask"), g.const(1), axis=0)
    not_padding = g.op("Cast", "attention_mask", to=TensorProto.BOOL)  # [B, P + T]
    fused, plain_attention = None, None
    if any(fused_attention(d) for d in arch.d_head):
        # additive: 0 where a key may be attended to, the reference's masked score at padding; [B, 1, T, P + T]
        # (the kernel takes no broadcast over the queries)
        bias = g.op("Unsqueeze", plain.additive_mask(g, not_padding), g.const([1, 2]))
        bias = g.op("Expand", bias, g.op("Concat", g.const([1, 1]), g.unsqueeze0(seq_len), g.const([1]), axis=0))
        fused = (*_lengths(g, ids_shape, total), bias)
    if not all(fused_attention(d) for d in arch.d_head):
        causal = g.causal(g.op("Sub", total, seq_len), total)
        allowed = g.op("And", causal, g.op("Unsqueeze", not_padding, g.const([1, 2])))
        plain_attention = ("position_ids", plain.additive_mask(g, allowed))
    return _finish(g, arch, spec, ids_shape, fused, plain_attention, cached=True,
                   name=f"ltsedge_{arch.backbone}_generate_contrib")


def _lengths(g: GraphBuilder, ids_shape: str, total: str) -> tuple[str, str]:
    """GroupQueryAttention's ``seqlens_k`` (every row's ``total - 1``, int32 [B]) and ``total_sequence_length``
    (an int32 scalar)."""
    total32 = g.op("Cast", total, to=TensorProto.INT32)
    batch = g.unsqueeze0(g.op("Gather", ids_shape, g.const(0), axis=0))
    seqlens = g.op("Expand", g.op("Sub", total32, g.const(1, np.int32)), batch)
    return seqlens, total32


def _finish(g: GraphBuilder, arch, spec: ExportSpec, ids_shape: str, fused: tuple | None,
            plain_attention: tuple[str, str] | None, cached: bool, name: str
            ) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The layers on the embedding, the output layer. ``fused``: GroupQueryAttention's (seqlens_k,
    total_sequence_length, attention_bias or None); ``plain_attention``: graph.py's (positions, mask bias), for
    layers of other head sizes (each None where no layer needs it)."""
    h = g.op("Reshape", g.op("Gather", g.weight("embed_tokens.weight"), "input_ids", axis=0),
             g.const([-1, arch.d_model]))  # [B*T, d]: the residual stream
    x = plain._rms_norm(g, h, "layers.0.input_layernorm", arch.rms_norm_eps)
    tables: dict[int, tuple[str, str]] = {}  # head size -> GroupQueryAttention's cos, sin [n_positions, hd/2]
    angles: dict[int, tuple[str, str]] = {}  # head size -> graph.py's angles, for layers it attends in
    for i in range(arch.n_layer):
        head_dim = arch.d_head[i]
        if fused_attention(head_dim):
            if head_dim not in tables:
                tables[head_dim] = _rotary_tables(g, arch, head_dim)
            a = _attention(g, arch, i, x, ids_shape, fused, tables[head_dim], cached)
        else:
            if head_dim not in angles:
                angles[head_dim] = plain._angles(g, plain_attention[0], head_dim, arch.rope_theta)
            a = plain._attention(g, arch, i, x, ids_shape, angles[head_dim], plain_attention[1], cached)
        x, h = _skip_rms_norm(g, h, a, f"layers.{i}.post_attention_layernorm", arch.rms_norm_eps)
        m = plain._mlp(g, x, f"layers.{i}.mlp")
        after = f"layers.{i + 1}.input_layernorm" if i + 1 < arch.n_layer else "norm"
        x, h = _skip_rms_norm(g, h, m, after, arch.rms_norm_eps)
    plain.output_layer(g, arch, x, ids_shape, fused=True)
    graph = g.graph(name, [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs])
    return graph, g.large


def _skip_rms_norm(g: GraphBuilder, residual: str, x: str, prefix: str, eps: float) -> tuple[str, str]:
    """``residual + x`` (the next residual stream) and its RMSNorm, in one operator: (normed, sum)."""
    normed, _, _, total = g.op("SkipSimplifiedLayerNormalization", residual, x, g.weight(f"{prefix}.weight"),
                               n_out=4, domain=CONTRIB_DOMAIN, epsilon=eps)
    g.nodes[-1].output[1] = g.nodes[-1].output[2] = ""  # mean and inverse deviation: not computed
    return normed, total


def _rotary_tables(g: GraphBuilder, arch, head_dim: int) -> tuple[str, str]:
    """cos and sin of every position's angles, ``[n_positions, head_dim / 2]``, as the reference computes them."""
    import torch

    cos, sin = rotary(torch.arange(arch.n_positions), head_dim, arch.rope_theta)
    half = head_dim // 2
    return (g.weight(f"rotary.cos.{head_dim}", cos[:, :half].numpy()),
            g.weight(f"rotary.sin.{head_dim}", sin[:, :half].numpy()))


def _attention(g: GraphBuilder, arch, i: int, x: str, ids_shape: str, fused: tuple, tables: tuple[str, str],
               cached: bool) -> str:
    """Layer ``i``'s attention on ``x [B*T, d]``: q, k and v from one packed projection, GroupQueryAttention
    (rotating them, reading and extending cache ``i``), the output projection."""
    n_head, n_kv, head_dim = arch.n_head[i], arch.kv_heads[i], arch.d_head[i]
    prefix = f"layers.{i}.self_attn"
    qkv = g.op("Reshape", plain.qkv_projection(g, arch, i, x), g.op("Concat", ids_shape, g.const([-1]), axis=0))
    seqlens, total, bias = fused
    past = (PAST.format(i=i, kind="key"), PAST.format(i=i, kind="value")) if cached else ("", "")
    inputs = [qkv, "", "", *past, seqlens, total, *tables]
    if bias is not None:
        inputs += ["", bias]  # no position_ids: the cache slots' angles
    y, key, value = g.op("GroupQueryAttention", *inputs, n_out=3, domain=CONTRIB_DOMAIN, num_heads=n_head,
                         kv_num_heads=n_kv, scale=head_dim ** -0.5, do_rotary=1, rotary_interleaved=0)
    if cached:
        g.nodes[-1].output[1:] = [PRESENT.format(i=i, kind="key"), PRESENT.format(i=i, kind="value")]
    y = g.op("Reshape", y, g.const([-1, n_head * head_dim]))
    return g.linear(y, f"{prefix}.o_proj", bias=False)
