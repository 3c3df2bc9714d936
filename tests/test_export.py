"""The fast ONNX route is proven equal to the PyTorch reference model."""

import hashlib
import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import ltsedge
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import architecture_of, export_model, read_metadata, weight_seed
from ltsedge.exporters.options import ExportOptions
from ltsedge.ortcompat import OLDEST_ORT, target_for
from ltsedge.proxy import count_params
from tests.conftest import random_tiny_archs, tiny_arch
from tests.helpers import max_diff, onnx_from_torch, randomize

CPU = ["CPUExecutionProvider"]


def build_model(arch, seed=0, shared_weights=False):
    return get_backbone(arch.backbone).build_model(arch, seed, shared_weights)


def build_graph(arch, weights, opset, variant="forward"):
    return get_backbone(arch.backbone).build_graph(arch, weights, opset, variant)


@pytest.mark.parametrize("arch", random_tiny_archs(24, seed=11), ids=lambda a: a.id)
def test_onnx_logits_equal_pytorch_on_random_architectures(arch):
    model = randomize(build_model(arch), seed=1)
    for opset in (17, 20):  # erf formula and the Gelu operator
        assert max_diff(arch, model, onnx_from_torch(arch, model, opset)) <= 1e-3


@pytest.mark.parametrize("overrides", [
    {}, {"d_embed": 32, "div_val": 1}, {"d_embed": 64, "div_val": 2}, {"d_embed": 64, "div_val": 4},
    {"d_model": 128, "n_head": [8, 2], "d_inner": [512, 256], "d_embed": 32, "div_val": 2, "cutoffs": [100, 200, 400]},
])
def test_exported_model_equals_its_pytorch_model_at_several_lengths(overrides):
    """export_model's own weights (shared buffer) and serializer, end to end."""
    arch = tiny_arch(**overrides)
    exported = export_model(arch)
    model = build_model(arch, weight_seed(arch), shared_weights=True)
    for batch, seq in [(1, 1), (1, 64), (3, 17)]:
        assert max_diff(arch, model, exported.to_bytes(), batch, seq) <= 1e-3


def test_adaptive_output_is_a_distribution_over_the_full_vocabulary():
    arch = tiny_arch(d_embed=32, div_val=2)
    session = ort.InferenceSession(export_model(arch).to_bytes(), providers=CPU)
    (logits,) = session.run(None, {"input_ids": np.array([[1, 250, 499]])})
    assert logits.shape == (1, 3, arch.vocab_size)
    np.testing.assert_allclose(np.exp(logits).sum(-1), 1.0, rtol=1e-4)


def test_fast_serializer_writes_the_message_protobuf_would():
    arch = tiny_arch(d_embed=32, div_val=2)
    exported = export_model(arch)
    parsed = onnx.load_from_string(exported.to_bytes())
    model = build_model(arch, weight_seed(arch), shared_weights=True)
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    graph, initializers = build_graph(arch, weights, exported.target.opset)
    by_name = {t.name: t for t in parsed.graph.initializer}
    for name, array in initializers.items():
        assert by_name[name] == numpy_helper.from_array(array, name)
    assert [n.op_type for n in parsed.graph.node] == [n.op_type for n in graph.node]
    onnx.checker.check_model(parsed, full_check=True)


def test_io_contract_and_dynamic_axes():
    proto = onnx.load_from_string(export_model(tiny_arch()).to_bytes())
    (inp,), (out,) = proto.graph.input, proto.graph.output
    assert inp.name == "input_ids" and inp.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [d.dim_param for d in inp.type.tensor_type.shape.dim] == ["batch", "sequence"]
    assert out.name == "logits"
    dims = out.type.tensor_type.shape.dim
    assert [dims[0].dim_param, dims[1].dim_param, dims[2].dim_value] == ["batch", "sequence", 500]
    assert proto.opset_import[0].version >= 17


def test_metadata_says_what_the_file_is(tmp_path):
    arch = tiny_arch(d_embed=32, div_val=4)
    exported = export_model(arch)
    path = tmp_path / "m.onnx"
    exported.save(path)
    meta = read_metadata(path)
    assert json.loads(meta["architecture"]) == arch.to_dict()
    assert meta["id"] == arch.id
    assert int(meta["decoder_params"]) == count_params(arch).decoder_params
    assert meta["version"] == ltsedge.__version__
    assert architecture_of(path) == arch
    assert (int(meta["opset"]), int(meta["ir_version"])) == (exported.target.opset, exported.target.ir_version)


def test_default_target_is_the_oldest_supported_runtime():
    target = target_for(OLDEST_ORT)  # what apps bundle, not the newest the local onnxruntime knows
    proto = onnx.load_from_string(export_model(tiny_arch()).to_bytes())
    assert (proto.opset_import[0].version, proto.ir_version) == (target.opset, target.ir_version)


