"""The end of a search: publish the frontier as models, then measure the baseline beside it.

Publishing (``frontier.py``) thins the search's front to the settings' resolution (``pareto.thin``),
re-measures every model kept from its file at the device profile's own policy (however the search timed
its candidates), then only the undecided ones (whose place on the front hangs on the noise) with the
strict policy. The layer-scaled baseline's stand-ins in the space (``baseline.stand_ins``: the models the
search started from) are re-measured beside the front even where its figures left them off it, and
those the search did not measure (seeding off aside: not seeded, or only predicted) are measured there
for the first time: each baseline point is then judged on fresh figures of its stand-in and the front,
taken together and on one front, so it can only tie or beat it. Thinning keeps them, and for each
baseline point the front models the comparison will pick (``baseline.comparison_anchors``), whatever
would cover them. The baseline model itself is reported beside its stand-in: inside the space they are
one model, measured once; outside it, or without a stand-in figure, it is measured afresh as the front
was (the objective's workload at the profile's policy, the others coarsely), so the comparison is of
figures measured alike. ``--max-bundles N`` bounds the bundles written, stand-ins included: a stand-in
beyond it is measured afresh as the baseline is, compared from its figures, and no file of it is kept
(the front it is judged against is then the published one, which it may beat). What each pass cost is
kept (``PublishCost``) and reported apart from the search's own time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

from ltsedge.architecture import Architecture
from ltsedge.devices import DeviceProfile, strict
from ltsedge.proxy import count_params
from ltsedge.runners.measurement import Measurement
from ltsedge.search.baseline import (baseline_architectures, compare, comparison_anchors, seeds_in_space,
                                     shape_changes, stacked, stand_ins)
from ltsedge.search.budgets import Budgets
from ltsedge.search.candidate import Candidate
from ltsedge.search.evaluate import CandidateEvaluator
from ltsedge.search.frontier import PublishedModel, keep_front, remeasure, undecided, write_frontier
from ltsedge.workloads import WORKLOADS
from ltsedge.search.pareto import cap, spread, thin
from ltsedge.search.outdir import OutputDir
from ltsedge.search.publish_log import PublishLog, baseline_key, remeasured_key


@dataclass
class PublishCost:
    front: int = 0  # models the search's front held
    thinned: int = 0  # of those, the ones kept at the resolution (exported and re-measured)
    capped: int = 0  # of the ones kept at the resolution, left out by --max-bundles
    contenders: int = 0  # the baseline's stand-ins off the search's front, (re-)measured beside it
    published: int = 0  # models the re-measured front holds
    strict: int = 0  # of the front, measured again strictly (undecided at the profile's policy)
    reused: int = 0  # figures taken from an earlier run's publishing (publish_log.py), not measured now
    resolution: float = 0.0
    export_seconds: float = 0.0
    remeasure_seconds: float = 0.0  # every model kept, at the profile's policy
    strict_seconds: float = 0.0
    baseline_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Finished:
    frontier: list[PublishedModel]
    baseline: list[dict]  # one comparison row per baseline point: the baseline model and its stand-in
    cost: PublishCost = field(default_factory=PublishCost)


def finish(front: list[Candidate], settings, profile: DeviceProfile, store, outdir: OutputDir, *,
           runner_factory, log, with_baseline: bool = True, evaluated: list[Candidate] = (),
           published: PublishLog | None = None) -> Finished:
    """Publish ``front``; ``evaluated`` (every candidate of the search) holds the baseline's stand-ins it
    measured. ``published``: the figures an earlier run of this search took here (taken instead of
    measuring) and where this run's go (``publish_log.py``; None: every figure measured now, none kept)."""
    seeded = {a.id: a for a in seeds_in_space(settings.baseline, settings.space, len(settings.baseline.layers))} \
        if settings.baseline is not None else {}
    anchors = comparison_anchors(settings.baseline, settings.space, front, settings.merit) \
        if with_baseline and settings.baseline is not None else set()
    thinned = thin(front, settings.resolution, keep=set(seeded) | anchors, merit=settings.merit)
    kept = cap(thinned, settings.max_bundles, keep=set(seeded) | anchors, merit=settings.merit)
    off_front = {i: a for i, a in seeded.items() if i not in {c.arch.id for c in kept}}
    wanted = _contenders(evaluated, off_front, settings, measure_new=settings.seed_baseline) \
        if with_baseline else []
    contenders = _within_cap(wanted, settings.max_bundles, len(kept))
    # The cap bounds the bundles written, stand-ins included: one left out is measured with the baseline, no file kept
    unbundled = [c.arch for c in wanted if c.arch.id not in {b.arch.id for b in contenders}]
    cost = PublishCost(front=len(front), thinned=len(kept), contenders=len(contenders), resolution=settings.resolution,
                       capped=len(thinned) - len(kept))
    clock = time.perf_counter()
    written = write_frontier(kept + contenders, outdir, settings.export_options,
                             execution_provider=profile.execution_provider)
    cost.export_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    before = published.taken if published is not None else 0
    fresh = _remeasured(written, profile, "profile", runner_factory, settings.objective, log, published)
    cost.remeasure_seconds, clock = time.perf_counter() - clock, time.perf_counter()
    doubtful = undecided(fresh, settings.budgets, settings.objective, settings.merit)
    cost.strict = len(doubtful)
    again = {p.candidate.arch.id: p for p in _remeasured([p for p in fresh if p.candidate.arch.id in doubtful],
                                                         strict(profile), "strict", runner_factory,
                                                         settings.objective, log, published)}
    cost.strict_seconds = time.perf_counter() - clock if doubtful else 0.0
    final = [again.get(p.candidate.arch.id, p) for p in fresh]
    front_models = keep_front(final, outdir, settings.budgets, settings.merit)
    clock = time.perf_counter()
    exact: list[Candidate] = []
    stand: list[Candidate | None] = []
    if with_baseline and settings.baseline is not None:
        fresh_seeds = [p.candidate for p in final if p.candidate.arch.id in seeded and p.candidate.ok]
        exact, stand = _baseline(settings, profile, runner_factory, log, store, outdir, front_models, fresh_seeds,
                                 published, unbundled)
    cost.baseline_seconds = time.perf_counter() - clock
    cost.published = len(front_models)
    cost.reused = published.taken - before if published is not None else 0
    points = [stacked(settings.baseline, n, settings.space) for n in settings.baseline.layers] if exact else []
    return Finished(front_models, compare(points, exact, stand, [p.candidate for p in front_models],
                                            settings.merit), cost)


