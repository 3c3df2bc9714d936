"""The backbone seam: a backbone defined here, in the test suite, is counted, exported and profiled
like a built-in one, through the registry alone."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn

from ltsedge.architecture import Architecture
from ltsedge.backbones import (
    Backbone,
    BaselineSpec,
    backbone_names,
    register,
    unregister,
)
from ltsedge.backbones.weights import materialize
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model, read_metadata, weight_seed
from ltsedge.iospec import ExportSpec, TensorSpec
from ltsedge.onnx_graph import GraphBuilder
from ltsedge.profiling import profile_model
from ltsedge.proxy import count_params
from ltsedge.space import SearchSpace


class ToyLM(nn.Module):
    """Token embedding, then per layer a ReLU MLP with a residual, then the tied output layer."""

    def __init__(self, arch: Architecture):
        super().__init__()
        self.emb = nn.Embedding(arch.vocab_size, arch.d_model)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(arch.d_model, d), nn.ReLU(), nn.Linear(d, arch.d_model))
                                    for d in arch.d_inner)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = x + layer(x)
        return x @ self.emb.weight.T


class Toy(Backbone):
    name = "toy"
    description = "an MLP language model, for testing the seam"

    def validate(self, arch):
        if arch.adaptive:
            raise LtsedgeError("the toy backbone has no adaptive embeddings")

    def decoder_params(self, arch):
        return sum(2 * arch.d_model * d + d + arch.d_model for d in arch.d_inner)

    def embedding_params(self, arch):
        return arch.vocab_size * arch.d_model

    def build_model(self, arch, seed=0, shared_weights=False):
        with torch.device("meta"):
            model = ToyLM(arch)
        return materialize(model, seed, shared_weights)

    def export_spec(self, arch, variant):
        self.check_variant(variant)
        return ExportSpec(variant, (TensorSpec("input_ids", "int64", ("batch", "sequence"), "input_ids"),),
                          (TensorSpec("logits", "float32", ("batch", "sequence", arch.vocab_size), "logits"),))

    def build_graph(self, arch, weights, opset, variant):
        spec = self.export_spec(arch, variant)
        g = GraphBuilder(weights, opset)
        x = g.op("Gather", g.weight("emb.weight"), "input_ids", axis=0)
        for i in range(arch.n_layer):
            h = g.op("MatMul", x, g.weight(f"l{i}.w1", weights[f"layers.{i}.0.weight"].T))
            h = g.op("Relu", g.op("Add", h, g.weight(f"layers.{i}.0.bias")))
            h = g.op("Add", g.op("MatMul", h, g.weight(f"l{i}.w2", weights[f"layers.{i}.2.weight"].T)),
                     g.weight(f"layers.{i}.2.bias"))
            x = g.op("Add", x, h)
        g.op("MatMul", x, g.weight("emb.T", weights["emb.weight"].T))
        g.rename_last("logits")
        return g.graph("toy", [t.value_info() for t in spec.inputs], [t.value_info() for t in spec.outputs]), g.large

    def default_space(self):
        return {"n_layer": (1, 2, 3), "d_model": (32, 64), "n_head": (2,), "d_inner": (64, 128, 192),
                "d_embed": (), "div_val": (1,), "d_inner_min_ratio": 1.0, "vocab_size": 97, "n_positions": 32}

    def baseline(self):
        return BaselineSpec(d_model=64, d_inner=128, n_head=2, layers=(1, 2))


@pytest.fixture
def toy():
    backbone = register(Toy())
    yield backbone
    unregister("toy")


def toy_arch(**changes):
    fields = dict(backbone="toy", n_layer=2, d_model=32, n_head=[2, 2], d_inner=[64, 96], vocab_size=97,
                  n_positions=32)
    return Architecture(**{**fields, **changes})


def test_an_unregistered_backbone_is_refused():
    assert "toy" not in backbone_names()
    with pytest.raises(LtsedgeError, match="'backbone' = 'toy' is invalid: must be one of"):
        toy_arch()


def test_params_count_the_modules(toy):
    arch = toy_arch()
    model = toy.build_model(arch)
    decoder = sum(p.numel() for n, p in model.named_parameters() if n.startswith("layers."))
    assert count_params(arch).decoder_params == decoder
    assert count_params(arch).total_params == sum(p.numel() for p in model.parameters())
    with pytest.raises(LtsedgeError, match="no adaptive embeddings"):
        toy_arch(d_embed=16)


def test_export_equals_the_reference_and_declares_its_spec(toy):
    arch = toy_arch()
    exported = export_model(arch)
    meta = read_metadata(onnx_proto(exported))
    assert json.loads(meta["architecture"])["backbone"] == "toy" and meta["variant"] == "forward"
    assert ExportSpec.from_json(meta["io_spec"]) == toy.export_spec(arch, "forward")
    model = toy.build_model(arch, seed=weight_seed(arch), shared_weights=True)
    ids = np.random.default_rng(0).integers(0, arch.vocab_size, (2, 7))
    (logits,) = ort.InferenceSession(exported.to_bytes(), providers=["CPUExecutionProvider"]).run(None, {"input_ids": ids})
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(torch.from_numpy(ids)).numpy(), atol=1e-4)
    with pytest.raises(LtsedgeError, match="no export variant 'generate'"):
        export_model(arch, variant="generate")


def test_profile_and_space_through_the_registry(toy, tmp_path):
    arch_file = tmp_path / "toy.json"
    arch_file.write_text(toy_arch().to_json())
    profile = load_profile("cpu").replace(sequence=8, warmup=1, min_runs=3, max_runs=5, max_seconds=1.0,
                                          tolerance=0.5, drift_check_every=0)
    result = profile_model(arch_file, profile, store_path=tmp_path / "store.sqlite")
    assert result["ok"] and result["latency_ms"] > 0 and result["decoder_params"] == count_params(toy_arch()).decoder_params
    again = profile_model(arch_file, profile, store_path=tmp_path / "store.sqlite")
    assert again["cached"] and again["latency_ms"] == result["latency_ms"]

    space = SearchSpace.default("toy")
    assert space.backbone == "toy" and space.vocab_size == 97
    assert all(a.backbone == "toy" and space.contains(a) for a in space.sample(20, seed=1))


def onnx_proto(exported):
    import onnx

    return onnx.load_from_string(exported.to_bytes())
