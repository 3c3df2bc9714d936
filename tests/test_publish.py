"""Publishing the frontier: the front thinned to the resolution, every model kept re-measured from its file
at the device profile's policy, only the undecided ones again strictly, the front recomputed on the final
figures, the cost of each pass kept."""

from __future__ import annotations

import csv
import json
import random
from types import SimpleNamespace

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.exporters import architecture_of
from ltsedge.proxy import count_params
from ltsedge.runners.measurement import Measurement
from ltsedge.runners.policy import Calibration
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.budgets import Budgets
from ltsedge.search.candidate import Candidate
from ltsedge.search.finish import finish
from ltsedge.search.frontier import PublishedModel, undecided
from ltsedge.search.outdir import OutputDir
from ltsedge.search.pareto import cap, pareto_front, thin
from ltsedge.search.baseline import stacked
from ltsedge.store import MeasurementStore
from tests.helpers import random_tiny_archs

HALF_WIDTH = 0.01  # every fake figure's interval: +-1%


def figure(latency: float, memory: float, half_width: float = HALF_WIDTH) -> Measurement:
    """A decode measurement with an interval, as the worker writes one."""
    low, high = latency * (1 - half_width), latency * (1 + half_width)
    decode = {"latency_ms": latency, "latency_low_ms": low, "latency_high_ms": high, "latency_ratio": latency}
    return Measurement(ok=True, workload="decode", latency_ms=latency, decode_latency_ms=latency, latency_low_ms=low,
                       latency_high_ms=high, peak_memory_mb=memory, workloads={"decode": decode})


def published(points: list[tuple[float, float]]) -> list[PublishedModel]:
    """Models with strictly increasing decoder parameters and the given (decode ms, MB)."""
    archs = sorted(random_tiny_archs(len(points) * 3, seed=5), key=lambda a: count_params(a).decoder_params)
    chosen, last = [], -1
    for a in archs:  # distinct parameter counts
        if count_params(a).decoder_params > last and len(chosen) < len(points):
            chosen.append(a)
            last = count_params(a).decoder_params
    assert len(chosen) == len(points)
    return [PublishedModel(Candidate(a, count_params(a), figure(*p), "final", 1, "decode_latency_ms"), None, "")
            for a, p in zip(chosen, points)]


def ids(models, *which) -> set[str]:
    return {models[i].candidate.arch.id for i in which}


def test_models_whose_dominance_their_intervals_cannot_tell_are_undecided():
    models = published([(1.0, 10), (2.0, 20), (3.0, 15), (3.02, 14), (9.0, 30)])
    # 2 has more parameters and less memory than 1: it would dominate 1 at <= 1.0 ms; 2.0 is far from it
    # (decided). 3 vs 2: 3.0 far from 2.0 (decided). 3 vs 4: 4 has more parameters, less memory and a
    # latency within 3's interval: undecided. 4 (9.0 ms, 30 MB) has more memory than all: nothing to decide.
    assert undecided(models, Budgets(), "decode") == ids(models, 2, 3)


def test_incomparable_models_need_no_precision_however_close_their_latency():
    models = published([(2.0, 10), (2.0, 20), (2.001, 30)])  # more parameters, more memory: no dominance
    assert undecided(models, Budgets(), "decode") == set()


def test_a_model_straddling_the_latency_budget_or_without_an_interval_is_undecided():
    models = published([(1.0, 10), (5.0, 20), (7.0, 30)])
    assert undecided(models, Budgets(max_latency_ms=5.02), "decode") == ids(models, 1)
    no_interval = models[2].candidate.measurement
    del no_interval.workloads["decode"]["latency_low_ms"]
    no_interval.latency_low_ms = None
    assert undecided(models, Budgets(), "decode") == ids(models, 2)


class FakeMachine:
    """A runner whose figures come from a table by architecture id: one table at the profile's policy,
    another at the strict one (told apart by the profile's tolerance)."""

    search_figures: dict[str, tuple[float, float]] = {}
    strict_figures: dict[str, tuple[float, float]] = {}
    measured: list[tuple[str, str]] = []  # (policy, id), in order
    search_tolerance = 0.0  # the profile's policy; a smaller tolerance is the strict one
    default_figure: tuple[float, float] | None = None  # for a model in neither table (a baseline model)
    figure_of = None  # else, where set: (decode ms, MB) of any architecture, a machine's law

    def __init__(self, profile, log=None, **_):
        self.profile = profile
        self.policy = "strict" if profile.tolerance < FakeMachine.search_tolerance else "profile"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def fingerprint(self):
        return {"cpu_model": "fake machine", "onnxruntime": "1.0"}

    def calibrate(self):
        return Calibration(1.0, 0.0)

    def measure_many(self, models, race=None, on_result=None, **_):
        out = []
        for i, path in enumerate(models):
            arch_id = architecture_of(path).id
            # the objective in full, others coarse
            assert race(i).workload == "decode" and race(i).front == () and race(i).coarse_others
            FakeMachine.measured.append((self.policy, arch_id))
            table = FakeMachine.strict_figures if self.policy == "strict" else FakeMachine.search_figures
            law = FakeMachine.figure_of
            fallback = law(architecture_of(path)) if law else FakeMachine.default_figure
            out.append(figure(*table.get(arch_id, fallback)))
        return out


