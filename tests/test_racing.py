"""Racing never drops a candidate that the strict figures put on the front (simulated measurements)."""

from __future__ import annotations

import numpy as np
import pytest

from ltsedge.runners.racing import Race
from tests.helpers import tiny_arch


def true_front(points):
    """Indices of the non-dominated points (max params, min ratio, min memory)."""
    front = []
    for i, (p, r, m) in enumerate(points):
        dominated = any(q >= p and s <= r and n <= m and (q, s, n) != (p, r, m) for q, s, n in points)
        if not dominated:
            front.append(i)
    return set(front)


@pytest.mark.parametrize("seed", range(8))
def test_racing_never_drops_a_true_frontier_candidate(seed):
    rng = np.random.default_rng(seed)
    n = 120
    params = rng.integers(10_000, 5_000_000, n)
    # Latency and memory grow with parameters, with topology changing them by up to 2.8x and 5.5x.
    ratios = params / 1e6 * rng.uniform(1.0, 2.8, n)
    memory = 20 + params / 2e4 * rng.uniform(1.0, 5.5, n)
    truth = true_front(list(zip(params, ratios, memory)))
    tolerance, kept = 0.02, []  # (params, ratio, memory) of candidates timed in full, as a search keeps them
    dropped = []
    for i in range(n):
        front = tuple(kept[j] for j in true_front(kept)) if kept else ()
        race = Race("forward", int(params[i]), front, tolerance)
        # A first estimate: 6 noisy samples (lognormal, 5%: a shared VM's ratios are steadier than that).
        samples = list(ratios[i] * rng.lognormal(0.0, 0.05, 6))
        measured_memory = memory[i] * rng.uniform(0.99, 1.01)
        if race.settled(samples, measured_memory):
            dropped.append(i)
        else:  # refined: its figure is then known within the tolerance
            kept.append((int(params[i]), ratios[i] * rng.uniform(1 - tolerance, 1 + tolerance), measured_memory))
    assert not truth & set(dropped), "racing dropped a candidate of the true front"
    assert len(dropped) > n // 4  # and it does save work: most clearly dominated candidates stop early


def test_budgets_settle_a_candidate_beyond_them():
    race = Race("decode", 1000, (), 0.02, max_ratio=2.0, max_memory_mb=100.0)
    assert race.settled([2.5] * 6, 50.0)  # even its fastest sample is over the latency budget
    assert race.settled([1.0] * 6, 150.0)
    assert not race.settled([2.0] * 6, 50.0)  # at the budget's edge: could be within, refine
    assert not race.settled([2.5] * 5, 50.0)  # not before the first estimate is complete


@pytest.mark.slow
def test_a_raced_model_times_its_objective_in_full_and_its_other_workload_coarsely(tmp_path):
    """Prefill is reported, not optimised, in a decode search: a few samples at +-10%, flagged coarse; the
    objective keeps the profile's policy; without a race (profile, publishing) every workload is full."""
    from ltsedge.devices import load_profile
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.runners import Runner
    from ltsedge.runners.measurement import complete
    from ltsedge.runners.racing import SECONDARY_MAX_RUNS

    path = tmp_path / "m.onnx"
    export_model(tiny_arch(), ExportOptions(variant="generate")).save(path)
    profile = load_profile("cpu").replace(sequence=16, context=16, min_runs=12, max_runs=20, tolerance=0.005,
                                          max_seconds=20.0, warmup=1)
    race = Race("decode", 1, (), 0.02)  # an empty front: nothing to race out against
    with Runner(profile) as runner:
        raced = runner.measure(path, race=race).to_dict()
        plain = runner.measure(path).to_dict()
    prefill, decode = raced["workloads"]["prefill"], raced["workloads"]["decode"]
    assert prefill["coarse"] and prefill["runs"] <= SECONDARY_MAX_RUNS
    # The profile's min_runs counts the pairs timed: beside the compute reference a figure is made of the
    # quiet ones among them (``runs``), which may be fewer.
    assert not decode["coarse"] and decode["pairs_timed"] >= 12  # in full
    assert not complete(raced)
    assert not any(w["coarse"] for w in plain["workloads"].values())
    assert plain["workloads"]["prefill"]["pairs_timed"] >= 12
    assert complete(plain)


