"""Quantized exports: the fast exporter's fp32 model, quantized by onnxruntime's own tools.

    int8  ``onnxruntime.quantization.quantize_dynamic``: int8 weights for every MatMul with a constant
          weight, activations quantized at run time (DynamicQuantizeLinear + MatMulInteger), the
          form onnxruntime recommends for Transformers on CPU (weights QInt8, activations uint8).
    int4  ``matmul_nbits_quantizer.MatMulNBitsQuantizer``: block-wise 4-bit weights of every MatMul
          as com.microsoft ``MatMulNBits`` (what onnxruntime-genai's model builder emits for CPUs
          and phones).
    In both the embedding tables stay fp32, as onnxruntime-genai's builder leaves them: a lookup reads
    one row per token, so its precision costs memory, not time (and a quantized Gather needs
    DequantizeLinear at the model's opset, which a runtime's newest opsets may lack kernels for).
    The tied output layer is a MatMul on its own transposed copy of the table, quantized.
    fp16  onnxruntime's float16 converter (inputs and outputs stay fp32): only for the CUDA
          execution provider; onnxruntime's CPU kernels mostly lack fp16.

Neither quantizer rewrites ``Gemm``: a quantized export is built with its linear layers as MatMul +
Add (``GraphBuilder(gemm=False)``). Quantizing is part of a candidate's cost: benchmarks/export.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.keys import DEFAULT_PRECISION
from ltsedge.ortcompat import parse_version

PRECISIONS = ("fp32", "fp16", "int8", "int4")
# The oldest onnxruntime that runs each precision: com.microsoft MatMulNBits first shipped in 1.17
# (onnxruntime PR 17890; its accuracy_level attribute, PR 17669, in the same release); int8's
# DynamicQuantizeLinear and MatMulInteger are standard ONNX operators.
MIN_ORT = {"int4": (1, 17)}
FP16_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
INT4_BLOCK_SIZES = (16, 32, 64, 128, 256)
SMALL_TENSOR = 1024  # bytes: initializers below this stay in the graph's protobuf


@dataclass(frozen=True)
class QuantOptions:
    """How a precision is reached; every field decides the exported bytes (the defaults leave store keys short)."""

    per_channel: bool = False  # int8: one scale per output channel instead of per tensor
    # int4: onnxruntime-genai's model builder's defaults for CPU. Accuracy level 4 computes in int8 (the
    # activations quantized per block at run time): measured here 2.3x faster per decoded token than
    # level 0 (fp32 compute), which decodes slower than the fp32 model (docs/benchmarks.md).
    block_size: int = 32  # weights per scale
    symmetric: bool = True  # no zero points
    accuracy_level: int | None = 4  # MatMulNBits' compute type: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8

    def __post_init__(self) -> None:
        if self.block_size not in INT4_BLOCK_SIZES:
            raise LtsedgeError(f"int4 block size {self.block_size} must be one of "
                               f"{', '.join(map(str, INT4_BLOCK_SIZES))}")
        if self.accuracy_level is not None and self.accuracy_level not in range(5):
            raise LtsedgeError(f"int4 accuracy level {self.accuracy_level} must be 0-4 (0: unset, 1: fp32, "
                               f"2: fp16, 3: bf16, 4: int8)")

    def for_precision(self, precision: str) -> dict:
        """The options that apply to ``precision`` (what its metadata and store key record)."""
        fields = {"int8": ("per_channel",), "int4": ("block_size", "symmetric", "accuracy_level")}.get(precision, ())
        return {k: v for k, v in asdict(self).items() if k in fields}

    def key(self, precision: str) -> str | None:
        """A store-key value for options other than the defaults (None: defaults, nothing to add)."""
        mine = self.for_precision(precision)
        if mine == QuantOptions().for_precision(precision):
            return None
        return "-".join(f"{k}{int(v) if isinstance(v, bool) else v}" for k, v in mine.items())


def check_precision(precision: str, runtime: str, execution_provider: str | None = "CPUExecutionProvider") -> None:
    """Refuse, before anything is exported or measured, a precision the target runtime or provider cannot run
    (``execution_provider`` None: the runtime only, as ``ExportOptions`` checks it)."""
    if precision not in PRECISIONS:
        raise LtsedgeError(f"--precision {precision!r}: must be one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and execution_provider is not None and execution_provider not in FP16_PROVIDERS:
        raise LtsedgeError(f"--precision fp16 runs on the CUDA execution provider only, not {execution_provider}: "
                           f"on a CPU use int8 or int4")
    needed = MIN_ORT.get(precision)
    if needed and parse_version(runtime) < needed:
        raise LtsedgeError(f"--precision {precision} needs onnxruntime >= {needed[0]}.{needed[1]} (MatMulNBits), "
                           f"the target is onnxruntime {runtime}")


def quantize_model(exported, precision: str, options: QuantOptions | None = None):
    """The exported fp32 model (built with ``gemm=False``) at ``precision``: a new ExportedModel whose
    opset, IR version and ltsedge metadata are the fp32 model's, plus ``ltsedge.precision``."""
    import onnx
    from onnx import helper, numpy_helper

    from ltsedge.exporters import METADATA_PREFIX, ExportedModel

    options = options or QuantOptions()
    if precision == DEFAULT_PRECISION:
        return exported
    if exported.needs_external_data():
        raise LtsedgeError(f"{exported.arch.id} is {exported.nbytes / 2**30:.2f} GiB in fp32: quantizing a model "
                           f"over protobuf's 2 GB is not supported yet (export it in fp32)")
    # The whole model in memory, parsed from its bytes: half the time of building the tensors one by one.
    model = onnx.load_from_string(exported.to_bytes())
    with tempfile.TemporaryDirectory(prefix="ltsedge-quantize-") as scratch, _quiet():
        proto = _QUANTIZERS[precision](model, Path(scratch), options)
    # The tools' shape inference leaves value_info that onnxruntime then contradicts (scalars as [1]):
    # the exporter declares none, so none is kept.
    proto.graph.ClearField("value_info")
    # The tools may raise the IR version or leave opsets as they like: the target's are what was promised.
    proto.ir_version = exported.target.ir_version
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = exported.target.opset
    # The weights go back beside the graph (written without protobuf copies, inline or external);
    # constants, scales and scalar zero points stay in it (the weight writer makes every array >= 1-D).
    small = [_copy(t) for t in proto.graph.initializer if len(t.dims) == 0 or _nbytes(t) < SMALL_TENSOR]
    weights = [(t.name, numpy_helper.to_array(t)) for t in proto.graph.initializer if _nbytes(t) >= SMALL_TENSOR
               and len(t.dims)]
    proto.graph.ClearField("initializer")
    proto.graph.initializer.extend(small)
    props = {p.key: p.value for p in exported.proto.metadata_props}
    props[METADATA_PREFIX + "precision"] = precision
    props[METADATA_PREFIX + "quantization"] = json.dumps(options.for_precision(precision), sort_keys=True)
    del proto.metadata_props[:]
    helper.set_model_props(proto, props)
    proto.producer_name, proto.producer_version = exported.proto.producer_name, exported.proto.producer_version
    return ExportedModel(exported.arch, exported.target, exported.spec, proto, weights, precision, exported.options)


