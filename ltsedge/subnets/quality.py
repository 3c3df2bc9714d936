"""A sub-network's quality, each one measured once: its held-out loss with inherited weights (sliced, and
repaired where asked), cached by what decides it (the canonical genes and whether it was repaired)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ltsedge.architecture import Architecture
from ltsedge.subnets.genes import SubnetGenes, SubnetSpace
from ltsedge.subnets.importance import Importance
from ltsedge.subnets.loss import HeldOutLoss, held_out_loss
from ltsedge.subnets.repair import Grams, repaired_state_dict
from ltsedge.subnets.slicing import slice_state_dict


def genes_key(genes: SubnetGenes, repaired: bool) -> str:
    return json.dumps({**genes.to_dict(), "repaired": repaired}, sort_keys=True, separators=(",", ":"))


class Quality:
    """The children of one parent and their held-out loss on ``held_out`` [n, window] token ids."""

    def __init__(self, space: SubnetSpace, weights: Mapping, importance: Importance, grams: Grams | None,
                 held_out, threads: int | None = None):
        self.space, self.weights, self.importance, self.grams = space, weights, importance, grams
        self.held_out, self.threads = held_out, threads
        self.losses: dict[str, HeldOutLoss] = {}

    @property
    def parent(self) -> Architecture:
        return self.space.parent

    def child(self, genes: SubnetGenes, repaired: bool = False) -> tuple[Architecture, dict]:
        """The child's architecture and state_dict; ``repaired``: its pruned layers refitted (``repair``)."""
        genes = self.space.canonical(genes)
        if repaired and self.repairable(genes):
            return repaired_state_dict(self.parent, self.weights, genes, self.importance, self.grams)
        return slice_state_dict(self.parent, self.weights, genes, self.importance)

    def repairable(self, genes: SubnetGenes) -> bool:
        """Does repair change this child: a kept layer narrowed (a dropped layer leaves nothing to refit)?"""
        parent, space = self.parent, self.space
        return self.grams is not None and any(
            genes.kv_groups[i] < parent.kv_heads[i] or genes.ffn[i] < parent.d_inner[i]
            or space.q_heads(genes, i) < space.group_size(i) for i in genes.kept_layers)

    def loss(self, genes: SubnetGenes, repaired: bool = False) -> HeldOutLoss:
        genes = self.space.canonical(genes)
        repaired = repaired and self.repairable(genes)
        key = genes_key(genes, repaired)
        if key not in self.losses:
            arch, state = self.child(genes, repaired)
            self.losses[key] = held_out_loss(arch, state, self.held_out, threads=self.threads)
        return self.losses[key]

    def known(self, genes: SubnetGenes, repaired: bool = False) -> HeldOutLoss | None:
        genes = self.space.canonical(genes)
        return self.losses.get(genes_key(genes, repaired and self.repairable(genes)))
