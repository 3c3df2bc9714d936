"""Runners: real measurements of tiny ONNX models in the worker, its failures, and the policies around it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper

from ltsedge.architecture import Architecture
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.runners import Measurement, Runner, make_inputs, measure, policy, stats, timing
from ltsedge.runners.process import death_reason
from ltsedge.runners.reference import reference_model
from ltsedge.runners.worker import FAULT_KEY, TEST_FAULTS_ENV
from ltsedge.wire import serialize_with_weights, weights_mb

LINUX = sys.platform.startswith("linux")
FAST = load_profile("cpu").replace(min_runs=3, max_runs=5, max_seconds=2.0, warmup=1, drift_check_every=0)


# ---------------------------------------------------------------------------------------------
# Tiny models, built with onnx.helper
# ---------------------------------------------------------------------------------------------
def matmul_chain(n: int, k: int, metadata: dict[str, str] | None = None) -> bytes:
    """x[batch, k] through n MatMuls with k x k weights: n * k * k * 4 bytes of initializers."""
    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
        x = f"y{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", k])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if metadata:
        helper.set_model_props(model, metadata)
    weights = [(f"w{i}", np.full((k, k), 0.01, dtype=np.float32)) for i in range(n)]
    return serialize_with_weights(model, weights)  # fast: no protobuf copies of 200 MB


def small_model(**metadata: str) -> bytes:
    return matmul_chain(2, 512, metadata)  # 2 MB


def hang_model() -> bytes:
    """A Loop with 2**62 iterations: a real model that never finishes a forward pass."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [one])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "x"], ["y"], body=body)], "hang",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor("M", TensorProto.INT64, [], [2**62]),
         helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def large_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "large.onnx"
    path.write_bytes(matmul_chain(3, 4096))  # 192 MB of weights
    return path


@pytest.fixture(scope="module")
def small_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "small.onnx"
    path.write_bytes(small_model())
    return path


def tiny_ltsedge_model(**overrides) -> tuple[Architecture, bytes]:
    from ltsedge.exporters import export_model

    fields = dict(n_layer=2, d_model=64, n_head=[2, 2], d_inner=[128, 128], vocab_size=500, n_positions=64)
    arch = Architecture(**{**fields, **overrides})
    return arch, export_model(arch).to_bytes()


# ---------------------------------------------------------------------------------------------
# Successful measurements
# ---------------------------------------------------------------------------------------------
def test_measure_small_model(small_path):
    with Runner(FAST) as runner:
        m = runner.measure(small_path)
        assert runner._worker.hello["heavy_modules"] == []  # the worker never imports torch or onnx
    assert m.ok and m.error is None
    assert FAST.min_runs <= m.runs <= FAST.max_runs
    assert 0 < m.latency_min_ms <= m.latency_ms <= m.latency_p90_ms
    assert m.latency_cv >= 0
    assert m.weights_mb == pytest.approx(2.0)
    assert m.peak_memory_mb > 0 and m.load_seconds > 0 and m.inference_seconds > 0
    if LINUX:
        assert m.load_avg is not None
    assert Measurement.from_dict(m.to_dict()) == m


def test_one_shot_measure_of_bytes():
    m = measure(small_model(), FAST)
    assert m.ok and m.weights_mb == pytest.approx(2.0)


def test_ltsedge_model_and_its_sequence_limit():
    arch, data = tiny_ltsedge_model()
    with Runner(FAST) as runner:
        too_long = runner.measure(data)  # sequence 192 > n_positions 64
        fits = runner.measure(data, shapes={"input_ids": [1, 32]})
    assert not too_long.ok
    assert too_long.error == ("cannot make inputs: input 'input_ids': sequence 192 is longer than the model's "
                              "n_positions 64; use a profile with sequence <= 64")
    assert fits.ok and fits.weights_mb > 0
    assert measure(data, FAST.replace(sequence=64)).ok


def test_repeats_stop_on_convergence_or_budget(small_path):
    loose = FAST.replace(min_runs=4, max_runs=1000, max_seconds=20.0, tolerance=0.9)
    tight = FAST.replace(min_runs=3, max_runs=7, tolerance=1e-9)
    with Runner(loose) as runner:
        a = runner.measure(small_path)
    with Runner(tight) as runner:
        b = runner.measure(small_path)
    assert a.converged and a.runs < 1000
    assert not b.converged and b.pairs_timed == 7 and 5 <= b.runs <= 7  # the figure: its quiet pairs


def test_shape_overrides_and_errors_reach_the_measurement(small_path):
    with Runner(FAST) as runner:
        ok = runner.measure(small_path, shapes={"x": [4, 512]})
        bad = runner.measure(small_path, shapes={"x": [4, 3]})
        unknown = runner.measure(small_path, shapes={"ids": [1, 2]})
    assert ok.ok
    assert bad.error == "cannot make inputs: input 'x': shape [4, 3] does not match the model's [batch, 512]"
    assert unknown.error.startswith("cannot make inputs: shape given for 'ids', which is not an input")


def test_missing_model_file_is_a_user_error(tmp_path):
    with Runner(FAST) as runner, pytest.raises(LtsedgeError, match="model file not found"):
        runner.measure(tmp_path / "nope.onnx")