def finish_with_a_new_baseline(front, settings, profile, tmp_path, baseline_figure, evaluated=None, published=None):
    """``finish`` on the fake machine: the front re-measured at its search figures, every baseline model new
    (the search measured no seed; else ``evaluated``: all it measured) and measured at ``baseline_figure``
    (decode ms, MB); ``published``: the run's publish log."""
    FakeMachine.search_figures = {c.arch.id: (c.latency_ms, c.memory_mb) for c in front}
    FakeMachine.strict_figures, FakeMachine.default_figure = {}, baseline_figure
    FakeMachine.measured, FakeMachine.search_tolerance = [], profile.tolerance
    try:
        with MeasurementStore(tmp_path / "s.sqlite") as store, OutputDir(tmp_path / "out") as outdir:
            return finish(front, settings, profile, store, outdir, runner_factory=FakeMachine, log=lambda m: None,
                          evaluated=front if evaluated is None else evaluated, published=published)
    finally:
        FakeMachine.default_figure = None


def test_finish_re_measures_every_front_model_then_only_the_undecided_strictly(tmp_path):
    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, baseline=False, resolution=0))
    assert settings.objective == "decode"
    # The search's figures (biased low) put four models on its front; afresh: 0 and 1 far apart, 2 and 3
    # within each other's interval; strictly, 3 beats 2.
    front = [p.candidate for p in published([(1.0, 10), (2.0, 20), (3.0, 15), (3.1, 14)])]
    a = [c.arch.id for c in front]
    FakeMachine.search_figures = {a[0]: (1.1, 10), a[1]: (2.2, 20), a[2]: (3.3, 15), a[3]: (3.32, 14)}
    FakeMachine.strict_figures = {a[2]: (3.3, 15), a[3]: (3.2, 14)}
    FakeMachine.measured, FakeMachine.search_tolerance = [], profile.tolerance
    with MeasurementStore(tmp_path / "s.sqlite") as store, OutputDir(tmp_path / "out") as outdir:
        done = finish(front, settings, profile, store, outdir, runner_factory=FakeMachine, log=lambda m: None)
        assert FakeMachine.measured == [("profile", i) for i in a] + [("strict", a[2]), ("strict", a[3])]
        kept = {p.candidate.arch.id: p for p in done.frontier}
        assert set(kept) == {a[0], a[1], a[3]}  # 2 dominated once measured strictly: its bundle removed
        assert not (tmp_path / "out" / "models" / a[2]).exists()
        assert (tmp_path / "out" / "models" / a[3] / "model.onnx").is_file()
        assert [kept[i].remeasured for i in (a[0], a[1], a[3])] == ["profile", "profile", "strict"]
        assert kept[a[0]].candidate.latency_ms == 1.1 and kept[a[3]].candidate.latency_ms == 3.2  # fresh figures
        cost = done.cost
        assert (cost.front, cost.thinned, cost.strict, cost.published) == (4, 4, 2, 3)
        assert min(cost.export_seconds, cost.remeasure_seconds, cost.strict_seconds) >= 0


def test_finish_exports_and_measures_only_the_thinned_front(tmp_path):
    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, baseline=False))
    assert settings.resolution == 0.1  # the default
    # 2 has 2% more decoder parameters than 1, less memory and a latency within 10% of 1's: 1 is left out.
    front = [p.candidate for p in published([(1.0, 10), (2.0, 20), (2.05, 19.5), (5.0, 30)])]
    a = [c.arch.id for c in front]
    assert 1 < front[2].params.decoder_params / front[1].params.decoder_params < 1.1
    FakeMachine.search_figures = {i: (c.latency_ms, c.memory_mb) for i, c in zip(a, front)}
    FakeMachine.strict_figures = {}
    FakeMachine.measured, FakeMachine.search_tolerance = [], profile.tolerance
    with MeasurementStore(tmp_path / "s.sqlite") as store, OutputDir(tmp_path / "out") as outdir:
        done = finish(front, settings, profile, store, outdir, runner_factory=FakeMachine, log=lambda m: None)
    assert FakeMachine.measured == [("profile", a[0]), ("profile", a[2]), ("profile", a[3])]
    assert not (tmp_path / "out" / "models" / a[1]).exists()
    assert [p.candidate.arch.id for p in done.frontier] == [a[0], a[2], a[3]]
    assert (done.cost.front, done.cost.thinned, done.cost.strict, done.cost.published) == (4, 3, 0, 3)


