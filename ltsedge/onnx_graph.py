"""The helper every backbone writes its ONNX graph with: nodes, weights by state-dict name, constants.

Backbones build their graph node by node (no tracing): ``GraphBuilder`` names every intermediate
value uniquely, keeps the reference PyTorch model's weights as numpy arrays (serialized later
without protobuf copies, see ``ltsedge.wire``), and offers the few composite layers all decoders
share (linear, LayerNorm, GELU). It knows nothing about any backbone.

A linear layer is one ``Gemm(transB=1)`` on PyTorch's ``[out, in]`` weight by default. With
``gemm=False`` it is ``MatMul`` on a transposed copy then ``Add``: onnxruntime's quantizers
(``quantize_dynamic``, ``MatMulNBitsQuantizer``) rewrite ``MatMul`` and leave ``Gemm`` in fp32, so a
quantized export is built in that form (``ltsedge.exporters.quantize``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

FIRST_GELU_OPSET = 20  # the Gelu operator; earlier opsets get the erf formula


class GraphBuilder:
    """Collects nodes and initializers; names every intermediate value uniquely."""

    def __init__(self, weights: Mapping[str, np.ndarray], opset: int, gemm: bool = True):
        self.weights = weights
        self.opset = opset
        self.gemm = gemm  # False: linear layers as MatMul + Add (what onnxruntime's quantizers rewrite)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}  # small constants
        self.large: dict[str, np.ndarray] = {}  # weights, serialized without protobuf copies
        self._count = 0

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs) -> str | list[str]:
        self._count += 1
        outputs = [f"{op_type.lower()}_{self._count}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=f"{op_type}_{self._count}", **attrs))
        return outputs[0] if n_out == 1 else outputs

    def rename_last(self, name: str) -> str:
        """Give the last node's (only) output a declared name, e.g. ``logits``."""
        self.nodes[-1].output[0] = name
        return name

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

    def linear(self, x: str, prefix: str, bias: bool = True) -> str:
        """``x @ W.T + b`` on PyTorch's ``[out, in]`` weight, without transposing a copy."""
        w = self.weight(f"{prefix}.weight")  # registered before the bias: initializer order is file order
        b = self.weight(f"{prefix}.bias") if bias else None
        return self.matmul_t(x, w, b)

    def matmul_t(self, x: str, w: str, bias: str | None = None) -> str:
        """``x @ W.T (+ bias)`` for a registered weight W in PyTorch's ``[out, in]`` layout: ``Gemm(transB=1)``
        on W as it is or, without ``gemm``, ``MatMul`` on a transposed copy (``<W>.T``) then ``Add``."""
        if self.gemm:
            return self.op("Gemm", x, w, *((bias,) if bias else ()), transB=1)
        y = self.op("MatMul", x, self.weight(f"{w}.T", self.large[w].T))
        return self.op("Add", y, bias) if bias else y

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        w, b = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.op("LayerNormalization", x, w, b, axis=-1, epsilon=eps)

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU: the Gelu operator where the opset has it, else its formula."""
        if self.opset >= FIRST_GELU_OPSET:
            return self.op("Gelu", x, approximate="none")
        erf = self.op("Erf", self.op("Mul", x, self.const(1 / math.sqrt(2), np.float32)))
        return self.op("Mul", self.op("Mul", x, self.op("Add", erf, self.const(1.0, np.float32))),
                       self.const(0.5, np.float32))

    def causal(self, past_len: str, total_len: str) -> str:
        """bool ``[T, P + T]``: may query t (absolute position past + t) attend to key j? ``j <= past + t``."""
        queries = self.op("Unsqueeze", self.op("Range", past_len, total_len, self.const(1)), self.const([1]))  # [T, 1]
        keys = self.op("Unsqueeze", self.op("Range", self.const(0), total_len, self.const(1)), self.const([0]))  # [1, S]
        return self.op("LessOrEqual", keys, queries)

    def unsqueeze0(self, scalar: str) -> str:
        """A 0-d int64 (e.g. a gathered dimension) as a 1-element vector, for Concat into a shape."""
        return self.op("Unsqueeze", scalar, self.const([0]))

    def graph(self, name: str, inputs: list, outputs: list) -> onnx.GraphProto:
        if not self.gemm:  # a weight only a MatMul's transposed copy reads is not written
            used = {name for node in self.nodes for name in node.input}
            self.large = {k: v for k, v in self.large.items() if k in used}
        return helper.make_graph(self.nodes, name, inputs, outputs, list(self.initializers.values()))