def test_the_coarse_policy_only_loosens():
    from ltsedge.devices import load_profile
    from ltsedge.runners.protocol import RunSettings

    settings = RunSettings.from_profile(load_profile("cpu"))
    coarse = Race("decode", 1, (), 0.02).secondary(settings)
    assert coarse.tolerance >= settings.tolerance and coarse.max_runs <= settings.max_runs
    assert coarse.min_runs <= coarse.max_runs and coarse.max_seconds < settings.max_seconds
    strict_one = settings.__class__(**{**settings.__dict__, "tolerance": 0.2, "min_runs": 2, "max_runs": 4})
    loose = Race("decode", 1, (), 0.02).secondary(strict_one)
    assert (loose.tolerance, loose.min_runs, loose.max_runs) == (0.2, 2, 4)  # already coarser: kept


def test_a_coarse_or_raced_figure_never_replaces_a_complete_one_in_the_store(tmp_path):
    from ltsedge.devices import load_profile
    from ltsedge.runners import Measurement
    from ltsedge.search.budgets import Budgets
    from ltsedge.search.evaluate import CandidateEvaluator
    from ltsedge.store import MeasurementStore

    class Stub:  # the evaluator asks its runner for the machine's fingerprint only
        def fingerprint(self):
            return {"machine": "test", "onnxruntime": "1.0"}

    def figure(latency, **workload):
        return Measurement(ok=True, latency_ms=latency, peak_memory_mb=1.0, workload="decode",
                           workloads={"decode": {"latency_ms": latency, "coarse": False},
                                      "prefill": {"latency_ms": 9.0, **workload}})

    arch = tiny_arch()
    with MeasurementStore(tmp_path / "store.sqlite") as store:
        evaluator = CandidateEvaluator(load_profile("cpu"), Stub(), store, tmp_path, Budgets(), objective="decode")
        key = evaluator.store_key(arch)
        evaluator._keep(arch, figure(1.0, coarse=True))  # nothing stored yet: the coarse figure is kept
        assert store.get(*key)["latency_ms"] == 1.0
        evaluator._keep(arch, figure(2.0, coarse=False))  # a complete one replaces it
        assert store.get(*key)["latency_ms"] == 2.0
        evaluator._keep(arch, figure(3.0, coarse=True))  # and is never replaced by a coarse one
        evaluator._keep(arch, Measurement(ok=True, latency_ms=4.0, stopped_early=True))  # nor a raced-out one
        assert store.get(*key)["latency_ms"] == 2.0


def test_a_candidate_this_version_cannot_export_fails_alone_and_is_not_stored(tmp_path, monkeypatch):
    """A llama-edge search met a 30 x 1216 model of 2.07 GiB in fp32 whose int4 export is refused (quantizing
    over protobuf's 2 GB): the whole search stopped with exit 2. It is one failed candidate."""
    import ltsedge.search.evaluate as evaluate
    from ltsedge.devices import load_profile
    from ltsedge.errors import LtsedgeError
    from ltsedge.runners import Measurement
    from ltsedge.search.budgets import Budgets
    from ltsedge.store import MeasurementStore

    small, big, third = tiny_arch(), tiny_arch(d_model=32), tiny_arch(d_inner=[64, 64])
    real_export = evaluate.export_model

    def export(arch, *args, **kwargs):
        if arch.id == big.id:
            raise LtsedgeError(f"{arch.id} is 2.07 GiB in fp32: quantizing a model over protobuf's 2 GB is not "
                               f"supported yet (export it in fp32)")
        return real_export(arch, *args, **kwargs)

    class Machine:
        def __init__(self):
            self.measured = []

        def fingerprint(self):
            return {"machine": "test", "onnxruntime": "1.0"}

        def measure_many(self, paths, on_result=None, race=None):
            self.measured += [p.name for p in paths]
            out = [Measurement(ok=True, latency_ms=1.0, peak_memory_mb=1.0) for _ in paths]
            for i, m in enumerate(out):
                on_result(i, m)
            return out

    monkeypatch.setattr(evaluate, "export_model", export)
    machine = Machine()
    with MeasurementStore(tmp_path / "store.sqlite") as store:
        evaluator = evaluate.CandidateEvaluator(load_profile("cpu"), machine, store, tmp_path, Budgets(),
                                                objective="forward")
        first, second, last = evaluator._measure([small, big, third], generation=1)
        assert first.ok and last.ok and machine.measured == [f"{small.id}.onnx", f"{third.id}.onnx"]
        assert not second.ok and second.measurement.error.startswith("not exported: ")
        assert "over protobuf's 2 GB" in second.measurement.error
        assert store.get(*evaluator.store_key(big)) is None  # a later version may export it: measured then
