"""Which models a check trains: a sample of the space spread over its decoder-parameter range, a control
sample of standard GPT-2 layers for spaces the study did not measure, and a set at equal parameters and
several depths.

The spread sample: a large uniform pool of the space (counting parameters is instant), then for each of N
log-spaced sizes from the pool's smallest to its largest the nearest size not taken yet: N distinct sizes
over the whole range, where N uniform draws would bunch in the middle. A space that cannot give N distinct
sizes is refused in one line.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ltsedge.architecture import Architecture, default_cutoffs
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.proxy import count_params
from ltsedge.space import SearchSpace

POOL_MIN = 2000  # architectures drawn to choose from
POOL_PER_MODEL = 100
MIN_SPREAD = 10.0  # a ranking over less than a 10x range of sizes is weak evidence (the check says so)
DEPTH_TOLERANCE = 0.15  # a depth-set model is within 15% of the target's decoder parameters, or left out
DEPTH_POOL = 500  # architectures drawn at each depth to find one of the target size
ATTENTION_MODULES = ("attn", "self_attn", "dec_attn")  # the backbones' attention sub-modules


def spread_sample(space: SearchSpace, n: int, seed: int, max_params: int | None = None) -> list[Architecture]:
    """``n`` architectures of distinct decoder-parameter counts, log-spaced over the space's range
    (below ``max_params``), smallest first."""
    pool = space.sample(max(POOL_MIN, POOL_PER_MODEL * n), seed=seed)
    by_size: dict[int, Architecture] = {}
    for arch in pool:
        size = count_params(arch).decoder_params
        if max_params is None or size <= max_params:
            by_size.setdefault(size, arch)
    sizes = sorted(by_size)
    if len(sizes) < n:
        under = f" at most {max_params:,} decoder parameters," if max_params is not None else ""
        raise LtsedgeError(f"the space ({space.source}) gave {len(sizes)} distinct{under} decoder-parameter sizes "
                           f"in {len(pool)} samples, fewer than the {n} models asked for: "
                           + (f"ask for --models {len(sizes)} or fewer, or widen the space" if len(sizes) >= 2
                              else "widen the space"))
    available = list(sizes)
    chosen = []
    for target in np.geomspace(sizes[0], sizes[-1], n):
        best = min(available, key=lambda s: abs(math.log(s / target)))
        available.remove(best)
        chosen.append(best)
    return [by_size[s] for s in sorted(chosen)]


def spread(archs: list[Architecture]) -> float:
    """Largest over smallest decoder-parameter count."""
    sizes = [count_params(a).decoder_params for a in archs]
    return max(sizes) / min(sizes) if sizes and min(sizes) > 0 else 0.0


def control_space(space: SearchSpace) -> SearchSpace | None:
    """The space's ranges with standard GPT-2 layers (what the study measured), for a space with PAR block
    types or of another backbone; None for a standard GPT-2 space, which is its own control."""
    if space.backbone == "gpt2" and not space.block_types:
        return None
    # GPT-2 splits d_model into its heads: the space's head counts that divide every width (a space with a
    # head size of its own, as Llama's, may have others), else one head
    heads = tuple(h for h in space.n_head if all(d % h == 0 for d in space.d_model)) or (1,)
    return SearchSpace.default(
        "gpt2", n_layer=space.n_layer, d_model=space.d_model, n_head=heads, d_inner=space.d_inner,
        d_inner_min_ratio=space.d_inner_min_ratio, d_embed=space.d_embed, div_val=space.div_val,
        vocab_size=space.vocab_size, n_positions=space.n_positions, cutoffs=space.cutoffs,
        source="control: the space's ranges in standard GPT-2 layers")


def depth_set(space: SearchSpace, target: float, count: int, seed: int,
              max_params: int | None = None) -> list[Architecture]:
    """Architectures of the space at ``count`` depths (log-spaced over its n_layer choices), each the one
    of a uniform sample at its depth nearest ``target`` decoder parameters; depths that cannot come within
    ``DEPTH_TOLERANCE`` of it are left out, and fewer than two depths give none."""
    if count < 2:
        return []
    found = []
    for depth in _depths(space.n_layer, count):
        pool = dataclasses.replace(space, n_layer=(depth,)).sample(DEPTH_POOL, seed=seed)
        best = min(pool, key=lambda a: abs(math.log(count_params(a).decoder_params / target)))
        size = count_params(best).decoder_params
        if abs(math.log(size / target)) <= math.log(1 + DEPTH_TOLERANCE) and (max_params is None or size <= max_params):
            found.append(best)
    return found if len(found) >= 2 else []


def _depths(choices: tuple[int, ...], count: int) -> list[int]:
    if len(choices) <= count:
        return list(choices)
    left, picked = list(choices), []
    for target in np.geomspace(choices[0], choices[-1], count):
        best = min(left, key=lambda c: abs(math.log(c / target)))
        left.remove(best)
        picked.append(best)
    return sorted(picked)


def for_vocabulary(arch: Architecture, vocab_size: int) -> Architecture:
    """``arch`` with the tokenizer's vocabulary (decoder parameters do not depend on it); the space's
    adaptive cutoffs where they still fit, else the default ones."""
    if arch.vocab_size == vocab_size:
        return arch
    cutoffs = arch.cutoffs if arch.cutoffs and max(arch.cutoffs) < vocab_size else default_cutoffs(vocab_size)
    return dataclasses.replace(arch, vocab_size=vocab_size, cutoffs=cutoffs if arch.adaptive else ())


def counts(arch: Architecture) -> dict[str, int]:
    """Decoder, total and attention parameters (the attention sub-blocks' weights and biases, relative
    position projections included), counted on the reference model built on the meta device."""
    model = get_backbone(arch.backbone).empty_model(arch)
    attention = sum(p.numel() for name, p in model.named_parameters()
                    if any(part in ATTENTION_MODULES for part in name.split(".")))
    params = count_params(arch)
    return {"decoder_params": params.decoder_params, "total_params": params.total_params,
            "attention_params": attention}