def _remeasured(models: list[PublishedModel], profile: DeviceProfile, policy: str, runner_factory, objective: str,
                log, published: PublishLog | None) -> list[PublishedModel]:
    """``frontier.remeasure`` at ``profile`` (named ``policy``) of the models ``published`` holds no figure of
    at that policy (no runner where it holds them all); the others take that figure. A model whose
    measurement failed keeps its earlier figures, and is not recorded: the next run measures it again."""
    todo = [p for p in models if published is None or published.figure(remeasured_key(policy, p.sha256)) is None]
    measured = {}
    if todo:
        with runner_factory(profile, log=log) as runner:
            for p in remeasure(todo, runner, objective, policy, log=log):
                measured[p.candidate.arch.id] = p
                m = p.candidate.measurement
                if published is not None and m.final_measurement_error is None:
                    published.add(remeasured_key(policy, p.sha256), m)
    return [measured.get(p.candidate.arch.id) or replace(p, candidate=replace(
                p.candidate, measurement=published.take(remeasured_key(policy, p.sha256)), source="final"),
                remeasured=policy)
            for p in models]


def _contenders(evaluated: list[Candidate], stand_ins: dict[str, Architecture], settings, measure_new: bool
                ) -> list[Candidate]:
    """The stand-ins to measure beside the front: each the search measured within the budgets, and with
    ``measure_new`` each it has no figure of (not seeded: more of them than the first generation's share;
    or only predicted), as a candidate not measured yet. A search that measured one outside the budgets,
    or failed to, does not publish it (its point is measured afresh)."""
    found = {c.arch.id: c for c in evaluated if c.arch.id in stand_ins}
    figure = WORKLOADS[settings.objective].figure
    out = []
    for arch_id, arch in stand_ins.items():
        c = found.get(arch_id)
        if c is not None and c.ok and not c.predicted:
            if not settings.budgets.violations(c.params.decoder_params, c.latency_ms, c.memory_mb):
                out.append(c)
        elif measure_new and (c is None or c.predicted):
            out.append(Candidate(arch, count_params(arch), Measurement.failure("not measured by the search"),
                                 "measured", -1, figure))
    return out


