"""Transformer-XL as an ONNX graph, written node by node from the architecture and the reference weights.

Mirrors ``model.py`` (the tests prove logits and memories equal to PyTorch's over several segments),
with two changes of method that leave the result exact and suit a runtime better:
  - the relative shift is an explicit gather by relative distance (``GatherElements``), not NVIDIA's
    pad-and-reshape trick; positions a query may not see get an arbitrary in-range index and are masked;
  - queries are projected from the segment only (rows ``:d`` of ``qkv_net``), keys and values from
    memory and segment (rows ``d:``): NVIDIA projects queries for the memory too and drops them.
The causal mask and relative distances are built from ``Range`` and comparisons, so one graph serves
every segment and memory length. Activations stay 2-D (``[batch*sequence, d_model]``) between blocks.
The ``generate`` variant reads the memory length from ``mems.0`` (all memories are equally long).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from ltsedge.backbones.adaptive.graph import adaptive_embed, adaptive_logits
from ltsedge.backbones.transfo_xl.model import LAYER_NORM_EPS, MASKED_SCORE, inverse_frequencies
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder

END = np.iinfo(np.int64).max  # Slice to the end


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: one segment without memory, ``input_ids [batch, sequence] -> logits``."""
    return _build(arch, weights, opset, spec, f"ltsedge_{arch.backbone}", mems=None, gemm=gemm)


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant: ``input_ids`` and per attention layer ``mems.{k} [batch, past, d_model]``
    -> ``logits`` and ``new_mems.{k}`` (the last mem_len of memory and segment). Mirrors
    ``TransfoXL.forward_with_mems``."""
    mems = [t.name for t in spec.input("past")]
    return _build(arch, weights, opset, spec, f"ltsedge_{arch.backbone}_generate", mems=mems, gemm=gemm)


@dataclass(frozen=True)
class Segment:
    """What every attention layer of one segment shares (T new positions after M in memory, K = M + T)."""

    ids_shape: str  # [B, T]
    hidden_shape: str  # [B, T, d]
    pos_emb: str  # [K, d]: row m embeds relative distance K - 1 - m
    rel_index: str  # [T, K]: the row of pos_emb for query i and key j (clamped where j is not visible)
    visible: str  # [T, K] bool: key j <= M + i


def _build(arch, weights, opset: int, spec: ExportSpec, name: str, mems: list[str] | None, gemm: bool = True):
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")  # [B, T]
    x = _embed(g, arch, ids_shape)  # [B*T, d]
    seg = _segment(g, arch, ids_shape, mems[0] if mems else None) if arch.attention_layers else None
    for i in range(arch.n_layer):
        if arch.has_attention(i):
            k = arch.attention_layers.index(i)
            x = _attention(g, arch, i, x, seg, mems[k] if mems else None, f"new_mems.{k}")
        if arch.has_ffn(i):
            x = _ffn(g, i, x)
    logits = _output(g, arch, x)  # [B*T, V]
    g.op("Reshape", logits, g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.rename_last("logits")
    graph = g.graph(name, [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs])
    return graph, g.large


def _embed(g: GraphBuilder, arch, ids_shape: str) -> str:
    d = arch.d_model
    if arch.adaptive:
        e = adaptive_embed(g, arch, "input_ids", "word_emb")  # [B*T, d]
    else:
        e = g.op("Reshape", g.op("Gather", g.weight("word_emb.weight"), "input_ids", axis=0), g.const([-1, d]))
    return g.op("Mul", e, g.const(d**0.5, np.float32))


def _segment(g: GraphBuilder, arch, ids_shape: str, mem: str | None) -> Segment:
    one = g.const(1)
    seq_len = g.op("Gather", ids_shape, one, axis=0)
    mem_len = g.op("Gather", g.op("Shape", mem), one, axis=0) if mem else g.const(0)
    klen = g.op("Add", mem_len, seq_len)
    keys = g.op("Unsqueeze", g.op("Range", g.const(0), klen, one), g.const([0]))  # [1, K]
    queries = g.op("Unsqueeze", g.op("Range", g.const(0), seq_len, one), g.const([1]))  # [T, 1]
    visible = g.op("LessOrEqual", keys, g.op("Add", queries, mem_len))
    # Distance M + i - j lives in row K - 1 - (M + i - j) = j - i + T - 1; beyond K - 1 only where j > M + i.
    rel_index = g.op("Min", g.op("Add", g.op("Sub", keys, queries), g.op("Sub", seq_len, one)), g.op("Sub", klen, one))
    pos_seq = g.op("Cast", g.op("Range", g.op("Sub", klen, one), g.const(-1), g.const(-1)), to=TensorProto.FLOAT)
    inv_freq = g.const(inverse_frequencies(arch.d_model), np.float32)
    sinusoid = g.op("Mul", g.op("Unsqueeze", pos_seq, g.const([1])), inv_freq)  # [K, d/2]
    pos_emb = g.op("Concat", g.op("Sin", sinusoid), g.op("Cos", sinusoid), axis=1)  # [K, d]
    hidden_shape = g.op("Concat", ids_shape, g.const([arch.d_model]), axis=0)
    return Segment(ids_shape, hidden_shape, pos_emb, rel_index, visible)


def _attention(g: GraphBuilder, arch, i: int, x: str, seg: Segment, mem: str | None, new_mem: str) -> str:
    d, h = arch.d_model, arch.n_head[i]
    dh, p = d // h, f"layers.{i}.dec_attn"
    cat = x
    if mem is not None:  # the memory: this layer's inputs of earlier segments, then the new memory
        cat = g.op("Concat", mem, g.op("Reshape", x, seg.hidden_shape), axis=1)  # [B, K, d]
        g.op("Slice", cat, g.const([-arch.mem_len]), g.const([END]), g.const([1]))
        g.rename_last(new_mem)
        cat = g.op("Reshape", cat, g.const([-1, d]))
    qkv = g.weights[f"{p}.qkv_net.weight"]
    q = g.matmul_t(x, g.weight(f"{p}.qkv_net.weight.q", qkv[:d]))  # [B*T, d]
    kv = g.matmul_t(cat, g.weight(f"{p}.qkv_net.weight.kv", qkv[d:]))  # [B*K, 2d]
    k, v = g.op("Split", kv, g.const([d, d]), axis=1, n_out=2)
    batch = g.op("Slice", seg.ids_shape, g.const([0]), g.const([1]))
    kv_heads = g.op("Concat", batch, g.const([-1, h, dh]), axis=0)  # [B, K, h, dh]
    q = g.op("Transpose", g.op("Reshape", q, g.op("Concat", seg.ids_shape, g.const([h, dh]), axis=0)),
             perm=[0, 2, 1, 3])  # [B, h, T, dh]
    k = g.op("Transpose", g.op("Reshape", k, kv_heads), perm=[0, 2, 3, 1])  # [B, h, dh, K]
    v = g.op("Transpose", g.op("Reshape", v, kv_heads), perm=[0, 2, 1, 3])  # [B, h, K, dh]
    r = g.op("Reshape", g.matmul_t(seg.pos_emb, g.weight(f"{p}.r_net.weight")), g.const([-1, h, dh]))
    r = g.op("Transpose", r, perm=[1, 2, 0])  # [h, dh, K]

    r_w_bias = g.weight(f"{p}.r_w_bias", g.weights[f"{p}.r_w_bias"].reshape(h, 1, dh))
    r_r_bias = g.weight(f"{p}.r_r_bias", g.weights[f"{p}.r_r_bias"].reshape(h, 1, dh))
    content = g.op("MatMul", g.op("Add", q, r_w_bias), k)  # AC [B, h, T, K]
    by_row = g.op("MatMul", g.op("Add", q, r_r_bias), r)  # BD before the shift: [B, h, T, rows]
    position = g.op("GatherElements", by_row, g.op("Expand", seg.rel_index, g.op("Shape", by_row)), axis=3)
    score = g.op("Mul", g.op("Add", content, position), g.const(1 / math.sqrt(dh), np.float32))
    score = g.op("Where", seg.visible, score, g.const(MASKED_SCORE, np.float32))
    y = g.op("Transpose", g.op("MatMul", g.op("Softmax", score, axis=-1), v), perm=[0, 2, 1, 3])  # [B, T, h, dh]
    y = g.linear(g.op("Reshape", y, g.const([-1, d])), f"{p}.o_net", bias=False)
    return g.layer_norm(g.op("Add", x, y), f"{p}.layer_norm", LAYER_NORM_EPS)


def _ffn(g: GraphBuilder, i: int, x: str) -> str:
    p = f"layers.{i}.pos_ff"
    m = g.linear(g.op("Relu", g.linear(x, f"{p}.CoreNet.0")), f"{p}.CoreNet.2")
    return g.layer_norm(g.op("Add", x, m), f"{p}.layer_norm", LAYER_NORM_EPS)


def _output(g: GraphBuilder, arch, x: str) -> str:
    if not arch.adaptive:
        return g.matmul_t(x, g.weight("word_emb.weight"))  # tied: reuses the embedding initializer
    return adaptive_logits(g, arch, x, embedding="word_emb", head="crit")
