"""The machine's pinned calibration (milliseconds that repeat between runs) and check's marginal verdicts."""

from __future__ import annotations

import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ltsedge import store_sqlite
from ltsedge.check import run_check
from ltsedge.devices import load_profile
from ltsedge.keys import calibration_key, runtime_settings
from ltsedge.profiling import profile_model
from ltsedge.runners import Runner
from ltsedge.runners.policy import FIGURE_SPREAD_CAP, PIN_WINDOWS, Calibration, PinnedCalibration, pinned_calibration
from ltsedge.store import MeasurementStore
from tests.helpers import FAST_DEVICE, fake_fingerprint, ltsedge_cli, meas, no_traceback

FAST = load_profile("cpu").replace(name="fast", min_runs=3, max_runs=5, max_seconds=1.0, warmup=1,
                                   drift_check_every=1, sequence=16, tolerance=0.05)
JUNIT_SCHEMA = Path(__file__).parent / "data" / "junit-10.xsd"


class ScriptedRunner(Runner):
    """A Runner without a worker: the reference alone runs at ``machine_ms`` (every window and the run's own
    calibration), and each model at twice the reference timed beside it (``beside_ms``)."""

    def __init__(self, profile, machine_ms: float, beside_ms: float | None = None, **options):
        super().__init__(profile, **options)
        self.machine_ms, self.beside_ms = machine_ms, beside_ms or machine_ms
        self.reference_windows = 0

    def fingerprint(self):
        return fake_fingerprint(self.profile)

    def _time_reference(self, seconds):
        self.reference_windows += 1
        return [self.machine_ms] * 10, [2 * self.machine_ms] * 10  # compute, bandwidth reference

    def _measure_path(self, path, shapes, race):
        self.calibrate()
        ref = [self.beside_ms] * 8
        samples = {"model_ms": [2 * r for r in ref], "reference_ms": ref, "converged": True,
                   "stopped_early": False, "runs_per_sample": 1}
        return self._to_measurement({"ok": True, "workloads": {"forward": samples}, "peak_memory_mb": 1.0})


# ---------------------------------------------------------------------------------------------
# Made once, reused, redone on request
# ---------------------------------------------------------------------------------------------
def test_the_pinned_calibration_is_made_once_and_reused(tmp_path):
    lines = []
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        with ScriptedRunner(FAST, machine_ms=10.0) as first:
            pinned = pinned_calibration(store, first, log=lines.append)
            assert first.reference_windows == PIN_WINDOWS and len(lines) == 1
            assert "measuring it once" in lines[0]
        with ScriptedRunner(FAST, machine_ms=13.0) as second:  # another run, a busier machine
            again = pinned_calibration(store, second, log=lines.append)
            second.use_pinned(again)
            m = second.measure(b"model")
        assert second.reference_windows == 1 and len(lines) == 1  # its own calibration only, said nothing
    assert again == pinned and again.reference_ms == 10.0 and again.windows == (10.0,) * PIN_WINDOWS
    assert m.latency_ratio == pytest.approx(2.0) and m.latency_ms == pytest.approx(2.0 * 10.0)
    assert m.calibration_ms == 10.0 and second.run_calibration.reference_ms == 13.0


def test_profile_pins_once_and_reports_the_run_s_own_calibration(tmp_path, arch_file, monkeypatch):
    made = []
    real = Runner.measure_pinned

    def counted(self, *args, **kwargs):
        made.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Runner, "measure_pinned", counted)
    device = tmp_path / "fast.toml"
    device.write_text(FAST_DEVICE)
    store = tmp_path / "s.sqlite"
    first = profile_model(arch_file(), str(device), store_path=store)
    second = profile_model(arch_file(), str(device), store_path=store, fresh=True)
    assert len(made) == 1  # the second run found it in the store
    with MeasurementStore(store) as s:
        pinned = s.get_calibration(*calibration_key(first["fingerprint"], load_profile(str(device))))["reference_ms"]
    for r in (first, second):
        assert r["ok"] and not r["cached"] and r["calibration_ms"] == pinned
        assert r["latency_ms"] == pytest.approx(r["latency_ratio"] * pinned)
        assert r["run_calibration_ms"] > 0  # this run's own, beside it