def test_max_bundles_caps_what_is_written_and_says_what_it_left_out(tmp_path):
    """A 3-objective front of 233 models wrote 44 GB: --max-bundles bounds it, spread over the parameters."""
    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, baseline=False, resolution=0, max_bundles=3))
    front = [p.candidate for p in published([(1.0, 10), (2.0, 20), (3.0, 15), (4.0, 14), (5.0, 13)])]
    a = [c.arch.id for c in front]
    FakeMachine.search_figures = {i: (c.latency_ms, c.memory_mb) for i, c in zip(a, front)}
    FakeMachine.strict_figures = {}
    FakeMachine.measured, FakeMachine.search_tolerance = [], profile.tolerance
    with MeasurementStore(tmp_path / "s.sqlite") as store, OutputDir(tmp_path / "out") as outdir:
        done = finish(front, settings, profile, store, outdir, runner_factory=FakeMachine, log=lambda m: None)
    assert [p.candidate.arch.id for p in done.frontier] == [a[0], a[2], a[4]]  # the first, the middle, the last
    assert sorted(i for _, i in FakeMachine.measured) == sorted([a[0], a[2], a[4]])  # the rest: not even measured
    assert sorted(p.name for p in (tmp_path / "out" / "models").iterdir()) == sorted([a[0], a[2], a[4]])
    assert (done.cost.thinned, done.cost.capped, done.cost.published) == (3, 2, 3)


def test_the_cap_keeps_the_baseline_comparison_s_models_first():
    front = [SimpleNamespace(**{**vars(point(p, 10.0 - p, 10.0)), "arch": SimpleNamespace(id=f"m{p}")})
             for p in range(1, 9)]
    keep = {front[1].arch.id, front[2].arch.id}
    assert [c.arch.id for c in cap(front, 3, keep)] == [front[1].arch.id, front[2].arch.id, front[7].arch.id]
    assert [c.arch.id for c in cap(front, 1, keep)] == [front[2].arch.id]  # over the cap alone: spread
    assert cap(front, None, keep) == front and cap(front, 8, keep) == front
    with pytest.raises(LtsedgeError, match="--max-bundles 0 is out of range"):
        resolve(SearchOptions(preset="smoke", max_bundles=0))


def test_seeded_baseline_models_off_the_front_are_re_measured_beside_it_and_judge_the_comparison(tmp_path):
    """The quick preset once read 0.89x at its 1-layer point: the seeded baseline model had been left off
    the front by its search figure, and the baseline, measured later, came out faster than the front
    model it was compared with. Both seeded models are now re-measured with the front: the one that is
    fast afresh is published, the one a front model dominates afresh is compared on that fresh figure."""
    from ltsedge.search.baseline import seeds_in_space

    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, resolution=0))
    seeds = seeds_in_space(settings.baseline, settings.space, 2)
    assert [a.n_layer for a in seeds] == [1, 2] == list(settings.baseline.layers)
    most = max(count_params(a).decoder_params for a in seeds)
    big = sorted([a for a in random_tiny_archs(60, seed=3) if count_params(a).decoder_params > most][:2],
                 key=lambda a: count_params(a).decoder_params)
    assert count_params(big[0]).decoder_params < count_params(big[1]).decoder_params
    front = [Candidate(a, count_params(a), figure(2.0 + i, 30.0 + i), "measured", 1, "decode_latency_ms")
             for i, a in enumerate(big)]
    # The search measured both seeds slower than the front, so they are not on it.
    evaluated = front + [Candidate(a, count_params(a), figure(5.0, 40.0), "measured", 0, "decode_latency_ms")
                         for a in seeds]
    one, two = (a.id for a in seeds)
    FakeMachine.search_figures = {big[0].id: (2.0, 30.0), big[1].id: (3.0, 31.0), one: (1.0, 10.0), two: (4.0, 35.0)}
    FakeMachine.strict_figures = {}
    FakeMachine.measured, FakeMachine.search_tolerance = [], profile.tolerance
    with MeasurementStore(tmp_path / "s.sqlite") as store, OutputDir(tmp_path / "out") as outdir:
        done = finish(front, settings, profile, store, outdir, runner_factory=FakeMachine, log=lambda m: None,
                      evaluated=evaluated)
    assert sorted(FakeMachine.measured) == sorted(("profile", i) for i in (big[0].id, big[1].id, one, two))
    assert {p.candidate.arch.id for p in done.frontier} == {one, big[0].id, big[1].id}  # big[0] dominates two
    assert not (tmp_path / "out" / "models" / two).exists()
    rows = {r["n_layer"]: r for r in done.baseline}
    assert rows[1]["baseline_id"] == rows[1]["frontier_id"] == one and rows[1]["speedup"] == 1.0
    assert rows[2]["baseline_id"] == two and rows[2]["frontier_id"] == big[0].id
    assert rows[2]["speedup"] == pytest.approx(4.0 / 2.0)  # fresh figures of both, from one pass
    assert (done.cost.thinned, done.cost.contenders, done.cost.published) == (2, 2, 3)


