"""The study's baseline: the same homogeneous model with 1..16 identical layers, measured on the same device.

Each backbone names its base block (``Backbone.baseline``: GPT-2 d_model 1024, d_inner 3072).

A baseline model the space does not hold (the study's GPT-2 block has 16 heads where its space offers 2, 4
and 8, and one layer where it starts at 2) stands in it as its nearest shape (``in_space_shape``): each
size snapped to the nearest of the space's choices. The search starts from these stand-ins, and
publishing re-measures them beside the front, so each baseline point is judged on a model the search
could have published, on figures taken together with the front's: its front can only tie or beat it.

Both are reported (``compare``): the baseline model itself, measured afresh where the space does not
hold it (the study's own baseline, never weakened), and its stand-in. Each is compared with the fastest
frontier model that has at least its decoder parameters (so, by the proxy, at least its quality; with a
fitted proxy, ``--proxy FILE``, at least its merit: a predicted held-out loss no higher). A
baseline model measured afresh takes that frontier model's embedding settings (d_embed, div_val,
cutoffs): decoder parameters do not depend on them, and the speedup then measures the topology of the
blocks, not the output layer.
"""

from __future__ import annotations

from ltsedge.architecture import FAMILY_FIELDS, Architecture
from ltsedge.backbones import BaselineSpec
from ltsedge.costmodel.features import output_weights
from ltsedge.errors import LtsedgeError
from ltsedge.proxy import count_params, decoder_merit, merit_of
from ltsedge.search.candidate import Candidate
from ltsedge.space import SearchSpace

# The sizes a space offers choices of, with a family's own (n_kv_head, head_dim, ...) where its space has
# them: what ``in_space_shape`` snaps, and what a row's ``stand_in`` reports changed.
SHAPE_FIELDS = ("n_layer", "d_model", "n_head", "d_inner")
REPORTED_FIELDS = SHAPE_FIELDS + ("block_types",) + FAMILY_FIELDS


def stacked(spec: BaselineSpec, n_layer: int, space: SearchSpace) -> Architecture:
    """The baseline's block stacked ``n_layer`` deep, in the space's backbone, vocabulary and context."""
    grouped = {"n_kv_head": [spec.n_kv_head] * n_layer} if spec.n_kv_head is not None else {}
    return Architecture(n_layer=n_layer, d_model=spec.d_model, n_head=[spec.n_head] * n_layer,
                        d_inner=[spec.d_inner] * n_layer, head_dim=spec.head_dim, vocab_size=space.vocab_size,
                        n_positions=space.n_positions, backbone=space.backbone, **grouped)


def baseline_architectures(spec: BaselineSpec, space: SearchSpace, front: list[Candidate] = (),
                           merit=decoder_merit) -> list[Architecture]:
    """The baseline models in the space's backbone and vocabulary, each with the embedding settings of
    the frontier model it will be compared with (without one: the front's largest model's, else plain)."""
    archs = []
    for n in spec.layers:
        arch = stacked(spec, n, space)
        match = best_match(arch, front, merit) or (max(front, key=lambda f: merit_of(f, merit)) if front else None)
        if match is not None and match.arch.adaptive:
            arch = Architecture.from_dict({**arch.to_dict(), "d_embed": match.arch.d_embed,
                                           "div_val": match.arch.div_val, "cutoffs": list(match.arch.cutoffs)})
        archs.append(arch)
    return archs


def stand_ins(spec: BaselineSpec, space: SearchSpace) -> list[Architecture | None]:
    """Each baseline point's model as the space holds it (``in_space_shape``), in the order of its layers."""
    return [in_space_shape(stacked(spec, n, space), space) for n in spec.layers]


def seeds_in_space(spec: BaselineSpec, space: SearchSpace, limit: int) -> list[Architecture]:
    """The baseline points' stand-ins (``stand_ins``), each once, up to ``limit`` spread over the layer
    counts. Seeded into the first generation, they make the hand-scaled models the start of the search.
    Those beyond ``limit`` (more points than the share of the first generation the search gives them)
    are measured when the front is published, beside it (``finish.py``)."""
    found = list({a.id: a for a in stand_ins(spec, space) if a is not None}.values())
    if len(found) <= limit:
        return found
    step = (len(found) - 1) / max(limit - 1, 1)
    return [found[round(i * step)] for i in range(limit)]


def in_space_shape(arch: Architecture, space: SearchSpace) -> Architecture | None:
    """The model of the space nearest to the homogeneous ``arch``: each of its sizes (``SHAPE_FIELDS``, and
    a family's fields the space offers choices of) snapped to the space's nearest choice, a tie to the
    larger (more decoder parameters, where the choices differ), then as the space decodes it (its own
    repairs, e.g. d_inner's floor); plain embeddings where the space holds them, else its cheapest output
    layer. ``arch`` itself where the space holds it; None where it holds no such model."""
    n_layer = _nearest(space.n_layer, arch.n_layer)
    snapped = {**arch.to_dict(), "n_layer": n_layer, "vocab_size": space.vocab_size,
               "n_positions": space.n_positions, "mem_len": space.mem_len}
    snapped.pop("cutoffs", None)
    for name in SHAPE_FIELDS[1:] + tuple(f for f in FAMILY_FIELDS if getattr(space, f, None)):
        value, choices = snapped.get(name), _choices(space, name, snapped)
        if isinstance(value, list):  # per layer: the block's one value, on every layer
            snapped[name] = [_nearest(choices, value[0])] * n_layer if value else value
        elif value is not None:
            snapped[name] = _nearest(choices, value)
    own = {k: v for k, v in snapped.items() if k not in FAMILY_FIELDS}
    for shape in (snapped, own):  # a family's fields as snapped, else as the space fills them
        embeddings = [(None, 1)] + [(d, k) for d in space.d_embed for k in space.div_val]
        held = [a for d, k in embeddings if (a := _held({**shape, "d_embed": d, "div_val": k,
                                                          **({"cutoffs": list(space.cutoffs)} if d else {})},
                                                         space)) is not None]
        if held:
            return min(held, key=output_weights)
    return None


