"""OPT as an ONNX graph, written node by node from the architecture and the reference model's weights.

Same route as GPT-2's graph (no tracing): weights read by their state-dict names (``model.py``),
linear layers as ``Gemm(transB=1)`` on PyTorch's ``[out, in]`` weights, the tied output layer reusing
the token-embedding initializer. Activations stay 2-D (``[batch*sequence, d_model]``) between layers;
attention reshapes to heads. One attention function serves both variants: without a cache (forward)
or concatenating its cache (generate). A layer's missing sub-block (PAR block types) emits no nodes:
an FFN-only layer has no Softmax and no cache. The tests prove the logits equal PyTorch's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto

from ltsedge.backbones.kv_cache import PAST, PRESENT, cache_heads_of, cache_layers, cached_scores, cached_weighted
from ltsedge.backbones.opt.model import LAYER_NORM_EPS, MASKED_SCORE
from ltsedge.backbones.opt.params import POSITION_OFFSET
from ltsedge.iospec import ExportSpec
from ltsedge.onnx_graph import GraphBuilder


def build_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The forward variant: ``input_ids [batch, sequence] -> logits [batch, sequence, vocab]``."""
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")  # [B, T]
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
    positions = g.op("Range", g.const(POSITION_OFFSET), g.op("Add", seq_len, g.const(POSITION_OFFSET)), g.const(1))
    x = _embed(g, arch, positions)  # rows 2 .. T+1 of the position table, [T, d] broadcast over the batch
    allowed = _allowed(g, g.const(0), seq_len) if arch.attention_layers else None  # [T, T] causal
    return _finish(g, arch, spec, x, ids_shape, allowed, caches=None, name=f"ltsedge_{arch.backbone}")