def test_max_bundles_bounds_every_bundle_written_the_baseline_s_stand_ins_included(tmp_path):
    """`--max-bundles 1` on the smoke preset wrote 3 bundles: the seeded baseline models the cap left out came
    back as contenders beside the front (llama-edge's 15 points: up to 15 over the cap). The cap now bounds
    what is written; a baseline point whose stand-in has no bundle is compared from its figures, measured
    afresh as the baseline is."""
    from ltsedge.search.baseline import baseline_architectures, seeds_in_space

    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, resolution=0, max_bundles=1))
    seeds = seeds_in_space(settings.baseline, settings.space, 2)
    most = max(count_params(a).decoder_params for a in seeds)
    big = sorted([a for a in random_tiny_archs(60, seed=3) if count_params(a).decoder_params > most][:2],
                 key=lambda a: count_params(a).decoder_params)
    front = [Candidate(a, count_params(a), figure(2.0 + i, 30.0 + i), "measured", 1, "decode_latency_ms")
             for i, a in enumerate(big)]
    evaluated = front + [Candidate(a, count_params(a), figure(5.0, 40.0), "measured", 0, "decode_latency_ms")
                         for a in seeds]
    FakeMachine.figure_of = lambda a: (1.0 + count_params(a).decoder_params / 1e4, 10.0)
    try:
        done = finish_with_a_new_baseline(front, settings, profile, tmp_path, None, evaluated=evaluated)
    finally:
        FakeMachine.figure_of = None
    assert [p.name for p in (tmp_path / "out" / "models").iterdir()] == [big[0].id]  # the comparison's match
    assert (done.cost.thinned, done.cost.capped, done.cost.contenders, done.cost.published) == (1, 1, 0, 1)
    own = baseline_architectures(settings.baseline, settings.space, [p.candidate for p in done.frontier])
    assert {("profile", a.id) for a in own} <= set(FakeMachine.measured)  # measured afresh, no file kept
    assert [r["baseline_id"] for r in done.baseline] == [r["stand_in_id"] for r in done.baseline] == [a.id for a in own]
    assert all(r["frontier_id"] == big[0].id and r["speedup"] == pytest.approx(r["latency_ms"] / 2.0)
               for r in done.baseline)


def test_a_stand_in_outside_the_space_the_cap_leaves_without_a_bundle_is_compared_from_its_figures(tmp_path):
    """Outside the space the stand-in is a model of its own: beyond the cap it is measured beside the
    baseline's own block, in a scratch file, and both comparisons are reported."""
    from ltsedge.search.baseline import seeds_in_space

    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, baseline_n_head=8, max_bundles=1))
    shapes = seeds_in_space(settings.baseline, settings.space, 2)
    archs = {a.id: a for a in settings.space.sample(40, seed=2) + shapes}.values()
    measured = [Candidate(a, count_params(a), figure(*(0.9 * v for v in machine_law(a))), "measured", 1,
                          "decode_latency_ms") for a in archs]
    front = pareto_front(measured, Budgets())
    FakeMachine.figure_of = machine_law
    try:
        done = finish_with_a_new_baseline(front, settings, profile, tmp_path, None, evaluated=measured)
    finally:
        FakeMachine.figure_of = None
    assert len(list((tmp_path / "out" / "models").iterdir())) == 1 == done.cost.published
    assert [r["stand_in_id"] for r in done.baseline] == [a.id for a in shapes]
    assert {("profile", a.id) for a in shapes} <= set(FakeMachine.measured)  # the one without a bundle too
    kept = done.frontier[0].candidate
    assert all(r["stand_in_latency_ms"] is not None for r in done.baseline)
    assert all(r["stand_in_speedup"] == pytest.approx(r["stand_in_latency_ms"] / kept.latency_ms)
               for r in done.baseline if r["stand_in_frontier_id"] is not None)


def test_the_baseline_is_measured_as_the_front_was_the_objective_in_full_the_others_coarsely(tmp_path):
    """Only the objective is compared with the front, which publishing re-measured with its other workloads
    coarse; a baseline prefill timed in full was most of the baseline's time in the study's decode search."""
    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, resolution=0, seed_baseline=False))
    tied = sorted({count_params(a).decoder_params: a for a in random_tiny_archs(40, seed=5) if not a.adaptive}.items())
    front = [Candidate(a, count_params(a), figure(1.0 + i, 10.0 + i), "measured", 1, "decode_latency_ms")
             for i, (_, a) in enumerate(tied[-2:])]  # the baseline takes no embedding settings from a tied model
    done = finish_with_a_new_baseline(front, settings, profile, tmp_path, baseline_figure=(5.0, 40.0))
    baseline = {r["baseline_id"] for r in done.baseline}
    assert len(baseline) == len(settings.baseline.layers) == 2 and not baseline & {c.arch.id for c in front}
    assert {("profile", i) for i in baseline} <= set(FakeMachine.measured)  # through the race asserted above
    assert all(r["latency_ms"] == 5.0 for r in done.baseline)


def point(params: int, latency: float, memory: float):
    """A front model as pareto.py reads it (its architecture unread by the decoder-parameter merit)."""
    return SimpleNamespace(arch=None, params=SimpleNamespace(decoder_params=params), latency_ms=latency,
                           memory_mb=memory)


