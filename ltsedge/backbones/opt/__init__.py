"""OPT (Meta's Open Pre-trained Transformer decoder): the study's third backbone, for its OPT-scale space.

The LiteTransformerSearch study compared its searched models with OPT-350M, building them with OPT's
own code: pre-LayerNorm blocks with a ReLU FFN, learned positions at OPT's offset of 2, an output tied
to the token embedding, the position table counted as decoder. ``params.py`` counts, ``model.py`` is
the PyTorch reference, ``graph.py`` the ONNX graph; this file ties them into the ``Backbone``.
"""

from __future__ import annotations

from ltsedge.backbones.base import BaselineSpec, PackageBackbone, grid
from ltsedge.backbones.gpt2 import FusedWhereEveryCache

OPT_VOCAB_SIZE = 50272  # OPT's vocabulary (GPT-2's BPE, padded)
OPT_N_POSITIONS = 2048


class OPTBackbone(FusedWhereEveryCache, PackageBackbone):
    name = "opt"
    description = "OPT: pre-LayerNorm blocks, ReLU FFN, learned positions with OPT's offset, tied output"
    variants = ("forward", "generate")
    # 2: a bundle's batch axis is "batch_size" (kv_cache.BATCH: transformers.js's own empty caches get their rows)
    graph_version = 2
    model_class = "OPT"
    kv_cache = True  # generate: past_key_values / present, in kv_cache.CACHE_LAYOUTS
    supports_block_types = True
    # standard operators (graph.py), or onnxruntime's fused attention (contrib_graph.py); its bundles in the
    # latter where every cache layer fuses, each cache in its layer's own heads, as GPT-2's
    graph_forms = ("plain", "contrib")
    supports_adaptive = False  # plain embeddings (d_embed = d_model): presets drop their adaptive choices
    # Hugging Face's OPTForCausalLM state_dict carries the tied output layer under its own name.
    tied_aliases = {"lm_head.weight": "decoder.embed_tokens.weight"}

    def default_space(self) -> dict:
        """The study's OPT-scale space: 3..29 layers, d_model 512..1472, per layer d_inner 512..6080 (no
        2 x d_model floor) and 2..16 heads; OPT's vocabulary and 2048 positions; plain embeddings."""
        return {"n_layer": grid(3, 29, 1), "d_model": grid(512, 1472, 64), "n_head": (2, 4, 8, 16),
                "d_inner": grid(512, 6080, 64), "d_inner_min_ratio": 0.0, "d_embed": (), "div_val": (1,),
                "vocab_size": OPT_VOCAB_SIZE, "n_positions": OPT_N_POSITIONS}

    def baseline(self) -> BaselineSpec:
        """OPT-350M's block, stacked 4 .. 24 layers deep."""
        return BaselineSpec(d_model=1024, d_inner=4096, n_head=16, layers=(4, 8, 12, 16, 20, 24))
