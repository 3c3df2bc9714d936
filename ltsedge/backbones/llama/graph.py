"""Llama as an ONNX graph of standard operators, written node by node from the architecture and the
reference model's weights.

Same route as GPT-2's and OPT's graphs (no tracing): weights read by their state-dict names
(``model.py``), linear layers through ``GraphBuilder.linear`` (Gemm, or MatMul for the quantizers), the
tied output layer reusing the token-embedding initializer. Only standard ONNX operators, so every
``--target-ort`` release loads it: RMSNorm as ReduceMean/Sqrt/Div, SiLU as Sigmoid times its input.

Rotary positions are computed from the positions in the graph (one Cos and Sin per head size, shared
by the layers), from the reference's very frequencies: no table bounds the sequence. They rotate the
queries and keys in the ``[B, T, heads, head_dim]`` layout before the transposes that copy them anyway,
as ``x * cos + swap_halves(x) * sin'`` with ``sin' = (-sin, sin)``: rotate_half without a Neg per layer.
Queries, keys and values come from one packed projection, split. Grouped key/value heads are never
repeated: the ``n_head / n_kv_head`` query heads of a group are stacked along the sequence axis (a free
Reshape), so one MatMul per group reads its keys and values. The mask is added to the scores.
The generate variant's caches are each layer's own ``[batch, n_kv_head, past, head_dim]``, static heads
and head size; keys are cached rotated, as transformers caches them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto

from ltsedge.backbones.kv_cache import PAST, PRESENT
from ltsedge.backbones.llama.model import MASKED_SCORE, inverse_frequencies
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder

FIRST_REDUCE_AXES_INPUT_OPSET = 18  # ReduceMean takes its axes as an input from opset 18 on


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: ``input_ids [batch, sequence] -> logits [batch, sequence, vocab]``, in standard
    operators (``contrib_graph.py``: the same with onnxruntime's fused ones)."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")  # [B, T]
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    positions = g.op("Range", g.const(0), seq_len, g.const(1))  # [T]: angles [T, 1, hd] over [B, T, h, hd]
    allowed = g.causal(g.const(0), seq_len)  # [T, T]
    return _finish(g, arch, spec, positions, ids_shape, allowed, cached=False, name=f"ltsedge_{arch.backbone}")


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant: new tokens after a KV cache, in the naming Optimum and onnxruntime-genai use.

    ``input_ids``, ``position_ids`` [batch, sequence]; ``attention_mask`` [batch, past + sequence] (0 at
    padding); per layer ``past_key_values.{i}.key/.value`` [batch, n_kv_head[i], past, head_dim] -> ``logits``
    and ``present.{i}.*`` [batch, n_kv_head[i], past + sequence, head_dim]. Prefill is the same graph with a
    past of length 0. Mirrors ``Llama.forward_with_cache``.
    """
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    past_len = g.op("Gather", g.op("Shape", PAST.format(i=0, kind="key")), g.const(2), axis=0)
    causal = g.causal(past_len, g.op("Add", past_len, seq_len))  # [T, P + T]
    not_padding = g.op("Unsqueeze", g.op("Cast", "attention_mask", to=TensorProto.BOOL), g.const([1, 2]))
    allowed = g.op("And", causal, not_padding)  # [B, 1, T, P + T]
    return _finish(g, arch, spec, "position_ids", ids_shape, allowed, cached=True,
                   name=f"ltsedge_{arch.backbone}_generate")


