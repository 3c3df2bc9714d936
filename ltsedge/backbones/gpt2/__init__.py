"""GPT-2 (pre-LayerNorm blocks, learned positions, tied output): the study's first backbone.

Each layer may be standard, FFN-only or attention-only (PAR block types, ``arch.block_types``).

``params.py`` counts, ``model.py`` is the PyTorch reference, ``graph.py`` the ONNX graph; this file
ties them into the ``Backbone`` the registry hands out.
"""

from __future__ import annotations

from ltsedge.backbones.base import BaselineSpec, PackageBackbone, grid
from ltsedge.backbones.kv_cache import PER_LAYER


class FusedWhereEveryCache:
    """GPT-2's and OPT's bundles: the contrib form where every cache layer attends fused (onnxruntime-genai then
    shares one past/present buffer), else the plain one; each cache in its layer's own heads."""

    generate_graph_form = "contrib"
    default_cache_layout = PER_LAYER

    def generate_form(self, arch, cache_layout: str | None = None) -> str | None:
        from ltsedge.backbones.gpt2.fusion import fuses_every_cache

        return "contrib" if fuses_every_cache(arch, self.generate_spec(arch, cache_layout)) else None

    def generate_form_rule(self) -> str:
        return "contrib (onnxruntime 1.22) where every cache layer attends fused, else plain"


class GPT2Backbone(FusedWhereEveryCache, PackageBackbone):
    name = "gpt2"
    description = "GPT-2: pre-LayerNorm blocks, learned positions, output tied to the token embedding"
    variants = ("forward", "generate")
    # 2: a bundle's batch axis is "batch_size" (kv_cache.BATCH: transformers.js's own empty caches get their rows)
    graph_version = 2
    model_class = "GPT2"
    kv_cache = True  # generate: past_key_values / present, in kv_cache.CACHE_LAYOUTS
    supports_block_types = True  # PAR layers: FFN-only (no attention, no cache) or attention-only
    # standard operators (graph.py), or onnxruntime's fused attention (contrib_graph.py: GroupQueryAttention,
    # which onnxruntime-genai runs with one past/present buffer)
    graph_forms = ("plain", "contrib")
    # Its bundles (FusedWhereEveryCache): fused attention where every layer with a cache takes it, each cache in its
    # layer's own heads. In genai's loop (benchmarks/gpt2_graph_form.py, docs/benchmarks.md) a step after 960
    # tokens took 0.80-0.82x the plain form's and the peak was 12-16% lower (equal at 192 tokens); where some
    # layer attends in standard operators no buffer is shared, and there the contrib form took 1.10x the plain's.

    def default_space(self) -> dict:
        """The study's space (``--preset study``) holding its baseline's own block too: 1 layer and 16 heads
        per layer, where the study stops at 2 and 8. A layer of 16 heads of 64 decoded faster here than
        8 of 128 at its width, so the front lost to the block it could not hold (0.80-0.99x)."""
        return {"n_layer": grid(1, 16, 1), "n_head": (2, 4, 8, 16)}

    def baseline(self) -> BaselineSpec:
        return BaselineSpec(d_model=1024, d_inner=3072, n_head=16, layers=tuple(range(1, 17)))