def within(kept, left_out, resolution: float) -> bool:
    factor = 1 + resolution
    return (kept.params.decoder_params * factor >= left_out.params.decoder_params
            and kept.latency_ms <= left_out.latency_ms * factor and kept.memory_mb <= left_out.memory_mb * factor)


@pytest.mark.parametrize("seed", range(5))
def test_every_front_model_left_out_has_a_kept_one_within_the_resolution(seed):
    rng = random.Random(seed)
    # A dense 3-objective front: latency and memory grow with parameters, with scatter.
    cloud = [point(p, p ** 0.8 * rng.uniform(0.7, 1.3), 100 + p ** 0.5 * rng.uniform(0.7, 1.3))
             for p in (rng.randrange(10**5, 2 * 10**7) for _ in range(400))]
    front = pareto_front([SimpleNamespace(ok=True, **vars(c)) for c in cloud], Budgets())
    for resolution in (0.02, 0.1, 0.3):
        kept = thin(front, resolution)
        assert kept == sorted(kept, key=lambda c: c.params.decoder_params) and set(map(id, kept)) <= set(map(id, front))
        assert all(any(within(k, c, resolution) for k in kept) for c in front)
        assert all(not within(k, c, resolution) for k in kept for c in kept if k is not c
                   and k.params.decoder_params > c.params.decoder_params)  # none kept that an earlier one covers
    assert len(thin(front, 0.3)) < len(thin(front, 0.1)) < len(thin(front, 0.02)) < len(front)
    assert thin(front, 0) == front


def test_thinning_keeps_the_largest_of_near_equals_and_every_model_far_from_the_others():
    a, b, c = point(100, 10.0, 50.0), point(105, 10.5, 51.0), point(300, 30.0, 90.0)
    assert thin([a, b, c], 0.1) == [b, c]  # b: more parameters, within 10% of a in latency and memory
    assert thin([a, b, c], 0.01) == [a, b, c]
    faster = point(100, 8.0, 50.0)  # 20% faster than b: b does not cover it
    assert thin([faster, b, c], 0.1) == [faster, b, c]


def test_the_baseline_models_on_the_front_are_never_thinned_away():
    """The report compares each baseline model with the fastest published model with at least its
    parameters: a baseline model the search kept on its front must be published, or the comparison
    shows a neighbour up to the resolution slower (the quick preset's 3-layer point read 0.94x)."""
    a, b, c = point(100, 10.0, 50.0), point(105, 10.5, 51.0), point(300, 30.0, 90.0)
    for p, name in ((a, "a"), (b, "b"), (c, "c")):
        p.arch = SimpleNamespace(id=name)
    assert thin([a, b, c], 0.1) == [b, c]
    assert thin([a, b, c], 0.1, keep={"a"}) == [a, c]  # a kept first; it covers b within 10%
    assert thin([a, b, c], 0.1, keep={"b"}) == [b, c]


@pytest.mark.slow
def test_a_search_says_how_each_published_figure_was_measured(tmp_path):
    from ltsedge.search.loop import SearchRun

    out = tmp_path / "out"
    options = SearchOptions(preset="smoke", out=out, population=8, generations=2, seed=1,
                            store_path=tmp_path / "s.sqlite", quiet=True, baseline=False)
    settings, profile = resolve(options)
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, out, store, log=lambda m: None).run()
    rows = list(csv.DictReader((out / "frontier.csv").open()))
    assert rows and {r["remeasured"] for r in rows} <= {"profile", "strict"}
    summary = json.loads((out / "search.json").read_text())["publish"]
    strict_ids = {r["id"] for r in rows if r["remeasured"] == "strict"}
    assert summary["published"] == len(rows) == len(result.frontier)
    assert len(strict_ids) <= summary["strict"] <= summary["front"]
    assert summary["remeasure_seconds"] > 0 and (summary["strict_seconds"] > 0) == (summary["strict"] > 0)


def test_the_front_model_each_baseline_point_is_compared_with_is_never_thinned_away(tmp_path):
    """The study's search here compared its 3-layer baseline point with a published model 7% slower than the
    fastest front model with at least its decoder parameters: thinning had let a larger neighbour within
    10% stand for it. Publishing now keeps, for each baseline point, the model the comparison will pick."""
    from ltsedge.search.baseline import baseline_architectures

    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True))
    assert settings.resolution == 0.1
    most = max(count_params(a).decoder_params for a in baseline_architectures(settings.baseline, settings.space))
    bigger = sorted({count_params(a).decoder_params: a for a in random_tiny_archs(200, seed=7)
                     if not a.adaptive and count_params(a).decoder_params > most}.items())
    # Two models above every baseline point, under 10% apart in decoder parameters.
    (_, fast), (_, big) = next((x, y) for x, y in zip(bigger, bigger[1:]) if y[0] < 1.1 * x[0])
    front = [Candidate(fast, count_params(fast), figure(2.0, 30.0), "measured", 1, "decode_latency_ms"),
             Candidate(big, count_params(big), figure(2.15, 29.5), "measured", 1, "decode_latency_ms")]
    assert pareto_front(front, Budgets()) == front  # both on the front
    assert [c.arch.id for c in thin(front, 0.1)] == [big.id]  # the larger covers the faster within 10%
    done = finish_with_a_new_baseline(front, settings, profile, tmp_path, baseline_figure=(3.0, 40.0))
    # Kept first, the faster model now covers the larger one within 10%: it is published in its place.
    assert [p.candidate.arch.id for p in done.frontier] == [fast.id]
    assert (done.cost.front, done.cost.thinned) == (2, 1)
    assert [r["frontier_id"] for r in done.baseline] == [fast.id] * len(settings.baseline.layers)
    assert all(r["speedup"] == pytest.approx(3.0 / 2.0) for r in done.baseline)


