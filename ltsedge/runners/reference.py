"""The drift reference: a small fixed model timed again and again to see if the machine changed.

Four 384x384 MatMuls with ReLUs over a 192x384 input (192 = the usual sequence): ~230 MFLOP, a
millisecond on a laptop, ~20 ms on a Raspberry Pi 4: long enough to time well, short enough to
repeat every few models. Its weights are seeded, so every run of ltsedge times the same model.
"""

from __future__ import annotations

import numpy as np

WIDTH = 384
ROWS = 192
LAYERS = 4


def reference_model() -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, initializers, x = [], [], "x"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        initializers.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
        x = f"r{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, "ltsedge_reference",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, WIDTH])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ltsedge")
    model.ir_version = 8  # loads in every onnxruntime ltsedge supports
    onnx.checker.check_model(model)
    return model.SerializeToString()
