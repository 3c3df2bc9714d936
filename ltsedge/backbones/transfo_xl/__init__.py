"""Transformer-XL (relative positions, segment-level recurrence memory): the study's second backbone.

Skeleton: filled in by the Transformer-XL work (params.py, model.py, graph.py beside this file)."""

from __future__ import annotations

from ltsedge.backbones.base import Backbone


class TransfoXLBackbone(Backbone):
    name = "transfo_xl"
    description = "Transformer-XL: post-LayerNorm blocks, relative multi-head attention, recurrence memory"
    variants = ("forward", "generate")
    default_mem_len = 192
