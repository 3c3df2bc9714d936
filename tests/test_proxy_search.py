"""A proxy-check's result in the search: ``--proxy FILE`` makes NSGA-II minimise the fitted held-out loss, the
file is part of the search's identity (a resume with another proxy is refused), and a search's report shows
the check kept with it or given to it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.proxy import count_params, merit_of
from ltsedge.proxycheck import RESULT, report
from ltsedge.proxycheck.fitted import load_proxy
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.baseline import best_match, stacked
from ltsedge.search.budgets import Budgets
from ltsedge.search.checkpoint import CandidateLog, identity_hash
from ltsedge.search.presets import get_preset
from ltsedge.search.pareto import pareto_front, thin
from ltsedge.search.problem import FAILED_PENALTY, ArchitectureProblem
from tests.helpers import one_line_exit_2, run_ltsedge


def check_result(path, space, depth_cost: float = 0.05, backbone: str | None = None, size_slope: float = -0.3) -> str:
    """A check's JSON as ``report.summarize`` writes it, of 8 models whose loss moves by ``size_slope`` per
    ln(decoder parameters) and rises with depth by ``depth_cost`` per layer."""
    models = []
    for i, arch in enumerate(space.sample(40, seed=1)[:8]):
        p = count_params(arch).decoder_params
        loss = 9.0 + size_slope * math.log(p) + depth_cost * arch.n_layer + 0.01 * (i % 3)
        models.append({"index": i, "role": "sample", "id": arch.id, "n_layer": arch.n_layer, "d_model": arch.d_model,
                       "decoder_params": p, "total_params": count_params(arch).total_params, "attention_params": p // 3,
                       "held_out_loss": loss, "checkpoints": [{"fraction": 1.0, "tokens": 640, "held_out_loss": loss}],
                       "tokens": 640, "seconds": 1.0})
    summary = report.summarize(models, {"space": {**space.to_dict(), **({"backbone": backbone} if backbone else {})},
                                        "text": {"source": "my-corpus.txt"}, "tokens_per_model": 640})
    path.write_text(json.dumps(summary))
    return str(path)


def test_a_fitted_proxy_is_the_quality_objective(tmp_path):
    space = get_preset("smoke").space()
    proxy = load_proxy(check_result(tmp_path / "c.json", space, depth_cost=0.05), "gpt2")
    assert proxy.c == pytest.approx(0.05, abs=0.01) and proxy.b == pytest.approx(-0.3, abs=0.02)
    problem = ArchitectureProblem(space, Budgets(), quality=proxy)
    shallow, deep = (Architecture(n_layer=n, d_model=64, n_head=[2] * n, d_inner=[d] * n, vocab_size=512,
                                  n_positions=64) for n, d in ((1, 256), (2, 64)))
    f_shallow, _ = problem.objectives(count_params(shallow).decoder_params, 1.0, 1.0, True, shallow)
    f_deep, _ = problem.objectives(count_params(deep).decoder_params, 1.0, 1.0, True, deep)
    assert f_shallow[0] == pytest.approx(proxy.predict(shallow))
    assert count_params(deep).decoder_params > count_params(shallow).decoder_params * 0.9
    assert f_shallow[0] < f_deep[0]  # the fit says depth costs more than these extra parameters give
    failed, _ = problem.objectives(0, None, None, False, deep)
    assert failed[0] == FAILED_PENALTY  # a failed candidate is the worst loss, not the best
    plain, _ = ArchitectureProblem(space, Budgets()).objectives(1000, 1.0, 1.0, True, deep)
    assert plain[0] == -1000.0  # without --proxy: decoder parameters, as before


def _model(n_layer: int, d_inner: int, latency_ms: float = 1.0, memory_mb: float = 10.0):
    """A measured front candidate of ``n_layer`` layers of width 64 (only what pareto.py reads)."""
    arch = Architecture(n_layer=n_layer, d_model=64, n_head=[2] * n_layer, d_inner=[d_inner] * n_layer,
                        vocab_size=512, n_positions=64)
    return SimpleNamespace(arch=arch, params=count_params(arch), ok=True, predicted=False, latency_ms=latency_ms,
                           memory_mb=memory_mb)


def test_a_fitted_proxy_ranks_the_front_as_its_predicted_loss(tmp_path):
    space = get_preset("smoke").space()
    proxy = load_proxy(check_result(tmp_path / "c.json", space, depth_cost=0.2), "gpt2")
    models = [_model(n, d) for n in (1, 2, 3, 4) for d in (64, 256, 1024)]
    by_loss = sorted(models, key=lambda m: proxy.predict(m.arch))
    by_merit = sorted(models, key=lambda m: -proxy.merit(m.arch, m.params.decoder_params))
    assert [m.arch.id for m in by_loss] == [m.arch.id for m in by_merit]
    assert by_loss != sorted(models, key=lambda m: -m.params.decoder_params)  # depth reorders them
    a, b = models[1], models[4]  # a ratio of merits is a difference of predicted loss, in units of |b|
    ratio = proxy.merit(a.arch, a.params.decoder_params) / proxy.merit(b.arch, b.params.decoder_params)
    assert proxy.predict(b.arch) - proxy.predict(a.arch) == pytest.approx(-proxy.b * math.log(ratio), rel=1e-9)


def test_a_fitted_proxy_decides_which_models_are_published(tmp_path):
    """A deep model with a few more parameters than a shallow one, no faster and no lighter: by decoder
    parameters it dominates the shallow one; by a fit in which depth costs more than those parameters
    give, the shallow one dominates it. The front, its thinning and the baseline's match follow the proxy."""
    space = get_preset("smoke").space()
    proxy = load_proxy(check_result(tmp_path / "c.json", space, depth_cost=0.2), "gpt2")
    shallow, deep = _model(1, 1024), _model(4, 224)
    assert deep.params.decoder_params > shallow.params.decoder_params
    assert proxy.predict(shallow.arch) < proxy.predict(deep.arch)
    assert [m.arch.id for m in pareto_front([shallow, deep], Budgets())] == [deep.arch.id]
    assert [m.arch.id for m in pareto_front([shallow, deep], Budgets(), proxy.merit)] == [shallow.arch.id]
    slower = _model(4, 224, latency_ms=1.05)  # both on a front at 10%: thinning keeps the proxy's best
    assert [m.arch.id for m in thin([shallow, slower], 0.1)] == [slower.arch.id]
    assert [m.arch.id for m in thin([shallow, slower], 0.1, merit=proxy.merit)] == [shallow.arch.id]

    baseline = _model(3, 256).arch  # between the two in decoder parameters, predicted worse than shallow
    fast_deep, slow_shallow = _model(6, 256, latency_ms=0.5), _model(2, 384, latency_ms=0.8)
    assert count_params(fast_deep.arch).decoder_params > count_params(baseline).decoder_params
    assert count_params(slow_shallow.arch).decoder_params < count_params(baseline).decoder_params
    assert proxy.predict(fast_deep.arch) > proxy.predict(baseline) > proxy.predict(slow_shallow.arch)
    assert best_match(baseline, [fast_deep, slow_shallow]) is fast_deep
    assert best_match(baseline, [fast_deep, slow_shallow], proxy.merit) is slow_shallow
    settings, _ = resolve(SearchOptions(preset="smoke", proxy=check_result(tmp_path / "s.json", space, 0.2)))
    assert settings.merit(shallow.arch, shallow.params.decoder_params) == pytest.approx(
        proxy.merit(shallow.arch, shallow.params.decoder_params))
    plain, _ = resolve(SearchOptions(preset="smoke"))
    assert plain.merit(deep.arch, 1234) == 1234.0


