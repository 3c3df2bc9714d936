"""OPT (Meta's Open Pre-trained Transformer decoder): the study's third backbone, for its OPT-scale space.

Skeleton: filled in by the OPT work (params.py, model.py, graph.py beside this file)."""

from __future__ import annotations

from ltsedge.backbones.base import Backbone


class OPTBackbone(Backbone):
    name = "opt"
    description = "OPT: pre-LayerNorm blocks, ReLU FFN, learned positions with OPT's offset, tied output"
    variants = ("forward", "generate")
