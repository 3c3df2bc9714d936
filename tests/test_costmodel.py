"""The device's cost model: counts, the fit and its interval, samples only from this machine, what a
search measures and predicts with it, and ``ltsedge predict`` / ``ltsedge costmodel``."""

from __future__ import annotations

import csv
import json
import math
import re
import shlex

import numpy as np
import pytest

from ltsedge.architecture import Architecture
from ltsedge.costmodel import MIN_SAMPLES, CostModel
from ltsedge.costmodel.features import Shapes, latency_features, memory_features
from ltsedge.costmodel.fit import RelativeLinearFit
from ltsedge.costmodel.samples import load_samples, remember
from ltsedge.devices import coarse, load_profile, strict
from ltsedge.devices.fingerprint import machine_fingerprint
from ltsedge.exporters import architecture_of, read_metadata
from ltsedge.exporters.options import ExportOptions
from ltsedge.keys import measurement_key, runtime_settings
from ltsedge.proxy import count_params
from ltsedge.runners.measurement import Measurement
from ltsedge.runners.policy import Calibration
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.budgets import Budgets
from ltsedge.search.presets import get_preset
from ltsedge.search.loop import SearchRun
from ltsedge.search.screening import MEASURE_SHARE, Screen, Verdict, audited, plan, promise
from ltsedge.store import MeasurementStore
from tests.helpers import ltsedge_cli, tiny_arch, tiny_space

PROFILE = load_profile("cpu").replace(sequence=16, context=16)


# --- counts --------------------------------------------------------------------------------------
def test_a_decode_step_reads_every_decoder_weight_once_and_the_whole_cache():
    arch = tiny_arch(n_layer=2, d_model=64)
    f = latency_features(arch, Shapes.of("decode", PROFILE))
    assert f["dense_macs"] == count_params(arch).decoder_params  # one token through every block
    assert f["cache_bytes"] == 2 * 4 * (16 + 1) * 64 * 2  # keys and values, fp32, context + the new token
    prefill = latency_features(arch, Shapes.of("prefill", PROFILE))
    assert prefill["dense_macs"] == 16 * f["dense_macs"] and prefill["weight_bytes"] == f["weight_bytes"]


def test_grouped_heads_are_counted_at_their_own_widths():
    """A layer caches n_kv_head x head size keys and values per token, and attends n_head x head size wide."""
    grouped = Architecture(backbone="llama", n_layer=2, d_model=64, n_head=[4, 8], n_kv_head=[2, 1], head_dim=32,
                           d_inner=[128, 128], vocab_size=500, n_positions=4096)
    app = load_profile("cpu").replace(sequence=512, context=2048)
    f = latency_features(grouped, Shapes.of("decode", app))
    assert f["cache_bytes"] == 2 * 4 * (2048 + 1) * (2 * 32 + 1 * 32)  # keys and values, fp32
    assert f["attention_macs"] == 2 * (2048 + 1) * (4 * 32 + 8 * 32)
    memory = memory_features(grouped, {w: Shapes.of(w, app) for w in ("prefill", "decode")})
    assert memory["cache_mb"] == 2 * 4 * (2048 + 1) * 96 / 2**20
    assert memory["activation_mb"] == 4 * 512 * (8 + 2 * 1) * 32 / 2**20  # queries, keys, values of layer 2
    # every query head with its own keys and values: the d_model-wide cache of the other backbones
    multi = Architecture.from_dict({**grouped.to_dict(), "n_kv_head": [4, 4], "head_dim": 16, "n_head": [4, 4]})
    assert latency_features(multi, Shapes.of("decode", app))["cache_bytes"] == 2 * 4 * (2048 + 1) * 64 * 2


def test_an_ffn_only_layer_has_no_attention_cost():
    standard = tiny_arch(n_layer=2, n_head=[2, 2], d_inner=[128, 128])
    par = tiny_arch(n_layer=2, n_head=[2, 2], d_inner=[128, 128], block_types=["attn_ffn", "ffn"])
    s, p = (latency_features(a, Shapes.of("prefill", PROFILE)) for a in (standard, par))
    assert p["attention_macs"] == s["attention_macs"] / 2 and p["heads"] == s["heads"] / 2
    assert p["dense_macs"] < s["dense_macs"]


def test_adaptive_embeddings_shrink_the_output_layer_and_memory_counts_it():
    plain = tiny_arch(d_model=64)
    adaptive = tiny_arch(d_model=64, d_embed=64, div_val=4)
    shapes = Shapes.of("prefill", PROFILE)
    assert latency_features(adaptive, shapes)["output_macs"] < latency_features(plain, shapes)["output_macs"]
    m = memory_features(plain, {"prefill": shapes})
    assert m["embedding_mb"] == 4 * count_params(plain).embedding_params / 2**20
    # the adaptive softmax's log-probabilities: logits-sized buffers a tied output does not hold, counted
    # apart for the one-table output (div_val 1: every logit at once, then split) and per-cluster tables
    a = memory_features(adaptive, {"prefill": shapes})
    split = memory_features(tiny_arch(d_model=64, d_embed=32, div_val=1), {"prefill": shapes})
    assert m["adaptive_split_logits_mb"] == m["adaptive_cluster_logits_mb"] == 0
    assert a["adaptive_split_logits_mb"] == 0 and a["adaptive_cluster_logits_mb"] == a["logits_mb"] == m["logits_mb"] > 0
    assert split["adaptive_cluster_logits_mb"] == 0 and split["adaptive_split_logits_mb"] == m["logits_mb"]