def _within_cap(contenders: list[Candidate], limit: int | None, bundles: int) -> list[Candidate]:
    """The contenders that fit under ``limit`` bundles beside ``bundles`` already kept (all without a limit),
    spread over the baseline's points."""
    if limit is None:
        return list(contenders)
    room = max(limit - bundles, 0)
    return spread(contenders, room) if room else []


def _baseline(settings, profile: DeviceProfile, runner_factory, log, store, outdir: OutputDir,
              front: list[PublishedModel], fresh_seeds: list[Candidate], published: PublishLog | None,
              unbundled: list[Architecture] = ()) -> tuple[list[Candidate], list[Candidate | None]]:
    """Each baseline point's baseline model and its stand-in, in the order of its layers. Inside the space
    they are one block, measured once: the stand-in's figure where publishing measured it beside the
    front (``fresh_seeds``). Outside it, the stand-in's figure (None where publishing measured none),
    and the baseline model itself. Every baseline model without a stand-in figure is measured afresh
    (never from the store), with the embedding settings of the frontier model it is compared with, as
    the front was re-measured: the objective's workload at the profile's policy, the others coarsely:
    only the objective is compared, and in a decode search the prefill timed in full was most of the
    baseline's time. So is each stand-in outside the space that ``--max-bundles`` left without a bundle
    (``unbundled``): it is compared from its figures, no file of it kept. A figure ``published`` holds
    (an earlier run of this search took it) is taken instead of measuring."""
    fresh = {c.arch.id: c for c in fresh_seeds}
    shapes = stand_ins(settings.baseline, settings.space)
    points = [stacked(settings.baseline, n, settings.space) for n in settings.baseline.layers]
    inside = [s is not None and not shape_changes(p, s) for p, s in zip(points, shapes)]
    own = baseline_architectures(settings.baseline, settings.space, [p.candidate for p in front], settings.merit)
    spare = {a.id for a in unbundled}
    todo = [a for a, s, held in zip(own, shapes, inside) if not (held and s.id in fresh)]
    todo += [s for s, held in zip(shapes, inside) if s is not None and not held and s.id in spare]
    measured = _measured_afresh(todo, settings, profile, runner_factory, log, store, outdir, published)
    chosen = [fresh[s.id] if held and s.id in fresh else measured[a.id] for a, s, held in zip(own, shapes, inside)]
    stand = [None if s is None else fresh.get(s.id) or measured.get(s.id) for s in shapes]
    return chosen, [c if held else s for c, s, held in zip(chosen, stand, inside)]


def _measured_afresh(archs: list[Architecture], settings, profile: DeviceProfile, runner_factory, log, store,
                     outdir: OutputDir, published: PublishLog | None) -> dict[str, Candidate]:
    """Each of ``archs`` by id, measured as ``_baseline`` says (in a scratch file, never from the store), or
    the figure ``published`` holds of it."""
    figure = WORKLOADS[settings.objective].figure
    out: dict[str, Candidate] = {}
    for arch in archs:
        m = published.take(baseline_key(arch.id)) if published is not None and arch.id not in out else None
        if m is not None:
            out[arch.id] = Candidate(arch, count_params(arch), m, "measured", -1, figure)
    todo = [a for a in archs if a.id not in out]
    if not todo:
        return out
    with runner_factory(profile, log=log) as runner:
        evaluator = CandidateEvaluator(profile, runner, store, outdir, Budgets(), export=settings.export_options,
                                       fresh=True, objective=settings.objective, coarse_others=True)
        measured = {c.arch.id: c for c in evaluator.evaluate(todo, generation=-1)}
    for c in measured.values():
        if published is not None and c.ok:
            published.add(baseline_key(c.arch.id), c.measurement)
    return out | measured
