"""GPT-2 (pre-LayerNorm blocks, learned positions, tied output): the study's first backbone.

Each layer may be standard, FFN-only or attention-only (PAR block types, ``arch.block_types``).

``params.py`` counts, ``model.py`` is the PyTorch reference, ``graph.py`` the ONNX graph; this file
ties them into the ``Backbone`` the registry hands out.
"""

from __future__ import annotations

from ltsedge.backbones.base import Backbone, BaselineSpec
from ltsedge.backbones.gpt2 import params
from ltsedge.backbones.kv_cache import generate_spec
from ltsedge.iospec import ExportSpec, TensorSpec


class GPT2Backbone(Backbone):
    name = "gpt2"
    description = "GPT-2: pre-LayerNorm blocks, learned positions, output tied to the token embedding"
    variants = ("forward", "generate")
    supports_block_types = True  # PAR layers: FFN-only (no attention, no cache) or attention-only

    def decoder_params(self, arch) -> int:
        return params.decoder_params(arch)

    def embedding_params(self, arch) -> int:
        return params.embedding_params(arch)

    def empty_model(self, arch):
        import torch

        from ltsedge.backbones.gpt2.model import GPT2

        with torch.device("meta"):
            return GPT2(arch)

    def export_spec(self, arch, variant: str) -> ExportSpec:
        self.check_variant(variant)
        if variant == "generate":
            return generate_spec(arch)
        return ExportSpec(
            variant,
            inputs=(TensorSpec("input_ids", "int64", ("batch", "sequence"), "input_ids"),),
            outputs=(TensorSpec("logits", "float32", ("batch", "sequence", arch.vocab_size), "logits"),),
        )

    def build_graph(self, arch, weights, opset: int, variant: str):
        from ltsedge.backbones.gpt2.graph import build_generate_graph, build_graph

        build = build_generate_graph if variant == "generate" else build_graph
        return build(arch, weights, opset, self.export_spec(arch, variant))

    def baseline(self) -> BaselineSpec:
        return BaselineSpec(d_model=1024, d_inner=3072, n_head=16, layers=tuple(range(1, 17)))
