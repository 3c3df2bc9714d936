"""Publishing the frontier: every front model re-measured from its file at the search's policy, only the
undecided ones again strictly, the front recomputed on the final figures, the cost of each pass kept."""

from __future__ import annotations

import csv
import json

import pytest

from ltsedge.exporters import architecture_of
from ltsedge.proxy import count_params
from ltsedge.runners.measurement import Measurement
from ltsedge.runners.policy import Calibration
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.budgets import Budgets
from ltsedge.search.evaluate import Candidate
from ltsedge.search.finish import finish
from ltsedge.search.frontier import PublishedModel, undecided
from ltsedge.search.outdir import OutputDir
from ltsedge.store import MeasurementStore
from tests.helpers import random_tiny_archs

HALF_WIDTH = 0.01  # every fake figure's interval: +-1%


def figure(latency: float, memory: float, half_width: float = HALF_WIDTH) -> dict:
    """A decode measurement with an interval, as the worker writes one."""
    low, high = latency * (1 - half_width), latency * (1 + half_width)
    decode = {"latency_ms": latency, "latency_low_ms": low, "latency_high_ms": high, "latency_ratio": latency}
    return {"ok": True, "workload": "decode", "latency_ms": latency, "decode_latency_ms": latency,
            "latency_low_ms": low, "latency_high_ms": high, "peak_memory_mb": memory, "workloads": {"decode": decode}}


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
    del no_interval["workloads"]["decode"]["latency_low_ms"], no_interval["latency_low_ms"]
    assert undecided(models, Budgets(), "decode") == ids(models, 2)


class FakeMachine:
    """A runner whose figures come from a table by architecture id: one table at the search's policy,
    another at the strict one (told apart by the profile's tolerance)."""

    search_figures: dict[str, tuple[float, float]] = {}
    strict_figures: dict[str, tuple[float, float]] = {}
    measured: list[tuple[str, str]] = []  # (policy, id), in order
    search_tolerance = 0.0  # the search's policy; a smaller tolerance is the strict one

    def __init__(self, profile, log=None, **_):
        self.profile = profile
        self.policy = "strict" if profile.tolerance < FakeMachine.search_tolerance else "search"

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
            assert race(i).workload == "decode" and race(i).front == ()  # the objective in full, others coarse
            FakeMachine.measured.append((self.policy, arch_id))
            table = FakeMachine.strict_figures if self.policy == "strict" else FakeMachine.search_figures
            out.append(Measurement.from_dict(figure(*table[arch_id])))
        return out


def test_finish_re_measures_every_front_model_then_only_the_undecided_strictly(tmp_path):
    settings, profile = resolve(SearchOptions(preset="smoke", out=tmp_path / "out", store_path=tmp_path / "s.sqlite",
                                              quiet=True, baseline=False))
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
        assert FakeMachine.measured == [("search", i) for i in a] + [("strict", a[2]), ("strict", a[3])]
        kept = {p.candidate.arch.id: p for p in done.frontier}
        assert set(kept) == {a[0], a[1], a[3]}  # 2 dominated once measured strictly: its bundle removed
        assert not (tmp_path / "out" / "models" / a[2]).exists()
        assert (tmp_path / "out" / "models" / a[3] / "model.onnx").is_file()
        assert [kept[i].remeasured for i in (a[0], a[1], a[3])] == ["search", "search", "strict"]
        assert kept[a[0]].candidate.latency_ms == 1.1 and kept[a[3]].candidate.latency_ms == 3.2  # fresh figures
        cost = done.cost
        assert (cost.front, cost.strict, cost.published) == (4, 2, 3)
        assert min(cost.export_seconds, cost.remeasure_seconds, cost.strict_seconds) >= 0


@pytest.mark.slow
def test_a_search_says_how_each_published_figure_was_measured(tmp_path):
    from ltsedge.search.run import SearchRun

    out = tmp_path / "out"
    options = SearchOptions(preset="smoke", out=out, population=8, generations=2, seed=1,
                            store_path=tmp_path / "s.sqlite", quiet=True, baseline=False)
    settings, profile = resolve(options)
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, out, store, log=lambda m: None).run()
    rows = list(csv.DictReader((out / "frontier.csv").open()))
    assert rows and {r["remeasured"] for r in rows} <= {"search", "strict"}
    summary = json.loads((out / "search.json").read_text())["publish"]
    strict_ids = {r["id"] for r in rows if r["remeasured"] == "strict"}
    assert summary["published"] == len(rows) == len(result.frontier)
    assert len(strict_ids) <= summary["strict"] <= summary["front"]
    assert summary["remeasure_seconds"] > 0 and (summary["strict_seconds"] > 0) == (summary["strict"] > 0)