def _finish(g: GraphBuilder, arch, spec: ExportSpec, positions: str, ids_shape: str, allowed: str, cached: bool,
            name: str) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The embedding, the layers, the final RMSNorm and the output layer; the graph declaring ``spec``."""
    x = g.op("Reshape", g.op("Gather", g.weight("embed_tokens.weight"), "input_ids", axis=0),
             g.const([-1, arch.d_model]))  # [B*T, d]
    angles: dict[int, tuple[str, str]] = {}  # head size -> cos, sin' broadcasting over [B, T, heads, head size]
    bias = additive_mask(g, allowed)
    for i in range(arch.n_layer):
        prefix = f"layers.{i}"
        head_dim = arch.d_head[i]
        if head_dim not in angles:
            angles[head_dim] = _angles(g, positions, head_dim, arch.rope_theta)
        a = _rms_norm(g, x, f"{prefix}.input_layernorm", arch.rms_norm_eps)
        x = g.op("Add", x, _attention(g, arch, i, a, ids_shape, angles[head_dim], bias, cached))
        m = _rms_norm(g, x, f"{prefix}.post_attention_layernorm", arch.rms_norm_eps)
        x = g.op("Add", x, _mlp(g, m, f"{prefix}.mlp"))
    x = _rms_norm(g, x, "norm", arch.rms_norm_eps)
    output_layer(g, arch, x, ids_shape)
    graph = g.graph(name, [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs])
    return graph, g.large


def output_layer(g: GraphBuilder, arch, x: str, ids_shape: str, fused: bool = False) -> str:
    """``logits [B, T, vocab]`` of ``x [B*T, d]``: the tied embedding (its initializer itself) or ``lm_head``.
    A Reshape that makes a graph output copies it (96 MiB for 512 tokens of a 49152 vocabulary), so the
    product is written straight into the logits where the graph can: MatMul on ``x`` as ``[B, T, d]`` for
    a quantized export (the quantizers rewrite it), com.microsoft FusedMatMul (``fused``) in fp32; a plain
    fp32 graph's Gemm is 2-D, and reshaped."""
    weight = g.weight("embed_tokens.weight" if arch.tie_embeddings else "lm_head.weight")
    if g.gemm and not fused:
        g.op("Reshape", g.matmul_t(x, weight), g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    else:
        x = g.op("Reshape", x, g.op("Concat", ids_shape, g.const([arch.d_model]), axis=0))
        if g.gemm:
            g.op("FusedMatMul", x, weight, domain="com.microsoft", transB=1)
        else:
            g.matmul_t(x, weight)
    return g.rename_last("logits")


def _rms_norm(g: GraphBuilder, x: str, prefix: str, eps: float) -> str:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""
    square = g.op("Mul", x, x)
    if g.opset >= FIRST_REDUCE_AXES_INPUT_OPSET:
        mean = g.op("ReduceMean", square, g.const([-1]), keepdims=1)
    else:
        mean = g.op("ReduceMean", square, axes=[-1], keepdims=1)
    rms = g.op("Sqrt", g.op("Add", mean, g.const(eps, np.float32)))
    return g.op("Mul", g.op("Div", x, rms), g.weight(f"{prefix}.weight"))


def _mlp(g: GraphBuilder, x: str, prefix: str) -> str:
    """SwiGLU: ``down(silu(gate(x)) * up(x))``, SiLU as ``x * sigmoid(x)``."""
    gate = g.linear(x, f"{prefix}.gate_proj", bias=False)
    up = g.linear(x, f"{prefix}.up_proj", bias=False)
    hidden = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up)
    return g.linear(hidden, f"{prefix}.down_proj", bias=False)


def _angles(g: GraphBuilder, positions: str, head_dim: int, theta: float) -> tuple[str, str]:
    """cos and sin' = (-sin, sin) of ``positions`` ([T] or [B, T]) for heads of ``head_dim``, with a heads axis
    before the last: ``[T, 1, hd]`` or ``[B, T, 1, hd]``."""
    frequencies = g.const(inverse_frequencies(head_dim, theta).numpy(), np.float32)
    angles = g.op("Mul", g.op("Unsqueeze", g.op("Cast", positions, to=TensorProto.FLOAT), g.const([-1])),
                  frequencies)  # [..., T, hd/2]
    angles = g.op("Unsqueeze", angles, g.const([-2]))  # [..., T, 1, hd/2]
    cos, sin = g.op("Cos", angles), g.op("Sin", angles)
    return g.op("Concat", cos, cos, axis=-1), g.op("Concat", g.op("Neg", sin), sin, axis=-1)


