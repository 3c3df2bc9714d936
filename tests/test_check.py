"""`ltsedge check`: budgets, noise-aware verdicts, regressions, JUnit/JSON reports and exit codes.

Verdict logic runs on injected measurements (deterministic); a few tests measure tiny real models
(an ltsedge export and a MatMul chain built with onnx.helper) with a fast profile, and the CLI runs
as a user runs it (a subprocess: exit codes, no tracebacks).
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ltsedge.architecture import Architecture
from ltsedge.check import run_check
from ltsedge.check.budgets_file import load_budgets
from ltsedge.check.api import measure_with_runner
from ltsedge.check.verdict import is_marginal, latency_relative_bounds, uncertainty
from ltsedge.devices import load_profile
from ltsedge.devices.fingerprint import fingerprint_hash, machine_fingerprint
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.runners import Measurement
from ltsedge.runners.worker import FAULT_KEY, TEST_FAULTS_ENV
from tests.helpers import fake_fingerprint, ltsedge_process, meas

FAST = dict(warmup=1, min_runs=3, max_runs=8, max_seconds=1.0, sequence=16, drift_check_every=0)
FAST_TOML = """\
name = "fast"
description = "cpu settings, few runs: for tests"
[workload]
sequence = 16
[repeats]
warmup = 1
min_runs = 3
max_runs = 8
max_seconds = 1.0
drift_check_every = 0
"""


def quiet(_line: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Models and profiles
# ---------------------------------------------------------------------------------------------
def matmul_chain(path, n: int = 3, d: int = 64) -> None:
    """A model from outside ltsedge: x[batch, seq, d] -> n MatMuls -> y, symbolic batch and sequence."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        inits.append(numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32), f"w{i}"))
        out = "y" if i == n - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out]))
        prev = out
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])
    graph = helper.make_graph(nodes, "chain", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("check-models")
    export_model(Architecture(n_layer=1, d_model=32, n_head=[2], d_inner=[64], vocab_size=200,
                              n_positions=32)).save(d / "tiny.onnx")
    matmul_chain(d / "chain.onnx")
    (d / "broken.onnx").write_bytes(b"this is not an ONNX model")
    (d / "fast.toml").write_text(FAST_TOML)
    return d


@pytest.fixture
def models(model_dir, tmp_path, monkeypatch):
    """The shared models copied into a fresh working directory (relative paths, budgets files)."""
    for name in ("tiny.onnx", "chain.onnx", "broken.onnx", "fast.toml"):
        shutil.copy(model_dir / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def fast():
    return load_profile("cpu").replace(name="fast", **FAST)


def fake_files(tmp_path, *names):
    """Distinct non-ONNX files: enough for run_check with an injected measure (sha256 differs)."""
    for name in names:
        (tmp_path / name).write_bytes(f"model {name}".encode())
    return [tmp_path / name for name in names]


class FakeMeasure:
    """Scripted measurements per round, keyed by file name (rounds past the last read as the last);
    records each call's profile and models."""

    def __init__(self, *rounds):
        self.rounds = list(rounds)
        self.calls = []

    def __call__(self, profile, jobs):
        self.calls.append((profile, [p.name for p, _ in jobs], [s for _, s in jobs]))
        table = self.rounds[min(len(self.calls), len(self.rounds)) - 1]
        return [table[p.name] for p, _ in jobs]


def check(models, profile, measure, **kw):
    kw.setdefault("fingerprint", fake_fingerprint(profile))
    return run_check(models, profile, measure=measure, log=quiet, **kw)


def verdicts(report):
    return {(r.model.rsplit("/", 1)[-1], c.label): c.verdict for r in report.results for c in r.checks}


# ---------------------------------------------------------------------------------------------
# Verdicts on injected measurements
# ---------------------------------------------------------------------------------------------
def test_pass_and_fail_with_margins(tmp_path, fast):
    a, b = fake_files(tmp_path, "a.onnx", "b.onnx")
    fake = FakeMeasure({"a.onnx": meas(40.0, 200.0), "b.onnx": meas(60.0, 300.0)})
    report = check([a, b], fast, fake, budgets={"max_latency_ms": 50, "max_memory_mb": 250})
    assert verdicts(report) == {("a.onnx", "latency"): "pass", ("a.onnx", "memory"): "pass",
                                ("b.onnx", "latency"): "FAIL", ("b.onnx", "memory"): "FAIL"}
    assert report.exit_code == 1 and not report.passed
    # a latency fail is confirmed by two more measurements (the model over it only); a clear memory fail is not
    assert [names for _, names, _ in fake.calls] == [["a.onnx", "b.onnx"], ["b.onnx"], ["b.onnx"]]
    lat = report.results[0].checks[0]
    assert (lat.margin, lat.margin_pct) == (10.0, 20.0)
    assert report.results[1].checks[0].message() == ("latency 60.0 ms > budget 50.0 ms "
                                                     "[lowest of 3 measurements, the first 60.0 ms]")
    ok = check([a], fast, FakeMeasure({"a.onnx": meas(40.0, 200.0)}),
               budgets={"max_latency_ms": 50, "max_memory_mb": 250})
    assert ok.exit_code == 0 and ok.passed


def test_uncertainty_of_latency_and_memory():
    converged = meas(10.0, cv=0.5, runs=10, converged=True)
    assert latency_relative_bounds(converged, 0.02) == (0.02, 0.02)  # the runner's own 95% interval criterion
    noisy = meas(10.0, cv=0.10, runs=16, converged=False, p90=20.0, low=5.0)
    h = 1.959964 * 1.2533 * 0.10 / 4
    assert latency_relative_bounds(noisy, 0.02) == pytest.approx((h, h), rel=1e-3)
    outlier = meas(10.0, cv=3.0, runs=8, converged=False, p90=10.5, low=9.9)  # one huge run: the CV lies
    assert latency_relative_bounds(outlier, 0.02) == pytest.approx((0.02, 0.05))
    assert is_marginal("latency", outlier, 10.4, 0.02) and not is_marginal("latency", outlier, 9.7, 0.02)
    assert uncertainty("latency", outlier, 0.02, limit=9.7) == pytest.approx(0.2)  # the side of the limit
    # a limit below the fastest run is never marginal, however noisy the runs
    wild = meas(1.0, cv=5.0, runs=8, converged=False, p90=50.0, low=0.8)
    assert not is_marginal("latency", wild, 1e-6, 0.02) and is_marginal("latency", wild, 3.0, 0.02)
    assert uncertainty("memory", meas(memory=50.0), 0.02) == 2.0  # 2 MB floor after other models
    fresh = meas(memory=5.0)
    fresh.memory_method = "fresh_process"
    assert uncertainty("memory", fresh, 0.02) == 0.25  # a model measured first in its own worker
    assert not is_marginal("memory", fresh, 5.5, 0.02)  # +10% is a real regression, not noise
    assert uncertainty("memory", meas(memory=500.0), 0.02) == 10.0  # 2%
    assert is_marginal("memory", meas(memory=500.0), 509.0, 0.02)
    assert not is_marginal("memory", meas(memory=500.0), 511.0, 0.02)
    assert is_marginal("latency", meas(10.1), 10.0, 0.02) and not is_marginal("latency", meas(10.5), 10.0, 0.02)


def test_marginal_latency_is_remeasured_strictly_and_decided_on_the_lower_figure(tmp_path, fast):
    a, b = fake_files(tmp_path, "a.onnx", "b.onnx")
    first = meas(50.3, cv=0.05, runs=10, converged=False, p90=55.0, low=47.0)  # +-3.9%: 50 is within
    fake = FakeMeasure({"a.onnx": first, "b.onnx": meas(20.0)}, {"a.onnx": meas(49.0)})
    report = check([a, b], fast, fake, budgets={"max_latency_ms": 50})
    # measured again: only the close model, with the stricter policy (twice the runs, half the tolerance),
    # and no more once a figure is clear of the limit
    assert [names for _, names, _ in fake.calls] == [["a.onnx", "b.onnx"], ["a.onnx"]]
    careful = fake.calls[1][0]
    assert (careful.min_runs, careful.max_runs, careful.tolerance) == (2 * fast.min_runs, 2 * fast.max_runs,
                                                                      fast.tolerance / 2)
    assert verdicts(report) == {("a.onnx", "latency"): "pass", ("b.onnx", "latency"): "pass"}
    assert report.exit_code == 0
    c = report.results[0].checks[0]
    assert not c.marginal and c.remeasured and (c.first_value, c.value) == (50.3, 49.0)
    assert (c.measurements, c.decided_on) == (2, 1)
    out = report.to_json()["results"][0]
    assert out["latency_ms"] == 49.0 and out["marginal"] == {"latency": False} and out["remeasured"]
    assert [m["latency_ms"] for m in out["remeasurements"]] == [49.0] and out["measurement"]["latency_ms"] == 50.3
    assert "lowest of 2 measurements, the first 50.3 ms" in c.message()


def test_a_marginal_latency_that_reads_slower_again_keeps_its_first_figure_and_stays_marginal(tmp_path, fast):
    (a,) = fake_files(tmp_path, "a.onnx")
    first = meas(50.3, cv=0.05, runs=10, converged=False, p90=55.0, low=47.0)
    fake = FakeMeasure({"a.onnx": first}, {"a.onnx": meas(51.0)})
    for policy, verdict, code in ((None, "marginal fail", 1), ("pass", "marginal pass", 0)):
        fake.calls.clear()
        report = check([a], fast, fake, budgets={"max_latency_ms": 50}, marginal=policy)
        c = report.results[0].checks[0]
        assert len(fake.calls) == 3  # doubtful after each: the lowest is still within noise of the limit
        assert c.marginal and c.value == 50.3 and (c.measurements, c.decided_on) == (3, 0)
        assert c.verdict == verdict and report.exit_code == code
        assert report.to_json()["results"][0]["latency_ms"] == 50.3  # the measurement decided on
        case = junit_cases(report, tmp_path)["a.onnx latency"]
        assert "marginal" in case.find("system-out").text and "decided on the first measurement" in case.find(
            "system-out").text


@pytest.mark.parametrize("again, verdict, value, decided_on", [
    ((62.0, 44.0), "pass", 44.0, 2),  # one measurement clear of the budget: the others were contention
    ((57.0, 59.0), "FAIL", 57.0, 1),  # every measurement over it: the fail stands, on the lowest figure
])
def test_a_latency_fail_stands_only_when_every_measurement_says_so(tmp_path, fast, again, verdict, value, decided_on):
    (a,) = fake_files(tmp_path, "a.onnx")
    fake = FakeMeasure({"a.onnx": meas(58.0)}, {"a.onnx": meas(again[0])}, {"a.onnx": meas(again[1])})
    report = check([a], fast, fake, budgets={"max_latency_ms": 50}, marginal="fail")
    c = report.results[0].checks[0]
    assert len(fake.calls) == 3 and (c.verdict, c.value, c.decided_on) == (verdict, value, decided_on)
    assert report.exit_code == (verdict != "pass") and report.results[0].used("latency").latency_ms == value


def test_only_the_close_metric_is_redecided(tmp_path, fast):
    (a,) = fake_files(tmp_path, "a.onnx")
    fake = FakeMeasure({"a.onnx": meas(10.0, 99.0)}, {"a.onnx": meas(30.0, 98.0)})
    report = check([a], fast, fake, budgets={"max_latency_ms": 50, "max_memory_mb": 100})
    lat, mem = report.results[0].checks
    assert mem.marginal and mem.value == 98.0 and mem.verdict == "marginal pass"
    assert not lat.marginal and not lat.remeasured and lat.value == 10.0  # latency keeps its first value
    assert report.to_json()["results"][0]["latency_ms"] == 10.0


def test_failed_remeasurement_keeps_the_first_verdict(tmp_path, fast):
    (a,) = fake_files(tmp_path, "a.onnx")
    fake = FakeMeasure({"a.onnx": meas(50.1, converged=True)}, {"a.onnx": Measurement.failure("timed out after 60 s")})
    report = check([a], fast, fake, budgets={"max_latency_ms": 50})
    c = report.results[0].checks[0]
    assert c.verdict == "marginal fail" and c.value == 50.1 and not c.remeasured
    assert any("re-measurement failed (timed out" in n for n in c.notes)


def test_a_model_that_cannot_be_measured_fails_the_gate(tmp_path, fast):
    a, b = fake_files(tmp_path, "a.onnx", "b.onnx")
    fake = FakeMeasure({"a.onnx": Measurement.failure("failed to load: protobuf parsing failed"), "b.onnx": meas()})
    report = check([a, b], fast, fake, budgets={"max_latency_ms": 50, "max_memory_mb": 500})
    assert report.exit_code == 1
    assert [c.verdict for c in report.results[0].checks] == ["ERROR", "ERROR"]
    out = report.to_json()["results"][0]
    assert not out["ok"] and out["error"].startswith("failed to load") and out["latency_ms"] is None
    suite = junit_suite(report, tmp_path)
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("4", "2", "0")
    error = junit_cases(report, tmp_path)["a.onnx latency"].find("error")
    assert error.get("type") == "MeasurementFailed" and "protobuf parsing failed" in error.get("message")


# ---------------------------------------------------------------------------------------------
# Budgets: file, command line, device profile
# ---------------------------------------------------------------------------------------------
def write_budgets(tmp_path, text, name="budgets.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


BUDGETS = """\
[[model]]
path = "models/a.onnx"
[model.budgets.fast]
max_latency_ms = 50
[model.budgets.arm64]
max_latency_ms = 400

[[model]]
path = "models/b.onnx"
shapes = { x = "1x8x64" }
[model.budgets.fast]
max_latency_ms = 5
max_memory_mb = 300

[[model]]
path = "models/c.onnx"
[model.budgets.arm64]
max_memory_mb = 100
"""


@pytest.fixture
def budget_models(tmp_path):
    (tmp_path / "models").mkdir()
    fake_files(tmp_path / "models", "a.onnx", "b.onnx", "c.onnx", "d.onnx")
    return write_budgets(tmp_path, BUDGETS)


def test_budgets_file_paths_are_relative_to_it_and_models_without_this_device_are_skipped(
        budget_models, fast, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path / "models")  # anywhere: paths are relative to the file
    fake = FakeMeasure({"a.onnx": meas(40.0), "b.onnx": meas(4.0, 400.0)})
    report = check([], fast, fake, budgets_file=budget_models)
    assert verdicts(report) == {("a.onnx", "latency"): "pass", ("b.onnx", "latency"): "pass",
                                ("b.onnx", "memory"): "FAIL"}
    assert fake.calls[0][2] == [{}, {"x": [1, 8, 64]}]  # the file's shapes reach the runner
    assert [m for m, _ in report.skipped] == ["c.onnx"]  # shown relative to the working directory
    assert report.results[0].target.budgets.sources["max_latency_ms"] == str(budget_models)
    suite = junit_suite(report, tmp_path)
    assert (suite.get("tests"), suite.get("failures"), skipped_cases(suite)) == ("4", "1", 1)


def test_budget_precedence_file_then_flags_then_profile(budget_models, fast, tmp_path):
    profile = fast.replace(max_latency_ms=7.0, max_memory_mb=700.0)
    a, b = tmp_path / "models/a.onnx", tmp_path / "models/b.onnx"
    fake = FakeMeasure({"a.onnx": meas(), "b.onnx": meas()})
    report = check([a, b], profile, fake, budgets_file=budget_models, budgets={"max_memory_mb": 250})
    (ra, rb) = report.results
    assert ra.target.budgets.to_dict() == {"max_latency_ms": 50.0, "max_memory_mb": 250.0}  # file, flag
    assert rb.target.budgets.to_dict() == {"max_latency_ms": 5.0, "max_memory_mb": 300.0}  # file wins over the flag
    assert rb.target.budgets.sources["max_memory_mb"] == str(budget_models)
    # no file: flags, then the profile's own [budgets]
    report = check([a], profile, FakeMeasure({"a.onnx": meas()}), budgets={"max_latency_ms": 20})
    assert report.results[0].target.budgets.to_dict() == {"max_latency_ms": 20.0, "max_memory_mb": 700.0}
    assert report.results[0].target.budgets.sources["max_memory_mb"] == "device profile fast"


def test_no_budget_at_all_is_bad_input(budget_models, fast, tmp_path):
    with pytest.raises(LtsedgeError, match="no budget for .*a.onnx on device 'fast'"):
        check([tmp_path / "models/a.onnx"], fast, FakeMeasure())
    with pytest.raises(LtsedgeError, match=r"no budget for .*c.onnx on device 'fast'.*\[model\.budgets\.fast\]"):
        check([tmp_path / "models/c.onnx"], fast, FakeMeasure(), budgets_file=budget_models)
    with pytest.raises(LtsedgeError, match="no model with budgets for device 'cuda'.*arm64, fast"):
        check([], fast.replace(name="cuda"), FakeMeasure(), budgets_file=budget_models)


def test_model_missing_from_the_budgets_file(budget_models, fast, tmp_path):
    d = tmp_path / "models/d.onnx"
    with pytest.raises(LtsedgeError, match="d.onnx is not in the budgets file .*budgets.toml"):
        check([d], fast, FakeMeasure(), budgets_file=budget_models)
    report = check([d], fast, FakeMeasure({"d.onnx": meas(30.0)}), budgets_file=budget_models,
                   budgets={"max_latency_ms": 20})
    assert verdicts(report) == {("d.onnx", "latency"): "FAIL"}  # the command-line budget applies


@pytest.mark.parametrize("text, message", [
    ("[[model]\npath = 'a.onnx'", "malformed TOML"),
    ("colour = 1\n[[model]]\npath = 'models/a.onnx'", "unknown key 'colour' at the top level"),
    ("[[model]]\npath = 'models/a.onnx'\nbudget = 1", "unknown key 'budget' .*allowed: path, shapes, budgets"),
    ("[[model]]\npath = 'models/a.onnx'\n[model.budgets.fast]\nmax_latency = 5",
     r"unknown key 'max_latency' in \[model.budgets.fast\]"),
    ("[[model]]\npath = 'models/a.onnx'\n[model.budgets.fast]\nmax_latency_ms = '50'",
     "budgets.fast.max_latency_ms = \"50\" has the wrong type: expected a number"),
    ("[[model]]\npath = 'models/a.onnx'\n[model.budgets.fast]\nmax_memory_mb = -1", "out of range: must be a positive"),
    ("[[model]]\npath = 'models/a.onnx'\n[model.budgets.fast]\nmax_memory_mb = true", "wrong type"),
    ("[[model]]\npath = 'models/a.onnx'\nbudgets = { fast = 5 }", r"budgets.fast = 5 must be a table"),
    ("[[model]]\npath = 'models/a.onnx'\nshapes = { x = '1xfoo' }",
     "shapes.x = \"1xfoo\": expected positive dimensions"),
    ("[[model]]\n[model.budgets.fast]\nmax_latency_ms = 5", r"\[\[model\]\] #1: missing path"),
    ("[[model]]\npath = 3", "path = 3: expected the model file's path"),
    ("[[model]]\npath = 'models/a.onnx'\n[[model]]\npath = './models/../models/a.onnx'", "repeats path"),
    ("model = 'a.onnx'", "'model' must be an array of tables"),
    ("", r"no \[\[model\]\] entries"),
])
def test_malformed_budget_files_are_bad_input(tmp_path, text, message):
    (tmp_path / "models").mkdir(exist_ok=True)
    path = write_budgets(tmp_path, text)
    with pytest.raises(LtsedgeError, match=message) as e:
        load_budgets(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_missing_files_and_bad_flags_are_bad_input(tmp_path, fast):
    (a,) = fake_files(tmp_path, "a.onnx")
    with pytest.raises(LtsedgeError, match="model file not found: .*nope.onnx"):
        check([a, tmp_path / "nope.onnx"], fast, FakeMeasure(), budgets={"max_latency_ms": 5})
    with pytest.raises(LtsedgeError, match="budgets file not found"):
        check([a], fast, FakeMeasure(), budgets_file=tmp_path / "nope.toml")
    with pytest.raises(LtsedgeError, match="--max-latency-ms = 0 is out of range"):
        check([a], fast, FakeMeasure(), budgets={"max_latency_ms": 0})
    with pytest.raises(LtsedgeError, match="no model to check"):
        check([], fast, FakeMeasure(), budgets={"max_latency_ms": 5})
    with pytest.raises(LtsedgeError, match="unknown device profile 'tpu'"):
        run_check([a], "tpu", budgets={"max_latency_ms": 5}, log=quiet)


# ---------------------------------------------------------------------------------------------
# Regression mode
# ---------------------------------------------------------------------------------------------
def previous_check_json(profile, results, **fp_changes):
    return {"tool": "ltsedge check", "device": profile.name, "fingerprint": fake_fingerprint(profile, **fp_changes),
            "results": results}


def write_json(tmp_path, data, name="previous.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_regression_against_previous_check_json(tmp_path, fast, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake_files(tmp_path, "a.onnx", "b.onnx")
    prev = write_json(tmp_path, previous_check_json(fast, [
        {"model": "a.onnx", "latency_ms": 10.0, "peak_memory_mb": 100.0},
        {"model": "./b.onnx", "latency_ms": 10.0, "peak_memory_mb": 100.0},
    ]))
    fake = FakeMeasure({"a.onnx": meas(12.0, 101.0), "b.onnx": meas(10.2, 99.0)})
    report = check(["a.onnx", "b.onnx"], fast, fake, budgets={"max_latency_ms": 50}, against=prev)
    assert verdicts(report) == {
        ("a.onnx", "latency"): "pass", ("a.onnx", "latency vs previous"): "FAIL",  # +20% > 10%
        ("a.onnx", "memory vs previous"): "pass",
        ("b.onnx", "latency"): "pass", ("b.onnx", "latency vs previous"): "pass",
        ("b.onnx", "memory vs previous"): "pass"}
    assert report.exit_code == 1
    reg = report.to_json()["results"][0]["regression"]
    assert reg["matched_by"] == "path" and reg["previous_latency_ms"] == 10.0
    assert reg["latency_change"] == pytest.approx(0.2)
    case = junit_cases(report, tmp_path)["a.onnx latency regression"]
    assert case.find("failure").get("type") == "Regression"
    assert case.find("failure").get("message").startswith(
        "latency 12.0 ms > regression limit 11.0 ms (previous 10.0 ms, +20.0%)")
    # a looser --max-regression lets it through
    loose = check(["a.onnx"], fast, FakeMeasure({"a.onnx": meas(12.0, 101.0)}), budgets={"max_latency_ms": 50},
                  against=prev, max_regression=0.25)
    assert loose.exit_code == 0


def test_regression_against_profile_json_lines_and_matching(tmp_path, fast, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b, c = fake_files(tmp_path, "a.onnx", "b.onnx", "c.onnx")
    from ltsedge.check.model_files import inspect_model

    fp = fake_fingerprint(fast)
    lines = [  # what `ltsedge profile --json >> previous.jsonl` collects, from another checkout
        {"model": "/elsewhere/renamed.onnx", "ok": True, "latency_ms": 1.0, "peak_memory_mb": 100.0,
         "fingerprint": fp, "sha256": inspect_model(a).sha256},
        {"model": "/ci/work/models/b.onnx", "ok": True, "latency_ms": 100.0, "peak_memory_mb": 100.0,
         "fingerprint": fp},
        {"model": "other.onnx", "ok": False, "latency_ms": None, "peak_memory_mb": None, "fingerprint": fp},
    ]
    prev = write_json(tmp_path, "\n".join(json.dumps(x) for x in lines), "previous.jsonl")
    fake = FakeMeasure({"a.onnx": meas(5.0, 10.0), "b.onnx": meas(5.0, 10.0), "c.onnx": meas(5.0, 10.0)})
    report = check(["a.onnx", "b.onnx", "c.onnx"], fast, fake, budgets={"max_latency_ms": 50}, against=prev)
    ra, rb, rc = report.results
    assert (ra.matched_by, rb.matched_by, rc.matched_by) == ("sha256", "file name", None)
    assert verdicts(report)[("a.onnx", "latency vs previous")] == "FAIL"  # 1 ms -> 5 ms
    assert verdicts(report)[("b.onnx", "latency vs previous")] == "pass"
    assert [ch.kind for ch in rc.checks] == ["budget"] and "no regression check" in rc.notes[0]


def test_different_machine_is_refused_unless_forced(tmp_path, fast):
    (a,) = fake_files(tmp_path, "a.onnx")
    prev = write_json(tmp_path, previous_check_json(fast, [{"model": str(a), "latency_ms": 10.0}],
                                                    cpu_model="Cortex-A72", arch="aarch64"))
    here = fake_fingerprint(fast)
    with pytest.raises(LtsedgeError) as e:
        check([a], fast, FakeMeasure(), budgets={"max_latency_ms": 50}, against=prev)
    message = str(e.value)
    assert "Cortex-A72" in message and "Test CPU 9000" in message and "--force" in message
    assert fingerprint_hash(here) in message and "\n" not in message
    report = check([a], fast, FakeMeasure({"a.onnx": meas(10.5)}), budgets={"max_latency_ms": 50}, against=prev,
                   force=True)
    assert report.exit_code == 0 and report.forced and any("across machines" in n for n in report.notes)
    assert verdicts(report)[("a.onnx", "latency vs previous")] == "pass"


def test_other_workload_settings_are_refused_unless_forced(tmp_path, fast):
    (a,) = fake_files(tmp_path, "a.onnx")
    data = previous_check_json(fast, [{"model": str(a), "latency_ms": 10.0}])
    data["fingerprint"]["settings"]["sequence"] = 192
    prev = write_json(tmp_path, data)
    with pytest.raises(LtsedgeError, match="sequence = 192 then, 16 now"):
        check([a], fast, FakeMeasure(), budgets={"max_latency_ms": 50}, against=prev)
    assert check([a], fast, FakeMeasure({"a.onnx": meas(10.0)}), budgets={"max_latency_ms": 50}, against=prev,
                 force=True).passed


@pytest.mark.parametrize("text, message", [
    ("{not json", "malformed JSON"),
    ("", "is empty"),
    ('{"results": []}', "missing the 'fingerprint'"),
    ('{"fingerprint": {}, "results": {}}', "'results' must be a list"),
    ('{"fingerprint": {}, "results": [{"model": "a.onnx", "latency_ms": "fast"}]}',
     r"results\[0\]: latency_ms = \"fast\" must be a non-negative number"),
    ('{"fingerprint": {}, "results": [{"latency_ms": 1}]}', "'model' must be the model's path"),
    ('{"fingerprint": {}, "latency": 3}', "neither `ltsedge check --json`"),
    ("[1, 2]", "expected a JSON object"),
])
def test_malformed_against_file_is_bad_input(tmp_path, fast, text, message):
    (a,) = fake_files(tmp_path, "a.onnx")
    prev = write_json(tmp_path, text)
    with pytest.raises(LtsedgeError, match=message):
        check([a], fast, FakeMeasure(), budgets={"max_latency_ms": 50}, against=prev)


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------
JUNIT_SCHEMA = Path(__file__).parent / "data" / "junit-10.xsd"


def junit_suite(report, tmp_path):
    """The report's root, after checking it against Jenkins' junit-10.xsd and its totals against its suites."""
    import xmlschema

    path = tmp_path / "out" / "report.xml"
    report.write_junit(path)
    xmlschema.XMLSchema(str(JUNIT_SCHEMA)).validate(str(path))
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("name") == "ltsedge check"
    suites = root.findall("testsuite")
    for key in ("tests", "failures", "errors"):
        assert int(root.get(key)) == sum(int(s.get(key)) for s in suites)
    return root


def skipped_cases(root):
    return sum(1 for case in root.iter("testcase") if case.find("skipped") is not None)


def junit_cases(report, tmp_path):
    """Test cases by name, without the models' directories."""
    return {case.get("name").rsplit("/", 1)[-1]: case for case in junit_suite(report, tmp_path).iter("testcase")}


def test_junit_counts_and_structure(tmp_path, fast):
    a, b, c = fake_files(tmp_path, "a.onnx", "b.onnx", "c.onnx")
    fake = FakeMeasure({"a.onnx": meas(40.0, 100.0), "b.onnx": meas(60.0, 100.0),
                        "c.onnx": Measurement.failure("worker died (signal SIGSEGV)")})
    report = check([a, b, c], fast, fake, budgets={"max_latency_ms": 50, "max_memory_mb": 80})
    suite = junit_suite(report, tmp_path)
    cases = list(suite.iter("testcase"))
    failures = [x for x in cases if x.find("failure") is not None]
    errors = [x for x in cases if x.find("error") is not None]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), skipped_cases(suite)) == (
        str(len(cases)), str(len(failures)), str(len(errors)), 0)
    assert (len(cases), len(failures), len(errors)) == (6, 3, 2)
    assert {x.get("classname") for x in cases} == {"ltsedge.check.fast"}
    assert {x.get("name") for x in cases} == {f"{p} {m}" for p in (a.as_posix(), b.as_posix(), c.as_posix())
                                             for m in ("latency", "memory")}
    failure = next(x for x in failures if x.get("name").endswith("b.onnx latency")).find("failure")
    assert failure.get("type") == "BudgetExceeded" and failure.get("message").startswith("latency 60.0 ms > budget 50.0 ms")
    assert "median 60.0 ms" in failure.text
    assert all(x.find("system-out") is not None for x in cases)
    assert float(suite.get("time")) >= 0 and "skipped" not in suite.attrib  # junit-10.xsd: no skipped here
    by_model = {s.get("name").rsplit("/", 1)[-1]: s for s in suite.findall("testsuite")}
    props = {p.get("name"): p.get("value") for p in by_model["b.onnx"].iter("property")}
    assert props["device"] == "fast" and props["fingerprint"] == fingerprint_hash(fake_fingerprint(fast))
    assert float(props["latency_ms"]) == 60.0 and float(props["peak_memory_mb"]) == 100.0  # measured figures
    assert props["sha256"] == report.results[1].sha256
    assert "latency_ms" not in {p.get("name") for p in by_model["c.onnx"].iter("property")}  # not measured


def test_json_report_is_serialisable_and_complete(tmp_path, fast, capsys):
    (a,) = fake_files(tmp_path, "a.onnx")
    report = check([a], fast, FakeMeasure({"a.onnx": meas(12.0, 55.0)}),
                   budgets={"max_latency_ms": 50, "max_memory_mb": 80})
    data = json.loads(json.dumps(report.to_json()))
    assert data["passed"] is True and data["exit_code"] == 0 and data["device"] == "fast"
    assert data["fingerprint_hash"] == fingerprint_hash(fake_fingerprint(fast))
    r = data["results"][0]
    for key in ("model", "path", "sha256", "latency_ms", "latency_p90_ms", "latency_cv", "peak_memory_mb",
                "budgets", "verdicts", "marginal", "regression"):
        assert key in r
    assert r["budgets"] == {"max_latency_ms": 50.0, "max_memory_mb": 80.0}
    assert r["verdicts"] == {"latency": "pass", "memory": "pass"} and r["latency_ms"] == 12.0
    report.render()
    out = capsys.readouterr().out
    assert "a.onnx" in out and "PASSED" in out and "+38.0 ms" in out


# ---------------------------------------------------------------------------------------------
# Real measurements (tiny models, fast profile)
# ---------------------------------------------------------------------------------------------
def test_real_models_pass_and_fail(models, fast):
    report = run_check(["tiny.onnx", "chain.onnx"], fast, budgets={"max_latency_ms": 1000, "max_memory_mb": 4096},
                       log=quiet)
    assert report.exit_code == 0, report.to_json()
    r = report.results[0]
    assert r.ok and r.architecture_id is not None and report.results[1].architecture_id is None
    assert 0 < r.measurement.latency_ms < 1000 and r.measurement.runs >= fast.min_runs
    report = run_check(["chain.onnx"], fast, budgets={"max_latency_ms": 1e-6}, log=quiet)
    assert report.exit_code == 1 and report.results[0].checks[0].verdict == "FAIL"


def test_real_marginal_memory_is_remeasured(models, fast):
    """A budget a tenth of a MB above the model's measured peak is within its noise band: measured again."""
    calls = []

    def spy(profile, jobs):
        calls.append(profile)
        return measure_with_runner(profile, jobs)

    (first,) = measure_with_runner(fast, [(models / "chain.onnx", {})])
    assert first.ok and first.memory_method == "fresh_process"
    report = run_check(["chain.onnx"], fast, budgets={"max_memory_mb": first.peak_memory_mb + 0.1}, measure=spy,
                       log=quiet)
    c = report.results[0].checks[0]
    assert len(calls) == 2 and calls[1].min_runs == 2 * fast.min_runs
    assert c.marginal and c.remeasured and c.verdict in ("marginal pass", "marginal fail")
    (again,) = report.results[0].remeasurements  # memory: once
    assert again.ok and c.value == again.peak_memory_mb


def test_onnx_helper_model_shapes(models, fast):
    report = run_check(["chain.onnx"], fast, budgets={"max_latency_ms": 1000}, shapes={"x": [2, 8, 64]}, log=quiet)
    assert report.passed and report.results[0].shapes == {"x": [2, 8, 64]}
    with pytest.raises(LtsedgeError, match="chain.onnx: input 'x': shape \\[1, 8\\] has 2 dimensions"):
        run_check(["chain.onnx"], fast, budgets={"max_latency_ms": 1000}, shapes={"x": [1, 8]}, log=quiet)
    with pytest.raises(LtsedgeError, match="--shape input_ids=...: no model has an input 'input_ids'"):
        run_check(["chain.onnx"], fast, budgets={"max_latency_ms": 1000}, shapes={"input_ids": [1, 8]}, log=quiet)
    # a --shape applies to the models that declare that input: tiny.onnx takes input_ids, chain.onnx x
    both = run_check(["tiny.onnx", "chain.onnx"], fast, budgets={"max_latency_ms": 1000},
                     shapes={"input_ids": [1, 8]}, log=quiet)
    assert [r.shapes for r in both.results] == [{"input_ids": [1, 8]}, {}] and both.passed


def test_model_that_crashes_the_runtime_fails_the_gate(models, fast, monkeypatch):
    proto = onnx.load(str(models / "chain.onnx"))
    helper.set_model_props(proto, {FAULT_KEY: "segv"})
    onnx.save(proto, str(models / "crash.onnx"))
    monkeypatch.setenv(TEST_FAULTS_ENV, "1")
    report = run_check(["crash.onnx", "tiny.onnx"], fast, budgets={"max_latency_ms": 1000}, log=quiet)
    assert report.exit_code == 1 and not report.results[0].ok and report.results[1].passed  # the next model is fine
    assert report.results[0].checks[0].verdict == "ERROR" and report.results[0].error


def test_broken_model_fails_the_gate_with_the_reason(models, fast):
    report = run_check(["broken.onnx", "chain.onnx"], fast, budgets={"max_latency_ms": 1000}, log=quiet)
    assert report.exit_code == 1
    assert report.results[0].checks[0].verdict == "ERROR" and "failed to load" in report.results[0].error
    assert report.results[1].passed


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------
def cli(*args, rc, cwd=None):
    """``ltsedge check ARGS`` as a real process: every call runs where its relative paths are."""
    proc = ltsedge_process("check", *args, cwd=cwd)
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc


def test_cli_pass_fail_junit_and_json(models):
    out = cli("tiny.onnx", "chain.onnx", "--device", "fast.toml", "--max-latency-ms", 1000, "--max-memory-mb", 4096,
              "--junit", "r/report.xml", rc=0, cwd=models)
    assert "PASSED" in out.stdout and "tiny.onnx" in out.stdout
    root = ET.parse(models / "r/report.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "0", "0")
    out = cli("tiny.onnx", "broken.onnx", "--device", "fast.toml", "--max-latency-ms", 1e-6, "--json",
              "--junit", "fail.xml", rc=1, cwd=models)
    data = json.loads(out.stdout)
    assert data["passed"] is False and data["exit_code"] == 1
    assert [r["verdicts"]["latency"] for r in data["results"]] == ["FAIL", "ERROR"]
    assert "failed to load" in data["results"][1]["error"]
    root = ET.parse(models / "fail.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "1")


def test_cli_regression_round_trip_and_fingerprints(models):
    out = cli("tiny.onnx", "--device", "fast.toml", "--max-latency-ms", 1000, "--json", rc=0, cwd=models)
    data = json.loads(out.stdout)
    assert data["fingerprint_hash"] == fingerprint_hash(machine_fingerprint())
    # a much faster previous run: a regression (exit 1)
    faster = json.loads(out.stdout)
    faster["results"][0]["latency_ms"] /= 1000
    faster["results"][0]["measurement"]["latency_ratio"] /= 1000  # what is compared: drift-free ratios
    faster["results"][0]["peak_memory_mb"] = 10_000.0
    (models / "faster.json").write_text(json.dumps(faster))
    out = cli("tiny.onnx", "--device", "fast.toml", "--max-latency-ms", 1000, "--against", "faster.json", "--json",
              rc=1, cwd=models)
    r = json.loads(out.stdout)["results"][0]
    assert r["verdicts"] == {"latency": "pass", "latency_regression": "FAIL", "memory_regression": "pass"}
    assert r["verdicts"]["latency_regression"] == "FAIL" and r["regression"]["matched_by"] == "path"
    # another machine's (much slower) figures: refused, then compared with --force
    other = json.loads(json.dumps(data))
    other["results"][0]["latency_ms"] *= 1000
    other["results"][0]["measurement"]["latency_ratio"] *= 1000
    other["results"][0]["peak_memory_mb"] = 10_000.0
    other["fingerprint"].update(cpu_model="Raspberry Pi Cortex-A72", arch="aarch64")
    (models / "other.json").write_text(json.dumps(other))
    out = cli("tiny.onnx", "--device", "fast.toml", "--max-latency-ms", 1000, "--against", "other.json", rc=2,
              cwd=models)
    assert out.stderr.startswith("error: cannot compare: ") and "Cortex-A72" in out.stderr
    assert data["fingerprint"]["cpu_model"] in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = cli("tiny.onnx", "--device", "fast.toml", "--max-latency-ms", 1000, "--against", "other.json", "--force",
              rc=0, cwd=models)
    assert "across machines" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["missing.onnx", "--max-latency-ms", "5"], "model file not found: missing.onnx"),
    (["tiny.onnx", "--device", "tpu", "--max-latency-ms", "5"], "unknown device profile 'tpu'"),
    (["tiny.onnx"], "no budget for tiny.onnx on device 'fast'"),
    (["tiny.onnx", "--budgets", "bad.toml"], "malformed TOML"),
    (["tiny.onnx", "--budgets", "budgets.toml"], "tiny.onnx is not in the budgets file"),
    (["tiny.onnx", "--max-latency-ms", "5", "--against", "bad.json"], "malformed JSON"),
    (["tiny.onnx", "--max-latency-ms", "5", "--shape", "x=1x8"], "no model has an input 'x'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(models, args, message):
    (models / "bad.toml").write_text("[[model]\n")
    (models / "budgets.toml").write_text("[[model]]\npath = 'chain.onnx'\n[model.budgets.fast]\nmax_latency_ms = 5\n")
    (models / "bad.json").write_text("{")
    if "--device" not in args:
        args = [*args, "--device", "fast.toml"]
    out = cli(*args, rc=2, cwd=models)
    assert out.stderr.startswith("error: ") and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""


def test_cli_budgets_file_without_model_arguments(models):
    (models / "budgets.toml").write_text(
        "[[model]]\npath = 'chain.onnx'\n[model.budgets.fast]\nmax_latency_ms = 1000\n\n"
        "[[model]]\npath = 'tiny.onnx'\n[model.budgets.arm64]\nmax_latency_ms = 1\n")
    sub = models / "sub"
    sub.mkdir()
    out = cli("--budgets", "../budgets.toml", "--device", "../fast.toml", "--junit", "r.xml", rc=0, cwd=sub)
    assert "skipped" in out.stdout and "no budgets for device 'fast'" in out.stdout
    root = ET.parse(sub / "r.xml").getroot()
    assert (root.get("tests"), skipped_cases(root), root.get("failures")) == ("2", 1, "0")


def test_a_previous_model_is_claimed_once_by_its_strongest_match(tmp_path, fast, monkeypatch):
    """x/model.onnx is in the run and matched by path: y/model.onnx must not be compared with it by name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    fake_files(tmp_path, "x/model.onnx", "y/model.onnx")
    fp = fake_fingerprint(fast)
    prev = write_json(tmp_path, json.dumps({"model": "x/model.onnx", "ok": True, "latency_ms": 5.0,
                                            "peak_memory_mb": 100.0, "fingerprint": fp}), "previous.json")
    fake = FakeMeasure({"model.onnx": meas(15.0, 100.0)})  # both files measure 15 ms
    report = check(["y/model.onnx", "x/model.onnx"], fast, fake, budgets={"max_latency_ms": 50}, against=prev)
    ry, rx = report.results
    assert rx.matched_by == "path" and ry.matched_by is None
    assert [c.kind for c in ry.checks] == ["budget"]  # not a +200% "regression" of another model
    assert verdicts(report)[("model.onnx", "latency vs previous")] == "FAIL"  # x itself did regress: 5 -> 15 ms


def test_latency_regressions_compare_ratios_not_drifting_milliseconds(tmp_path, fast, monkeypatch):
    """The machine ran 30% slower this time (the reference too): the model did not regress."""
    monkeypatch.chdir(tmp_path)
    (a,) = fake_files(tmp_path, "a.onnx")
    fp = fake_fingerprint(fast)
    prev = write_json(tmp_path, json.dumps({"model": "a.onnx", "ok": True, "latency_ms": 10.0, "latency_ratio": 2.0,
                                            "calibration_ms": 5.0, "peak_memory_mb": 100.0,
                                            "memory_method": "no_reset", "fingerprint": fp}), "prev.json")
    now = meas(13.0, 200.0)
    now.latency_ratio, now.calibration_ms, now.memory_method = 2.0, 6.5, "fresh_process"
    report = check(["a.onnx"], fast, FakeMeasure({"a.onnx": now}), budgets={"max_latency_ms": 50}, against=prev)
    (r,) = report.results
    lat = next(c for c in r.checks if c.kind == "regression")
    assert lat.verdict == "pass" and lat.previous == pytest.approx(13.0)  # 2.0 x this run's 6.5 ms
    assert [c.metric for c in r.checks if c.kind == "regression"] == ["latency"]  # memory: other method
    assert any("another method" in n for n in r.notes)


def test_benchmark_json_is_github_action_benchmark_s_custom_smaller_is_better(tmp_path, fast):
    a, b = fake_files(tmp_path, "a.onnx", "b.onnx")
    fake = FakeMeasure({"a.onnx": meas(12.0, 55.0), "b.onnx": Measurement.failure("failed to load: x", "model")})
    report = check([a, b], fast, fake, budgets={"max_latency_ms": 50, "max_memory_mb": 80})
    report.write_benchmark_json(tmp_path / "out" / "bench.json")
    entries = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [e["name"].rsplit("/", 1)[-1] for e in entries] == ["a.onnx latency", "a.onnx memory"]  # b not measured
    for e in entries:
        assert set(e) == {"name", "unit", "value", "range", "extra"} and isinstance(e["value"], float)
    assert entries[0]["unit"] == "ms" and entries[0]["value"] == 12.0 and entries[0]["range"].startswith("±")
    assert entries[1]["unit"] == "MB" and entries[1]["value"] == 55.0


# ---------------------------------------------------------------------------------------------
# --against compares like with like: variant, precision and the settings a figure depends on
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kinds_dir(tmp_path_factory):
    """One architecture as a forward model, a generate model, an int8 forward model and an int8 generate model."""
    from ltsedge.exporters.options import ExportOptions

    d = tmp_path_factory.mktemp("check-kinds")
    arch = Architecture(n_layer=1, d_model=32, n_head=[2], d_inner=[64], vocab_size=200, n_positions=64)
    export_model(arch).save(d / "forward.onnx")
    export_model(arch, ExportOptions(variant="generate")).save(d / "generate.onnx")
    export_model(arch, ExportOptions(precision="int8")).save(d / "int8.onnx")
    export_model(arch, ExportOptions(variant="generate", precision="int8")).save(d / "generate-int8.onnx")
    return d


def previous_of(report, rename=None):
    """``check --json`` of ``report`` as --against reads it, each model renamed as ``rename`` says (and then
    matched by architecture id: another build of the same architecture, its hash unknown)."""
    data = report.to_json()
    for r in data["results"]:
        if r["model"] in (rename or {}):
            r["model"], r["sha256"] = rename[r["model"]], None
    return data


def kinds_check(kinds_dir, names, profile, against=None, **kw):
    paths = [kinds_dir / n for n in names]
    fake = FakeMeasure({n: meas(10.0, 100.0) for n in names})
    return check([str(p) for p in paths], profile, fake, budgets={"max_latency_ms": 50}, against=against, **kw)


@pytest.mark.parametrize("then, now", [("generate.onnx", "forward.onnx"), ("forward.onnx", "generate.onnx")])
def test_another_variant_of_the_same_architecture_never_compares(kinds_dir, tmp_path, fast, then, now):
    """Matched by architecture id, a decode step's figure was compared with a forward pass's (-96%, +2776%)."""
    first = kinds_check(kinds_dir, [then], fast)
    prev = write_json(tmp_path, previous_of(first, {str(kinds_dir / then): "elsewhere/model.onnx"}))
    for force in (False, True):
        with pytest.raises(LtsedgeError) as e:
            kinds_check(kinds_dir, [now], fast, against=prev, force=force)
        message = str(e.value)
        assert "variant = " in message and "architecture id" in message and "\n" not in message


def test_another_precision_is_refused_unless_forced_and_the_same_one_is_preferred(kinds_dir, tmp_path, fast):
    fp32 = previous_of(kinds_check(kinds_dir, ["forward.onnx"], fast), {str(kinds_dir / "forward.onnx"): "a.onnx"})
    prev = write_json(tmp_path, fp32)
    with pytest.raises(LtsedgeError, match="precision = fp32 then, int8 now"):
        kinds_check(kinds_dir, ["int8.onnx"], fast, against=prev)
    forced = kinds_check(kinds_dir, ["int8.onnx"], fast, against=prev, force=True)
    assert any("precision = fp32 then, int8 now" in n for n in forced.notes)
    # a file that holds both: the int8 model is compared with the int8 entry, whichever comes last
    int8 = previous_of(kinds_check(kinds_dir, ["int8.onnx"], fast), {str(kinds_dir / "int8.onnx"): "b.onnx"})
    both = write_json(tmp_path, "\n".join(json.dumps(x) for x in (int8, fp32)), "both.jsonl")
    (result,) = kinds_check(kinds_dir, ["int8.onnx"], fast, against=both).results
    assert (result.previous.model, result.matched_by) == ("b.onnx", "architecture id")


@pytest.mark.parametrize("setting, value", [("context", 900), ("decode_reference", "none"), ("huge_pages", True),
                                            ("malloc_mmap_threshold_kb", 4096)])
def test_a_setting_that_changes_a_figure_is_refused_unless_forced(kinds_dir, tmp_path, fast, setting, value):
    """A profile with context = 900 read the same bundle as a +80% latency regression."""
    prev = write_json(tmp_path, previous_of(kinds_check(kinds_dir, ["generate.onnx"], fast)))
    other = fast.replace(**{setting: value})
    with pytest.raises(LtsedgeError, match=f"{setting} = .* then, {value!r} now"):
        kinds_check(kinds_dir, ["generate.onnx"], other, against=prev)
    assert kinds_check(kinds_dir, ["generate.onnx"], other, against=prev, force=True).passed
    assert kinds_check(kinds_dir, ["generate.onnx"], fast, against=prev).results[0].matched_by == "path"


def test_a_generate_record_of_before_genais_loop_was_a_sessions_figure(kinds_dir, tmp_path, fast):
    """A record written before generation bundles were timed in onnxruntime-genai's loop holds a plain session's
    figure: against genai's now it is another figure, refused unless forced, and the message says which."""
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    data = previous_of(kinds_check(kinds_dir, ["generate.onnx"], fast))
    for r in data["results"]:
        assert r["settings"]["loop"].startswith("onnxruntime-genai ")
        del r["settings"]["loop"]
    prev = write_json(tmp_path, data)
    with pytest.raises(LtsedgeError, match="loop = 'onnxruntime session' then, 'onnxruntime-genai .* Generator' now"):
        kinds_check(kinds_dir, ["generate.onnx"], fast, against=prev)
    assert kinds_check(kinds_dir, ["generate.onnx"], fast, against=prev, force=True).results[0].previous


def test_a_record_without_the_decode_context_does_not_compare_a_generate_model(kinds_dir, tmp_path, fast):
    """Records written before the context was kept: a later setting left out was at its old value, but the
    context of a generate model is unknown."""
    data = previous_of(kinds_check(kinds_dir, ["generate.onnx"], fast))
    for r in data["results"]:
        del r["settings"], r["variant"]
        r["measurement"]["workload"] = "decode"  # a generate model's figures say so
    prev = write_json(tmp_path, data)
    with pytest.raises(LtsedgeError, match="context not recorded then, 192 now"):
        kinds_check(kinds_dir, ["generate.onnx"], fast, against=prev)
    data = previous_of(kinds_check(kinds_dir, ["forward.onnx"], fast))
    for r in data["results"]:
        del r["settings"], r["variant"]
    data["fingerprint"]["settings"].pop("huge_pages", None)  # before huge_pages: it was off
    assert kinds_check(kinds_dir, ["forward.onnx"], fast, against=write_json(tmp_path, data)).results[0].previous


@pytest.mark.parametrize("order", [1, -1])
def test_a_model_takes_the_entry_of_its_own_variant_whatever_the_order(kinds_dir, tmp_path, fast, order):
    """A file of one architecture's fp32 generate and forward entries: the int8 generate model compares with
    the generate entry under --force; the forward entry, last in the file, had been taken and refused."""
    names = ["generate.onnx", "forward.onnx"][::order]
    data = previous_of(kinds_check(kinds_dir, names, fast), {str(kinds_dir / n): f"old/{n}" for n in names})
    prev = write_json(tmp_path, data)
    forced = kinds_check(kinds_dir, ["generate-int8.onnx"], fast, against=prev, force=True)
    (result,) = forced.results
    assert (result.previous.model, result.matched_by) == ("old/generate.onnx", "architecture id")
    assert any("precision = fp32 then, int8 now" in n for n in forced.notes)
    with pytest.raises(LtsedgeError, match=r"precision = fp32 then, int8 now\); pass --force"):
        kinds_check(kinds_dir, ["generate-int8.onnx"], fast, against=prev)


@pytest.mark.parametrize("order", [1, -1])
def test_the_model_of_the_same_kind_gets_the_entry_whichever_model_comes_first(kinds_dir, tmp_path, fast, order):
    """One fp32 generate entry and both generate models in the run: the fp32 one compares with it, the int8
    one has no entry (first, it had taken the fp32 model's entry and been refused for its precision)."""
    data = previous_of(kinds_check(kinds_dir, ["generate.onnx"], fast), {str(kinds_dir / "generate.onnx"): "g.onnx"})
    names = ["generate-int8.onnx", "generate.onnx"][::order]
    report = kinds_check(kinds_dir, names, fast, against=write_json(tmp_path, data))
    int8, fp32 = report.results[::order]
    assert (fp32.previous.model, fp32.matched_by) == ("g.onnx", "architecture id")
    assert int8.previous is None and "no regression check" in int8.notes[0]


def old_profile_record(kinds_dir, model, sha256, fast):
    """`profile --json` of an ONNX file before it recorded its figures' kind: precision null, no settings."""
    from ltsedge.check.model_files import inspect_model

    return {"model": model, "sha256": sha256, "variant": "forward", "precision": None, "ok": True,
            "latency_ms": 10.0, "peak_memory_mb": 100.0, "shapes": None, "fingerprint": fake_fingerprint(fast),
            "architecture_id": inspect_model(kinds_dir / "forward.onnx").architecture_id}


def test_a_record_without_a_precision_reads_it_where_the_file_says(kinds_dir, tmp_path, fast, monkeypatch):
    """`profile --json` wrote "precision": null for an ONNX file: a forward fp32 model was refused."""
    from ltsedge.check.model_files import inspect_model

    monkeypatch.chdir(tmp_path)
    sha = inspect_model(kinds_dir / "forward.onnx").sha256
    # the record's sha256 is the model's: the same bytes, the same precision (its file is elsewhere now)
    prev = write_json(tmp_path, old_profile_record(kinds_dir, "/ci/gone/forward.onnx", sha, fast), "same.json")
    (result,) = kinds_check(kinds_dir, ["forward.onnx"], fast, against=prev).results
    assert result.matched_by == "sha256" and result.previous.kind.precision == "fp32"
    # a rebuild of the model: the file the record names still holds the recorded bytes, and says fp32
    rebuilt = onnx.load(str(kinds_dir / "forward.onnx"))
    rebuilt.doc_string = "rebuilt"
    onnx.save(rebuilt, str(tmp_path / "rebuilt.onnx"))
    prev = write_json(tmp_path, old_profile_record(kinds_dir, str(kinds_dir / "forward.onnx"), sha, fast), "named.json")
    fake = FakeMeasure({"rebuilt.onnx": meas(10.0, 100.0)})
    (result,) = check(["rebuilt.onnx"], fast, fake, budgets={"max_latency_ms": 50}, against=prev).results
    assert result.matched_by == "architecture id" and result.previous.kind.precision == "fp32"
    # the same file read for an int8 model: another precision, not an unknown one
    with pytest.raises(LtsedgeError, match="precision = fp32 then, int8 now"):
        kinds_check(kinds_dir, ["int8.onnx"], fast, against=prev)
    # neither the model's bytes nor a file holding them: unknown, compared only with --force
    prev = write_json(tmp_path, old_profile_record(kinds_dir, "rebuilt.onnx", sha, fast), "changed.json")
    with pytest.raises(LtsedgeError, match=r"precision = not recorded then, fp32 now\); pass --force") as e:
        check(["rebuilt.onnx"], fast, FakeMeasure(), budgets={"max_latency_ms": 50}, against=prev)
    assert "\n" not in str(e.value)
    assert check(["rebuilt.onnx"], fast, fake, budgets={"max_latency_ms": 50}, against=prev, force=True).passed


def test_profile_json_records_what_its_figures_are_of(kinds_dir, tmp_path):
    from ltsedge.profiling import profile_model

    fast_profile = load_profile("cpu").replace(name="fast", **FAST)
    r = profile_model(kinds_dir / "int8.onnx", fast_profile, store_path=tmp_path / "s.db")
    assert (r["variant"], r["precision"]) == ("forward", "int8")
    assert r["settings"]["sequence"] == 16 and "context" not in r["settings"]
    r = profile_model(kinds_dir / "generate.onnx", fast_profile, store_path=tmp_path / "s.db")
    assert (r["variant"], r["precision"], r["settings"]["context"]) == ("generate", "fp32", 192)
