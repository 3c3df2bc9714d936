"""What precision a model's weights run at, read from its operators: any ONNX model (``ltsedge check``),
not only ltsedge's exports."""

from __future__ import annotations

EIGHT_BIT_OPS = ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "QGemm",
                 "QAttention", "QLinearMatMul", "QLinearConv", "QLinearAdd", "QLinearMul", "QuantizeLinear",
                 "DequantizeLinear")
N_BIT_OPS = ("MatMulNBits", "GatherBlockQuantized")  # a ``bits`` attribute, 4 when absent
FOUR_BIT_OPS = ("MatMulBnb4",)


def precision_of(proto) -> dict:
    """The precision a model runs its weights at, from its operators: ``{"precision": "int4",
    "quantized_ops": {"MatMulNBits": 12}}``. The narrowest bit width found wins (a model may keep its
    embedding Gathers in int8 and its MatMuls in int4); no quantized operator: fp16 if it holds fp16
    weights, else fp32."""
    import onnx

    ops: dict[str, int] = {}
    bits = []
    for node in _all_nodes(proto.graph):
        if node.op_type in N_BIT_OPS:
            bits.append(next((a.i for a in node.attribute if a.name == "bits"), 4))
        elif node.op_type in FOUR_BIT_OPS:
            bits.append(4)
        elif node.op_type in EIGHT_BIT_OPS:
            bits.append(8)
        else:
            continue
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    if bits:
        precision = f"int{min(bits)}"
    elif any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer):
        precision = "fp16"
    else:
        precision = "fp32"
    return {"precision": precision, "quantized_ops": dict(sorted(ops.items()))}


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attribute in node.attribute:  # subgraphs (If, Loop, Scan)
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _all_nodes(sub)
