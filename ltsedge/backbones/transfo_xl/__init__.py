"""Transformer-XL (relative positions, segment-level recurrence memory): the study's second backbone.

``params.py`` counts, ``model.py`` is the PyTorch reference (NVIDIA's ``mem_transformer.py``),
``graph.py`` the ONNX graph, ``mems.py`` the generate variant's memory inputs and outputs; this file
ties them into the ``Backbone`` the registry hands out.
"""

from __future__ import annotations

from ltsedge.backbones.base import BaselineSpec, PackageBackbone
from ltsedge.backbones.transfo_xl.mems import generate_spec
from ltsedge.errors import LtsedgeError


class TransfoXLBackbone(PackageBackbone):
    name = "transfo_xl"
    description = "Transformer-XL: post-LayerNorm blocks, relative multi-head attention, recurrence memory"
    variants = ("forward", "generate")
    model_class = "TransfoXL"
    graph_version = 2  # 2: the sinusoids' frequency table is the float32 nearest the exact values
    default_mem_len = 192
    supports_block_types = True
    # onnxruntime-genai runs KV caches (past_key_values / present), not a recurrence memory.
    genai_compatible = False
    learned_positions = False  # relative, sinusoidal: no table bounds the sequence

    def validate(self, arch) -> None:
        if arch.d_model % 2:
            raise LtsedgeError(f"architecture field 'd_model' = {arch.d_model} is invalid: Transformer-XL's "
                               f"sinusoidal position embedding needs an even d_model")

    def generate_spec(self, arch, cache_layout: str | None = None):
        return generate_spec(arch)  # the recurrence memory, not a KV cache: no layout to choose

    def baseline(self) -> BaselineSpec:
        return BaselineSpec(d_model=512, d_inner=2048, n_head=8, layers=tuple(range(1, 17)))  # Transformer-XL base