def test_the_cap_the_baseline_match_and_the_screen_follow_the_fitted_proxy(tmp_path):
    from ltsedge.runners.measurement import Measurement
    from ltsedge.search.baseline import compare
    from ltsedge.search.pareto import cap
    from ltsedge.search.screening import Screen

    space = get_preset("smoke").space()
    proxy = load_proxy(check_result(tmp_path / "c.json", space, depth_cost=0.2), "gpt2")
    deep, shallow = _model(4, 224, latency_ms=0.5), _model(1, 1024, latency_ms=2.0)
    kept = sorted([deep, shallow], key=lambda m: m.params.decoder_params)
    assert cap(kept, 1) == [deep]  # the most decoder parameters
    assert cap(kept, 1, merit=proxy.merit) == [shallow]  # the best predicted loss

    baseline = _model(3, 256, latency_ms=3.0)
    fast_deep, slow_shallow = _model(6, 256, latency_ms=0.5), _model(2, 384, latency_ms=0.8)
    plain = compare([baseline.arch], [baseline], [None], [fast_deep, slow_shallow])
    fitted = compare([baseline.arch], [baseline], [None], [fast_deep, slow_shallow], proxy.merit)
    assert plain[0]["frontier_id"] == fast_deep.arch.id and plain[0]["speedup"] == pytest.approx(6.0)
    assert fitted[0]["frontier_id"] == slow_shallow.arch.id and fitted[0]["speedup"] == pytest.approx(3.75)

    for m in (deep, shallow):
        m.measurement = Measurement(ok=True, workload="decode", workloads={"decode": {"latency_ratio": m.latency_ms}})
    by_params = Screen("decode", Budgets(), seed=0).front_points([deep, shallow])
    by_fit = Screen("decode", Budgets(), seed=0, merit=proxy.merit).front_points([deep, shallow])
    assert by_params == [(float(deep.params.decoder_params), 0.5, 10.0)]  # more parameters and faster: alone
    assert by_fit == [(pytest.approx(proxy.merit(shallow.arch, shallow.params.decoder_params)), 2.0, 10.0),
                      (pytest.approx(proxy.merit(deep.arch, deep.params.decoder_params)), 0.5, 10.0)]