def smoke_with_a_baseline_outside_it(tmp_path, **baseline):
    """The smoke preset (n_head 2 or 4, d_model 32 or 64) against a baseline block it does not hold."""
    return resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite", quiet=True,
                                 **{f"baseline_{k}": v for k, v in baseline.items()}))


def block(d_model: int, d_inner: int):
    """One smoke-vocabulary layer of 4 heads."""
    from ltsedge.architecture import Architecture

    return Architecture(n_layer=1, d_model=d_model, n_head=[4], d_inner=[d_inner], vocab_size=512, n_positions=64)


def one_layer_baseline_outside_the_space(tmp_path):
    """The smoke search with a 1-layer baseline of 8 heads, 48 wide, FFN 100 (outside the smoke space), that
    baseline model and its stand-in in the space (64 wide, 4 heads, FFN 128)."""
    settings, profile = smoke_with_a_baseline_outside_it(tmp_path, d_model=48, d_inner=100, n_head=8, layers=1)
    return settings, profile, stacked(settings.baseline, 1, settings.space), block(64, 128)


def test_the_front_model_a_baseline_point_outside_the_space_is_compared_with_is_never_thinned_away(tmp_path):
    """A baseline model outside the space is judged on its stand-in (the space's nearest shape, here with
    more decoder parameters), against the fastest front model with at least the stand-in's: that model
    is kept whatever larger neighbour within the resolution would cover it."""
    settings, profile, baseline, stand_in = one_layer_baseline_outside_the_space(tmp_path)
    fast, x, y = block(48, 200), block(64, 160), block(64, 176)
    params = [count_params(a).decoder_params for a in (baseline, fast, stand_in, x, y)]
    assert params == sorted(params) and params[4] < 1.1 * params[3]  # y covers x within 10%
    front = [Candidate(a, count_params(a), figure(*f), "measured", 1, "decode_latency_ms")
             for a, f in ((fast, (1.0, 10.0)), (x, (3.0, 30.0)), (y, (3.2, 29.5)))]
    assert pareto_front(front, Budgets()) == front and [c.arch for c in thin(front, 0.1)] == [fast, y]
    done = finish_with_a_new_baseline(front, settings, profile, tmp_path, baseline_figure=(9.0, 90.0))
    assert {p.candidate.arch.id for p in done.frontier} == {fast.id, x.id}  # x kept first; it covers y
    (row,) = done.baseline
    assert row["stand_in"] == "d_model 48->64; n_head 8->4; d_inner 100->128"
    assert row["stand_in_decoder_params"] == params[2] and row["stand_in_frontier_id"] == x.id
    assert row["stand_in_speedup"] == 3.0
    # the study's own block, measured too, against the fastest front model with at least its parameters
    assert (row["baseline_id"], row["decoder_params"], row["frontier_id"]) == (baseline.id, params[0], fast.id)
    assert row["speedup"] == 9.0 and ("profile", baseline.id) in FakeMachine.measured


def machine_law(arch) -> tuple[float, float]:
    """A deterministic machine on which 8 heads run twice as fast as fewer, at equal decoder parameters."""
    params = count_params(arch).decoder_params
    return params / 1e4 * (0.5 if min(arch.n_head) >= 8 else 1.0), 10 + params / 1e4