def test_save_returns_the_sha256_of_the_file_and_export_is_deterministic(tmp_path):
    small, large = tiny_arch(), tiny_arch(d_model=128, d_inner=[512, 512], vocab_size=5000)
    first = export_model(small)
    sha = first.save(tmp_path / "a.onnx")
    assert sha == hashlib.sha256((tmp_path / "a.onnx").read_bytes()).hexdigest()
    export_model(large)  # grows the shared weight buffer: must not change anyone's weights
    assert hashlib.sha256(export_model(small).to_bytes()).hexdigest() == sha
    code = ("from ltsedge.exporters import export_model; from ltsedge.architecture import Architecture; import hashlib;"
            f"print(hashlib.sha256(export_model(Architecture.from_json({small.to_json()!r})).to_bytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == sha
    assert not list(tmp_path.glob("*.partial"))


def test_export_does_not_copy_weights_per_candidate():
    """Matrices are views of the shared buffer; the exported pieces reference them, not copies."""
    arch = tiny_arch(vocab_size=20000, d_model=128, d_inner=[256, 256])
    exported = export_model(arch)
    from ltsedge.backbones.random_weights import _POOL

    views = [p for p in exported.parts if isinstance(p, memoryview)]
    assert sum(v.nbytes for v in views) >= count_params(arch).total_params * 4 * 0.99
    pool_start = _POOL.buffer.data_ptr()
    pool_end = pool_start + _POOL.buffer.numel() * 4
    matrices = [v for v in views if v.obj.ndim == 2]
    assert len(matrices) == 2 + 2 * 4  # token and position tables, 4 matrices per layer
    for view in matrices:
        address = view.obj.__array_interface__["data"][0]
        assert pool_start <= address and address + view.nbytes <= pool_end


def test_external_data_file_loads_and_equals_the_inline_model(tmp_path):
    from ltsedge.wire import EXTERNAL_ALIGNMENT, weights_mb

    arch = tiny_arch(d_embed=32, div_val=2)
    exported = export_model(arch, ExportOptions(variant="generate"))
    files = exported.save_files(tmp_path / "model.onnx", external_data=True)
    assert set(files) == {"model.onnx", "model.onnx_data"}
    data = tmp_path / "model.onnx_data"
    assert hashlib.sha256(data.read_bytes()).hexdigest() == files["model.onnx_data"]
    assert (tmp_path / "model.onnx").stat().st_size < 100_000 < data.stat().st_size
    proto = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False)
    offsets = [int(e.value) for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
               for e in t.external_data if e.key == "offset"]
    assert offsets and all(o % EXTERNAL_ALIGNMENT == 0 for o in offsets)
    assert weights_mb(tmp_path / "model.onnx") == pytest.approx(weights_mb(exported.to_bytes()))
    inline = ort.InferenceSession(exported.to_bytes(), providers=CPU)
    external = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=CPU)
    feeds = {"input_ids": np.array([[1, 2, 3]]), "attention_mask": np.ones((1, 3), np.int64),
             "position_ids": np.array([[0, 1, 2]])}
    for t in exported.spec.input("past"):
        feeds[t.name] = np.zeros([1, t.dims[1], 0, t.dims[3]], np.float32)
    np.testing.assert_array_equal(inline.run(["logits"], feeds)[0], external.run(["logits"], feeds)[0])


def test_a_model_over_protobufs_limit_goes_to_external_data_by_itself(tmp_path, monkeypatch):
    """Above 2 GB a forward model's weights (inline below it) move to ``model.onnx_data`` without being asked
    (the limit lowered here so a tiny model crosses it); the model then loads and computes as the inline one."""
    import ltsedge.exporters.exported as exported_module

    arch = tiny_arch()
    inline = export_model(arch)
    inline_bytes = inline.to_bytes()
    assert sorted(inline.save_files(tmp_path / "small.onnx")) == ["small.onnx"]
    monkeypatch.setattr(exported_module, "PROTOBUF_LIMIT", inline.nbytes // 2)
    exported = export_model(arch)
    assert exported.needs_external_data()
    with pytest.raises(LtsedgeError, match="over protobuf's 2 GB"):
        exported.to_bytes()
    assert sorted(exported.save_files(tmp_path / "model.onnx")) == ["model.onnx", "model.onnx_data"]
    ids = {"input_ids": np.array([[3, 1, 4, 1, 5]])}
    big = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=CPU).run(["logits"], ids)[0]
    small = ort.InferenceSession(inline_bytes, providers=CPU).run(["logits"], ids)[0]
    np.testing.assert_array_equal(big, small)