def test_runner_rejects_an_unavailable_provider():
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    with pytest.raises(LtsedgeError, match="CUDAExecutionProvider is not available"):
        Runner(load_profile("cuda", check_available=False))


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(not LINUX, reason="one worker per model outside Linux")
def test_memory_of_a_large_model_does_not_leak_into_the_next(large_path, small_path):
    with Runner(FAST) as runner:
        large = runner.measure(large_path)
        pid = runner.worker_pid
        small_after_large = runner.measure(small_path)
        assert runner.worker_pid == pid  # the same worker: isolation came from trimming, not a restart
    with Runner(FAST) as runner:
        small_fresh = runner.measure(small_path)
    assert large.ok and small_after_large.ok and small_fresh.ok
    assert large.weights_mb == pytest.approx(192.0)
    assert large.peak_memory_mb >= 180  # the weights at least
    assert abs(small_after_large.peak_memory_mb - small_fresh.peak_memory_mb) < 16
    assert small_after_large.peak_memory_mb < large.peak_memory_mb / 10


def test_over_the_memory_limit(large_path, small_path):
    # The worker with its two references rests at ~150 MB; the large model adds its 192 MB of weights.
    with Runner(FAST, memory_limit_mb=250) as runner:
        m = runner.measure(large_path)
        after = runner.measure(small_path)  # the same Runner carries on with a fresh worker
    assert not m.ok and m.error == "exceeded the memory limit of 250 MB"
    assert m.latency_ms is None and m.weights_mb == pytest.approx(192.0)
    assert after.ok


def test_retire_policy():
    """A worker whose resting memory grew since its first model, or that cannot reset its peak counter, is
    replaced; loading the references before the first model is not growth."""
    class FakeWorker:
        def __init__(self, resettable):
            self.hello = {"rss_mb": 50.0, "peak_resettable": resettable}
            self.closed, self.rested_mb = False, None

        def close(self):
            self.closed = True

    runner = Runner(FAST)
    try:
        for resettable, rss_after, retired in [(True, 60.0, False), (True, 50.0 + 65, True), (False, 50.0, True)]:
            runner._worker = worker = FakeWorker(resettable)
            runner._maybe_retire({"rss_after_mb": rss_after})
            assert worker.closed is retired and (runner._worker is None) is retired
        runner._worker = worker = FakeWorker(True)
        runner._maybe_retire({"baseline_rss_mb": 150.0, "rss_after_mb": 160.0})  # references: 100 MB at rest
        runner._maybe_retire({"baseline_rss_mb": 170.0, "rss_after_mb": 200.0})
        assert not worker.closed and worker.rested_mb == 150.0
        runner._maybe_retire({"baseline_rss_mb": 200.0, "rss_after_mb": 150.0 + 65})
        assert worker.closed
    finally:
        runner._worker = None
        runner.close()


# ---------------------------------------------------------------------------------------------
# Failures: each becomes ok=False with a one-line reason, and the Runner carries on
# ---------------------------------------------------------------------------------------------
def test_hanging_model_times_out(small_path):
    with Runner(FAST, timeout_s=2) as runner:
        hung = runner.measure(hang_model())
        assert runner.worker_pid is None  # killed
        after = runner.measure(small_path)
    assert not hung.ok and hung.error == "timed out after 2 s"
    assert after.ok


