"""The study's baseline: the same homogeneous model with 1..16 identical layers, measured on the same device.

Each backbone names its base block (``Backbone.baseline``: GPT-2 d_model 1024, d_inner 3072).

Each baseline model is compared with the frontier model that has at least its decoder parameters
(so, by the proxy, at least its quality) and the lowest latency. The baseline model takes that
frontier model's embedding settings (d_embed, div_val, cutoffs): decoder parameters do not depend
on them, and the speedup then measures the topology of the blocks, not the output layer.
"""

from __future__ import annotations

from ltsedge.architecture import Architecture
from ltsedge.backbones import BaselineSpec
from ltsedge.costmodel.features import output_weights
from ltsedge.errors import LtsedgeError
from ltsedge.search.candidate import Candidate
from ltsedge.space import SearchSpace


def baseline_architectures(spec: BaselineSpec, space: SearchSpace, front: list[Candidate] = ()
                           ) -> list[Architecture]:
    """The baseline models in the space's backbone and vocabulary, each with the embedding settings of
    the frontier model it will be compared with (without one: the front's largest model's, else plain)."""
    archs = []
    for n in spec.layers:
        arch = spec.architecture(n, space)
        match = best_match(arch, front) or (max(front, key=lambda f: f.params.decoder_params) if front else None)
        if match is not None and match.arch.adaptive:
            arch = Architecture.from_dict({**arch.to_dict(), "d_embed": match.arch.d_embed,
                                           "div_val": match.arch.div_val, "cutoffs": list(match.arch.cutoffs)})
        archs.append(arch)
    return archs


def seeds_in_space(spec: BaselineSpec, space: SearchSpace, limit: int) -> list[Architecture]:
    """Up to ``limit`` baseline models, spread over its layer counts, that the space holds: with the
    space's cheapest embedding settings where it does not hold plain ones. Seeded into the first
    generation, they make the hand-scaled models the start of the search, so its front can only
    improve on them."""
    found = []
    for n in spec.layers:
        plain = spec.architecture(n, space)
        variants = [plain] + [_with_embedding(plain, d, k) for d in space.d_embed or () for k in space.div_val]
        held = [a for a in variants if a is not None and space.contains(a)]
        if held:
            found.append(min(held, key=lambda a: output_weights(a)))
    if len(found) <= limit:
        return found
    step = (len(found) - 1) / max(limit - 1, 1)
    return [found[round(i * step)] for i in range(limit)]


def _with_embedding(arch: Architecture, d_embed: int, div_val: int) -> Architecture | None:
    try:
        return Architecture.from_dict({**arch.to_dict(), "d_embed": d_embed, "div_val": div_val, "cutoffs": []})
    except LtsedgeError:
        return None


def best_match(baseline: Architecture, front: list[Candidate]) -> Candidate | None:
    """The fastest frontier model with at least the baseline's decoder parameters."""
    from ltsedge.proxy import count_params

    need = count_params(baseline).decoder_params
    matches = [f for f in front if f.params.decoder_params >= need and f.latency_ms is not None]
    return min(matches, key=lambda f: f.latency_ms) if matches else None


def comparison_anchors(spec: BaselineSpec, space: SearchSpace, front: list[Candidate]) -> set[str]:
    """The front models the comparison will judge the baseline against: for each baseline model, the fastest
    front model with at least its decoder parameters. Publishing keeps them whatever thinning would cover
    them with: a kept neighbour with fewer decoder parameters than the baseline model does not count for
    it, and one with more may be up to the resolution slower (the study's search here compared its 3-layer
    point with a model 7% slower than the front's own, before either was re-measured)."""
    return {m.arch.id for a in baseline_architectures(spec, space) if (m := best_match(a, front)) is not None}


def compare(baseline: list[Candidate], front: list[Candidate]) -> list[dict]:
    rows = []
    for b in baseline:
        row = {"baseline_id": b.arch.id, "n_layer": b.arch.n_layer, "decoder_params": b.params.decoder_params,
               "d_embed": b.arch.d_embed, "div_val": b.arch.div_val,
               "latency_ms": b.latency_ms, "peak_memory_mb": b.memory_mb, "ok": b.ok,
               "frontier_id": None, "frontier_decoder_params": None, "frontier_latency_ms": None,
               "frontier_peak_memory_mb": None, "speedup": None, "memory_ratio": None}
        best = best_match(b.arch, front)
        if b.ok and best is not None:
            row.update(frontier_id=best.arch.id, frontier_decoder_params=best.params.decoder_params,
                       frontier_latency_ms=best.latency_ms, frontier_peak_memory_mb=best.memory_mb,
                       speedup=b.latency_ms / best.latency_ms, memory_ratio=b.memory_mb / best.memory_mb)
        rows.append(row)
    return rows