def test_calibrate_command_redoes_it(tmp_path):
    device = tmp_path / "fast.toml"
    device.write_text(FAST_DEVICE)
    store = tmp_path / "s.sqlite"
    profile = load_profile(str(device))
    with MeasurementStore(store) as s, Runner(profile) as runner:
        key = calibration_key(runner.fingerprint(), profile)
        s.put_calibration(*key, PinnedCalibration(123.0, 0.01, 0.02, (123.0,)).to_dict(),
                          fingerprint=runner.fingerprint(), settings=runtime_settings(profile))
    proc = no_traceback(ltsedge_cli("calibrate", "--device", device, "--store", store))
    assert proc.returncode == 0, proc.stderr
    assert "pinned calibration on fast: reference" in proc.stdout and "windows:" in proc.stdout
    assert "spread between them" in proc.stdout and "previously pinned: 123.000 ms" in proc.stdout
    with MeasurementStore(store) as s:
        redone = PinnedCalibration.from_dict(s.get_calibration(*key))
    assert redone.reference_ms != 123.0 and len(redone.windows) == PIN_WINDOWS
    assert f"reference {redone.reference_ms:.3f} ms" in proc.stdout


def test_calibrate_command_bad_input(tmp_path):
    proc = no_traceback(ltsedge_cli("calibrate", "--device", "no-such-device"))
    assert proc.returncode == 2 and "no-such-device" in proc.stderr


# ---------------------------------------------------------------------------------------------
# The store: schema and key
# ---------------------------------------------------------------------------------------------
def test_a_version_2_store_migrates_and_keeps_its_rows(tmp_path):
    path = tmp_path / "m.sqlite"
    key = ("sha256:" + "a" * 64, "fp", "st", "1.20.0")
    with MeasurementStore(path) as s:
        s.put(*key, {"ok": True, "latency_ms": 1.0}, fingerprint={}, settings={})
    conn = sqlite3.connect(path)  # as ltsedge wrote it before pinned calibrations existed
    conn.execute("DROP TABLE calibrations")
    conn.execute("UPDATE schema_version SET version = 2")
    conn.commit()
    conn.close()
    with MeasurementStore(path) as s:
        assert s.get(*key) == {"ok": True, "latency_ms": 1.0}
        assert s.get_calibration("fp", "st", "1.20.0") is None
        s.put_calibration("fp", "st", "1.20.0", {"reference_ms": 2.0}, fingerprint={}, settings={})
        assert s.get_calibration("fp", "st", "1.20.0") == {"reference_ms": 2.0}
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(store_sqlite.SCHEMA_VERSION,)]
    assert store_sqlite.SCHEMA_VERSION == 3
    conn.close()


def test_the_key_separates_machines_and_runtime_settings(tmp_path):
    fp = fake_fingerprint(FAST)
    base = calibration_key(fp, FAST)
    assert calibration_key(fp, FAST.replace(intra_op_threads=2)) != base  # another runtime: another speed
    assert calibration_key(fake_fingerprint(FAST, cpu_model="Other CPU"), FAST) != base
    assert calibration_key(fake_fingerprint(FAST, onnxruntime="1.19.0"), FAST)[2] == "1.19.0"
    # the workload and repeat policy do not change how fast the reference runs: check's stricter
    # re-measurement and a search's finishing step share the machine's calibration
    assert calibration_key(fp, FAST.replace(min_runs=5, max_runs=50, sequence=64, tolerance=0.01)) == base
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        with ScriptedRunner(FAST, machine_ms=10.0) as runner:
            pinned_calibration(store, runner, log=lambda line: None)
        with ScriptedRunner(FAST.replace(intra_op_threads=2), machine_ms=6.0) as runner:
            other = pinned_calibration(store, runner, log=lambda line: None)
            assert runner.reference_windows == PIN_WINDOWS  # measured, not the other's
        assert other.reference_ms == 6.0
        assert PinnedCalibration.from_dict(store.get_calibration(*base)).reference_ms == 10.0


