"""Transformer-XL (relative positions, segment-level recurrence memory): the study's second backbone.

``params.py`` counts, ``model.py`` is the PyTorch reference (NVIDIA's ``mem_transformer.py``),
``graph.py`` the ONNX graph, ``mems.py`` the generate variant's memory inputs and outputs; this file
ties them into the ``Backbone`` the registry hands out.
"""

from __future__ import annotations

from ltsedge.backbones.base import Backbone, BaselineSpec
from ltsedge.backbones.transfo_xl import params
from ltsedge.backbones.transfo_xl.mems import generate_spec
from ltsedge.errors import LtsedgeError
from ltsedge.iospec import ExportSpec, TensorSpec


class TransfoXLBackbone(Backbone):
    name = "transfo_xl"
    description = "Transformer-XL: post-LayerNorm blocks, relative multi-head attention, recurrence memory"
    variants = ("forward", "generate")
    default_mem_len = 192
    supports_block_types = True
    # onnxruntime-genai runs KV caches (past_key_values / present), not a recurrence memory.
    genai_compatible = False
    learned_positions = False  # relative, sinusoidal: no table bounds the sequence
    graph_version = 1

    def validate(self, arch) -> None:
        if arch.d_model % 2:
            raise LtsedgeError(f"architecture field 'd_model' = {arch.d_model} is invalid: Transformer-XL's "
                               f"sinusoidal position embedding needs an even d_model")

    def decoder_params(self, arch) -> int:
        return params.decoder_params(arch)

    def embedding_params(self, arch) -> int:
        return params.embedding_params(arch)

    def empty_model(self, arch):
        import torch

        from ltsedge.backbones.transfo_xl.model import TransfoXL

        with torch.device("meta"):
            return TransfoXL(arch)

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
        from ltsedge.backbones.transfo_xl.graph import build_generate_graph, build_graph

        build = build_generate_graph if variant == "generate" else build_graph
        return build(arch, weights, opset, self.export_spec(arch, variant))

    def default_space(self) -> dict:
        return {}  # the study searched Transformer-XL over the same ranges as GPT-2

    def baseline(self) -> BaselineSpec:
        return BaselineSpec(d_model=512, d_inner=2048, n_head=8, layers=tuple(range(1, 17)))  # Transformer-XL base

    def max_sequence(self, space) -> int | None:
        return None  # relative positions: no table to run out of