# --- the fit -------------------------------------------------------------------------------------
def synthetic(n: int, seed: int, noise: float = 0.03):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.uniform(1, 10, n), rng.uniform(0, 5, n)])
    y = X @ np.array([2.0, 0.5, 1.5]) * rng.lognormal(0.0, noise, n)
    return X, y


def test_the_fit_recovers_a_linear_cost_and_its_interval_covers_fresh_points():
    X, y = synthetic(60, seed=0)
    fit = RelativeLinearFit(X, y, ("a", "b", "c"), coverage=0.9)
    assert np.allclose(fit.weights, [2.0, 0.5, 1.5], rtol=0.15)
    assert fit.accuracy()["median_error"] < 0.04  # held out, near the 3% noise
    fresh_X, fresh_y = synthetic(400, seed=1)
    inside = [p.low <= t <= p.high for p, t in zip(map(fit.predict, fresh_X), fresh_y)]
    assert 0.82 <= np.mean(inside) <= 0.99  # the stated 90%, within sampling error of 60 calibration points


def test_weights_are_never_negative_even_where_noise_would_make_them_so():
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(30), rng.uniform(1, 10, 30), rng.uniform(1, 10, 30)])
    y = 1 + 0.3 * X[:, 1] + rng.normal(0, 0.05, 30)  # the last column costs nothing
    assert (RelativeLinearFit(X, y, ("a", "b", "c")).weights >= 0).all()


def test_a_point_outside_the_fitted_range_is_marked_and_its_interval_widened():
    X, y = synthetic(40, seed=2)
    fit = RelativeLinearFit(X, y, ("a", "b", "c"))
    inside, outside = fit.predict([1, 5, 2]), fit.predict([1, 50, 2])
    assert not inside.extrapolated and outside.extrapolated
    assert (outside.high / outside.value) - 1 > (inside.high / inside.value) - 1


def test_too_few_samples_make_no_model():
    X, y = synthetic(MIN_SAMPLES - 1, seed=0)
    with pytest.raises(ValueError, match="at least"):
        RelativeLinearFit(X, y, ("a", "b", "c"))


# --- samples: this machine, these settings, this export --------------------------------------------
def fake_figures(arch: Architecture, profile=PROFILE, noise: float = 0.0, seed: int = 0,
                 variant: str = "generate") -> Measurement:
    """A machine whose costs are exactly linear in the counts (plus optional noise)."""
    rng = np.random.default_rng(seed)
    ratios = {}
    workloads = ("prefill", "decode") if variant == "generate" else ("forward",)
    for name in workloads:
        f = latency_features(arch, Shapes.of(name, profile))
        ratios[name] = (0.05 + f["kernels"] * 1e-3 + f["dense_macs"] * 2e-7 + f["output_macs"] * 1e-7) \
            * rng.lognormal(0, noise)
    memory = memory_features(arch, {w: Shapes.of(w, profile) for w in workloads})
    mb = (5 + 1.3 * memory["decoder_mb"] + memory["embedding_mb"]) * rng.lognormal(0, noise)
    if variant != "generate":
        return Measurement(ok=True, latency_ms=ratios["forward"], latency_ratio=ratios["forward"], calibration_ms=1.0,
                           workload="forward", workloads={"forward": {"latency_ms": ratios["forward"],
                                                                      "latency_ratio": ratios["forward"]}},
                           peak_memory_mb=mb, runs=6, converged=True)
    return Measurement(ok=True, latency_ms=ratios["decode"], latency_ratio=ratios["decode"], calibration_ms=1.0,
                       workload="decode", decode_latency_ms=ratios["decode"], prefill_latency_ms=ratios["prefill"],
                       workloads={n: {"latency_ms": r, "latency_ratio": r} for n, r in ratios.items()},
                       peak_memory_mb=mb, runs=6, converged=True)


PLAIN_BUNDLES = ExportOptions(variant="generate", graph_form="plain")  # one form for every architecture


def put_sample(store, arch, fingerprint, profile=PROFILE, export=PLAIN_BUNDLES, **changes):
    key = measurement_key(export.model_key(arch), fingerprint, profile, variant="generate")
    store.put(*key, {**fake_figures(arch, profile).to_dict(), **changes}, fingerprint=fingerprint, settings={})
    remember(store, arch, key[0])