def test_the_hypervolume_scale_holds_the_space_s_highest_merit(tmp_path):
    from ltsedge.search.callback import highest_merit

    space = get_preset("quick").space()
    largest = space.decode(space.upper_bounds)
    assert highest_merit(space, lambda a, p: float(p)) == count_params(largest).decoder_params
    proxy = load_proxy(check_result(tmp_path / "c.json", space, depth_cost=0.2), "gpt2")
    top = highest_merit(space, proxy.merit)
    assert top > proxy.merit(largest, count_params(largest).decoder_params)  # depth costs: a shallower one leads
    assert all(proxy.merit(a, count_params(a).decoder_params) <= top * (1 + 1e-12) for a in space.sample(300, seed=4))


def test_a_fit_too_flat_to_rank_the_space_is_refused(tmp_path):
    space = get_preset("default").space()
    flat = check_result(tmp_path / "flat.json", space, size_slope=-0.002, depth_cost=0.1)
    assert load_proxy(flat, "gpt2").b < 0  # more parameters still help, by a hair
    with pytest.raises(LtsedgeError, match="too flat in parameters to rank this space"):
        resolve(SearchOptions(preset="default", proxy=flat))


def test_a_fit_in_which_more_parameters_do_not_help_is_refused(tmp_path):
    space = get_preset("smoke").space()
    rising = check_result(tmp_path / "rising.json", space, size_slope=0.2)
    with pytest.raises(LtsedgeError, match="predicts no lower loss for more decoder parameters"):
        load_proxy(rising, "gpt2")
    one_line_exit_2(run_ltsedge("search", "--preset", "smoke", "--proxy", rising, "--out", tmp_path / "o"),
                    "predicts no lower loss")