def precision_fields(exported) -> dict:
    """What a bundle's config.json records of an export's precision: ``{"precision": "int4",
    "quantization": {"block_size": 32, ...}}`` (the options as the model's metadata holds them)."""
    from ltsedge.exporters import METADATA_PREFIX

    props = {p.key: p.value for p in exported.proto.metadata_props}
    options = props.get(METADATA_PREFIX + "quantization")
    return {"precision": exported.precision, "quantization": json.loads(options) if options else None}


@contextlib.contextmanager
def _quiet():
    """The quantizers log advice for image models ("consider pre-processing") and a line per node, on
    their own loggers: not for our users, whose rule is one line per problem. Errors still raise."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def _int8(model, scratch: Path, options: QuantOptions):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = scratch / "int8.onnx"
    # Only weights: MatMuls with a constant right-hand side (attention's activation x activation
    # MatMuls stay fp32, as in onnxruntime's own Transformer recipes).
    nodes = list(_constant_weight_nodes(model))
    quantize_dynamic(model, target, op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes,
                     per_channel=options.per_channel, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return onnx.load(str(target))


def _int4(model, scratch: Path, options: QuantOptions):
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


_QUANTIZERS = {"int8": _int8, "int4": _int4, "fp16": _fp16}


def _copy(tensor):
    import onnx

    out = onnx.TensorProto()
    out.CopyFrom(tensor)  # its own message: the field it came from is cleared
    return out


def _nbytes(tensor) -> int:
    import onnx

    bits = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize * 8
    count = 1
    for d in tensor.dims:
        count *= d
    return count * bits // 8


def _constant_weight_nodes(model) -> Iterable[str]:
    """Names of the MatMul nodes whose weight (B) is a float initializer."""
    import onnx

    floats = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in floats:
            yield node.name


# ---------------------------------------------------------------------------------------------
# What a model holds (``ltsedge check``)
# ---------------------------------------------------------------------------------------------
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
