"""Quantized exports: the fast exporter's fp32 model, quantized by onnxruntime's own tools.

    int8  ``onnxruntime.quantization.quantize_dynamic``: int8 weights for every MatMul with a constant
          weight, activations quantized at run time (DynamicQuantizeLinear + MatMulInteger), the
          form onnxruntime recommends for Transformers on CPU (weights QInt8, activations uint8).
    int4  ``matmul_nbits_quantizer.MatMulNBitsQuantizer``: block-wise 4-bit weights of every MatMul
          as com.microsoft ``MatMulNBits`` (what onnxruntime-genai's model builder emits for CPUs
          and phones).
    In both the embedding tables stay fp32: a lookup reads one row per token, so its precision costs
    memory, not time. The tied output layer is a MatMul on its own transposed copy of the table,
    quantized; at int4 a backbone that asks for it (``int4_embedding_from_blocks``) reads its tied
    embedding from those blocks instead (``tied_embedding_from_blocks``), as onnxruntime-genai's builder
    does, and the fp32 table is not stored.
    fp16  onnxruntime's float16 converter (inputs and outputs stay fp32): only for the CUDA
          execution provider; onnxruntime's CPU kernels mostly lack fp16.

Neither quantizer rewrites ``Gemm``: a quantized export is built with its linear layers as MatMul +
Add (``GraphBuilder(gemm=False)``). Quantizing is part of a candidate's cost (benchmarks/export.py
--quantized): the quantizers are given the graph with its large weights held aside (``quantizers.light_model``),
each put back only where a quantizer reads it, so that what the tools do around the quantizing (a copy
of the model, a file written and read back, shape inference, twice for int8) costs nothing per weight.
The file is the one ``quantize_dynamic`` / ``MatMulNBitsQuantizer`` give (tests/test_quantize_fast.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from pathlib import Path

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.exporters.exported import METADATA_PREFIX, ExportedModel
from ltsedge.exporters.quantizers import LIGHT_QUANTIZERS, QUANTIZERS, SMALL_TENSOR, light_model
from ltsedge.precision import DEFAULT_PRECISION, QuantOptions

def quantize_model(exported, precision: str, options: QuantOptions | None = None):
    """The exported fp32 model (built with ``gemm=False``) at ``precision``: a new ExportedModel whose
    opset, IR version and ltsedge metadata are the fp32 model's, plus ``ltsedge.precision``."""
    return _quantize(exported, precision, options or QuantOptions(), light=True)


def _quantize(exported, precision: str, options: QuantOptions, *, light: bool):
    """``light``: int8 and int4 run onnxruntime's quantizers on the graph with its large weights held aside
    (``light_model``), each weight put in only where a quantizer reads it; else (the reference the tests
    compare it with, and the fallback) the whole model goes through ``quantize_dynamic`` and a file."""
    from onnx import helper, numpy_helper

    if precision == DEFAULT_PRECISION:
        return exported
    if exported.needs_external_data():
        raise LtsedgeError(f"{exported.arch.id} is {exported.nbytes / 2**30:.2f} GiB in fp32: quantizing a model "
                           f"over protobuf's 2 GB is not supported yet (export it in fp32)")
    held: dict = {}  # name -> the exporter's own array, for the weights the quantizer was given without data
    with _quiet():
        if light and precision in LIGHT_QUANTIZERS:
            try:
                model, held = light_model(exported)
                proto = LIGHT_QUANTIZERS[precision](model, held, options)
            except Exception:  # noqa: BLE001
                # An onnxruntime whose quantizer reads a weight held aside (no data: it raises) takes the
                # documented path, which gives the same model (tests/test_quantize_fast.py), only slower.
                held = {}
                proto = _reference_proto(exported, precision, options)
        else:
            proto = _reference_proto(exported, precision, options)
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
    # A weight held aside that is still used goes back as the exporter's array it was (no copy).
    small, weights = [], []
    for t in proto.graph.initializer:
        if t.name in held:
            weights.append((t.name, held[t.name]))
        elif len(t.dims) == 0 or _nbytes(t) < SMALL_TENSOR:
            small.append(_copy(t))
        else:
            weights.append((t.name, numpy_helper.to_array(t)))
    proto.graph.ClearField("initializer")
    proto.graph.initializer.extend(small)
    props = {p.key: p.value for p in exported.proto.metadata_props}
    props[METADATA_PREFIX + "precision"] = precision
    props[METADATA_PREFIX + "quantization"] = json.dumps(options.for_precision(precision), sort_keys=True)
    del proto.metadata_props[:]
    helper.set_model_props(proto, props)
    proto.producer_name, proto.producer_version = exported.proto.producer_name, exported.proto.producer_version
    return ExportedModel(exported.arch, exported.target, exported.spec, proto, weights, precision, exported.options)


def _reference_proto(exported, precision: str, options: QuantOptions):
    """The whole model, parsed from its bytes, through the tools' documented entry points."""
    import onnx

    model = onnx.load_from_string(exported.to_bytes())
    with tempfile.TemporaryDirectory(prefix="ltsedge-quantize-") as scratch:
        return QUANTIZERS[precision](model, Path(scratch), options)


