"""onnxruntime's quantizers as ltsedge runs them (``quantize.py`` decides which, and finishes the model).

``QUANTIZERS``: each precision's documented entry point (``quantize_dynamic``, ``MatMulNBitsQuantizer``,
the float16 converter) on the whole model, with a scratch directory for the files they write.
``LIGHT_QUANTIZERS``: int8 and int4 the same tools' own steps, in memory, on the light model
(``light_model``: the graph with its large weights held aside, each put back only where a quantizer
reads it), which gives the same file (tests/test_quantize_fast.py) without a copy per weight.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ltsedge.precision import QuantOptions

SMALL_TENSOR = 1024  # bytes: initializers below this stay in the graph's protobuf


def _int8(model, scratch: Path, options: QuantOptions):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = scratch / "int8.onnx"
    # Only weights: MatMuls with a constant right-hand side (attention's activation x activation
    # MatMuls stay fp32, as in onnxruntime's own Transformer recipes).
    nodes = list(constant_weight_nodes(model))
    quantize_dynamic(model, target, op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes,
                     per_channel=options.per_channel, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return onnx.load(str(target))


def _int4(model, scratch: Path | None, options: QuantOptions):
    from ltsedge.extras import require

    require("onnx_ir", "--precision int4 (onnxruntime's MatMulNBitsQuantizer)")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=options.block_size, is_symmetric=options.symmetric,
                                     accuracy_level=options.accuracy_level, op_types_to_quantize=("MatMul",))
    quantizer.process()
    return quantizer.model.model


def _fp16(model, scratch: Path, options: QuantOptions):
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # Inputs and outputs stay fp32 (the declared I/O spec); Cast nodes sit at the edges.
    return convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True)


QUANTIZERS = {"int8": _int8, "int4": _int4, "fp16": _fp16}


def _int8_light(model, held: dict, options: QuantOptions):
    """``quantize_dynamic``'s own steps (onnxruntime/quantization/quantize.py, as of 1.20 and 1.32), in memory: its
    shape inference, its ONNXQuantizer (which infers shapes again on its own copy), its quantization, the
    topological sort its ``save_model_to_file`` does; the weights the quantizer reads are put back into the
    quantizer's copy before it quantizes. No file is written and read back with the weights in it."""
    import onnx
    from onnxruntime.quantization import QuantType, quant_utils
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.quant_utils import QuantizationMode

    nodes = list(constant_weight_nodes(model))
    inputs = {i for n in model.graph.node if n.name in nodes for i in n.input}
    model = quant_utils.save_and_reload_model_with_shape_infer(model)
    if hasattr(quant_utils, "update_opset_version"):  # not in 1.20; a no-op for int8 weights at opset >= 11
        model = quant_utils.update_opset_version(model, QuantType.QInt8)
    extra_options = {"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True}
    quantizer = ONNXQuantizer(model, options.per_channel, False, QuantizationMode.IntegerOps, False, QuantType.QInt8,
                              QuantType.QUInt8, None, nodes, [], ["MatMul"], extra_options)
    _fill(quantizer.model.model.graph, held, inputs)
    quantizer.quantize_model()
    quantizer.model.topological_sort()
    return quantizer.model.model


def _int4_light(model, held: dict, options: QuantOptions):
    """MatMulNBitsQuantizer as ``_int4`` runs it (in memory, in place), every MatMul's weights put back first."""
    _fill(model.graph, held, (i for n in model.graph.node if n.op_type == "MatMul" for i in n.input))
    return _int4(model, None, options)


LIGHT_QUANTIZERS = {"int8": _int8_light, "int4": _int4_light}


def light_model(exported):
    """The model the quantizers are given: the exported graph with every weight of 1 KiB or more as an
    initializer holding its name, type and shape but no data (held aside: name -> array); smaller ones
    whole, as ``to_bytes`` writes them. What the tools do with the model — shape inference, their copies,
    their files — then costs nothing per weight; ``_fill`` puts data in where a quantizer reads it.

    The tools' own round trip through a file (``save_and_reload_model_with_shape_infer``) saves every
    tensor of 1 KiB or more as external data, which its shape inference does not read either."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(exported.proto)  # no weights in it: a small copy
    held = {}
    for name, array in exported.weights:
        tensor = model.graph.initializer.add()
        tensor.name = name
        tensor.data_type = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        if array.ndim and array.nbytes >= SMALL_TENSOR:
            held[name] = array
        else:
            tensor.raw_data = _little_endian_bytes(array)
    return model, held


def _fill(graph, held: dict, names: Iterable[str]) -> None:
    """Put the held weights ``names`` back into ``graph``'s initializers (the ones a quantizer reads)."""
    names = set(names) & held.keys()
    for tensor in graph.initializer:
        if tensor.name in names and not tensor.HasField("raw_data"):
            tensor.raw_data = _little_endian_bytes(held[tensor.name])


def _little_endian_bytes(array) -> bytes:
    import numpy as np

    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def constant_weight_nodes(model) -> Iterable[str]:
    """Names of the MatMul nodes whose weight (B) is a float initializer."""
    import onnx

    floats = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in floats:
            yield node.name