def test_samples_come_only_from_this_machine_these_settings_and_this_export(tmp_path):
    here, there = {"cpu_model": "here", "onnxruntime": "1.0"}, {"cpu_model": "there", "onnxruntime": "1.0"}
    archs = tiny_space().sample(12, seed=0)
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        for a in archs[:10]:
            put_sample(store, a, here)
        for a in archs[10:]:
            put_sample(store, a, there)
        put_sample(store, archs[0], here, PROFILE.replace(sequence=8))  # other settings
        found = load_samples(store, archs[0], here, PROFILE, PLAIN_BUNDLES)
        assert sorted(a.id for a, _ in found) == sorted(a.id for a in archs[:10])
        assert load_samples(store, archs[0], here, PROFILE, ExportOptions(variant="forward")) == []  # other export
        assert len(load_samples(store, archs[0], there, PROFILE, PLAIN_BUNDLES)) == 2


def test_a_search_predicts_each_candidate_from_the_figures_of_its_own_graph_form(tmp_path):
    """A GPT-2 bundle is fused or not by its heads (Backbone.generate_form): each form's figures are another
    model's samples, and the screen predicts a candidate with the cost model of its form."""
    here, default = {"cpu_model": "here", "onnxruntime": "1.0"}, ExportOptions(variant="generate")
    archs = tiny_space().sample(40, seed=3)
    form = {a.id: ":form=contrib:" in default.model_key(a) for a in archs}
    fused, plain = [a for a in archs if form[a.id]], [a for a in archs if not form[a.id]]
    assert len(fused) >= 3 and len(plain) >= 3
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        for a in archs:
            put_sample(store, a, here, export=default)
        for like, kind in ((fused[0], fused), (plain[0], plain)):
            assert sorted(a.id for a, _ in load_samples(store, like, here, PROFILE, default)) == \
                sorted(a.id for a in kind)
    models = {True: CostModel([(a, fake_figures(a)) for a in fused], PROFILE, "generate"),
              False: CostModel([(a, fake_figures(a)) for a in plain], PROFILE, "generate")}
    screen = Screen("decode", Budgets(), seed=0, audit_share=0.0)
    screen.use(lambda arch: models[form[arch.id]])
    assert all(screen.model_for(a) is models[form[a.id]] for a in archs)


def test_samples_are_of_every_export_option_the_search_measures_with(tmp_path):
    """The cost model loads its samples with the search's one ExportOptions whole: rebuilt from its variant,
    target and precision, it lost the options beyond them (here where the weights are), and a search exporting
    that way found none of its own figures."""
    here = {"cpu_model": "here", "onnxruntime": "1.0"}
    archs = tiny_space().sample(4, seed=5)
    external = ExportOptions(variant="generate", graph_form="plain", external_data=False)  # inline: not the default
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        for a in archs:
            key = measurement_key(external.model_key(a), here, PROFILE, variant="generate")
            store.put(*key, fake_figures(a, PROFILE).to_dict(), fingerprint=here, settings={})
            remember(store, a, key[0])
        assert sorted(a.id for a, _ in load_samples(store, archs[0], here, PROFILE, external)) == \
            sorted(a.id for a in archs)
        assert load_samples(store, archs[0], here, PROFILE, PLAIN_BUNDLES) == []


def test_samples_of_every_policy_of_the_profile_teach_one_model_one_figure_per_architecture(tmp_path):
    """A search timing coarsely learns from `ltsedge costmodel`'s figures (the profile's policy) and the
    other way round; an architecture measured at several policies is one sample: its most precise figure."""
    here = {"cpu_model": "here", "onnxruntime": "1.0"}
    archs = tiny_space().sample(6, seed=2)
    rough, careful = coarse(PROFILE), strict(PROFILE)
    assert PROFILE.settings_hash() not in (rough.settings_hash(), careful.settings_hash())
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        for a in archs[:2]:
            put_sample(store, a, here, PROFILE)
        for a in archs[2:4]:
            put_sample(store, a, here, rough)
        put_sample(store, archs[4], here, careful)
        put_sample(store, archs[0], here, rough, peak_memory_mb=1.0)  # also measured coarsely
        put_sample(store, archs[5], here, PROFILE.replace(tolerance=0.3))  # a policy ltsedge never uses
        found = load_samples(store, archs[0], here, PROFILE, PLAIN_BUNDLES)
        assert sorted(a.id for a, _ in found) == sorted(a.id for a in archs[:5])
        figures = {a.id: m for a, m in found}
        model_key = PLAIN_BUNDLES.model_key(archs[0])
        own, coarse_figure = (store.get(*measurement_key(model_key, here, p, variant="generate")) for p in (PROFILE, rough))
        assert figures[archs[0].id].to_dict() == own != coarse_figure  # the profile's figure, not the coarse one


def test_the_coarse_policy_is_never_stricter_than_the_profile():
    from ltsedge.search.presets import get_preset

    for profile in (load_profile("cpu"), get_preset("quick").apply(load_profile("cpu")), PROFILE):
        rough = coarse(profile)
        assert rough.tolerance >= max(profile.tolerance, 0.05) and rough.max_runs <= min(profile.max_runs, 12)
        assert rough.min_runs <= rough.max_runs and rough.max_seconds < profile.max_seconds
        assert runtime_settings(rough) == runtime_settings(profile)  # one machine state: one pinned calibration


