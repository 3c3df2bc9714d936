"""The references: small fixed models timed beside every model, so its figure is a ratio that does not move
with the machine (runners/timing.py).

The compute reference (``reference_model``): four 384x384 MatMuls with ReLUs over a 192x384 input
(192 = the usual sequence): ~230 MFLOP, a millisecond on a laptop, ~20 ms on a Raspberry Pi 4, for a
compute-bound pass (forward, prefill). The bandwidth reference (``bandwidth_model``): matrix-vector
products over 96 MB of weights, for a decode step (``Workload.reference``). A workload timed beside the
bandwidth reference has its reference samples recorded in the compute reference's milliseconds (times
the ratio of the two references' pinned speeds), so every ratio is in one unit. Weights are seeded:
every run of ltsedge times the same models.
"""

from __future__ import annotations

import numpy as np

WIDTH = 384
ROWS = 192
LAYERS = 4


def reference_model() -> bytes:
    return _matmul_chain("ltsedge_reference", ROWS, WIDTH, LAYERS, seed=0, relu=True)


# The bandwidth reference: what a decode step does, without a model. Timed beside the compute reference,
# a decode step's ratio moved by a median 30% between two quiet passes on a 2-vCPU VM (the compute reference
# is bimodal: ~1.2 or ~1.5 ms per run, and a decode step does not follow it); beside this one, 2.3%
# (5.0% against a pass under a changing load): benchmarks/reference_choice.py, docs/benchmarks.md.
BANDWIDTH_WIDTH = 2048
BANDWIDTH_LAYERS = 6  # 6 x 16 MB of fp32 weights: beyond the caches of the CPUs ltsedge targets
BANDWIDTH_VERSION = "matvec-2048x6"  # in the store key of figures timed beside it (keys.measurement_settings)


def bandwidth_model() -> bytes:
    """A chain of matrix-vector products, [1, 2048] through six seeded 2048 x 2048 weights."""
    return _matmul_chain("ltsedge_bandwidth_reference", 1, BANDWIDTH_WIDTH, BANDWIDTH_LAYERS, seed=1, relu=False)


def _matmul_chain(name: str, rows: int, width: int, layers: int, *, seed: int, relu: bool) -> bytes:
    """[rows, width] through ``layers`` seeded width x width MatMuls (each followed by a Relu if asked)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, initializers, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        initializers.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]))
        x = f"m{i}"
        if relu:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ltsedge")
    model.ir_version = 8  # loads in every onnxruntime ltsedge supports
    onnx.checker.check_model(model)
    return model.SerializeToString()