def test_worker_exits_when_its_parent_dies_mid_run(tmp_path):
    hang = tmp_path / "hang.onnx"
    hang.write_bytes(hang_model())
    script = (
        "import sys\n"
        "from ltsedge.devices import load_profile\n"
        "from ltsedge.runners import Runner\n"
        "runner = Runner(load_profile('cpu'), timeout_s=600)\n"
        "print(runner._ensure_worker().pid, flush=True)\n"
        f"runner.measure({str(hang)!r})\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the killed parent cannot clean up its temporary directory
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    worker = psutil.Process(int(parent.stdout.readline()))
    time.sleep(1.0)  # the worker is now inside the never-ending forward pass
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not exited(worker):
        time.sleep(0.1)
    gone = exited(worker)
    if not gone:
        worker.kill()
    assert gone


def exited(process: psutil.Process) -> bool:
    try:  # an orphan's exit may leave a zombie when nobody reaps it (PID 1 in a container)
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("fault, error", [
    ("segv", "worker crashed (signal SIGSEGV)"),
    ("abort", "worker crashed (signal SIGABRT)"),
    ("exit", "worker exited with code 3"),
])
def test_crashing_worker(monkeypatch, small_path, fault, error):
    monkeypatch.setenv(TEST_FAULTS_ENV, "1")
    with Runner(FAST) as runner:
        crashed = runner.measure(small_model(**{FAULT_KEY: fault}))
        after = runner.measure(small_path)
    assert not crashed.ok and crashed.error == error
    assert after.ok


def test_fault_hook_needs_the_test_switch(monkeypatch):
    monkeypatch.delenv(TEST_FAULTS_ENV, raising=False)
    assert measure(small_model(**{FAULT_KEY: "segv"}), FAST).ok


def test_corrupt_and_invalid_models(tmp_path, small_path):
    truncated = small_model()[:5000]
    unknown_op = helper.make_model(helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"])], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]), opset_imports=[helper.make_opsetid("", 17)])
    unknown_op.ir_version = 8
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\xffnot an onnx model at all" * 100)
    with Runner(FAST) as runner:
        results = [runner.measure(m) for m in (garbage, truncated, unknown_op.SerializeToString())]
        after = runner.measure(small_path)
    for m in results:
        assert not m.ok and m.error.startswith("failed to load: ") and "\n" not in m.error
        assert m.weights_mb is None
        assert m.failure_kind == "model"  # onnxruntime refuses it: every run would, so the store keeps it
    assert "NoSuchOp" in results[2].error
    assert after.ok


def test_whose_failure_an_error_is():
    """onnxruntime refusing a model is the model's failure (kept in the store); its running out of
    memory, or an error of anything else (ltsedge's own code), is the environment's (measured again)."""
    from ltsedge.runners.session import failure_kind

    try:
        onnxruntime.InferenceSession(b"not a model", providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - whatever onnxruntime raises for it
        refused = e
    assert failure_kind(refused, f"failed to load: {refused}") == "model"
    assert failure_kind(refused, "failed to run (forward): Failed to allocate memory") == "environment"
    assert failure_kind(refused, "failed to load: Load model from m.onnx failed: External data path does not "
                                 "exist: m.onnx.data") == "environment"  # how it was shipped (a fleet)
    assert failure_kind(ZeroDivisionError("float division by zero"), "failed to run (prefill): float division "
                                                                      "by zero") == "environment"
    assert failure_kind(RuntimeError("execution provider CUDAExecutionProvider could not be initialised"),
                        "failed to load: ...") == "environment"


class SteppingClock:
    """Every read 5 ms after the one before: as if the process were descheduled between any two reads."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.005
        return self.t


def test_a_sample_holds_at_least_one_run():
    """On a loaded machine the process can lose the CPU between the first two clock reads; a sample of
    zero runs then had no time per run (CI: "failed to run (prefill): float division by zero")."""
    runs = []
    count, per_run_ms = timing.runs_filling(lambda: runs.append(1), timing.MIN_SAMPLE_MS, SteppingClock())
    assert count == 1 and runs == [1] and per_run_ms > 0
    settings = SimpleNamespace(warmup=1, min_runs=6, max_runs=6, max_seconds=10.0, tolerance=0.5)
    timed = timing.time_paired(lambda: None, lambda: None, 1.0, settings, clock=SteppingClock())
    assert len(timed.ratios) == 6 and all(r > 0 for r in timed.ratios)


def test_reference_samples_are_recorded_times_the_scale():
    """A decode step's bandwidth reference is recorded in the compute reference's ms: scale x its own."""
    settings = SimpleNamespace(warmup=0, min_runs=4, max_runs=4, max_seconds=10.0, tolerance=0.5)
    plain = timing.time_paired(lambda: None, lambda: None, 1.0, settings, clock=SteppingClock())
    scaled = timing.time_paired(lambda: None, lambda: None, 1.0, settings, reference_scale=0.25, clock=SteppingClock())
    assert scaled.reference_ms == pytest.approx([0.25 * r for r in plain.reference_ms])
    assert scaled.ratios == pytest.approx([4 * r for r in plain.ratios])


def test_a_model_timed_alone_records_the_scale_as_its_reference_and_takes_no_reference_runs():
    settings = SimpleNamespace(warmup=0, min_runs=4, max_runs=4, max_seconds=10.0, tolerance=0.5)
    reference_runs = []
    beside = timing.time_paired(lambda: None, lambda: reference_runs.append(1), 1.0, settings, clock=SteppingClock())
    assert reference_runs
    alone = timing.time_paired(lambda: None, None, 0.0, settings, reference_scale=0.5, clock=SteppingClock())
    assert len(alone.model_ms) == 4 and alone.reference_ms == [0.5] * 4
    assert alone.ratios == pytest.approx([m / 0.5 for m in alone.model_ms]) and len(beside.model_ms) == 4


@pytest.mark.parametrize("code, oom_before, oom_after, log, expected", [
    (-9, 3, 4, "", "out of memory (killed by the kernel)"),
    (-9, 3, 3, "", "killed by SIGKILL (out of memory?)"),
    (-9, None, None, "", "killed by SIGKILL (out of memory?)"),
    (-11, 0, 0, "", "worker crashed (signal SIGSEGV)"),
    (1, 0, 0, "ModuleNotFoundError: No module named 'onnxruntime'",
     "worker exited with code 1: ModuleNotFoundError: No module named 'onnxruntime'"),
])
def test_death_reasons(code, oom_before, oom_after, log, expected):
    assert death_reason(code, oom_before, oom_after, log) == expected


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
class Arg:
    """Stands in for onnxruntime's NodeArg."""

    def __init__(self, name, type, shape):
        self.name, self.type, self.shape = name, type, shape


def test_inputs_resolve_symbolic_dims_by_name():
    profile = FAST.replace(batch=2, sequence=24)
    feeds = make_inputs([
        Arg("input_ids", "tensor(int64)", ["batch_size", "sequence_length"]),
        Arg("attention_mask", "tensor(int64)", ["batch", "seq"]),
        Arg("position_ids", "tensor(int32)", [1, "past_sequence_length"]),
        Arg("pixel_values", "tensor(float)", ["N", 3, None, 7]),
        Arg("flag", "tensor(bool)", []),
        Arg("half", "tensor(float16)", [4]),
    ], profile, vocab_size=50)
    assert feeds["input_ids"].shape == (2, 24) and feeds["input_ids"].dtype == np.int64
    assert 0 <= feeds["input_ids"].min() and feeds["input_ids"].max() < 50
    assert (feeds["attention_mask"] == 1).all()
    assert feeds["position_ids"].dtype == np.int32 and feeds["position_ids"].tolist() == [list(range(24))]
    assert feeds["pixel_values"].shape == (1, 3, 1, 7) and feeds["pixel_values"].dtype == np.float32
    assert feeds["flag"].shape == () and feeds["flag"].dtype == np.bool_
    assert feeds["half"].dtype == np.float16
    assert all(isinstance(x, np.ndarray) and x.flags.c_contiguous for x in feeds.values())


def test_inputs_are_deterministic_and_small_without_a_vocabulary():
    args = [Arg("ids", "tensor(int32)", [3, 100])]
    a, b = make_inputs(args, FAST), make_inputs(args, FAST)
    assert np.array_equal(a["ids"], b["ids"]) and a["ids"].max() <= 1


X = [Arg("x", "tensor(float)", ["batch", 8])]


@pytest.mark.parametrize("args, shapes, message", [
    (X, {"y": [1, 8]}, "shape given for 'y', which is not an input of the model (inputs: x)"),
    (X, {"x": [1, 8, 1]}, "input 'x': shape [1, 8, 1] has 3 dimensions, the model declares 2 ([batch, 8])"),
    (X, {"x": [1, 0]}, "input 'x': shape [1, 0] must be a list of positive integers"),
    ([Arg("x", "tensor(float)", [0, 8])], None, "input 'x': declared shape [0, 8] has a dimension of 0"),
    ([Arg("x", "seq(tensor(float))", None)], None,
     "input 'x' has type seq(tensor(float)), for which ltsedge cannot make values"),
])
def test_inputs_that_cannot_be_made(args, shapes, message):
    with pytest.raises(LtsedgeError) as info:
        make_inputs(args, FAST, shapes)
    assert str(info.value).startswith(message)


def test_inputs_from_a_session_read_the_vocabulary():
    arch, data = tiny_ltsedge_model(vocab_size=37)
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = make_inputs(session, FAST.replace(sequence=16))
    assert feeds["input_ids"].shape == (1, 16) and feeds["input_ids"].max() < 37
    with pytest.raises(LtsedgeError, match="n_positions 64"):
        make_inputs(session, FAST)


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------
def test_median_interval_is_the_exact_binomial_one():
    from scipy.stats import binom

    for n in range(2, 150):
        x = list(range(n))
        low, high = stats.median_interval(x)
        j = low + 1
        assert high == n - j  # symmetric order statistics
        coverage = 1 - 2 * binom.cdf(j - 1, n, 0.5)
        if n >= 6:  # below 6 samples not even [min, max] reaches 95%
            assert coverage >= 0.95
            assert 1 - 2 * binom.cdf(j, n, 0.5) < 0.95  # and j is the tightest such order statistic
        else:
            assert (low, high) == (0, n - 1)


def test_normal_approximation_for_many_samples():
    x = list(range(5000))
    low, high = stats.median_interval(x)
    assert (low, high) == (2429, 2570)  # ~ n/2 -+ 1.96 sqrt(n)/2


def test_convergence_rule_and_summary():
    assert not stats.converged([10.0] * 5, min_runs=5, tolerance=0.02)  # 5 samples never cover 95%
    assert stats.converged([10.0] * 6, min_runs=5, tolerance=0.02)
    assert not stats.converged([10.0] * 7, min_runs=5, tolerance=0.02, max_runs=50)  # 7 is not a scheduled look
    assert stats.looks(50) == [6, 9, 14, 21, 32, 48, 50]
    noisy = [10.0, 14.0, 10.0, 9.0, 13.0, 10.0, 12.0]
    assert stats.relative_half_width(noisy) == pytest.approx((14 - 9) / 2 / 10)
    assert not stats.converged(noisy, min_runs=5, tolerance=0.02)
    s = stats.summarize([4.0, 1.0, 3.0, 2.0, 10.0])
    assert (s["latency_ms"], s["latency_p90_ms"], s["latency_min_ms"]) == (3.0, 10.0, 1.0)
    assert s["latency_cv"] == pytest.approx(np.std([4, 1, 3, 2, 10], ddof=1) / 4.0)
    assert math.isinf(stats.relative_half_width([1.0]))


def test_a_ratio_is_made_of_the_pairs_timed_while_the_reference_ran_at_its_quiet_speed():
    from ltsedge.runners.measurement import calibrated

    # 8 pairs on a quiet machine (the reference wanders 3%), 10 while a neighbour slowed the reference
    # 1.6x and the model 2x: the median of all 18 ratios is a loaded one, the figure not.
    reference = [1.0, 1.01, 0.99, 1.02, 1.0, 1.03, 0.995, 1.01] + [1.6] * 10
    model = [10.0 * r for r in reference[:8]] + [20.0] * 10
    assert stats.quiet_ratios(model, reference) == pytest.approx([10.0] * 8)
    figures = calibrated({"model_ms": model, "reference_ms": reference, "converged": False, "stopped_early": False,
                          "runs_per_sample": 1}, calibration_ms=2.0)
    assert figures["latency_ratio"] == pytest.approx(10.0) and figures["latency_ms"] == pytest.approx(20.0)
    assert (figures["runs"], figures["pairs_timed"]) == (8, 18)
    # Beside the bandwidth reference (a decode step) every pair counts: its quiet pairs repeated worse.
    beside_bandwidth = calibrated({"model_ms": model, "reference_ms": reference, "converged": False,
                                   "stopped_early": False, "runs_per_sample": 1, "reference": "bandwidth"}, 2.0)
    assert beside_bandwidth["runs"] == 18 and beside_bandwidth["latency_ratio"] == pytest.approx(12.5)
    # A quiet machine: every pair is kept.
    assert len(stats.quiet_ratios([5.0] * 9, [1.0, 1.05, 0.97, 1.08, 1.0, 1.02, 0.99, 1.04, 1.0])) == 9
    # Under a neighbour most of the time: at least the five pairs with the fastest reference.
    assert stats.quiet_ratios([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]) == [1.0] * 5
    assert stats.quiet_ratios([], []) == []


def test_the_stop_rule_looks_at_the_pairs_timed_and_judges_the_quiet_ones():
    assert stats.converged([10.0] * 6, min_runs=5, tolerance=0.02, max_runs=50, timed=9)  # 9 is a look
    assert not stats.converged([10.0] * 6, min_runs=5, tolerance=0.02, max_runs=50, timed=8)  # 8 is not
    assert not stats.converged([10.0] * 5, min_runs=5, tolerance=0.02, max_runs=50, timed=9)  # 5 quiet ones: too few


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------
def onnx_weight_bytes(data: bytes) -> int:
    model = onnx.load_from_string(data)
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def test_weights_match_onnx_for_every_storage():
    a = helper.make_tensor("a", TensorProto.FLOAT, [3, 5], np.arange(15, dtype=np.float32).tolist())  # float_data
    b = numpy_helper.from_array(np.ones((7, 2), np.int64), "b")  # raw_data
    c = numpy_helper.from_array(np.ones((4,), np.float16), "c")
    d = helper.make_tensor("d", TensorProto.INT32, [300], list(range(300)))  # packed varints
    e = numpy_helper.from_array(np.float32(3.0), "e")  # a scalar
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "w",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [a, b, c, d, e])
    data = helper.make_model(graph).SerializeToString()
    assert weights_mb(data) * 2**20 == onnx_weight_bytes(data) == 15 * 4 + 14 * 8 + 4 * 2 + 300 * 4 + 4
    _, exported = tiny_ltsedge_model()
    assert weights_mb(exported) * 2**20 == onnx_weight_bytes(exported)
    assert weights_mb(reference_model()) == pytest.approx(4 * 384 * 384 * 4 / 2**20)


def test_weights_of_garbage_is_none(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert weights_mb(empty) is None
    assert weights_mb(b"\x0f\xff\xff") is None
    assert weights_mb(small_model()[:5000]) is None


# ---------------------------------------------------------------------------------------------
# Cool-down and drift, with a fake clock
# ---------------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeSensors:
    def __init__(self, temperatures):
        self.temperatures = list(temperatures)

    def temperature_c(self):
        return self.temperatures.pop(0) if len(self.temperatures) > 1 else self.temperatures[0]

    def read(self):
        return {"load_avg": 0.5, "cpu_freq_mhz": 1800.0, "temperature_c": None, "throttled": False}


def cool(profile, temperatures):
    clock, logs = FakeClock(), []
    waited = policy.cool_down(profile, temperature=FakeSensors(temperatures).temperature_c, clock=clock,
                              sleep=clock.sleep, log=logs.append)
    return waited, clock.sleeps, logs


def test_cool_down_pause_only():
    assert cool(FAST.replace(cooldown_s=2.0), [90.0]) == (2.0, [2.0], [])
    assert cool(FAST, [90.0]) == (0.0, [], [])


def test_cool_down_waits_for_the_temperature():
    arm = load_profile("arm64")  # cooldown 2 s, below 70 C
    waited, sleeps, logs = cool(arm, [75.0, 72.0, 70.5, 69.0])
    assert sleeps == [2.0, 1.0, 1.0, 1.0] and waited == 5.0 and logs == []


def test_cool_down_is_bounded_and_says_so():
    waited, sleeps, logs = cool(load_profile("arm64").replace(max_cooldown_wait_s=3.5), [85.0])
    assert waited == pytest.approx(2.0 + 3.5) and sleeps[-1] == pytest.approx(0.5)
    assert len(logs) == 1 and "still 85.0 C after waiting 4 s" in logs[0]


def test_cool_down_without_a_thermometer():
    assert cool(load_profile("arm64"), [None]) == (2.0, [2.0], [])


class FakeRunner(Runner):
    """A Runner whose paired samples are scripted, not timed by a worker: each model's reference
    timings come from ``reference_ms`` (one list of samples per measurement), the model at twice them."""

    def __init__(self, profile, reference_ms, clock, logs, sensors=None, calibration=(10.0,) * 10):
        super().__init__(profile, log=logs.append, clock=clock, sleep=clock.sleep,
                         sensors=sensors or FakeSensors([40.0]),
                         calibration=policy.Calibration.from_samples(list(calibration)))
        self.reference_ms = list(reference_ms)
        self.measured: list[str] = []

    def _measure_path(self, path, shapes, race):
        self.measured.append(path.read_bytes())
        ref = self.reference_ms.pop(0)
        samples = {"model_ms": [2 * r for r in ref], "reference_ms": list(ref), "converged": True,
                   "stopped_early": False, "runs_per_sample": 1}
        return self._to_measurement({"ok": True, "workloads": {"forward": samples}, "peak_memory_mb": 1.0})


def test_a_constant_machine_never_triggers_the_drift_guard():
    clock, logs = FakeClock(), []
    noise = [[10.0 * (1 + 0.03 * ((i * 7 + j) % 5 - 2)) for j in range(8)] for i in range(40)]  # +-6% jitter
    with FakeRunner(FAST.replace(drift_check_every=1), noise, clock, logs) as runner:
        results = runner.measure_many([f"m{i}".encode() for i in range(40)])
    assert len(runner.measured) == 40 and not any(m.drift_remeasured for m in results) and logs == []
    assert all(m.latency_ratio == pytest.approx(2.0) and m.latency_ms == pytest.approx(20.0) for m in results)


def test_a_30_percent_slowdown_is_drift_and_remeasures_without_waiting():
    clock, logs = FakeClock(), []
    slow = [[13.0] * 8, [10.0] * 8, [10.1] * 8]  # the first model during a slow phase; its second try after it
    with FakeRunner(FAST.replace(drift_check_every=1), slow, clock, logs) as runner:
        results = runner.measure_many([b"a", b"b"])
    assert runner.measured == [b"a", b"a", b"b"]
    assert results[0].drift_remeasured and results[0].drift is None and not results[1].drift_remeasured
    assert len(logs) == 1 and "ran +30%" in logs[0] and clock.sleeps == []  # no sleeping on the cpu profile
    # The ratio cancelled the slowdown anyway: the same 2x, the same ms through the calibration.
    assert results[0].latency_ms == pytest.approx(20.0)


def test_a_faster_machine_never_causes_a_wait():
    clock, logs = FakeClock(), []
    with FakeRunner(FAST.replace(drift_check_every=1), [[7.0] * 8, [7.0] * 8], clock, logs) as runner:
        results = runner.measure_many([b"a"])
    assert clock.sleeps == [] and "ran -30%" in logs[0] and results[0].drift == pytest.approx(-0.3)


def test_the_drift_limit_follows_the_run_s_own_noise():
    quiet = policy.DriftGuard(policy.Calibration.from_samples([10.0, 10.1, 9.9, 10.0, 10.05]))
    noisy = policy.DriftGuard(policy.Calibration.from_samples([10.0, 13.0, 7.0, 10.0, 12.0, 8.0]))
    assert quiet.limit == policy.DRIFT_FLOOR and not quiet.drifted(10.8) and quiet.drifted(11.5)
    assert noisy.limit > 0.5 and not noisy.drifted(13.0)
    guard_off = FAST.replace(drift_check_every=0)
    clock, logs = FakeClock(), []
    with FakeRunner(guard_off, [[13.0] * 8], clock, logs) as runner:
        runner.measure_many([b"a"])
    assert runner.measured == [b"a"] and logs == []


def test_measure_many_cools_down_between_models():
    clock, logs = FakeClock(), []
    profile = load_profile("arm64").replace(drift_check_every=0)
    sensors = FakeSensors([75.0, 69.0, 69.0])
    with FakeRunner(profile, [[10.0] * 8] * 3, clock, logs, sensors=sensors) as runner:
        runner.measure_many([b"a", b"b", b"c"])
    # before b: 2 s pause, 75 C -> one more second; before c: 2 s pause, 69 C
    assert clock.sleeps == [2.0, 1.0, 2.0]


def test_measure_many_checks_every_file_first(tmp_path):
    clock, logs = FakeClock(), []
    with FakeRunner(FAST, [], clock, logs) as runner, pytest.raises(LtsedgeError, match="model file not found"):
        runner.measure_many([b"a", tmp_path / "missing.onnx"])
    assert runner.measured == []


def test_measure_many_for_real(small_path):
    """The real reference model and real models, paired; a drift re-measures exactly that model."""
    profile = FAST.replace(drift_check_every=1, tolerance=0.3, max_cooldown_wait_s=0.0)
    logs = []
    with Runner(profile, log=logs.append) as runner:
        results = runner.measure_many([small_path, small_model()])
        calibration = runner.calibration
    assert all(m.ok for m in results) and len(results) == 2
    assert sum(m.drift_remeasured for m in results) == sum("measuring it again" in line for line in logs)
    for m in results:  # ms = ratio x the run's calibration of the reference, which was timed beside it
        assert m.latency_ms == pytest.approx(m.latency_ratio * calibration.reference_ms)
        assert m.calibration_ms == calibration.reference_ms and m.reference_ms > 0
        assert m.latency_low_ms <= m.latency_ms <= m.latency_high_ms and 0 < m.latency_coverage <= 1


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------
@pytest.mark.cuda
def test_cuda_measurement(small_path):
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("needs onnxruntime-gpu and a CUDA GPU")
    profile = load_profile("cuda").replace(min_runs=3, max_runs=5, max_seconds=2.0, warmup=1)
    m = measure(small_path, profile)
    assert m.ok and m.latency_ms > 0
    if m.memory_of == "gpu":  # the figure judged is the GPU's; the host's is kept beside it
        assert m.peak_memory_mb == m.device_peak_memory_mb > 0 and m.host_peak_memory_mb > 0
    else:  # no GPU figure readable: the host's, and it says so
        assert m.device_peak_memory_mb is None and m.host_peak_memory_mb is None


def test_on_cuda_the_memory_judged_is_the_gpus():
    """On a GPU the model lives in GPU memory: that is the figure budgets and searches judge, with the
    host's RSS (mostly the CUDA libraries, the same whatever the model) kept beside it."""
    reply = {"peak_memory_mb": 210.0, "device_peak_memory_mb": 300.0}
    cuda = SimpleNamespace(profile=load_profile("cuda", check_available=False))
    cpu = SimpleNamespace(profile=load_profile("cpu"))
    assert Runner._memory_figures(cuda, reply) == dict(peak_memory_mb=300.0, device_peak_memory_mb=300.0,
                                                       host_peak_memory_mb=210.0, memory_of="gpu")
    host_only = Runner._memory_figures(cuda, {"peak_memory_mb": 210.0, "device_peak_memory_mb": None})
    assert host_only["peak_memory_mb"] == 210.0 and "memory_of" not in host_only  # the default: "host"
    assert Runner._memory_figures(cpu, {"peak_memory_mb": 50.0})["peak_memory_mb"] == 50.0
    assert Measurement(ok=True, **host_only).memory_of == "host"


def test_figures_of_cuda_are_keyed_apart_from_those_that_judged_the_hosts_memory():
    from ltsedge.keys import measurement_settings

    assert measurement_settings(load_profile("cuda", check_available=False))["memory"] == "gpu"
    assert "memory" not in measurement_settings(load_profile("cpu"))  # CPU figures keep their keys


def test_gpu_memory_without_pynvml_is_read_from_nvidia_smi():
    from ltsedge.runners.memory import _gpu_memory_from_nvidia_smi

    def smi(apps: str, device: str = "81559\n"):
        def run(cmd, **_):
            if any(arg.startswith("--query-compute-apps") for arg in cmd):
                return SimpleNamespace(stdout=apps)
            return SimpleNamespace(stdout=device)
        return run

    mine = f"1234, 100\n{os.getpid()}, 300\n"
    assert _gpu_memory_from_nvidia_smi(0, run=smi(mine)) == 300 * 2**20  # this process's line
    assert _gpu_memory_from_nvidia_smi(0, run=smi("1234, 100\n", "512\n")) == 512 * 2**20  # hidden: the device's

    def missing(cmd, **_):
        raise FileNotFoundError("nvidia-smi")
    assert _gpu_memory_from_nvidia_smi(0, run=missing) is None
    assert _gpu_memory_from_nvidia_smi(0, run=smi("", "[N/A]\n")) is None


def test_interval_reports_the_coverage_it_really_has():
    from scipy.stats import binom

    for n in range(2, 60):
        low, high, cover = stats.interval_with_coverage(list(range(n)))
        j = low + 1
        assert cover == pytest.approx(1 - 2 * binom.cdf(j - 1, n, 0.5))
        if n < 6:
            assert cover < 0.95 and (low, high) == (0, n - 1)  # [min, max]: 50, 75, 87.5, 93.75%
    assert [round(stats.interval_with_coverage(list(range(n)))[2], 4) for n in (2, 3, 4, 5)] == \
        [0.5, 0.75, 0.875, 0.9375]


def test_the_stop_rule_keeps_its_confidence_despite_looking_repeatedly():
    """Simulated: a skewed latency distribution, timed until the stop rule fires. Over many runs, the
    stopping median is outside +-tolerance of the true median in well under 5% of them."""
    rng = np.random.default_rng(0)
    tolerance, true_median, misses, trials = 0.03, float(np.exp(0.0)), 0, 400
    for _ in range(trials):
        samples = []
        while True:
            samples.append(float(rng.lognormal(0.0, 0.08)))
            if stats.converged(samples, 6, tolerance, 60) or len(samples) == 60:
                break
        if abs(np.median(samples) - true_median) > tolerance * true_median:
            misses += 1
    assert misses / trials < 0.05


def test_where_the_peak_cannot_be_reset_each_model_gets_a_fresh_worker(small_path, monkeypatch):
    monkeypatch.setenv(TEST_FAULTS_ENV, "no_peak_reset")
    with Runner(FAST) as runner:
        first = runner.measure(small_path)
        pid = runner.worker_pid
        second = runner.measure(small_path)
    assert first.ok and second.ok and pid is None  # retired after every model
    assert first.memory_method == second.memory_method == "no_reset"


def test_the_memory_method_is_recorded(small_path):
    with Runner(FAST) as runner:
        first, second = runner.measure(small_path), runner.measure(small_path)
    assert (first.memory_method, second.memory_method) == ("fresh_process", "reset_peak")


def test_the_drift_limit_widens_with_the_wander_the_run_has_shown():
    guard = policy.DriftGuard(policy.Calibration.from_samples([10.0] * 5))
    for ms in (11.2, 8.9, 11.1, 8.8, 11.3, 8.7):  # a VM that wanders +-12% all the time
        guard.drifted(ms)
    assert guard.limit == pytest.approx(0.36, abs=0.02) and not guard.drifted(12.5)
    assert guard.drifted(14.5)  # +45%: beyond even this run's wander
    # The limit it was judged against is the one said, not the wider one it leaves behind.
    assert guard.judged_limit == pytest.approx(0.36, abs=0.02) and guard.limit > guard.judged_limit


@pytest.mark.parametrize("limit, message", [({"timeout_s": 0.01}, "timed out after 0.01 s"),
                                            ({"memory_limit_mb": 5.0}, "exceeded the memory limit of 5 MB")])
def test_the_calibration_keeps_to_the_profiles_limits(limit, message, monkeypatch):
    """The reference is timed under the profile's timeout and memory limit, not a fixed 120 s and none:
    intra_op_threads = 100000 once sat at 1.7 GB for 26 s there. (The timeout's floor, which keeps a
    per-model timeout meant for the models from failing the reference, is lifted here.)"""
    import ltsedge.runners.runner as runner_module

    monkeypatch.setattr(runner_module, "CALIBRATION_FLOOR_S", 0.0)
    with Runner(FAST.replace(**limit)) as runner:
        with pytest.raises(LtsedgeError, match=f"could not be timed on this device \\({message}"):
            runner.calibrate()


# ---------------------------------------------------------------------------------------------
# Figures pooled over fresh workers (a profile's ``workers``)
# ---------------------------------------------------------------------------------------------
def _generate_measurement(decode_ratio: float, prefill_ratio: float, memory: float, drift=None) -> Measurement:
    def figures(ratio, runs):
        return {"latency_ms": 2 * ratio, "latency_ratio": ratio, "latency_p90_ms": 2.2 * ratio,
                "latency_min_ms": 1.8 * ratio, "latency_cv": 0.05, "latency_low_ms": 1.9 * ratio,
                "latency_high_ms": 2.1 * ratio, "latency_coverage": 0.95, "runs": runs, "pairs_timed": runs,
                "converged": runs < 50, "stopped_early": False, "runs_per_sample": 1, "reference_ms": 1.0,
                "uncalibrated_latency_ms": 2 * ratio}
    decode, prefill = figures(decode_ratio, 20), figures(prefill_ratio, 10)
    return Measurement(ok=True, workload="decode", workloads={"decode": decode, "prefill": prefill},
                       decode_latency_ms=decode["latency_ms"], prefill_latency_ms=prefill["latency_ms"],
                       peak_memory_mb=memory, load_seconds=1.0, inference_seconds=2.0, drift=drift,
                       **{k: decode[k] for k in ("latency_ms", "latency_ratio", "latency_p90_ms", "latency_min_ms",
                                                 "latency_cv", "latency_low_ms", "latency_high_ms", "runs",
                                                 "pairs_timed", "converged", "reference_ms")})


def test_pooled_figures_are_the_median_across_workers():
    from ltsedge.runners.pooling import pooled

    three = [_generate_measurement(1.0, 10.0, 100.0), _generate_measurement(1.3, 11.0, 104.0),
             _generate_measurement(1.1, 30.0, 101.0)]
    m = pooled(three)
    assert m.workers == 3 and m.ok
    assert m.workloads["decode"]["latency_ratio"] == m.latency_ratio == pytest.approx(1.1)  # an outlier worker
    assert m.workloads["prefill"]["latency_ratio"] == pytest.approx(11.0)                  # does not pull it
    assert m.decode_latency_ms == pytest.approx(2.2) and m.prefill_latency_ms == pytest.approx(22.0)
    assert m.workloads["decode"]["runs"] == m.runs == 60 and m.workloads["prefill"]["runs"] == 30
    assert m.peak_memory_mb == 101.0 and m.load_seconds == 3.0 and m.inference_seconds == 6.0
    two = pooled(three[:2])
    assert two.latency_ratio == pytest.approx(1.15) and two.workers == 2  # the mean of two
    assert pooled(three[:1]) is three[0]


def test_one_failed_or_drifted_worker_decides_the_pooled_measurement():
    from ltsedge.runners.pooling import pooled

    failed = Measurement.failure("failed to run (decode): out of memory")
    assert pooled([_generate_measurement(1.0, 10.0, 100.0), failed]) is failed
    drifted = pooled([_generate_measurement(1.0, 10.0, 100.0), _generate_measurement(1.0, 10.0, 100.0, drift=0.3)])
    assert drifted.drift == 0.3  # the drift guard measures the model again, every worker of it


def test_a_profile_with_workers_measures_each_model_in_that_many_fresh_workers(small_path, monkeypatch):
    pids, measure_path = [], Runner._measure_path

    def spy(self, *args):
        m = measure_path(self, *args)
        pids.append(self.worker_pid or m.load_seconds)  # the worker that measured it (alive after a success)
        return m

    monkeypatch.setattr(Runner, "_measure_path", spy)
    with Runner(FAST.replace(workers=2)) as runner:
        m = runner.measure(small_path)
    assert m.ok and m.workers == 2 and len(pids) == 2 and pids[0] != pids[1]
    with Runner(FAST) as runner:
        single = runner.measure(small_path)
    assert single.workers == 1 and len(pids) == 3
    assert m.runs >= 2 * FAST.min_runs  # timed in both workers: their runs summed


def test_workers_is_a_repeat_setting_in_the_key_only_when_set():
    from ltsedge.devices.profile import coarse

    assert "workers" not in FAST.settings() and FAST.replace(workers=2).settings()["workers"] == 2
    assert coarse(FAST.replace(workers=3)).workers == 1  # a search times its candidates in one worker
    with pytest.raises(LtsedgeError, match="workers = 0 is out of range: must be between 1 and 9"):
        FAST.replace(workers=0)