def test_a_fit_whose_predictions_overflow_over_the_space_is_refused(tmp_path):
    """Finite coefficients whose predicted loss overflows to infinity in the space: refused before the search
    writes anything (frontier.json would hold Infinity, which strict JSON parsers refuse)."""
    space = get_preset("smoke").space()
    data = json.loads(Path(check_result(tmp_path / "c.json", space)).read_text())
    data["fitted"]["coefficients"] = {"a": 1.7e308, "b": -1e306, "c": 1e308}
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(data))
    with pytest.raises(LtsedgeError, match="predicts a held-out loss of inf nats in this space"):
        resolve(SearchOptions(preset="smoke", proxy=str(huge)))
    data["fitted"]["coefficients"] = {"a": 5e6, "b": -0.3, "c": 0.05}  # finite, but no loss of a few nats
    large = tmp_path / "large.json"
    large.write_text(json.dumps(data))
    one_line_exit_2(run_ltsedge("search", "--preset", "smoke", "--proxy", large, "--out", tmp_path / "o"),
                    "predicts a held-out loss of 5e+06 nats")
    assert not (tmp_path / "o").exists()
    sane = check_result(tmp_path / "sane.json", space, depth_cost=0.05)
    settings, _ = resolve(SearchOptions(preset="smoke", proxy=sane))  # a fit of a loss passes
    assert 0 < settings.proxy.predict(space.sample(1, seed=0)[0]) < 20


def test_a_search_writes_no_json_a_strict_parser_refuses(tmp_path):
    from ltsedge.search.outputs import _write_json

    path = tmp_path / "frontier.json"
    with pytest.raises(LtsedgeError, match="frontier.json not written"):
        _write_json(path, {"models": [{"id": "a", "predicted_loss": math.inf}]})
    assert not path.exists() and not list(tmp_path.iterdir())  # nothing half written
    _write_json(path, {"models": [{"id": "a", "predicted_loss": 3.25}]})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c)) == {
        "models": [{"id": "a", "predicted_loss": 3.25}]}


def test_the_proxy_is_part_of_the_search_identity(tmp_path):
    space = get_preset("smoke").space()
    first = check_result(tmp_path / "a.json", space, depth_cost=0.05)
    other = check_result(tmp_path / "b.json", space, depth_cost=0.2)

    def identity(proxy: str) -> str:
        settings, profile = resolve(SearchOptions(preset="smoke", proxy=proxy))
        return identity_hash(settings.identity(profile, {}))

    plain, a, b = identity("decoder"), identity(first), identity(other)
    assert len({plain, a, b}) == 3
    settings, profile = resolve(SearchOptions(preset="smoke"))
    assert "proxy" not in settings.identity(profile, {})  # searches of decoder parameters resume as before
    CandidateLog(tmp_path, a).append({"id": "x"})
    with pytest.raises(LtsedgeError, match="different settings"):  # resumed with the other proxy: refused
        CandidateLog(tmp_path, b).records()
    assert CandidateLog(tmp_path, a).records() == [{"id": "x"}]


def test_a_bad_proxy_file_is_one_line(tmp_path):
    space = get_preset("smoke").space()
    other = check_result(tmp_path / "txl.json", space, backbone="transfo_xl")
    unfitted = tmp_path / "few.json"
    unfitted.write_text(json.dumps({**json.loads((tmp_path / "txl.json").read_text()), "fitted": None}))
    for path, message in ((tmp_path / "none.json", "not found"), (other, "fitted on a transfo_xl space"),
                          (unfitted, "holds no fitted proxy")):
        one_line_exit_2(run_ltsedge("search", "--preset", "smoke", "--proxy", path, "--out", tmp_path / "o"), message)