@pytest.mark.parametrize("search_measured_them", [True, False])
def test_a_front_never_loses_to_a_baseline_it_could_not_hold(tmp_path, search_measured_them):
    """The study's GPT-2 search published a front slower than the layer-scaled baseline at 15 of 16 points:
    the baseline's 16 heads are outside its space, so no baseline model was seeded, and each was timed
    afresh. Each point is now judged on its stand-in in the space, measured beside the front (the search
    had measured it, or not: not seeded, only predicted), so the front can only tie or beat it, even on a
    machine where the baseline's own block, which the space cannot hold, runs faster."""
    from ltsedge.search.baseline import baseline_architectures, seeds_in_space

    settings, profile = smoke_with_a_baseline_outside_it(tmp_path, n_head=8)
    shapes = seeds_in_space(settings.baseline, settings.space, 2)
    archs = {a.id: a for a in settings.space.sample(40, seed=2) + shapes}.values()
    # the search's figures of everything it measured: 10% low (the winner's curse)
    measured = [Candidate(a, count_params(a), figure(*(0.9 * v for v in machine_law(a))), "measured", 1,
                          "decode_latency_ms") for a in archs if search_measured_them or a not in shapes]
    front = pareto_front(measured, Budgets())
    FakeMachine.figure_of = machine_law  # publishing's figures: the law itself
    try:
        done = finish_with_a_new_baseline(front, settings, profile, tmp_path, None, evaluated=measured)
    finally:
        FakeMachine.figure_of = None
    assert all(r["stand_in_frontier_id"] is not None and r["stand_in_speedup"] >= 1.0 for r in done.baseline)
    assert [(a.n_layer, a.n_head, a.d_model, a.d_inner) for a in shapes] == \
        [(1, (4,), 64, (128,)), (2, (4, 4), 64, (128, 128))]
    assert [r["stand_in"] for r in done.baseline] == ["n_head 8->4"] * 2
    assert [r["stand_in_id"] for r in done.baseline] == [a.id for a in shapes]
    assert {("profile", a.id) for a in shapes} <= set(FakeMachine.measured)  # beside the front
    # The baseline's own 8-head block (in its match's embedding) is reported as this machine runs it:
    # faster than the front can be.
    own = baseline_architectures(settings.baseline, settings.space, [p.candidate for p in done.frontier])
    assert [(a.n_layer, set(a.n_head)) for a in own] == [(1, {8}), (2, {8})]
    assert [r["baseline_id"] for r in done.baseline] == [a.id for a in own]
    assert {("profile", a.id) for a in own} <= set(FakeMachine.measured)
    assert [r["latency_ms"] for r in done.baseline] == [machine_law(a)[0] for a in own]
    assert all(r["frontier_id"] is not None and r["speedup"] < 1.0 for r in done.baseline)


def test_a_baseline_point_outside_the_space_reports_its_own_block_and_its_stand_in_each_on_its_own_match(tmp_path):
    """The study's baseline is never weakened: beside its stand-in in the space, the baseline model itself is
    measured afresh, and each is compared with the fastest front model with at least its own decoder
    parameters, kept through thinning: here a model a larger neighbour within the resolution would cover."""
    from ltsedge.search.baseline import stand_ins

    settings, profile, baseline, stand_in = one_layer_baseline_outside_the_space(tmp_path)
    small, near, big = block(48, 160), block(48, 176), block(64, 160)
    params = [count_params(a).decoder_params for a in (baseline, small, near, stand_in, big)]
    assert params == sorted(params) and params[2] < 1.1 * params[1]  # near covers small within 10%
    front = [Candidate(a, count_params(a), figure(*f), "measured", 1, "decode_latency_ms")
             for a, f in ((small, (2.0, 20.0)), (near, (2.1, 19.5)), (big, (3.0, 30.0)))]
    assert pareto_front(front, Budgets()) == front and [c.arch for c in thin(front, 0.1)] == [near, big]
    done = finish_with_a_new_baseline(front, settings, profile, tmp_path, baseline_figure=(9.0, 90.0))
    assert {p.candidate.arch.id for p in done.frontier} == {small.id, big.id}  # small kept first; it covers near
    (row,) = done.baseline
    assert FakeMachine.measured.count(("profile", baseline.id)) == 1  # afresh, as the front was
    assert {k: row[k] for k in ("baseline_id", "n_layer", "decoder_params", "latency_ms", "peak_memory_mb",
                                "frontier_id", "speedup", "memory_ratio")} == \
        {"baseline_id": baseline.id, "n_layer": 1, "decoder_params": params[0], "latency_ms": 9.0,
         "peak_memory_mb": 90.0, "frontier_id": small.id, "speedup": 4.5, "memory_ratio": 4.5}
    assert {k: row[f"stand_in_{k}"] for k in ("id", "decoder_params", "latency_ms", "frontier_id", "speedup",
                                              "memory_ratio")} == \
        {"id": stand_ins(settings.baseline, settings.space)[0].id, "decoder_params": params[3], "latency_ms": 9.0,
         "frontier_id": big.id, "speedup": 3.0, "memory_ratio": 3.0}


@pytest.mark.parametrize("seeded", [True, False])
def test_a_baseline_point_inside_the_space_is_its_own_stand_in_measured_once(tmp_path, seeded):
    """Where the space holds the baseline model, its stand-in is that model: measured once (beside the front
    as the search started from it, else afresh), and the baseline's columns and the stand-in's agree."""
    from ltsedge.search.baseline import shape_changes, stand_ins

    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, resolution=0, seed_baseline=seeded))
    shapes = stand_ins(settings.baseline, settings.space)  # the baseline's blocks, in the space's output layer
    assert [shape_changes(stacked(settings.baseline, a.n_layer, settings.space), a) for a in shapes] == ["", ""]
    big = max(random_tiny_archs(40, seed=3), key=lambda a: count_params(a).decoder_params)
    front = [Candidate(big, count_params(big), figure(2.0, 30.0), "measured", 1, "decode_latency_ms")]
    FakeMachine.figure_of = lambda a: (1.0 + count_params(a).decoder_params / 1e4, 10.0)  # 4.4 and 7.7 ms
    try:
        done = finish_with_a_new_baseline(front, settings, profile, tmp_path, None)
    finally:
        FakeMachine.figure_of = None
    baseline = [r["baseline_id"] for r in done.baseline]
    assert baseline == [r["stand_in_id"] for r in done.baseline]
    assert (baseline == [a.id for a in shapes]) == seeded  # else in its match's embedding settings
    assert sorted(FakeMachine.measured) == sorted([("profile", big.id)] + [("profile", i) for i in baseline])
    columns = ("decoder_params", "d_embed", "div_val", "latency_ms", "peak_memory_mb", "ok", "frontier_id",
               "frontier_decoder_params", "frontier_latency_ms", "frontier_peak_memory_mb", "speedup", "memory_ratio")
    assert all(r["stand_in"] == "" and all(r[k] == r[f"stand_in_{k}"] for k in columns) for r in done.baseline)
    assert all(r["frontier_id"] == big.id and r["speedup"] == r["latency_ms"] / 2.0 > 1 for r in done.baseline)


