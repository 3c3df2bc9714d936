"""The workload table (ltsedge/workloads.py) is the one place a workload is declared: the runner's
figures, the search's objectives, check's budgets and the report all follow it."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest

from ltsedge.check import load_budgets, run_check
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.report.data import LATENCIES
from ltsedge.runners import Measurement
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.workloads import PRIMARY_WORKLOAD, WORKLOADS, timed_on
from tests.helpers import fake_fingerprint, meas

FAST = load_profile("cpu").replace(name="fast")


def test_each_figure_is_a_measurement_field_and_a_report_latency():
    fields = {f.name for f in dataclasses.fields(Measurement)}
    for w in WORKLOADS.values():
        assert w.figure in fields, w
        assert LATENCIES[w.figure] == w.label
    assert PRIMARY_WORKLOAD in WORKLOADS


def test_a_variant_is_timed_on_its_workloads_in_table_order():
    assert timed_on("forward") == ("forward",)
    assert timed_on("generate") == ("prefill", "decode")
    assert timed_on("something else") == ("forward",)  # a foreign model: one full pass
    for w in WORKLOADS.values():
        sizes = w.axes(FAST)
        assert sizes["batch"] == FAST.batch and all(isinstance(v, int) for v in sizes.values())


def test_the_search_optimises_exactly_the_table(tmp_path):
    for name in WORKLOADS:
        settings, _ = resolve(SearchOptions(preset="smoke", objective=name, out=tmp_path))
        assert settings.objective == name
    with pytest.raises(LtsedgeError, match=f"is not one of {', '.join(WORKLOADS)}$"):
        resolve(SearchOptions(preset="smoke", objective="encode", out=tmp_path))


def generated(profile, jobs):
    """A generate model's figures: every workload's latency set, distinct."""
    m = meas(10.0, 100.0)
    return [dataclasses.replace(m, prefill_latency_ms=20.0, decode_latency_ms=10.0) for _ in jobs]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_each_budget_key_gates_its_figure_from_the_api_and_the_budgets_file(tmp_path, name):
    w = WORKLOADS[name]
    model = tmp_path / "a.onnx"
    model.write_bytes(b"not parsed: measured by the fake")
    common = dict(measure=generated, log=lambda line: None, fingerprint=fake_fingerprint(FAST))
    given = run_check([model], FAST, budgets={w.budget: 15.0}, **common)
    (tmp_path / "budgets.toml").write_text(f"[[model]]\npath = 'a.onnx'\n[model.budgets.fast]\n{w.budget} = 15\n")
    assert load_budgets(tmp_path / "budgets.toml").models[0].budgets == {"fast": {w.budget: 15.0}}
    from_file = run_check([], FAST, budgets_file=tmp_path / "budgets.toml", **common)
    for report in (given, from_file):
        [check] = report.results[0].checks
        assert check.metric == w.metric and check.limit == 15.0
        assert check.value == getattr(generated(FAST, [None])[0], w.figure)
        assert check.passed == (check.value <= 15.0)
        assert report.results[0].target.budgets.to_dict()[w.budget] == 15.0


def test_an_unknown_budget_key_is_refused(tmp_path):
    model = tmp_path / "a.onnx"
    model.write_bytes(b"x")
    with pytest.raises(LtsedgeError, match="unknown budget 'max_encode_ms'"):
        run_check([model], FAST, budgets={"max_encode_ms": 5.0}, measure=generated, log=lambda line: None)


def test_the_cli_has_a_flag_for_each_budget_key():
    from ltsedge.cli import check

    assert {w.budget for w in WORKLOADS.values()} <= set(inspect.signature(check).parameters)


def test_the_table_imports_nothing_heavy():
    """The measuring worker reads it: no numpy, onnxruntime or torch come with it."""
    code = "import sys, ltsedge.workloads; print(sorted({'numpy', 'onnxruntime', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_decode_figure_is_keyed_by_its_reference_and_every_figure_by_the_pairs_it_is_made_of():
    from ltsedge.keys import measurement_settings
    from ltsedge.runners.reference import BANDWIDTH_VERSION
    from ltsedge.runners.stats import PAIRS_METHOD

    profile = load_profile("cpu")
    assert WORKLOADS["decode"].reference == "bandwidth" and WORKLOADS["prefill"].reference == "compute"
    assert measurement_settings(profile, variant="generate")["bandwidth_reference"] == BANDWIDTH_VERSION
    # A decode step timed alone: its own key, which names no bandwidth reference.
    alone = measurement_settings(profile.replace(decode_reference="none"), variant="generate")
    assert alone["decode_reference"] == "none" and "bandwidth_reference" not in alone
    assert "decode_reference" not in profile.settings()  # the default keeps the keys of earlier figures
    # Forward keys predate both references; a figure made of all pairs' ratios never answers for one
    # made of the quiet pairs'.
    assert measurement_settings(profile) == {**profile.settings(), "pairs": PAIRS_METHOD}
