"""Architecture + PyTorch weights -> ONNX graph, written node by node with onnx.helper.

This is the fast route to ONNX: no tracing, no second pass, no optimizer. It reads the weights of the
reference PyTorch model (``ltsedge.models.gpt2``) by their state-dict names and lays them out
without copying the embedding matrix: linear layers use ``Gemm(transB=1)`` on PyTorch's
``[out, in]`` weights, and the tied output layer reuses the token-embedding initializer. The tests
prove its logits equal PyTorch's on random architectures, with and without adaptive embeddings.

Activations stay 2-D (``[batch*sequence, d_model]``) between blocks; attention reshapes to heads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ltsedge.architecture import Architecture
from ltsedge.models.adaptive import cluster_bounds
from ltsedge.models.gpt2 import LAYER_NORM_EPS

FIRST_GELU_OPSET = 20  # the Gelu operator; earlier opsets get the erf formula


class _Graph:
    """Collects nodes and initializers; names every intermediate value uniquely."""

    def __init__(self, weights: Mapping[str, np.ndarray], opset: int):
        self.weights = weights
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}  # small constants
        self.large: dict[str, np.ndarray] = {}  # weights, serialized without protobuf copies
        self._count = 0

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs) -> str | list[str]:
        self._count += 1
        outputs = [f"{op_type.lower()}_{self._count}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=f"{op_type}_{self._count}", **attrs))
        return outputs[0] if n_out == 1 else outputs

    def weight(self, name: str, array: np.ndarray | None = None) -> str:
        """An initializer from the state dict (or an explicit array), added once."""
        if name not in self.large:
            data = self.weights[name] if array is None else array
            self.large[name] = np.ascontiguousarray(data, dtype=np.float32)
        return name

    def const(self, values, dtype=np.int64) -> str:
        name = f"const_{len(self.initializers)}"
        self.initializers[name] = numpy_helper.from_array(np.asarray(values, dtype=dtype), name)
        return name

    def linear(self, x: str, prefix: str) -> str:
        return self.op("Gemm", x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias"), transB=1)

    def layer_norm(self, x: str, prefix: str) -> str:
        w, b = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.op("LayerNormalization", x, w, b, axis=-1, epsilon=LAYER_NORM_EPS)

    def gelu(self, x: str) -> str:
        if self.opset >= FIRST_GELU_OPSET:
            return self.op("Gelu", x, approximate="none")
        erf = self.op("Erf", self.op("Mul", x, self.const(1 / math.sqrt(2), np.float32)))
        return self.op("Mul", self.op("Mul", x, self.op("Add", erf, self.const(1.0, np.float32))),
                       self.const(0.5, np.float32))


def build_graph(
    arch: Architecture, weights: Mapping[str, np.ndarray], opset: int
) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    """The graph (with its small constants) and the weights it reads, by initializer name."""
    g = _Graph(weights, opset)
    ids = "input_ids"
    ids_shape = g.op("Shape", ids)  # [B, T]
    seq_len = g.op("Gather", ids_shape, g.const(1), axis=0)

    x = _embed(g, arch, ids, ids_shape, seq_len)  # [B*T, d]
    # Causal mask, shared by every layer: -inf above the diagonal, 0 elsewhere.
    square = g.op("Concat", g.op("Unsqueeze", seq_len, g.const([0])), g.op("Unsqueeze", seq_len, g.const([0])), axis=0)
    minus_inf = helper.make_tensor("v", TensorProto.FLOAT, [1], [float("-inf")])
    mask = g.op("Trilu", g.op("ConstantOfShape", square, value=minus_inf), g.const(1), upper=1)

    for i, n_head in enumerate(arch.n_head):
        x = _block(g, arch.d_model, n_head, f"h.{i}", x, ids_shape, mask)
    x = g.layer_norm(x, "ln_f")
    logits = _output(g, arch, x)  # [B*T, V]
    logits = g.op("Reshape", logits, g.op("Concat", ids_shape, g.const([arch.vocab_size]), axis=0))
    g.nodes[-1].output[0] = "logits"

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", arch.vocab_size])]
    graph = helper.make_graph(g.nodes, f"ltsedge_{arch.backbone}", inputs, outputs, list(g.initializers.values()))
    return graph, g.large


def _embed(g: _Graph, arch: Architecture, ids: str, ids_shape: str, seq_len: str) -> str:
    d = arch.d_model
    positions = g.op("Range", g.const(0), seq_len, g.const(1))
    pos = g.op("Gather", g.weight("wpe.weight"), positions, axis=0)  # [T, d]
    if arch.adaptive:
        tok = _adaptive_embed(g, arch, ids)  # [B*T, d]
        tok = g.op("Reshape", tok, g.op("Concat", ids_shape, g.const([d]), axis=0))
    else:
        tok = g.op("Gather", g.weight("wte.weight"), ids, axis=0)  # [B, T, d]
    return g.op("Reshape", g.op("Add", tok, pos), g.const([-1, d]))


def _adaptive_embed(g: _Graph, arch: Architecture, ids: str) -> str:
    bounds = cluster_bounds(arch)
    if arch.div_val == 1:
        e = g.op("Gather", g.weight("wte.tables.0"), ids, axis=0)
        return g.op("Gemm", g.op("Reshape", e, g.const([-1, arch.d_embed])), g.weight("wte.projs.0"), transB=1)
    total = None
    for i, (lo, hi) in enumerate(bounds):
        table = g.weight(f"wte.tables.{i}")
        local = g.op("Min", g.op("Max", g.op("Sub", ids, g.const(lo)), g.const(0)), g.const(hi - lo - 1))
        e = g.op("Gather", table, local, axis=0)
        e = g.op("Gemm", g.op("Reshape", e, g.const([-1, g.large[table].shape[1]])), g.weight(f"wte.projs.{i}"),
                 transB=1)
        inside = g.op("And", g.op("GreaterOrEqual", ids, g.const(lo)), g.op("Less", ids, g.const(hi)))
        inside = g.op("Reshape", g.op("Cast", inside, to=TensorProto.FLOAT), g.const([-1, 1]))
        e = g.op("Mul", e, inside)
        total = e if total is None else g.op("Add", total, e)
    return total


def _block(g: _Graph, d: int, n_head: int, prefix: str, x: str, ids_shape: str, mask: str) -> str:
    d_head = d // n_head
    a = g.layer_norm(x, f"{prefix}.ln_1")
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
    x = g.op("Add", x, y)

    m = g.linear(g.layer_norm(x, f"{prefix}.ln_2"), f"{prefix}.mlp.c_fc")
    m = g.linear(g.gelu(m), f"{prefix}.mlp.c_proj")
    return g.op("Add", x, m)


def _output(g: _Graph, arch: Architecture, x: str) -> str:
    if not arch.adaptive:
        return g.op("Gemm", x, g.weight("wte.weight"), transB=1)  # tied: reuses the embedding initializer
    return _adaptive_logits(g, arch, x)


def _adaptive_logits(g: _Graph, arch: Architecture, x: str) -> str:
    """Mirror of ``AdaptiveLogits.forward``: head softmax over cluster 0 plus one logit per tail."""
    bounds = cluster_bounds(arch)
    bias = g.weights["lm_head.bias"]
    head_size = bounds[0][1]
    if arch.div_val == 1:  # one table and projection: compute every word logit at once, then split
        h = g.op("MatMul", x, g.weight("wte.projs.0"))
        words = g.op("Gemm", h, g.weight("wte.tables.0"), g.weight("lm_head.bias"), transB=1)
        word_logits = g.op("Split", words, g.const([hi - lo for lo, hi in bounds]), axis=1, n_out=len(bounds))
        hidden = [h] * len(bounds)
    else:
        hidden, word_logits = [], []
        for i, (lo, hi) in enumerate(bounds):
            h = g.op("MatMul", x, g.weight(f"wte.projs.{i}"))
            b = g.weight(f"lm_head.bias.{i}", bias[lo:hi])
            hidden.append(h)
            word_logits.append(g.op("Gemm", h, g.weight(f"wte.tables.{i}"), b, transB=1))
    clusters = g.op("Gemm", hidden[0], g.weight("lm_head.cluster_weight"), g.weight("lm_head.cluster_bias"), transB=1)
    head = g.op("LogSoftmax", g.op("Concat", word_logits[0], clusters, axis=1), axis=-1)
    pieces = [g.op("Slice", head, g.const([0]), g.const([head_size]), g.const([1]))]
    for i in range(1, len(bounds)):
        cluster_logprob = g.op("Slice", head, g.const([head_size + i - 1]), g.const([head_size + i]), g.const([1]))
        pieces.append(g.op("Add", g.op("LogSoftmax", word_logits[i], axis=-1), cluster_logprob))
    return g.op("Concat", *pieces, axis=1)