def _held(data: dict, space: SearchSpace) -> Architecture | None:
    """The architecture ``data`` describes as the space decodes it; None where it is invalid or not held."""
    try:
        arch = space.decode(space.encode(Architecture.from_dict(data)))
    except LtsedgeError:
        return None
    return arch if space.contains(arch) else None


def _choices(space: SearchSpace, name: str, snapped: dict) -> tuple:
    """The choices of ``name`` the space allows beside the sizes snapped before it (d_inner's floor at its
    d_model, key/value heads that divide the query heads)."""
    if name == "d_inner":
        return space.d_inner_choices(snapped["d_model"])
    if name == "n_kv_head" and hasattr(space, "kv_choices"):
        return space.kv_choices(snapped["n_head"][0]) or space.n_kv_head
    return getattr(space, name)


def _nearest(choices: tuple, value):
    """The choice nearest to ``value``, a tie to the larger; ``value`` itself where it is a choice."""
    if value in choices:
        return value
    if not all(isinstance(c, (int, float)) for c in choices) or not isinstance(value, (int, float)):
        return choices[0]
    return min(choices, key=lambda c: (abs(c - value), -c))


def shape_changes(baseline: Architecture, measured: Architecture) -> str:
    """What the model measured for a baseline point changed of its shape, e.g. ``n_layer 1->2; n_head 16->8``
    ("" for none; the embedding settings are columns of their own)."""
    before, after = baseline.to_dict(), measured.to_dict()
    return "; ".join(f"{name} {_one(before.get(name))}->{_one(after.get(name))}" for name in REPORTED_FIELDS
                     if _one(before.get(name)) != _one(after.get(name)))


def _one(value):
    """A per-layer value of a homogeneous model as its one value."""
    if isinstance(value, list) and value and all(v == value[0] for v in value):
        return value[0]
    return value


def best_match(baseline: Architecture, front: list[Candidate], merit=decoder_merit) -> Candidate | None:
    """The fastest frontier model with at least the baseline's merit (its decoder parameters, or a fitted
    proxy's: at most its predicted held-out loss)."""
    need = merit(baseline, count_params(baseline).decoder_params)
    matches = [f for f in front if merit_of(f, merit) >= need and f.latency_ms is not None]
    return min(matches, key=lambda f: f.latency_ms) if matches else None


def comparison_anchors(spec: BaselineSpec, space: SearchSpace, front: list[Candidate], merit=decoder_merit
                       ) -> set[str]:
    """The front models the comparison will judge the baseline against: for each baseline point, the fastest
    front model with at least the decoder parameters of its stand-in, and of the baseline model itself
    (both are compared). Publishing keeps them whatever thinning would cover them with: a kept neighbour
    with fewer decoder parameters does not count for the point, and one with more may be up to the
    resolution slower (the study's search here compared its 3-layer point with a model 7% slower than the
    front's own, before either was re-measured)."""
    models = baseline_architectures(spec, space) + [a for a in stand_ins(spec, space) if a is not None]
    return {m.arch.id for a in models if (m := best_match(a, front, merit)) is not None}


def compare(points: list[Architecture], exact: list[Candidate], stand_in: list[Candidate | None],
            front: list[Candidate], merit=decoder_merit) -> list[dict]:
    """One row per baseline point (``points``: the baseline models, in the order of its layers): the baseline
    model itself as measured (``exact``), then, prefixed ``stand_in_``, its stand-in in the space as measured
    beside the front (``stand_in``; None where none was), each against the fastest ``front`` model with at
    least its own merit (``best_match``). ``stand_in`` says what the stand-in changed of the block ("" inside the
    space, where it is the baseline model and its columns repeat the baseline's)."""
    rows = []
    for point, b, s in zip(points, exact, stand_in):
        judged = _judged(b, front, merit)
        row = {"baseline_id": judged.pop("id"), "n_layer": point.n_layer, **judged,
               "stand_in": shape_changes(point, s.arch) if s is not None else ""}
        rows.append(row | {f"stand_in_{k}": v for k, v in _judged(s, front, merit).items()})
    return rows


def _judged(model: Candidate | None, front: list[Candidate], merit=decoder_merit) -> dict:
    """A measured model's figures against the fastest ``front`` model with at least its merit
    (every value None without a model, the front's without a match or a figure)."""
    row = dict.fromkeys(("id", "decoder_params", "d_embed", "div_val", "latency_ms", "peak_memory_mb", "ok",
                         "frontier_id", "frontier_decoder_params", "frontier_latency_ms", "frontier_peak_memory_mb",
                         "speedup", "memory_ratio"))
    if model is None:
        return row
    row.update(id=model.arch.id, decoder_params=model.params.decoder_params, d_embed=model.arch.d_embed,
               div_val=model.arch.div_val, latency_ms=model.latency_ms, peak_memory_mb=model.memory_mb, ok=model.ok)
    best = best_match(model.arch, front, merit)
    if model.ok and best is not None:
        row.update(frontier_id=best.arch.id, frontier_decoder_params=best.params.decoder_params,
                   frontier_latency_ms=best.latency_ms, frontier_peak_memory_mb=best.memory_mb,
                   speedup=model.latency_ms / best.latency_ms, memory_ratio=model.memory_mb / best.memory_mb)
    return row