# ---------------------------------------------------------------------------------------------
# Milliseconds that repeat
# ---------------------------------------------------------------------------------------------
def test_pinned_milliseconds_do_not_follow_the_run_s_calibration():
    pinned = PinnedCalibration(10.0, 0.0, 0.02, (10.0,) * 5)
    figures = {}
    for busy in (10.0, 13.0):  # the machine at start-up: quiet, then 30% slower (and so while timing)
        logs = []
        with ScriptedRunner(FAST, machine_ms=busy, pinned=pinned, log=logs.append) as runner:
            (m,) = runner.measure_many([b"model"])
        figures[busy] = m
        assert runner.run_calibration.reference_ms == busy and not m.drift_remeasured and logs == []
        with ScriptedRunner(FAST, machine_ms=busy) as unpinned:  # before: ms = ratio x the run's own
            assert unpinned.measure(b"model").latency_ms == pytest.approx(2 * busy)
    assert figures[10.0].latency_ms == figures[13.0].latency_ms == pytest.approx(20.0)
    assert figures[13.0].calibration_ms == 10.0
    assert pinned.state(Calibration(13.0, 0.0)) == "this run: the machine 30% slower than calibrated"
    assert pinned.state(Calibration(10.1, 0.0)) is None  # within the noise


def test_the_drift_guard_keeps_to_the_run_s_own_calibration():
    pinned = PinnedCalibration(10.0, 0.0, 0.02, (10.0,) * 5)
    logs = []
    # quiet at start-up (10 ms), then 30% slower while the model is timed: drift within this run
    with ScriptedRunner(FAST, machine_ms=10.0, beside_ms=13.0, pinned=pinned, log=logs.append) as runner:
        (m,) = runner.measure_many([b"model"])
    assert m.drift_remeasured and "ran +30%" in logs[0]
    assert m.latency_ms == pytest.approx(20.0)  # the ratio cancels it; ms through the pinned scale


class GenerateScript(ScriptedRunner):
    """Each model a generate measurement: the decode step beside the bandwidth reference reading
    ``bandwidth`` ms, the prefill beside the compute one reading ``compute`` ms (None: raced out)."""

    def __init__(self, profile, readings: list[tuple[float, float | None]], **options):
        super().__init__(profile, machine_ms=10.0, **options)
        self.readings = list(readings)

    def _measure_path(self, path, shapes, race):
        self.calibrate()
        bandwidth, compute = self.readings.pop(0)

        def beside(reference, ms):
            return {"model_ms": [2 * ms] * 8, "reference_ms": [ms] * 8, "converged": True, "stopped_early": False,
                    "runs_per_sample": 1, "reference": reference}

        workloads = {"decode": beside("bandwidth", bandwidth)}
        if compute is not None:
            workloads["prefill"] = beside("compute", compute)
        return self._to_measurement({"ok": True, "workloads": workloads, "peak_memory_mb": 1.0})


def test_the_drift_guard_watches_the_compute_reference_beside_the_prefill_not_the_bandwidth_one():
    logs = []
    # The bandwidth reference reads 50% slower beside the second model (its weights take the caches) while
    # the compute reference holds still: not drift. The compute one 30% slower beside the third: drift.
    readings = [(20.0, 10.0), (30.0, 10.0), (20.0, 13.0), (20.0, 10.0)]
    with GenerateScript(FAST, readings, log=logs.append) as runner:
        first, second, third = runner.measure_many([b"a", b"b", b"c"])
    assert not first.drift_remeasured and not second.drift_remeasured
    assert third.drift_remeasured and len(logs) == 1 and "ran +30%" in logs[0]


def test_with_the_prefill_raced_out_the_bandwidth_reference_is_watched_against_its_first_level():
    logs = []
    readings = [(20.0, 10.0), (20.0, None), (30.0, None), (20.0, 10.0)]
    with GenerateScript(FAST, readings, log=logs.append) as runner:
        results = runner.measure_many([b"a", b"b", b"c"])
    assert [m.drift_remeasured for m in results] == [False, False, True] and "ran +50%" in logs[0]


def test_the_bandwidth_reference_is_pinned_beside_the_compute_one_and_an_older_pin_is_redone(tmp_path):
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        with ScriptedRunner(FAST, machine_ms=10.0) as runner:
            key = calibration_key(runner.fingerprint(), FAST)
            store.put_calibration(*key, PinnedCalibration(9.0, 0.0, 0.02, (9.0,) * 5).to_dict(),
                                  fingerprint=runner.fingerprint(), settings={})  # pinned before bandwidth
            pinned = pinned_calibration(store, runner, log=lambda line: None)
        assert runner.reference_windows == PIN_WINDOWS  # measured again
        assert (pinned.reference_ms, pinned.bandwidth_ms) == (10.0, 20.0)
        assert PinnedCalibration.from_dict(store.get_calibration(*key)) == pinned
        assert pinned.calibration.bandwidth_scale == 0.5  # a bandwidth sample x 0.5: in compute ms
    with pytest.raises(ValueError):
        PinnedCalibration.from_dict({**pinned.to_dict(), "bandwidth_ms": -1.0})


