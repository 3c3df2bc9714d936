"""The fast quantization path gives the model onnxruntime's documented entry points give.

``quantize_model`` runs onnxruntime's own quantizers (ONNXQuantizer as ``quantize_dynamic`` drives it;
MatMulNBitsQuantizer) on the graph with its large weights held aside, putting each weight back only
where a quantizer reads it (``exporters.quantizers.light_model``). The reference is the path it replaced:
the whole model parsed from its bytes, ``quantize_dynamic`` writing a file that is read back. Both must
give the same file: same nodes, same initializers bit for bit, same metadata — the same bytes.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import numpy_helper

import ltsedge.exporters
from ltsedge.architecture import Architecture
from ltsedge.exporters import export_model, read_metadata
from ltsedge.exporters import quantize as q
from ltsedge.exporters import quantizers
from ltsedge.exporters.options import ExportOptions
from ltsedge.precision import QuantOptions

ARCHS = [
    Architecture(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 192), vocab_size=256, n_positions=64),
    # 248 floats = 992 bytes: under ltsedge's 1 KiB (kept in the graph) yet over what onnx saves as external
    # data in the tools' own file round trip (sys.getsizeof of the bytes >= 1024).
    Architecture(n_layer=1, d_model=248, n_head=(4,), d_inner=(256,), vocab_size=100, n_positions=32),
    Architecture(backbone="opt", n_layer=2, d_model=32, n_head=(2, 4), d_inner=(48, 40), vocab_size=60,
                 n_positions=32),
]
OPTIONS = [
    pytest.param("int8", QuantOptions(), id="int8-per-tensor"),
    pytest.param("int8", QuantOptions(per_channel=True), id="int8-per-channel"),
    pytest.param("int4", QuantOptions(block_size=32, symmetric=True), id="int4-b32-sym"),
    pytest.param("int4", QuantOptions(block_size=32, symmetric=False), id="int4-b32-asym"),
    pytest.param("int4", QuantOptions(block_size=128, symmetric=True), id="int4-b128-sym"),
    pytest.param("int4", QuantOptions(block_size=128, symmetric=False, accuracy_level=None), id="int4-b128-asym-acc0"),
]


def matmul_form(arch, variant, monkeypatch):
    """The fp32 export a quantizer is given (gemm=False), before quantizing."""
    with monkeypatch.context() as m:
        m.setattr(ltsedge.exporters, "quantize_model", lambda exported, precision, options: exported)
        return export_model(arch, ExportOptions(variant=variant, precision="int8"))


def assert_same_model(fast, reference):
    a, b = onnx.load_from_string(fast.to_bytes()), onnx.load_from_string(reference.to_bytes())
    assert [n.SerializeToString() for n in a.graph.node] == [n.SerializeToString() for n in b.graph.node]
    assert [t.name for t in a.graph.initializer] == [t.name for t in b.graph.initializer]
    for x, y in zip(a.graph.initializer, b.graph.initializer, strict=True):
        assert x.data_type == y.data_type and list(x.dims) == list(y.dims), x.name
        assert numpy_helper.to_array(x).tobytes() == numpy_helper.to_array(y).tobytes(), x.name
    assert {p.key: p.value for p in a.metadata_props} == {p.key: p.value for p in b.metadata_props}
    assert read_metadata(a)["precision"] == fast.precision
    assert (a.ir_version, list(a.opset_import)) == (b.ir_version, list(b.opset_import))
    assert [w for w, _ in fast.weights] == [w for w, _ in reference.weights]
    assert fast.to_bytes() == reference.to_bytes()  # and everything else: the same file


@pytest.mark.parametrize("precision,options", OPTIONS)
@pytest.mark.parametrize("variant", ["forward", "generate"])
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.id)
def test_fast_path_gives_the_tools_documented_output(arch, variant, precision, options, monkeypatch):
    exported = matmul_form(arch, variant, monkeypatch)
    reference = q._quantize(exported, precision, options, light=False)
    with monkeypatch.context() as m:  # the fast path itself, not its fallback
        m.setattr(q, "_reference_proto", lambda *a: pytest.fail("the fast path fell back to the reference"))
        fast = q.quantize_model(exported, precision, options)
    assert_same_model(fast, reference)


def test_weights_not_quantized_are_the_exporters_arrays_uncopied(monkeypatch):
    exported = matmul_form(ARCHS[0], "forward", monkeypatch)
    fast = q.quantize_model(exported, "int8")
    mine = dict(exported.weights)
    kept = [name for name, _ in fast.weights if name in mine]
    assert kept  # the embedding tables, at least
    assert all(array is mine[name] for name, array in fast.weights if name in mine)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_quantizer_that_reads_a_weight_held_aside_falls_back_to_the_documented_path(precision, monkeypatch):
    """A future onnxruntime whose quantizer reads a weight the fast path did not put back fails loudly
    (an initializer without data); the model is then quantized the documented way, the same file."""
    exported = matmul_form(ARCHS[0], "forward", monkeypatch)
    reference = q._quantize(exported, precision, QuantOptions(), light=False)

    def reads_everything(model, held, options):
        onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name in held))  # no data: raises
        raise AssertionError("unreachable")

    with pytest.raises(ValueError):  # what reading a weight held aside does
        reads_everything(*quantizers.light_model(exported), None)
    monkeypatch.setitem(quantizers.LIGHT_QUANTIZERS, precision, reads_everything)
    assert_same_model(q.quantize_model(exported, precision), reference)


def test_the_light_model_holds_every_large_weight_aside():
    exported = export_model(ARCHS[0], ExportOptions(precision="fp32"))
    model, held = quantizers.light_model(exported)
    assert held and set(held) <= {name for name, _ in exported.weights}
    for tensor in model.graph.initializer:
        if tensor.name in held:
            assert not tensor.HasField("raw_data") and list(tensor.dims) == list(held[tensor.name].shape)
        else:
            assert tensor.ByteSize() < 2 * quantizers.SMALL_TENSOR
    assert sum(t.ByteSize() for t in model.graph.initializer) < sum(a.nbytes for a in held.values()) / 10