def precision_fields(exported) -> dict:
    """What a bundle's config.json records of an export's precision: ``{"precision": "int4",
    "quantization": {"block_size": 32, ...}}`` (the options as the model's metadata holds them)."""
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


CONTRIB_DOMAIN = "com.microsoft"


def tied_embedding_from_blocks(exported, fused: bool = False):
    """An int4 model whose output layer is tied to its token embedding, the embedding read from the output
    layer's 4-bit blocks, as onnxruntime-genai's builder reads it: the fp32 table (a vocabulary of 49152 x 576
    is 113 MB) is no longer stored. A row of the table is a row of the output layer's ``[vocab, blocks, block
    / 2]`` blocks, so the lookup dequantizes exactly what the output layer multiplies by. ``fused``: one
    com.microsoft ``GatherBlockQuantized`` (onnxruntime >= 1.22); else standard operators (Gather of the rows'
    blocks and scales, the two 4-bit values of each byte unpacked, ``(value - 8) * scale``), which every int4
    target loads. Only for symmetric blocks (no zero points) that tile d exactly; else the model is returned as
    it is."""
    import dataclasses

    from onnx import helper

    graph = exported.proto.graph
    nbits = {n.input[1]: n for n in graph.node if n.op_type == "MatMulNBits" and n.domain == CONTRIB_DOMAIN}
    gathers = [n for n in graph.node if n.op_type == "Gather" and f"{n.input[0]}.T_Q4" in nbits]
    if len(gathers) != 1:
        return exported
    gather = gathers[0]
    table = gather.input[0]
    output_layer = nbits[f"{table}.T_Q4"]
    attrs = {a.name: helper.get_attribute_value(a) for a in output_layer.attribute}
    if len(output_layer.input) > 3 and output_layer.input[3] or attrs["K"] % attrs["block_size"] or \
            attrs.get("bits", 4) != 4 or any(a.name == "axis" and a.i != 0 for a in gather.attribute):
        return exported
    lookup = _BlockLookup(graph, table, output_layer.input[1], output_layer.input[2], gather.input[1])
    nodes = lookup.fused(attrs["N"], attrs["K"], attrs["block_size"]) if fused else \
        lookup.unpacked(attrs["K"] // attrs["block_size"], attrs["block_size"], attrs["K"])
    nodes[-1].output[:] = gather.output  # the lookup's result in place of the Gather's
    nodes[-1].name = gather.name
    at = list(graph.node).index(gather)
    graph.node.remove(gather)
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)
    if not any(table in n.input for n in graph.node):
        exported = dataclasses.replace(exported, weights=[(k, v) for k, v in exported.weights if k != table])
    return exported


class _BlockLookup:
    """The nodes that read rows ``ids`` ([batch, sequence]) of a table from its 4-bit ``blocks`` and ``scales``;
    their constants go into ``graph``, every name prefixed by the table's."""

    def __init__(self, graph, table: str, blocks: str, scales: str, ids: str):
        self.graph, self.table, self.blocks, self.scales, self.ids = graph, table, blocks, scales, ids
        self.nodes: list = []

    def const(self, name: str, values, dtype) -> str:
        from onnx import numpy_helper

        name = f"{self.table}.lookup_{name}"
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(values, dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        from onnx import helper

        output = f"{self.table}.lookup_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=output, **attrs))
        return output

    def fused(self, rows: int, width: int, block: int) -> list:
        data = self.op("Reshape", self.blocks, self.const("blocks_shape", [rows, width // 2], np.int64))
        scales = self.op("Reshape", self.scales, self.const("scales_shape", [rows, width // block], np.int64))
        self.op("GatherBlockQuantized", data, self.ids, scales, domain=CONTRIB_DOMAIN, block_size=block,
                gather_axis=0, quantize_axis=1)
        return self.nodes

    def unpacked(self, n_blocks: int, block: int, width: int) -> list:
        rows = self.op("Gather", self.blocks, self.ids, axis=0)  # [..., blocks, block / 2] uint8
        low = self.op("BitwiseAnd", rows, self.const("low_mask", 15, np.uint8))
        high = self.op("BitShift", rows, self.const("high_shift", 4, np.uint8), direction="RIGHT")
        last = self.const("last_axis", [-1], np.int64)
        pairs = self.op("Concat", self.op("Unsqueeze", low, last), self.op("Unsqueeze", high, last), axis=-1)
        values = self.op("Reshape", pairs, self.const("values_shape", [0, 0, n_blocks, block], np.int64))
        centred = self.op("Sub", self.op("Cast", values, to=1), self.const("zero_point", 8.0, np.float32))
        scales = self.op("Unsqueeze", self.op("Gather", self.scales, self.ids, axis=0), last)
        self.op("Reshape", self.op("Mul", centred, scales), self.const("row_shape", [0, 0, width], np.int64))
        return self.nodes