def build_generate_graph(arch, weights: Mapping[str, np.ndarray], opset: int, spec: ExportSpec,
                         gemm: bool = True) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The generate variant: new tokens after a KV cache, in the naming Optimum and onnxruntime-genai use.

    ``input_ids``, ``position_ids`` [batch, sequence] (0-based, as runtimes feed them: the graph adds
    OPT's offset); ``attention_mask`` [batch, past + sequence] (0 at padding); per attention layer k
    (``kv_cache.cache_layers``) ``past_key_values.{k}.key/.value`` -> ``logits`` and ``present.{k}.*``, in the
    heads ``spec`` declares them (the cache layout).
    Prefill is the same graph with a past of length 0. Mirrors ``OPT.forward_with_cache``.
    """
    g = GraphBuilder(weights, opset, gemm)
    ids_shape = g.op("Shape", "input_ids")
    positions = g.op("Add", "position_ids", g.const(POSITION_OFFSET))
    x = _embed(g, arch, positions)  # [B, T, d]
    allowed = None
    if arch.attention_layers:  # an all-FFN model has no cache and needs no mask
        seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)
        past_len = g.op("Gather", g.op("Shape", PAST.format(i=0, kind="key")), g.const(2), axis=0)
        not_padding = g.op("Unsqueeze", g.op("Cast", "attention_mask", to=TensorProto.BOOL), g.const([1, 2]))
        allowed = g.op("And", _allowed(g, past_len, seq_len), not_padding)  # [B, 1, T, P + T]
    caches = {layer: (k, cache_heads_of(spec, k)) for k, layer in enumerate(cache_layers(arch))}
    return _finish(g, arch, spec, x, ids_shape, allowed, caches, name=f"ltsedge_{arch.backbone}_generate")


def _embed(g: GraphBuilder, arch, positions: str) -> str:
    """Token plus position embeddings (``positions`` already offset), flattened to ``[B*T, d]``."""
    tok = g.op("Gather", g.weight("decoder.embed_tokens.weight"), "input_ids", axis=0)  # [B, T, d]
    pos = g.op("Gather", g.weight("decoder.embed_positions.weight"), positions, axis=0)
    return g.op("Reshape", g.op("Add", tok, pos), g.const([-1, arch.d_model]))


def _allowed(g: GraphBuilder, past_len: str, seq_len: str) -> str:
    """May query t (absolute position past + t) attend to key j? ``j <= past + t``: bool [T, P + T]."""
    return g.causal(past_len, g.op("Add", past_len, seq_len))


def _finish(g: GraphBuilder, arch, spec: ExportSpec, x: str, ids_shape: str, allowed: str | None,
            caches: dict[int, tuple[int, int]] | None, name: str) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The layers, the final LayerNorm and the tied output layer; the graph declaring ``spec``."""
    for i in range(arch.n_layer):
        prefix = f"decoder.layers.{i}"
        if arch.has_attention(i):
            cache = None if caches is None else caches[i]
            a = g.layer_norm(x, f"{prefix}.self_attn_layer_norm", LAYER_NORM_EPS)
            x = g.op("Add", x, _attention(g, arch, i, a, ids_shape, allowed, cache))
        if arch.has_ffn(i):
            f = g.linear(g.layer_norm(x, f"{prefix}.final_layer_norm", LAYER_NORM_EPS), f"{prefix}.fc1")
            x = g.op("Add", x, g.linear(g.op("Relu", f), f"{prefix}.fc2"))
    x = g.layer_norm(x, "decoder.final_layer_norm", LAYER_NORM_EPS)
    logits = g.matmul_t(x, g.weight("decoder.embed_tokens.weight"))  # tied: the embedding initializer
    g.op("Reshape", logits, g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.rename_last("logits")
    graph = g.graph(name, [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs])
    return graph, g.large


def _attention(g: GraphBuilder, arch, i: int, x: str, ids_shape: str, allowed: str,
               cache: tuple[int, int] | None) -> str:
    """Self-attention of layer ``i`` on ``x [B*T, d]``; with a cache (its number and the heads it is stored
    in, ``kv_cache``'s layouts), its past is prepended, the keys and values of all tokens are the
    ``present`` outputs, read in the layer's heads by the attention."""
    d, n_head, d_head = arch.d_model, arch.n_head[i], arch.d_head[i]
    prefix = f"decoder.layers.{i}.self_attn"
    heads_shape = g.op("Concat", ids_shape, g.const([n_head, d_head]), axis=0)  # [B, T, h, dh]
    stored = n_head if cache is None else cache[1]
    cache_shape = heads_shape if stored == n_head else g.op("Concat", ids_shape, g.const([stored, d // stored]), axis=0)

    def heads(t: str, perm: list[int], shape: str = heads_shape) -> str:
        return g.op("Transpose", g.op("Reshape", t, shape), perm=perm)

    q = g.op("Mul", g.linear(x, f"{prefix}.q_proj"), g.const(d_head ** -0.5, np.float32))  # scaled first, as OPT
    q = heads(q, [0, 2, 1, 3])  # [B, h, T, dh]
    k, v = g.linear(x, f"{prefix}.k_proj"), g.linear(x, f"{prefix}.v_proj")
    if cache is None:
        k, v = heads(k, [0, 2, 3, 1]), heads(v, [0, 2, 1, 3])  # keys straight to [B, h, dh, T]
        scores = g.op("MatMul", q, k)
    else:
        n = cache[0]
        g.op("Concat", PAST.format(i=n, kind="key"), heads(k, [0, 2, 1, 3], cache_shape), axis=2)  # [B, H, P+T, d/H]
        k = g.rename_last(PRESENT.format(i=n, kind="key"))
        g.op("Concat", PAST.format(i=n, kind="value"), heads(v, [0, 2, 1, 3], cache_shape), axis=2)
        v = g.rename_last(PRESENT.format(i=n, kind="value"))
        scores = cached_scores(g, q, k, stored, n_head, d)
    scores = g.op("Where", allowed, scores, g.const(MASKED_SCORE, np.float32))  # finite: no NaN
    att = g.op("Softmax", scores, axis=-1)
    y = g.op("MatMul", att, v) if cache is None else cached_weighted(g, att, v, stored, n_head, d)  # [B, h, T, dh]
    y = g.op("Transpose", y, perm=[0, 2, 1, 3])  # [B, T, h, dh]
    return g.linear(g.op("Reshape", y, g.const([-1, d])), f"{prefix}.out_proj")