def test_a_figure_moves_as_ratios_do_so_check_widens_by_the_ratio_spread_not_the_speed_spread():
    # Five windows of a machine whose load comes and goes: its speed moves by up to 2x, the two references
    # together (their ratio within 1%): a figure is a ratio times the pin, and moves as little.
    speeds = [1.0, 1.9, 1.2, 2.0, 1.05]
    compute = [[10.0 * s] * 9 for s in speeds]
    bandwidth = [[20.0 * s * r] * 9 for s, r in zip(speeds, (1.0, 1.01, 0.995, 1.0, 1.004))]
    pinned = PinnedCalibration.from_windows(compute, bandwidth_windows=bandwidth)
    assert pinned.spread == pytest.approx((19.0 - 10.5) / 10.5)  # the speed's interquartile range: 81%
    assert pinned.ratio_spread == pytest.approx((1.004 - 1.0) / 1.0, rel=1e-6)  # ratios: quartiles 1.0, 1.004
    assert pinned.figure_spread == pinned.ratio_spread < 0.01
    assert PinnedCalibration.from_dict(pinned.to_dict()) == pinned
    with pytest.raises(ValueError):
        PinnedCalibration.from_dict({**pinned.to_dict(), "ratio_spread": -0.1})
    older = PinnedCalibration.from_dict({k: v for k, v in pinned.to_dict().items() if k != "ratio_spread"})
    assert older.ratio_spread is None and older.figure_spread == FIGURE_SPREAD_CAP < pinned.spread  # capped bound


def test_a_pin_taken_in_a_bad_moment_widens_a_figure_by_at_most_the_cap():
    # Two of five windows in another state of the host: memory-bound work 45% slower against compute-bound
    # work (measured here, back to back with pins of 1-4%); a figure made of quiet pairs moves far less.
    compute = [[10.0] * 9] * 5
    bandwidth = [[20.0 * r] * 9 for r in (1.0, 1.45, 1.0, 1.45, 1.01)]
    pinned = PinnedCalibration.from_windows(compute, bandwidth_windows=bandwidth)
    assert pinned.ratio_spread == pytest.approx(0.45 / 1.01) and pinned.figure_spread == FIGURE_SPREAD_CAP
    calm = PinnedCalibration.from_windows(compute, bandwidth_windows=[[20.0 * r] * 9 for r in (1, 1.01, 1.02, 1, 1)])
    assert calm.figure_spread == calm.ratio_spread == pytest.approx(0.01)


def test_check_widens_by_the_pinned_ratio_spread_and_an_older_pin_without_it_is_redone(tmp_path):
    with MeasurementStore(tmp_path / "s.sqlite") as store:
        with ScriptedRunner(FAST, machine_ms=10.0) as runner:
            key = calibration_key(runner.fingerprint(), FAST)
            old = PinnedCalibration(10.0, 0.0, 0.87, (10.0,) * 5, None, 20.0, (20.0,) * 5)  # no ratio spread
            store.put_calibration(*key, old.to_dict(), fingerprint=runner.fingerprint(), settings={})
            pinned = pinned_calibration(store, runner, log=lambda line: None)
        assert runner.reference_windows == PIN_WINDOWS and pinned.ratio_spread == 0.0  # measured again
    # 10 ms against a limit 10% away: clear of a 0-3% band, inside the old pin's 87% were it not capped.
    assert not checked(tmp_path, 11.0, spread=pinned.figure_spread, marginal="fail").checks[0].marginal
    assert not checked(tmp_path, 11.0, spread=old.figure_spread, marginal="fail").checks[0].marginal
    assert checked(tmp_path, 11.0, spread=old.spread, marginal="fail").checks[0].marginal


