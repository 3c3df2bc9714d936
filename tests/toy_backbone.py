"""A toy fourth backbone defined in the test suite (an MLP language model): registered by
tests/test_backbones.py around its tests and by tests/test_contract.py's one registration line, it goes
through the registry, the proxy, export, profile and the backbone contract like a built-in one."""

from __future__ import annotations

import torch
import torch.nn as nn

from ltsedge.architecture import Architecture
from ltsedge.backbones import Backbone, BaselineSpec
from ltsedge.errors import LtsedgeError
from ltsedge.iospec import ExportSpec, TensorSpec
from ltsedge.onnx_graph import GraphBuilder


class ToyLM(nn.Module):
    """Token embedding, then per layer a ReLU MLP with a residual, then the tied output layer."""

    DECODER_MODULES = ("layers",)  # what the proxy's decoder_params count (the embedding is the rest)

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
    """Registered around each test here, and around each of tests/test_contract.py's, which it passes."""

    name = "toy"
    description = "an MLP language model, for testing the seam"
    supports_adaptive = False  # plain embeddings: d_embed = d_model, div_val 1

    def validate(self, arch):
        if arch.n_layer > 4:
            raise LtsedgeError("the toy backbone has at most 4 layers")

    def decoder_params(self, arch):
        return sum(2 * arch.d_model * d + d + arch.d_model for d in arch.d_inner)

    def embedding_params(self, arch):
        return arch.vocab_size * arch.d_model

    def empty_model(self, arch):  # Backbone.build_model materializes it
        with torch.device("meta"):
            return ToyLM(arch)

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