def _rotate(g: GraphBuilder, x: str, angles: tuple[str, str], head_dim: int) -> str:
    """``x [B, T, h, hd]`` rotated: ``x * cos + (x2, x1) * (-sin, sin)`` = transformers' ``x * cos +
    rotate_half(x) * sin``."""
    cos, sin = angles
    half = g.const([head_dim // 2, head_dim // 2])
    first, second = g.op("Split", x, half, axis=-1, n_out=2)
    swapped = g.op("Concat", second, first, axis=-1)
    return g.op("Add", g.op("Mul", x, cos), g.op("Mul", swapped, sin))


def additive_mask(g: GraphBuilder, allowed: str) -> str:
    """0 where a query may attend to a key, the reference's masked score elsewhere, added to the scores: the
    masked ones become that score exactly (it dwarfs any score), and an Add costs a third of a Where's
    broadcast (59 against 20 ms for the 30 layers of a 512-token SmolLM2-135M prefill)."""
    return g.op("Where", allowed, g.const(0.0, np.float32), g.const(MASKED_SCORE, np.float32))


def qkv_projection(g: GraphBuilder, arch, i: int, x: str) -> str:
    """Layer ``i``'s queries, keys and values of ``x [B*T, d]`` from one packed projection (q's rows, k's, v's:
    one matrix product instead of three, which at int4 quantizes ``x`` once): ``[B*T, (h + 2 kv) * hd]``."""
    prefix = f"layers.{i}.self_attn"
    packed = f"{prefix}.qkv_proj.weight"
    g.weight(packed, np.concatenate([g.weights[f"{prefix}.{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]))
    return g.matmul_t(x, packed)


def _attention(g: GraphBuilder, arch, i: int, x: str, ids_shape: str, angles: tuple[str, str], bias: str,
               cached: bool) -> str:
    """Grouped-query self-attention of layer ``i`` on ``x [B*T, d]`` (``bias``: ``additive_mask``'s); ``cached``:
    cache ``i`` is prepended and the keys and values of all tokens are its ``present`` outputs."""
    n_head, n_kv, head_dim = arch.n_head[i], arch.kv_heads[i], arch.d_head[i]
    group = n_head // n_kv
    prefix = f"layers.{i}.self_attn"
    sizes = g.const([n_head * head_dim, n_kv * head_dim, n_kv * head_dim])
    projected = g.op("Split", qkv_projection(g, arch, i, x), sizes, axis=-1, n_out=3)

    def heads(y: str, count: int) -> str:  # a projection [B*T, count*hd] as [B, T, count, hd]
        return g.op("Reshape", y, g.op("Concat", ids_shape, g.const([count, head_dim]), axis=0))

    q = g.op("Transpose", _rotate(g, heads(projected[0], n_head), angles, head_dim), perm=[0, 2, 1, 3])  # [B, h, T, hd]
    q = g.op("Mul", q, g.const(head_dim ** -0.5, np.float32))
    k = _rotate(g, heads(projected[1], n_kv), angles, head_dim)
    v = g.op("Transpose", heads(projected[2], n_kv), perm=[0, 2, 1, 3])  # [B, kv, T, hd]
    if cached:
        g.op("Concat", PAST.format(i=i, kind="key"), g.op("Transpose", k, perm=[0, 2, 1, 3]), axis=2)
        k = g.op("Transpose", g.rename_last(PRESENT.format(i=i, kind="key")), perm=[0, 1, 3, 2])  # [B, kv, hd, S]
        g.op("Concat", PAST.format(i=i, kind="value"), v, axis=2)
        v = g.rename_last(PRESENT.format(i=i, kind="value"))
    else:
        k = g.op("Transpose", k, perm=[0, 2, 3, 1])  # straight to [B, kv, hd, T]
    if group > 1:  # a group's queries one after another: [B, kv, group*T, hd]
        q = g.op("Reshape", q, g.const([0, n_kv, -1, head_dim]))
    scores = g.op("MatMul", q, k)
    if group > 1:
        scores = g.op("Reshape", scores, g.const([0, n_head, -1, 0]))  # [B, h, T, S]
    scores = g.op("Add", scores, bias)  # finite: no NaN for padding
    att = g.op("Softmax", scores, axis=-1)
    if group > 1:
        att = g.op("Reshape", att, g.const([0, n_kv, -1, 0]))
    y = g.op("MatMul", att, v)
    if group > 1:
        y = g.op("Reshape", y, g.const([0, n_head, -1, head_dim]))  # [B, h, T, hd]
    y = g.op("Reshape", g.op("Transpose", y, perm=[0, 2, 1, 3]), g.const([-1, n_head * head_dim]))
    return g.linear(y, f"{prefix}.o_proj", bias=False)
