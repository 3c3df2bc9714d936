"""A fleet on Dask: a scheduler and two agents on this machine (loopback only), a tiny search measured on
them, one agent killed in the middle; every candidate measured once and stored, and the same search
without a scheduler gives the same frontier from the same store."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="Dask's distributed is not installed")
pytestmark = pytest.mark.slow  # every test here starts processes: a fleet, or a search that waits on one

from ltsedge.runners.worker import FAULT_KEY  # noqa: E402
from tests.helpers import FLEET_DEVICE as DEVICE  # noqa: E402
from tests.helpers import free_port, ltsedge_cli, ltsedge_process, start, tiny_arch, wait_for  # noqa: E402


def candidate_records(out: Path) -> list[dict]:
    path = out / "candidates.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()[1:]
    return [json.loads(line) for line in lines if line.endswith("}")]


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if dask is None:
        pytest.skip("the dask command is not installed")
    agents_tmp = tmp_path / "tmp"  # where an agent's scratch directory shows it measuring a model
    agents_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(agents_tmp))
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    device = tmp_path / "fleet.toml"
    device.write_text(DEVICE)
    procs = [start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                   tmp_path / "scheduler.log")]
    time.sleep(1)
    for name in ("a1", "a2"):
        procs.append(start([sys.executable, "-m", "ltsedge", "agent", "--scheduler", address, "--device", str(device),
                            "--name", name], tmp_path / f"{name}.log"))
    try:
        for name in ("a1", "a2"):
            wait_for(lambda n=name: "measuring for" in (tmp_path / f"{n}.log").read_text(), 60, f"agent {name}")
        yield address, device, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def search_on_fleet(tmp_path: Path, address: str, device: Path, *, generations: int, seed: int,
                    candidates: int) -> tuple[list[str], Path, Path, subprocess.Popen]:
    """A smoke search measured on the fleet, once it has logged ``candidates`` candidates (or ended).
    Returns its command line without ``--scheduler`` (to run it again here), its --out and --store."""
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    # --measure all: every candidate goes to the fleet, and a replay from the store is the same search
    # (with the cost model, a replay's model would see the store's later figures and could differ).
    args = [sys.executable, "-m", "ltsedge", "search", "--preset", "smoke", "--measure", "all",
            "--generations", str(generations),
            "--device", str(device), "--out", str(out), "--store", str(store), "--quiet", "--no-baseline",
            "--seed", str(seed)]
    search = subprocess.Popen(args + ["--scheduler", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    wait_for(lambda: len(candidate_records(out)) >= candidates or search.poll() is not None, 120,
             "first candidates")
    return args, out, store, search


def test_a_search_on_two_agents_survives_losing_one(tmp_path, fleet):
    address, device, procs = fleet
    args, out, store, search = search_on_fleet(tmp_path, address, device, generations=3, seed=4, candidates=3)
    os.killpg(procs[1].pid, signal.SIGKILL)  # agent a1 dies, maybe in the middle of a model
    stdout, stderr = search.communicate(timeout=300)
    assert search.returncode == 0, stderr
    records = candidate_records(out)
    ids = [r["id"] for r in records if r["source"] != "predicted"]  # a prediction may be settled later
    assert len(ids) == len(set(ids))  # every candidate measured once
    measured = [r for r in records if r["source"] == "measured"]
    failed = [(r["id"], r["measurement"]["agent"], r["measurement"]["error"]) for r in measured
              if not r["measurement"]["ok"]]
    assert measured and not failed, failed
    assert all(r["measurement"]["agent"] for r in measured)
    assert any("a2" in r["measurement"]["agent"] for r in measured)
    # Which board measured what: in the tables and in the report.
    import csv

    rows = {r["id"]: r for r in csv.DictReader(open(out / "candidates.csv"))}
    assert all(rows[r["id"]]["agent"] == r["measurement"]["agent"] for r in measured)
    report = (out / "report" / "index.html").read_text()
    assert "Who measured what" in report and "a2" in report
    # Each agent timed against its own reference; the figures ranked are on the search's one scale.
    scales = {r["measurement"]["calibration_ms"] for r in measured}
    assert len(scales) == 1

    # The same search here, without a scheduler, from the same store: the same frontier, nothing measured.
    local = subprocess.run(args[:-4] + ["--out", str(tmp_path / "local"), "--store", str(store), "--quiet",
                                        "--no-baseline", "--seed", "4"], capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    again = candidate_records(tmp_path / "local")
    assert [r["id"] for r in again] == ids and all(r["source"] == "store" for r in again if r["source"] != "skipped")
    # The front the search found (before the strict re-measurement, which times again) is the same.
    assert front_of(again) == front_of(records) and front_of(records)


def front_of(records: list[dict]) -> set[str]:
    points = {r["id"]: (-r["decoder_params"], r["measurement"]["latency_ms"], r["measurement"]["peak_memory_mb"])
              for r in records if r["feasible"]}
    return {i for i, p in points.items()
            if not any(all(a <= b for a, b in zip(q, p)) and q != p for q in points.values())}


def large_model(path: Path) -> Path:
    """An ONNX model over Dask's 10 MB "large graph" threshold (one 1700 x 1700 MatMul: 11.6 MB of
    weights), quick to time."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    d = 1700
    weights = numpy_helper.from_array(np.ones((d, d), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "large",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    assert path.stat().st_size > 11 * 2**20
    return path


def test_profile_and_check_on_the_fleet(tmp_path, fleet):
    address, device, _ = fleet
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"n_layer": 1, "d_model": 32, "n_head": [2], "d_inner": [64], "vocab_size": 100,
                                "n_positions": 32}))
    proc = ltsedge_process("profile", arch, "--device", device, "--json", "--store", tmp_path / "s.sqlite",
                           "--scheduler", address, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["agent"] and result["fingerprint"]["onnxruntime"]
    model = tmp_path / "m.onnx"
    assert ltsedge_process("export", arch, "-o", model).returncode == 0
    check = ltsedge_process("check", model, "--device", device, "--max-latency-ms", "1000", "--json",
                            "--scheduler", address, timeout=120)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["results"][0]["measurement"]["agent"]


def test_a_large_model_is_profiled_on_the_fleet_without_dasks_warning(tmp_path, fleet):
    """A model over 10 MB travels in its task, and Dask's five-line advice to scatter it is not printed."""
    address, device, _ = fleet
    model = large_model(tmp_path / "large.onnx")
    proc = ltsedge_process("profile", model, "--device", device, "--json", "--store", tmp_path / "s.sqlite",
                           "--scheduler", address, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["agent"]
    assert "large graph" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr


def test_losing_the_scheduler_under_a_profile_says_what_was_kept(tmp_path, fleet):
    """``profile`` has no checkpoint to resume from: it says nothing was stored, and to run it again."""
    address, device, procs = fleet
    lasting = tmp_path / "lasting.toml"  # timed for minutes: the scheduler goes while the agent measures
    lasting.write_text(device.read_text().replace("min_runs = 3\nmax_runs = 8\nmax_seconds = 1.0",
                                                  "min_runs = 1000000\nmax_runs = 1000000\nmax_seconds = 300"))
    assert "max_seconds = 300" in lasting.read_text()
    store = tmp_path / "s.sqlite"
    profile = subprocess.Popen([sys.executable, "-m", "ltsedge", "profile", str(large_model(tmp_path / "large.onnx")),
                                "--device", str(lasting), "--store", str(store), "--scheduler", address],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: any((tmp_path / "tmp").glob("ltsedge-agent-*")) or profile.poll() is not None, 120,
             "an agent measuring the model")
    os.killpg(procs[0].pid, signal.SIGKILL)  # the scheduler goes away
    _, stderr = profile.communicate(timeout=120)
    assert profile.returncode == 1 and "Traceback" not in stderr, stderr
    (line,) = stderr.splitlines()
    assert "lost the scheduler" in line and "nothing was stored" in line and "once the scheduler is back" in line
    assert "resume" not in line
    from ltsedge.store import MeasurementStore

    with MeasurementStore(store) as kept:
        assert kept.count() == 0


def test_losing_the_scheduler_under_a_check_says_no_model_was_judged(tmp_path, monkeypatch):
    """``check`` keeps no figures: when the fleet's one line comes, it says so, and does not speak of
    resuming. (The line itself, from a real scheduler's loss, is the profile test's above.)"""
    from ltsedge.errors import LostConnection

    def scheduler_lost(*args, **kwargs):
        raise LostConnection("lost the scheduler (CommClosedError)")

    monkeypatch.setattr("ltsedge.check.run_check", scheduler_lost)
    proc = ltsedge_cli("check", large_model(tmp_path / "large.onnx"), "--max-latency-ms", "1000",
                       "--scheduler", "tcp://127.0.0.1:8786")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: lost the scheduler (CommClosedError); no model was judged")
    assert "once the scheduler is back" in line and "resume" not in line


def test_no_agent_or_no_scheduler_is_a_clear_error(tmp_path):
    port = free_port()
    proc = ltsedge_process("search", "--preset", "smoke", "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite",
                           "--quiet", "--scheduler", f"tcp://127.0.0.1:{port}", timeout=120)
    assert proc.returncode == 2 and "cannot reach the scheduler" in proc.stderr and "Traceback" not in proc.stderr


def test_a_hung_agent_does_not_hang_the_search(tmp_path, fleet, monkeypatch):
    """Agents stopped (SIGSTOP) after the search host met them: no answer within the model timeout plus
    slack, and the models still out come back as failures of the environment, not a wait forever."""
    from ltsedge.devices import load_profile
    from ltsedge.exporters import export_model
    from ltsedge.runners import remote
    from ltsedge.runners.remote import RemoteRunner

    address, device, procs = fleet
    monkeypatch.setattr(remote, "ANSWER_SLACK_S", 3.0)
    profile = load_profile(device).replace(timeout_s=2.0)
    model = export_model(tiny_arch()).to_bytes()
    with RemoteRunner(profile, address) as runner:
        for proc in procs[1:]:
            os.killpg(proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            got = []
            results = runner.measure_many([model, model], on_result=lambda i, m: got.append(i))
            waited = time.monotonic() - started
        finally:
            for proc in procs[1:]:
                os.killpg(proc.pid, signal.SIGCONT)
    assert waited < 30 and sorted(got) == [0, 1]
    assert all(not m.ok and m.failure_kind == "environment" and "no agent answered" in m.error for m in results)


def test_a_board_in_trouble_gets_a_second_try_on_the_fleet(tmp_path, fleet):
    """A failure of the environment (the agent's worker died) is measured once more, on whichever agent
    is free, before it counts: a passing trouble leaves no failure, a model that kills every worker
    is recorded as failed after its second try, and nothing is tried a third time."""
    import onnx
    from onnx import helper

    from ltsedge.devices import load_profile
    from ltsedge.exporters import export_model
    from ltsedge.runners.remote import RemoteRunner

    address, device, _ = fleet

    def model(fault: str) -> bytes:
        proto = onnx.load_from_string(export_model(tiny_arch()).to_bytes())
        helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, FAULT_KEY: fault})
        return proto.SerializeToString()

    marker = tmp_path / "died-once"
    said, got = [], []
    with RemoteRunner(load_profile(device), address, log=said.append) as runner:
        passing, broken = runner.measure_many([model(f"exit-once:{marker}"), model("exit")],
                                              on_result=lambda i, m: got.append(i))
    assert marker.exists() and passing.ok and passing.calibration_ms
    assert not broken.ok and broken.failure_kind == "environment" and "exited with code 3" in broken.error
    assert sorted(got) == [0, 1]  # each reported once, with its final figure
    assert sum("measuring it once more" in line for line in said) == 2


def test_losing_the_scheduler_stops_the_search_cleanly_and_it_resumes(tmp_path, fleet):
    address, device, procs = fleet
    args, out, _, search = search_on_fleet(tmp_path, address, device, generations=4, seed=6, candidates=2)
    os.killpg(procs[0].pid, signal.SIGKILL)  # the scheduler goes away
    _, stderr = search.communicate(timeout=300)
    assert search.returncode == 1 and "Traceback" not in stderr
    assert "lost the scheduler" in stderr and "again to resume" in stderr
    before = candidate_records(out)
    assert before  # nothing measured is lost: every figure was stored as it arrived
    resumed = subprocess.run(args, capture_output=True, text=True, timeout=300)  # here, without the fleet
    assert resumed.returncode == 0, resumed.stderr
    ids = [r["id"] for r in candidate_records(out) if r["source"] != "predicted"]  # settled: a second record
    assert len(ids) == len(set(ids)) and {r["id"] for r in before if r["source"] != "predicted"} <= set(ids)


def test_a_search_waits_a_bounded_time_for_an_agent_to_connect(tmp_path):
    """Boards are started beside the search, not always before it: an empty fleet is waited for, then one line."""
    from ltsedge.devices import load_profile
    from ltsedge.errors import LtsedgeError
    from ltsedge.runners.remote import RemoteRunner

    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if dask is None:
        pytest.skip("the dask command is not installed")
    port = free_port()
    scheduler = start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                      tmp_path / "scheduler.log")
    lines: list[str] = []
    try:
        started = time.monotonic()
        with pytest.raises(LtsedgeError, match="no ltsedge agent connected to the scheduler within 2 s"):
            RemoteRunner(load_profile("cpu"), f"tcp://127.0.0.1:{port}", log=lines.append, agent_wait_s=2)
        assert time.monotonic() - started >= 2
        assert lines == ["waiting up to 2 s for an ltsedge agent to connect to the scheduler"]
    finally:
        os.killpg(scheduler.pid, signal.SIGKILL)
        scheduler.wait()