def test_a_model_of_an_exactly_linear_machine_predicts_it():
    archs = tiny_space().sample(30, seed=1)
    model = CostModel([(a, fake_figures(a)) for a in archs[:20]], PROFILE, "generate")
    assert model.ready
    for a in archs[20:]:
        truth, estimate = fake_figures(a), model.predict(a)
        assert estimate.ratios["decode"].value == pytest.approx(truth.decode_latency_ms, rel=1e-3)
        assert estimate.memory_mb.value == pytest.approx(truth.peak_memory_mb, rel=1e-3)


# --- screening -------------------------------------------------------------------------------------
class FrontPoint:
    def __init__(self, params, ratio, memory):
        self.arch = None  # unread by the decoder-parameter merit
        self.params = type("P", (), {"decoder_params": params})()
        self.measurement = Measurement(ok=True, workload="decode", workloads={"decode": {"latency_ratio": ratio}})
        self.latency_ms, self.memory_mb, self.ok, self.predicted = ratio, memory, True, False


def test_screening_measures_what_could_enter_the_front_and_predicts_the_dominated():
    archs = tiny_space().sample(40, seed=2)
    model = CostModel([(a, fake_figures(a)) for a in archs[:20]], PROFILE, "generate")
    screen = Screen("decode", Budgets(), seed=0, audit_share=0.0)
    screen.use(model)
    arch = archs[25]
    params, estimate = count_params(arch).decoder_params, model.predict(arch)
    ratio, memory = estimate.ratios["decode"].value, estimate.memory_mb.value
    better = FrontPoint(params * 2, ratio / 2, memory / 2)
    worse = FrontPoint(params // 2, ratio * 2, memory * 2)
    assert not screen.verdict(arch, params, screen.front_points([better]), 1.0).measure
    assert screen.verdict(arch, params, screen.front_points([worse]), 1.0).measure
    assert screen.verdict(arch, params, [], 1.0).reason == "could enter the front"
    over = Screen("decode", Budgets(max_memory_mb=memory / 2), seed=0, audit_share=0.0)
    over.use(model)
    assert over.verdict(arch, params, [], 1.0).reason == "over a budget"
    near = Screen("decode", Budgets(max_memory_mb=memory), seed=0, audit_share=0.0)
    near.use(model)
    assert near.verdict(arch, params, near.front_points([better]), 1.0).reason == "near a budget"


def test_promise_says_how_far_beyond_the_front_a_point_lies():
    front = [(100, 2.0, 50.0), (200, 4.0, 80.0)]
    assert promise(300, 1.0, 10.0, front) == float("inf")  # more parameters than any front model
    assert promise(150, 4.0, 100.0, front) == pytest.approx(1.0)  # the 200-parameter model dominates it
    assert promise(150, 2.0, 100.0, front) == pytest.approx(2.0)  # twice as fast as it
    assert promise(50, 1.0, 25.0, front) == pytest.approx(2.0)  # beats both on both: the closer one counts


def test_a_generation_measures_its_share_by_promise_and_every_audit():
    verdicts = {"a": Verdict(True, "could enter the front", promise=1.2),
                "b": Verdict(True, "could enter the front", promise=3.0),
                "c": Verdict(True, "audit"), "d": Verdict(False, "dominated by the measured front", promise=0.5),
                "e": Verdict(True, "near a budget", promise=2.0)}
    assert plan(verdicts, 2) == ["c", "b", "e"]
    assert plan(verdicts, 0) == ["c"]


def test_the_audit_share_is_fixed_by_the_seed():
    ids = [f"gpt2-L1-d64-{i:010d}" for i in range(4000)]
    chosen = [audited(7, i) for i in ids]
    assert 0.04 < np.mean(chosen) < 0.06
    assert chosen == [audited(7, i) for i in ids] and chosen != [audited(8, i) for i in ids]


# --- a search that predicts ------------------------------------------------------------------------
class LinearMachine:
    """A runner whose figures are the exactly-linear machine's: measurement without timing noise."""

    measured: list[str] = []
    policies: list[tuple[float, int, float]] = []  # (tolerance, max_runs, max_seconds) of each model measured

    def __init__(self, profile, log=None, **_):
        self.profile = profile

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def fingerprint(self):
        return {"cpu_model": "linear machine", "onnxruntime": "1.0"}

    def calibrate(self):
        return Calibration(1.0, 0.0)

    def use_calibration(self, calibration):
        pass

    def measure_many(self, models, on_result=None, race=None, **_):
        results = []
        for i, path in enumerate(models):
            arch = architecture_of(path)
            LinearMachine.measured.append(arch.id)
            LinearMachine.policies.append((self.profile.tolerance, self.profile.max_runs, self.profile.max_seconds))
            m = fake_figures(arch, self.profile)
            results.append(m)
            if on_result:
                on_result(i, m)
        return results


def linear_search(tmp_path, measure: str, store_name: str = "store.sqlite", seed: int = 3, **options):
    options = SearchOptions(**{"preset": "smoke", "out": tmp_path / f"out-{measure}-{seed}-{store_name}", "population": 16,
                               "generations": 4, "seed": seed, "store_path": tmp_path / store_name, "quiet": True,
                               "measure": measure, "baseline": False, **options})
    settings, profile = resolve(options)
    LinearMachine.measured, LinearMachine.policies = [], []
    with MeasurementStore(options.store_path) as store:
        return SearchRun(settings, profile, options.out, store, log=lambda m: None,
                         runner_factory=LinearMachine).run()


def test_a_search_times_coarsely_with_the_cost_model_and_publishes_at_the_profiles_policy(tmp_path):
    profile = get_preset("smoke").apply(load_profile("cpu"))
    rough = coarse(profile)
    policy = {name: (p.tolerance, p.max_runs, p.max_seconds) for name, p in
              (("profile", profile), ("coarse", rough), ("strict", strict(profile)))}
    assert len(set(policy.values())) == 3
    for measure, timing, searched in (("front", None, "coarse"), ("all", None, "profile"), ("front", "profile", "profile")):
        result = linear_search(tmp_path, measure, store_name=f"{measure}-{timing}.sqlite", generations=2,
                               search_timing=timing)
        summary = json.loads((result.out_dir / "search.json").read_text())
        publish = summary["publish"]  # re-measured: every model kept, then the undecided strictly
        during = LinearMachine.policies[:-(publish["thinned"] + publish["strict"])]
        kept, undecided = (LinearMachine.policies[len(during):][:publish["thinned"]],
                           LinearMachine.policies[len(during) + publish["thinned"]:])
        assert during and set(during) == {policy[searched]}, (measure, timing)
        assert kept and set(kept) == {policy["profile"]} and set(undecided) <= {policy["strict"]}
        assert summary["settings"]["timing"] == searched


@pytest.mark.slow
def test_a_search_predicts_most_candidates_and_publishes_only_measured_ones(tmp_path):
    result = linear_search(tmp_path, "front")
    by_source = {}
    for c in result.candidates:
        by_source.setdefault(c.source, []).append(c)
    predicted = by_source.get("predicted", [])
    assert predicted, "an exact cost model left nothing to predict"
    assert all(c.measurement.predicted for c in predicted)
    assert not {c.arch.id for c in predicted} & set(LinearMachine.measured)  # predicted = never measured
    published = {p.candidate.arch.id for p in result.frontier}
    assert published and not published & {c.arch.id for c in predicted}
    rows = list(csv.DictReader((result.out_dir / "candidates.csv").open()))
    assert {r["id"] for r in rows if r["figures"] == "predicted"} == {c.arch.id for c in predicted}
    assert all(float(r["latency_low_ms"]) <= float(r["latency_ms"]) <= float(r["latency_high_ms"])
               for r in rows if r["figures"] == "predicted")
    summary = json.loads((result.out_dir / "search.json").read_text())["cost_model"]
    assert summary["predicted"] == len(predicted) and summary["decode"]["median_error"] < 0.01
    # What the predictions put on the front was measured before publishing: no prediction beats the front
    # by more than the resolution (settling leaves such near-ties to the front model beside them), and the
    # published front is thinned to the resolution: within it twice.
    assert summary["settled"] == len(by_source.get("settled", []))
    front = [(p.candidate.params.decoder_params, p.candidate.latency_ms, p.candidate.memory_mb) for p in result.frontier]
    factor = (1 + json.loads((result.out_dir / "search.json").read_text())["settings"]["resolution"]) ** 2
    for c in predicted:
        assert any(p * factor >= c.params.decoder_params and r <= c.latency_ms * factor and m <= c.memory_mb * factor
                   for p, r, m in front)
    # The report tells predictions from measurements and shows how good the predictions were.
    from ltsedge.report.data import checked_predictions, load

    data = load(result.out_dir)
    assert {p.id for p in data.candidates if p.predicted} == {c.arch.id for c in predicted}
    pairs = checked_predictions(data, "decode")
    assert pairs and all(abs(guess / actual - 1) < 0.01 for guess, _, _, actual in pairs)
    assert (result.out_dir / "report" / "cost_model.png").stat().st_size > 0
    for generation in range(2, 5):  # the model is ready from the first generation's 16 figures on
        offspring = [c for c in result.candidates if c.generation == generation]
        measured = [c for c in offspring if c.source == "measured" and not audited(3, c.arch.id)]
        assert len(measured) <= math.ceil(MEASURE_SHARE * 16)


@pytest.mark.slow
def test_a_second_search_on_the_same_machine_predicts_from_its_first_generation(tmp_path):
    linear_search(tmp_path, "front", seed=3)
    second = linear_search(tmp_path, "front", seed=4)  # same store: the first search's figures train it
    cold = linear_search(tmp_path, "front", store_name="empty.sqlite", seed=4)  # the same search, no history
    warm_measured, cold_measured = (sum(not c.predicted for c in r.candidates if c.generation == 1)
                                    for r in (second, cold))
    assert cold_measured >= MIN_SAMPLES  # cold: measured until the model has its samples
    assert warm_measured < cold_measured  # warm: predicted from the start


@pytest.mark.slow
def test_measure_all_measures_every_candidate(tmp_path):
    result = linear_search(tmp_path, "all")
    assert not any(c.predicted for c in result.candidates)
    assert {c.arch.id for c in result.candidates} <= set(LinearMachine.measured)


@pytest.mark.slow
def test_the_predicted_search_finds_the_front_of_measuring_everything(tmp_path):
    """On an exact machine, screening loses nothing: the published front is the one measuring every
    candidate finds, or dominates it (it evaluated the same offspring where their figures agreed). Its bundles in
    one graph form (the plain one, for onnxruntime 1.20): each form's cost model learns from its own figures only,
    and this machine's figures are alike in both."""
    everything = linear_search(tmp_path, "all", "a.sqlite", target_ort="1.20")
    screened = linear_search(tmp_path, "front", "b.sqlite", target_ort="1.20")
    hv = lambda r: r.summary["hypervolume"][-1]["hypervolume"]  # noqa: E731
    assert hv(screened) >= 0.98 * hv(everything)


# --- the commands ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_predict_needs_a_cost_model_then_gives_figures_with_intervals(tmp_path):
    store, arch = tmp_path / "s.sqlite", tmp_path / "arch.json"
    arch.write_text(Architecture(n_layer=2, d_model=64, n_head=[2, 4], d_inner=[128, 96], d_embed=32, div_val=2,
                                 vocab_size=512, n_positions=64).to_json())
    refused = ltsedge_cli("predict", arch, "--preset", "smoke", "--store", store)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "ltsedge costmodel --device cpu --preset smoke" in refused.stderr
    built = ltsedge_cli("costmodel", "--preset", "smoke", "--samples", "12", "--store", store, "--json")
    assert built.returncode == 0, built.stderr
    report = json.loads(built.stdout)
    assert report["samples"] >= MIN_SAMPLES and report["ready"] and set(report["accuracy"]) == {
        "prefill", "decode", "memory"}
    answer = ltsedge_cli("predict", arch, "--preset", "smoke", "--store", store, "--json")
    assert answer.returncode == 0, answer.stderr
    figures = json.loads(answer.stdout)
    decode = figures["workloads"]["decode"]
    assert figures["predicted"] and decode["latency_low_ms"] <= decode["latency_ms"] <= decode["latency_high_ms"]
    assert figures["memory_low_mb"] <= figures["peak_memory_mb"] <= figures["memory_high_mb"]
    near = tmp_path / "near.json"  # a little outside the smoke space: a warning, wider intervals, still figures
    near.write_text(Architecture(n_layer=3, d_model=64, n_head=[2, 4, 4], d_inner=[256] * 3, vocab_size=512,
                                 n_positions=64).to_json())
    outside = ltsedge_cli("predict", near, "--preset", "smoke", "--store", store)
    assert outside.returncode == 0 and "extrapolates" in outside.stderr and "peak memory" in outside.stdout
    assert "(generate variant)" in outside.stdout  # profile ARCH.json's default is forward: each says which
    huge = tmp_path / "huge.json"  # far outside it: no figures
    huge.write_text(Architecture(n_layer=8, d_model=256, n_head=[4] * 8, d_inner=[1024] * 8, vocab_size=512,
                                 n_positions=64).to_json())
    far = ltsedge_cli("predict", huge, "--preset", "smoke", "--store", store)
    assert far.returncode == 2 and "beyond what the cost model can predict" in far.stderr
    elsewhere = ltsedge_cli("predict", arch, "--preset", "quick", "--store", store)  # other settings: not this model
    assert elsewhere.returncode == 2 and "no cost model" in elsewhere.stderr


class ThisMachine(LinearMachine):
    """The exactly-linear machine under this machine's own fingerprint (the one `predict` looks figures up
    by), timing each model as the variant it was exported as."""

    def fingerprint(self):
        return machine_fingerprint(self.profile)

    def measure_many(self, models, on_result=None, race=None, **_):
        results = [fake_figures(architecture_of(path), self.profile, variant=read_metadata(path)["variant"])
                   for path in models]
        for i, m in enumerate(results):
            if on_result:
                on_result(i, m)
        return results


def smoke_arch() -> Architecture:
    return Architecture(n_layer=2, d_model=64, n_head=[2, 4], d_inner=[128, 96], d_embed=32, div_val=2,
                        vocab_size=512, n_positions=64)


def smoke_store(path, count: int = 12):
    """A store holding this machine's figures of the smoke preset's space (generate, fp32), as a search
    with --preset smoke leaves them: the exactly-linear machine's, without exporting anything."""
    profile = get_preset("smoke").apply(load_profile("cpu"))
    archs = get_preset("smoke").space("gpt2").sample(count, seed=5)
    with MeasurementStore(path) as store:
        for a in archs:
            put_sample(store, a, machine_fingerprint(profile), profile, ExportOptions(variant="generate"))
    return archs, profile


def of_form(archs, like):
    """Those of ``archs`` whose default bundle is in ``like``'s graph form (a cost model's samples for it)."""
    form = lambda arch: ":form=contrib:" in ExportOptions(variant="generate").model_key(arch)  # noqa: E731
    return [a for a in archs if form(a) == form(like)]


def suggested(refusal: str, lead: str) -> list[str]:
    """The arguments of the command in backquotes after ``lead`` in a one-line refusal."""
    found = re.search(re.escape(lead) + r" `([^`]+)`", refusal)
    assert found, refusal
    return shlex.split(found.group(1))


def test_predict_s_advice_run_as_printed_makes_the_model_predict_then_uses(tmp_path, monkeypatch):
    """Every setting that files a cost model's figures (preset, variant, onnxruntime target, precision,
    sequence) and the store reach the `ltsedge costmodel` that `predict` suggests: run as printed, it
    makes exactly the model the same `predict` then answers from."""
    from ltsedge.costmodel import api
    from ltsedge.costmodel.setting import Setting

    store, arch = tmp_path / "s.sqlite", tmp_path / "arch.json"
    arch.write_text(smoke_arch().to_json())
    env = {"LTSEDGE_STORE": str(tmp_path / "elsewhere.sqlite")}  # a command without --store writes there
    asked = ("predict", arch, "--preset", "smoke", "--variant", "forward", "--target-ort", "1.17",
             "--precision", "int8", "--sequence", "8", "--store", store)
    refused = ltsedge_cli(*asked, env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    command = suggested(refused.stderr, "make one with")
    assert command[:2] == ["ltsedge", "costmodel"]
    made = []
    real_build = api.build
    monkeypatch.setattr(api, "build", lambda setting, *a, **k: made.append(setting) or real_build(
        setting, *a, runner_factory=ThisMachine, **k))
    built = ltsedge_cli(*command[1:], "--samples", "12", "--json", env=env)  # a few repeat in the smoke space
    assert built.returncode == 0 and json.loads(built.stdout)["ready"], built.stderr
    assert made[0].key() == Setting("cpu", "smoke", "gpt2", "forward", "1.17", "int8", 8).key()
    answer = ltsedge_cli(*asked, "--json", env=env)
    assert answer.returncode == 0, answer.stderr
    assert set(json.loads(answer.stdout)["workloads"]) == {"forward"}


def test_predict_without_a_model_names_the_settings_the_store_holds_one_for(tmp_path):
    """After a search with --preset smoke, `predict` at the default preset names the command that uses the
    smoke preset's model (and only settings with enough figures), and that command answers."""
    store, arch = tmp_path / "s.sqlite", tmp_path / "arch.json"
    arch.write_text(smoke_arch().to_json())
    archs, _ = smoke_store(store)
    refused = ltsedge_cli("predict", arch, "--store", store)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "0 measured architectures" in refused.stderr and refused.stderr.count("ltsedge predict") == 1
    command = suggested(refused.stderr, "the store holds one for other settings:")
    assert command == ["ltsedge", "predict", str(arch), "--device", "cpu", "--preset", "smoke", "--store", str(store)]
    answer = ltsedge_cli(*command[1:], "--json")
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["samples"] == len({a.id for a in of_form(archs, smoke_arch())})
    empty = ltsedge_cli("predict", arch, "--store", tmp_path / "empty.sqlite")  # nothing to point to
    assert empty.returncode == 2 and "other settings" not in empty.stderr


def test_predict_refuses_an_architecture_far_beyond_the_fitted_range(tmp_path):
    """A linear fit carried to 10^12 parameters is arithmetic, not a prediction: refused in one line naming
    the range and the factor; an architecture a little beyond the range is predicted (and marked)."""
    from ltsedge.costmodel.fit import MAX_REACH

    store = tmp_path / "s.sqlite"
    archs, profile = smoke_store(store)
    model = CostModel([(a, fake_figures(a, profile)) for a in archs], profile, "generate")
    huge = Architecture(n_layer=320, d_model=16384, n_head=[128] * 320, d_inner=[65536] * 320, vocab_size=512,
                        n_positions=64)
    near = Architecture(n_layer=3, d_model=64, n_head=[2, 4, 4], d_inner=[256, 256, 256], vocab_size=512,
                        n_positions=64)
    assert count_params(huge).decoder_params > 10**12 and model.reach(huge).factor > MAX_REACH
    assert 1 < model.reach(near).factor <= MAX_REACH
    for arch in (huge, near):
        (tmp_path / f"{arch.id}.json").write_text(arch.to_json())
    refused = ltsedge_cli("predict", tmp_path / f"{huge.id}.json", "--preset", "smoke", "--store", store)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    params = sorted(count_params(a).decoder_params for a in archs)
    assert f"{params[0]:,}-{params[-1]:,} decoder parameters" in refused.stderr and f"up to {MAX_REACH:g}x" in refused.stderr
    answer = ltsedge_cli("predict", tmp_path / f"{near.id}.json", "--preset", "smoke", "--store", store)
    assert answer.returncode == 0 and "extrapolates" in answer.stderr and "decode latency" in answer.stdout


def test_settling_leaves_a_prediction_within_the_resolution_of_the_front_to_the_front(tmp_path, monkeypatch):
    from ltsedge.search.candidate import Candidate
    from ltsedge.search.evaluate import CandidateEvaluator

    class Stub:  # the evaluator asks its runner for the machine's fingerprint only
        def fingerprint(self):
            return {"machine": "test", "onnxruntime": "1.0"}

    def candidate(arch, ratio, memory, predicted):
        figures = Measurement(ok=True, predicted=predicted, workload="decode", latency_ms=ratio,
                              decode_latency_ms=ratio, peak_memory_mb=memory,
                              workloads={"decode": {"latency_ms": ratio, "latency_ratio": ratio}})
        return Candidate(arch, count_params(arch), figures, "predicted" if predicted else "measured", 1,
                         "decode_latency_ms")

    small, large, near, far = sorted(tiny_space().sample(8, seed=4), key=lambda a: count_params(a).decoder_params)[:4]
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        evaluator = CandidateEvaluator(PROFILE, Stub(), store, tmp_path, Budgets(), objective="decode",
                                       screen=Screen("decode", Budgets(), 0))
        measured, actual = [], {small.id: (1.9, 19.5), large.id: (1.5, 25.0)}  # as predicted
        monkeypatch.setattr(evaluator, "_measure", lambda archs, generation: (
            measured.extend(a.id for a in archs) or [candidate(a, *actual[a.id], False) for a in archs]))
        evaluator._record(candidate(far, 2.0, 20.0, False))  # the front: the most parameters
        evaluator._record(candidate(small, 1.9, 19.5, True))  # 5% beyond it on latency: within 10%
        evaluator._record(candidate(large, 1.5, 25.0, True))  # 33% faster (more memory): worth measuring
        evaluator.settle_front(limit=10, margin=0.1)
        assert measured == [large.id]
        evaluator.settle_front(limit=10)  # without a margin, the near-tie is measured too
        assert measured == [large.id, small.id]


def test_settling_judges_a_prediction_by_the_low_end_of_its_interval(tmp_path, monkeypatch):
    """A prediction whose point is behind the front but whose interval reaches beyond it could be on the
    front: it is measured, as screening would have measured it (a point-only settling lost front models
    that the model predicted 5-10% too slow)."""
    from ltsedge.search.candidate import Candidate
    from ltsedge.search.evaluate import CandidateEvaluator

    class Stub:
        def fingerprint(self):
            return {"machine": "test", "onnxruntime": "1.0"}

    def candidate(arch, ratio, memory, interval=None):
        figures = Measurement(ok=True, predicted=interval is not None, workload="decode", latency_ms=ratio,
                              decode_latency_ms=ratio, peak_memory_mb=memory,
                              workloads={"decode": {"latency_ms": ratio, "latency_ratio": ratio}})
        c = Candidate(arch, count_params(arch), figures, "predicted" if interval else "measured", 1, "decode_latency_ms")
        if interval:
            c.prediction = {"decode": {"value": ratio, "low": ratio * interval[0], "high": ratio * interval[1]},
                            "memory_mb": {"value": memory, "low": memory * 0.98, "high": memory * 1.02}}
        return c

    _, reaching, hopeless, front = sorted(tiny_space().sample(8, seed=4),
                                          key=lambda a: count_params(a).decoder_params)[:4]
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        evaluator = CandidateEvaluator(PROFILE, Stub(), store, tmp_path, Budgets(), objective="decode",
                                       screen=Screen("decode", Budgets(), 0))
        measured = []
        monkeypatch.setattr(evaluator, "_measure", lambda archs, generation: (
            measured.extend(a.id for a in archs) or [candidate(a, 1.0, 20.0) for a in archs]))
        evaluator._record(candidate(front, 2.0, 20.0))  # measured: the most parameters
        evaluator._record(candidate(reaching, 2.1, 20.0, (0.85, 1.15)))  # 5% behind; its low end 11% ahead
        evaluator._record(candidate(hopeless, 2.6, 25.0, (0.9, 1.1)))  # even its low ends (2.34, 24.5 MB) are behind
        evaluator.settle_front(limit=10)
        assert measured == [reaching.id]


def test_costmodel_measures_in_the_machine_s_pinned_scale_as_a_search_does(tmp_path):
    """`ltsedge costmodel`'s samples and a search's teach one model: both must be in the pinned scale
    (a decode ratio's unit is the pin's compute/bandwidth scale; a run's own moved ~20% between runs)."""
    from ltsedge.costmodel.api import Setting, build
    from ltsedge.keys import calibration_key
    from ltsedge.runners.policy import PinnedCalibration

    class PinnedLinear(LinearMachine):
        pinned_with = []

        def measure_pinned(self):
            return PinnedCalibration.from_windows([[1.0, 1.01]] * 5, "now", [[0.5, 0.51]] * 5)

        def use_pinned(self, pinned):
            PinnedLinear.pinned_with.append(pinned)

    store_path = tmp_path / "s.sqlite"
    build(Setting(preset="smoke"), samples=MIN_SAMPLES, store_path=store_path, log=lambda m: None,
          runner_factory=PinnedLinear)
    assert len(PinnedLinear.pinned_with) == 1
    profile = get_preset("smoke").apply(load_profile("cpu"))
    with MeasurementStore(store_path) as store:  # pinned once, kept for every later run on this machine
        stored = store.get_calibration(*calibration_key(PinnedLinear(profile).fingerprint(), profile))
    assert PinnedCalibration.from_dict(stored) == PinnedLinear.pinned_with[0]