def test_a_decode_step_is_timed_beside_the_bandwidth_reference_in_one_unit_with_the_rest(tmp_path):
    from ltsedge.architecture import Architecture
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions

    arch = Architecture(n_layer=1, d_model=64, n_head=[2], d_inner=[128], vocab_size=300, n_positions=64)
    data = export_model(arch, ExportOptions(variant="generate")).to_bytes()
    pinned = PinnedCalibration(1.0, 0.0, 0.0, (1.0,), bandwidth_ms=4.0)  # a bandwidth sample x 0.25
    with Runner(FAST.replace(context=16), pinned=pinned) as runner:
        m = runner.measure(data)
        run = runner.run_calibration
    assert m.ok and run.bandwidth_ms > 0 and runner.bandwidth_scale() == 0.25
    decode, prefill = m.workloads["decode"], m.workloads["prefill"]
    assert (decode["reference"], prefill["reference"]) == ("bandwidth", "compute")
    assert decode["reference_scale"] == 0.25 and "reference_scale" not in prefill  # its unit, kept with it
    # The decode step's reference samples were recorded x 0.25; its ratio is to them, its ms through the
    # pinned compute reference: ratio x 1.0 = its own time / (bandwidth reference time / 4).
    assert decode["latency_ms"] == pytest.approx(decode["latency_ratio"] * 1.0)
    beside = decode["reference_ms"] / 0.25  # the bandwidth reference's own ms beside the model
    assert 0.5 * run.bandwidth_ms < beside < 3 * run.bandwidth_ms
    assert 0.5 * run.reference_ms < prefill["reference_ms"] < 3 * run.reference_ms  # beside the compute one


def test_a_profile_can_time_a_decode_step_alone_in_the_pinned_unit(tmp_path):
    from ltsedge.architecture import Architecture
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions

    arch = Architecture(n_layer=1, d_model=64, n_head=[2], d_inner=[128], vocab_size=300, n_positions=64)
    data = export_model(arch, ExportOptions(variant="generate")).to_bytes()
    pinned = PinnedCalibration(0.5, 0.0, 0.0, (0.5,), bandwidth_ms=4.0)
    with Runner(FAST.replace(context=16, decode_reference="none"), pinned=pinned) as runner:
        m = runner.measure(data)
        guard = runner._guard
    assert m.ok
    decode, prefill = m.workloads["decode"], m.workloads["prefill"]
    assert (decode["reference"], prefill["reference"]) == ("none", "compute")
    # The drift guard watched the compute reference beside the prefill, not the pinned constant recorded
    # as the decode step's "reference" (the machine may really have drifted meanwhile: that is allowed).
    watched = prefill["reference_ms"]
    assert m.drift == (guard.change(watched) if guard.drifted(watched) else None)
    # No reference beside it: its "reference samples" are the pinned calibration, so its milliseconds are
    # its own (the median of its samples) and its ratio is them over the pin, in the unit of every figure.
    assert decode["reference_scale"] == decode["reference_ms"] == 0.5
    assert decode["latency_ms"] == pytest.approx(decode["uncalibrated_latency_ms"])
    assert decode["latency_ratio"] == pytest.approx(decode["latency_ms"] / 0.5)
    assert decode["pairs_timed"] >= FAST.min_runs and 0 < decode["latency_ms"] < 100
    # Pinned again at 0.25 ms: the same milliseconds, the ratio in the new unit.
    again = m.rescaled(0.25, bandwidth_scale=0.125)
    assert again.decode_latency_ms == pytest.approx(m.decode_latency_ms)
    assert again.ratio("decode") == pytest.approx(2 * m.ratio("decode"))
    assert again.prefill_latency_ms == pytest.approx(m.prefill_latency_ms / 2)  # beside the compute reference


# ---------------------------------------------------------------------------------------------
# check: marginal within the machine's between-run spread
# ---------------------------------------------------------------------------------------------
class FakeMeasure:
    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self, profile, jobs):
        self.calls += 1
        return [meas(self.value) for _ in jobs]


def checked(tmp_path, limit, *, spread, marginal, value=10.0):
    model = tmp_path / "a.onnx"
    model.write_bytes(b"not parsed: measured by the fake")
    return run_check([model], FAST, budgets={"max_latency_ms": limit}, measure=FakeMeasure(value),
                     log=lambda line: None, fingerprint=fake_fingerprint(FAST), spread=spread, marginal=marginal)