def test_a_rerun_publishes_the_baseline_s_own_block_and_its_stand_in_from_the_figures_it_took(tmp_path):
    """A re-run of a finished search measures nothing: the baseline model measured afresh beside the front
    (outside the space) is kept in published.jsonl with the rest of publishing's figures."""
    from ltsedge.search.publish_log import PublishLog, baseline_key

    settings, profile = smoke_with_a_baseline_outside_it(tmp_path, n_head=8)
    big = max(random_tiny_archs(40, seed=3), key=lambda a: count_params(a).decoder_params)
    front = [Candidate(big, count_params(big), figure(2.0, 30.0), "measured", 1, "decode_latency_ms")]
    (tmp_path / "out").mkdir()
    first = finish_with_a_new_baseline(front, settings, profile, tmp_path, (5.0, 40.0),
                                       published=PublishLog(tmp_path / "out", "run"))
    own = [stacked(settings.baseline, n, settings.space) for n in settings.baseline.layers]
    assert {("profile", a.id) for a in own} <= set(FakeMachine.measured)
    log = PublishLog(tmp_path / "out", "run")
    assert all(log.figure(baseline_key(a.id)) is not None for a in own)
    again = finish_with_a_new_baseline(front, settings, profile, tmp_path, (7.0, 50.0), published=log)
    assert FakeMachine.measured == [] and again.cost.reused > 0
    assert again.baseline == first.baseline and all(r["stand_in"] for r in again.baseline)


def test_baseline_csv_search_json_the_report_and_the_summary_show_the_baseline_s_own_block_beside_its_stand_in(
        tmp_path):
    """Every output that shows the baseline shows both comparisons of a point outside the space, each figure as
    it was measured: here the baseline's own block is the faster, and its speedup the lower."""
    from rich.console import Console

    from ltsedge.report import write_report
    from ltsedge.search.loop import SearchResult
    from ltsedge.search.outputs import write_outputs
    from ltsedge.search.summary import print_summary

    settings, profile = smoke_with_a_baseline_outside_it(tmp_path, n_head=8)
    big = max(random_tiny_archs(40, seed=3), key=lambda a: count_params(a).decoder_params)
    front = [Candidate(big, count_params(big), figure(2.0, 30.0), "measured", 1, "decode_latency_ms")]
    FakeMachine.figure_of = machine_law  # the baseline's 8 heads twice as fast as its stand-in's 4
    try:
        done = finish_with_a_new_baseline(front, settings, profile, tmp_path, None)
    finally:
        FakeMachine.figure_of = None
    summary = {"settings": {"objective": "decode"}, "device": {"name": "fake"}, "fingerprint": {},
               "generations_completed": 1, "wall_seconds": 1.0,
               "evaluation": {"measured": 1, "cached": 0, "predicted": 0, "failed": 0, "skipped": 0}}
    out = tmp_path / "out"
    result = SearchResult(out, done.frontier, front, done.baseline, summary, settings.budgets)
    write_outputs(result)
    rows = list(csv.DictReader((out / "baseline.csv").open()))
    assert [r["stand_in"] for r in rows] == ["n_head 8->4"] * 2
    assert all(r["baseline_id"] != r["stand_in_id"] and r["frontier_id"] == r["stand_in_frontier_id"] == big.id
               for r in rows)
    assert all(float(r["speedup"]) < float(r["stand_in_speedup"]) for r in rows)  # each figure as it is
    assert json.loads((out / "search.json").read_text())["baseline_comparison"] == json.loads(
        json.dumps(done.baseline))
    console = Console(record=True, width=200)
    print_summary(result, console)
    printed = console.export_text()
    assert "vs the baseline's stand-ins in the space" in printed and "* outside the space" in printed
    assert all(f"{r[k]:.2f}x" in printed for r in done.baseline for k in ("speedup", "stand_in_speedup"))
    write_report(out, tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text()
    assert "its stand-ins in the space" in page and "n_head 8-&gt;4" in page
    assert all(f"{r[k]:.2f}×" in page for r in done.baseline for k in ("speedup", "stand_in_speedup"))