def test_a_search_report_shows_the_check_of_its_space(tmp_path):
    from ltsedge.report import write_report

    space = get_preset("smoke").space()
    out = tmp_path / "search"
    out.mkdir()
    search = {"settings": {"objective": "forward", "population": 4, "generations": 1, "space": space.to_dict(),
                           "budgets": {}}, "device": {"name": "laptop"}, "fingerprint": {}}
    (out / "search.json").write_text(json.dumps(search))
    (out / "frontier.json").write_text(json.dumps({"device": "laptop", "objective": "forward", "models": []}))
    (out / "candidates.jsonl").write_text(json.dumps({"format": 1}) + "\n")
    check_result(out / RESULT, space)
    write_report(out, tmp_path / "r", png=False)
    page = (tmp_path / "r" / "index.html").read_text()
    assert "Spearman(decoder parameters, -held-out loss)" in page and "this search&#x27;s space" in page
    assert "over 8 models" in page and "my-corpus.txt" in page
    elsewhere = check_result(tmp_path / "other.json", get_preset("quick").space())
    proc = run_ltsedge("report", out, "--html", "--out", tmp_path / "r2", "--proxy-check", elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "another space than this search" in (tmp_path / "r2" / "index.html").read_text()


def test_without_tokenizers_proxy_check_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the search extra were not installed
    text = tmp_path / "t.txt"
    text.write_text("some text " * 100)
    one_line_exit_2(run_ltsedge("proxy-check", "--text", text, "--out", tmp_path / "o"),
                    'proxy-check needs tokenizers: pip install "ltsedge[search]"')


@pytest.mark.slow
def test_a_search_with_a_fitted_proxy_publishes_its_front(tmp_path):
    """End to end: the published models are on the front the fitted proxy draws over the search's
    candidates (not the decoder-parameter front), none dominates another under it, and each baseline
    point is compared with a model predicted no worse."""
    from ltsedge.search.loop import SearchRun
    from ltsedge.store import MeasurementStore

    space = get_preset("smoke").space()
    check = check_result(tmp_path / "c.json", space, depth_cost=0.5)
    options = SearchOptions(preset="smoke", out=tmp_path / "out", generations=3, seed=1, proxy=check,
                            store_path=tmp_path / "store.sqlite", quiet=True)
    settings, profile = resolve(options)
    proxy = settings.proxy
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, options.out, store, log=lambda m: None).run()
    merit = proxy.merit
    searched = {c.arch.id for c in pareto_front(result.candidates, settings.budgets, merit)}
    stand_ins = {r.get("stand_in_id") for r in result.baseline} | {r.get("baseline_id") for r in result.baseline}
    published = [p.candidate for p in result.frontier]
    assert published and {c.arch.id for c in published if c.arch.id not in stand_ins} <= searched
    decoder_front = {c.arch.id for c in pareto_front(result.candidates, settings.budgets)}
    assert searched != decoder_front  # the fit (0.5 nats a layer) moves the front: the test sees the difference
    for a in published:
        for b in published:
            assert not (merit_of(b, merit) >= merit_of(a, merit) and b.latency_ms <= a.latency_ms
                        and b.memory_mb <= a.memory_mb and b is not a
                        and (merit_of(b, merit), b.latency_ms, b.memory_mb) != (merit_of(a, merit), a.latency_ms,
                                                                                  a.memory_mb)), (b.arch.id, a.arch.id)
    by_id = {c.arch.id: c for c in published}
    compared = [r for r in result.baseline if r.get("frontier_id") in by_id]
    assert compared
    for row in compared:
        baseline = stacked(settings.baseline, row["n_layer"], settings.space)
        need = merit(baseline, count_params(baseline).decoder_params)
        assert merit_of(by_id[row["frontier_id"]], merit) >= need * (1 - 1e-9), row["frontier_id"]
    frontier = json.loads((tmp_path / "out" / "frontier.json").read_text())["models"]
    assert [m["predicted_loss"] for m in frontier] == [round(proxy.predict(c.arch), 4) for c in published]
    header = (tmp_path / "out" / "frontier.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["id", "decoder_params", "predicted_loss"]