def junit_root(report, tmp_path):
    import xmlschema

    path = tmp_path / "report.xml"
    report.write_junit(path)
    xmlschema.XMLSchema(str(JUNIT_SCHEMA)).validate(str(path))
    return ET.parse(path).getroot()


@pytest.mark.parametrize("limit", [9.0, 11.0])  # over the budget this time, and under it
def test_a_budget_inside_the_spread_band_is_marginal_and_the_policy_decides(tmp_path, limit):
    # 10 ms +-5% (the tolerance) lies clear of 9 and 11; widened by a 20% between-run spread it does not
    assert not checked(tmp_path, limit, spread=0.0, marginal="pass").checks[0].marginal
    for policy, code, verdict in (("pass", 0, "marginal pass"), ("fail", 1, "marginal fail")):
        report = checked(tmp_path, limit, spread=0.2, marginal=policy)
        (c,) = report.checks
        assert c.marginal and c.verdict == verdict and report.exit_code == code
        out = report.to_json()
        assert out["marginal_policy"] == policy and out["between_run_spread"] == 0.2
        assert out["results"][0]["checks"][0]["between_run_spread"] == 0.2
        assert "between-run spread 20.0%" in c.message() and f"counted as {policy}" in c.message()
        case = junit_root(report, tmp_path).find(".//testcase")
        failure = case.find("failure")
        assert (failure is not None) == (policy == "fail")
        if failure is not None:
            assert failure.get("type") == "Marginal" and "marginal" in failure.get("message")
        assert "counted as " + policy in case.find("system-out").text


def test_the_run_s_own_interval_and_the_spread_add_in_quadrature(tmp_path):
    # 10 ms, +-5% of its own (the tolerance), a 5% spread: x/ 1.071 together (added outright: x 1.1025).
    assert checked(tmp_path, 10.70, spread=0.05, marginal="fail").checks[0].marginal
    assert not checked(tmp_path, 10.72, spread=0.05, marginal="fail").checks[0].marginal
    assert not checked(tmp_path, 9.30, spread=0.05, marginal="fail").checks[0].marginal
    assert checked(tmp_path, 9.33, spread=0.05, marginal="fail").checks[0].marginal
    assert not checked(tmp_path, 1e-6, spread=5.0, marginal="fail").checks[0].marginal  # bounds stay positive


def test_without_a_policy_a_marginal_check_follows_its_value(tmp_path):
    (c,) = checked(tmp_path, 9.0, spread=0.2, marginal=None).checks
    assert c.marginal and c.verdict == "marginal fail"
    (c,) = checked(tmp_path, 11.0, spread=0.2, marginal=None).checks
    assert c.marginal and c.verdict == "marginal pass"


def test_memory_is_not_widened_by_the_machine_s_speed(tmp_path):
    model = tmp_path / "a.onnx"
    model.write_bytes(b"x")
    report = run_check([model], FAST, budgets={"max_memory_mb": 90.0}, measure=FakeMeasure(10.0), log=lambda line: None,
                       fingerprint=fake_fingerprint(FAST), spread=0.5, marginal="pass")
    (c,) = report.checks
    assert not c.marginal and c.verdict == "FAIL" and report.exit_code == 1


def test_check_marginal_option(tmp_path, monkeypatch):
    import ltsedge.check

    seen = []

    class Report:
        exit_code = 0

        def to_json(self):
            return {}

    def fake_run_check(models, device, **options):
        seen.append(options["marginal"])
        return Report()

    monkeypatch.setattr(ltsedge.check, "run_check", fake_run_check)
    model = tmp_path / "a.onnx"
    model.write_bytes(b"x")
    for env, option, expected in (({"CI": ""}, [], "pass"), ({"CI": "true"}, [], "fail"), ({"CI": "0"}, [], "pass"),
                                  ({"CI": "1"}, ["--marginal", "pass"], "pass")):
        assert ltsedge_cli("check", model, "--json", *option, env=env).returncode == 0
        assert seen[-1] == expected
    help_text = ltsedge_cli("check", "--help", env={"COLUMNS": "200"}).stdout
    assert "--marginal" in help_text and "CI" in help_text


def test_check_marginal_bad_value(tmp_path):
    proc = no_traceback(ltsedge_cli("check", tmp_path / "a.onnx", "--marginal", "maybe"))
    assert proc.returncode == 2 and "--marginal 'maybe'" in proc.stderr
