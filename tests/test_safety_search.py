"""A search's own files and its fleet, under abuse: re-running a finished search, a kill while
publishing, damaged files in --out and in the store, absurd sizes, models with external data on agents."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.checkpoint import SearchState, load_checkpoint, save_checkpoint
from ltsedge.search.pareto import pareto_front
from ltsedge.search.loop import SearchRun
from ltsedge.search.settings import SearchSettings
from ltsedge.store import MeasurementStore
from tests.conftest import tiny_arch
from tests.helpers import fresh_algorithm, generation

SEED = 2
# The same search from Python and from the command line (one identity: one checkpoint fits both).
CLI_ARGS = ["--preset", "smoke", "--generations", "1", "--quiet", "--no-baseline", "--seed", str(SEED)]


def options(out: Path, store: Path) -> SearchOptions:
    return SearchOptions(preset="smoke", generations=1, seed=SEED, baseline=False, quiet=True, out=out,
                         store_path=store)


def search(out: Path, store: Path, log: list | None = None):
    settings, profile = resolve(options(out, store))
    with MeasurementStore(store) as s:
        return SearchRun(settings, profile, out, s, log=(log.append if log is not None else lambda m: None)).run()


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()[1:]]


def run_cli(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "ltsedge", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def assert_one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for word in words:
        assert word in proc.stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-generation smoke search: its --out and its store."""
    root = tmp_path_factory.mktemp("finished")
    search(root / "out", root / "s.sqlite")
    return root


@pytest.fixture
def copy_of_finished(finished, tmp_path):
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run" / "out", tmp_path / "run" / "s.sqlite"


# --- 1. a finished search is finished -------------------------------------------------------------
@pytest.mark.parametrize("done", [2, 3])
def test_a_checkpoint_of_the_last_generation_has_nothing_left_to_run(tmp_path, done):
    algorithm = fresh_algorithm(generations=3)
    for _ in range(done):
        generation(algorithm)
    save_checkpoint(tmp_path, "run-a", algorithm, SearchState(generation=done))
    resumed = fresh_algorithm(generations=3)
    load_checkpoint(tmp_path, "run-a", resumed)
    assert resumed.has_next() == (done < 3)


class Killed(BaseException):
    """A kill -9 while the frontier is published, as far as the search's own code can tell."""


@pytest.mark.slow
def test_rerunning_a_finished_or_killed_while_publishing_search_publishes_without_evolving(tmp_path, monkeypatch):
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    import ltsedge.search.loop as loop_module

    real_finish = loop_module.finish

    def killed(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(loop_module, "finish", killed)
    with pytest.raises(Killed):
        search(out, store)
    assert (out / "checkpoint.json").exists() and not (out / "frontier.json").exists()
    evolved = records(out)

    monkeypatch.setattr(loop_module, "finish", real_finish)
    log: list[str] = []
    resumed = search(out, store, log)  # publishing resumes; nothing is evolved
    assert any("completed its 1 generations" in m for m in log), log
    assert not any("resuming" in m for m in log), log
    assert json.loads((out / "search.json").read_text())["generations_completed"] == 1
    assert {r["generation"] for r in records(out)} == {1}
    assert len([r for r in records(out) if r["source"] == "measured"]) == len(
        [r for r in evolved if r["source"] == "measured"])
    frontier = json.loads((out / "frontier.json").read_text())["models"]
    assert frontier and [m["id"] for m in frontier] == [p.candidate.arch.id for p in resumed.frontier]

    again = search(out, store)  # and once more: the same front found (publishing re-times it), one generation
    assert json.loads((out / "search.json").read_text())["generations_completed"] == 1
    assert front(again) == front(resumed)
    assert {r["generation"] for r in records(out)} == {1}


def front(result) -> list[str]:
    return sorted(c.arch.id for c in pareto_front(result.candidates, result.budgets))


def settling(out: Path, store: Path, log: list | None = None):
    """A smoke search whose end settles a full round (8 predictions measured): what a re-run must not redo."""
    opts = SearchOptions(preset="smoke", generations=3, population=8, seed=SEED, baseline=False, quiet=True,
                         out=out, store_path=store)
    settings, profile = resolve(opts)
    with MeasurementStore(store) as s:
        return SearchRun(settings, profile, out, s, log=(log.append if log is not None else lambda m: None)).run()


def published_figures(out: Path) -> list[tuple]:
    return [(m["id"], m["latency_ms"], m["peak_memory_mb"], m["sha256"])
            for m in json.loads((out / "frontier.json").read_text())["models"]]


@pytest.fixture
def measured_paths(monkeypatch) -> list:
    """Every model file a Runner measures from now on."""
    from ltsedge.runners.runner import Runner

    paths: list = []
    real = Runner.measure_many

    def counting(self, models, *args, **kwargs):
        paths.extend(models)
        return real(self, models, *args, **kwargs)

    monkeypatch.setattr(Runner, "measure_many", counting)
    return paths


@pytest.mark.slow
def test_a_rerun_of_a_finished_search_measures_nothing_and_publishes_the_same_front(tmp_path, measured_paths):
    """Each re-run settled another round and re-measured the front: 11, 19, then 21 candidates measured,
    5, 7, then 8 models published by the same finished search."""
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    settling(out, store)
    assert sum(r["source"] == "settled" for r in records(out)) > 0  # the round this test is about happened
    log_before, published_before = records(out), published_figures(out)
    measured_paths.clear()
    for _ in range(2):
        settling(out, store)
        assert measured_paths == []
        assert records(out) == log_before and published_figures(out) == published_before
        publish = json.loads((out / "search.json").read_text())["publish"]
        assert publish["reused"] == publish["thinned"] + publish["strict"]  # every figure taken, none measured


@pytest.mark.slow
def test_a_search_killed_while_publishing_measures_only_what_it_had_not(tmp_path, monkeypatch, measured_paths):
    import ltsedge.search.finish as finish_module

    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    real_undecided = finish_module.undecided

    def killed(*args, **kwargs):  # after every front model's first re-measurement
        raise Killed

    monkeypatch.setattr(finish_module, "undecided", killed)
    with pytest.raises(Killed):
        settling(out, store)
    settled = records(out)
    assert not (out / "frontier.json").exists()

    monkeypatch.setattr(finish_module, "undecided", real_undecided)
    measured_paths.clear()
    settling(out, store)
    assert records(out) == settled  # no second settling round
    publish = json.loads((out / "search.json").read_text())["publish"]
    assert publish["reused"] == publish["thinned"]  # every first re-measurement taken from before the kill
    assert len(measured_paths) == publish["strict"]  # only the undecided ones, strictly, were measured
    assert all(m["remeasured"] in ("profile", "strict")
               for m in json.loads((out / "frontier.json").read_text())["models"])


# --- 3. damaged files in --out: one line, exit 2 ---------------------------------------------------
def _ragged_population(out: Path) -> None:
    data = json.loads((out / "checkpoint.json").read_text())
    data["algorithm"]["population"]["F"].pop()  # one objective row fewer than genes
    (out / "checkpoint.json").write_text(json.dumps(data))


@pytest.mark.slow
@pytest.mark.parametrize("damage, words", [
    (_ragged_population, ["checkpoint", "damaged", "population F", "--restart"]),
    (lambda out: (out / "checkpoint.json").write_text("[1,2]"), ["checkpoint", "unreadable", "--restart"]),
    (lambda out: (out / "candidates.jsonl").write_bytes(b"\xff\xfe\x00binary\x80\n\x81"),
     ["candidates.jsonl is not a candidate log", "--restart"]),
])
def test_a_damaged_checkpoint_or_log_is_one_line(copy_of_finished, damage, words):
    out, store = copy_of_finished
    damage(out)
    assert_one_line_error(run_cli("search", *CLI_ARGS, "--out", out, "--store", store), *words)


def test_a_checkpoint_of_an_absurd_population_is_damaged_not_a_crash(tmp_path):
    algorithm = fresh_algorithm()
    generation(algorithm)
    save_checkpoint(tmp_path, "run-a", algorithm, SearchState(generation=1))
    data = json.loads((tmp_path / "checkpoint.json").read_text())
    population = data["algorithm"]["population"]
    for bad in ({**population, "X": [[99] * len(population["X"][0])] * len(population["X"])},  # genes off the space
                {**population, "rank": ["a"] * len(population["rank"])},
                {**population, "G": [[1.0]] * len(population["G"])}):  # one constraint, the problem has two
        (tmp_path / "checkpoint.json").write_text(json.dumps({**data, "algorithm": {**data["algorithm"],
                                                                                     "population": bad}}))
        with pytest.raises(LtsedgeError, match="damaged"):
            load_checkpoint(tmp_path, "run-a", fresh_algorithm())
    (tmp_path / "checkpoint.json").write_text(json.dumps({**data, "run": {"generation": "three"}}))
    with pytest.raises(LtsedgeError, match="damaged"):
        load_checkpoint(tmp_path, "run-a", fresh_algorithm())


# --- 3. a damaged store row is measured again --------------------------------------------------------
KEY = ("sha256:abc", "fp", "set", "1.0")


def _damage_rows(store: Path, text: str) -> None:
    conn = sqlite3.connect(store)
    conn.execute("UPDATE measurements SET measurement = ?", (text,))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("row", ['{"ok": true}', '{"ok": true, "latency_ms": null}', '{"ok": false}',
                                 '{"ok": "yes", "latency_ms": 1.0}'])
def test_a_damaged_store_row_is_absent_and_replaced(tmp_path, row):
    path = tmp_path / "s.sqlite"
    with MeasurementStore(path) as s:
        s.put(*KEY, {"ok": True, "latency_ms": 2.0}, fingerprint={}, settings={})
    _damage_rows(path, row)
    with MeasurementStore(path) as s:
        assert s.get(*KEY) is None  # measured again, as if it were not there
        s.put(*KEY, {"ok": True, "latency_ms": 3.0}, fingerprint={}, settings={})
        assert s.get(*KEY)["latency_ms"] == 3.0


def test_profile_measures_again_over_a_damaged_row(tmp_path):
    from ltsedge.profiling import profile_model

    model, store = tmp_path / "m.onnx", tmp_path / "s.sqlite"
    export_model(tiny_arch()).save(model)
    device = tmp_path / "d.toml"
    device.write_text('name = "d"\n[workload]\nsequence = 16\n[repeats]\nwarmup = 1\nmin_runs = 3\nmax_runs = 5\n'
                      'max_seconds = 1.0\ntolerance = 0.1\n')
    assert profile_model(model, str(device), store_path=store)["ok"]
    _damage_rows(store, '{"ok": true}')
    again = profile_model(model, str(device), store_path=store)
    assert again["ok"] and not again["cached"] and again["latency_ms"] > 0


def test_a_model_failure_caused_by_missing_external_data_is_never_served(tmp_path):
    """Stored as the model's own by an agent that was sent the .onnx alone: the same file must be
    measured again, not answered with that failure."""
    with MeasurementStore(tmp_path / "s.sqlite") as s:
        s.put(*KEY, {"ok": False, "failure_kind": "model", "error": "failed to load: FAIL : External data path "
                     "validation failed for initializer: wpe.weight. Error: tensorprotoutils.cc:619 External data "
                     "path does not exist: \"/tmp/x/model.onnx.data\""}, fingerprint={}, settings={})
        assert s.get(*KEY) is None
        s.put(*KEY, {"ok": False, "failure_kind": "model", "error": "failed to load: unsupported op"},
              fingerprint={}, settings={})
        assert s.get(*KEY)["error"] == "failed to load: unsupported op"  # the model's own: still served


# --- 4. absurd sizes are refused up front ------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("population", 10**9), ("population", 1), ("generations", 10**9),
                                          ("generations", 0), ("population", True)])
def test_search_sizes_are_bounded(field, value):
    with pytest.raises(LtsedgeError, match=f"--{field} .* is out of range"):
        SearchSettings(**{field: value})


def test_a_billion_candidates_is_refused_at_once(tmp_path):
    started = time.time()
    proc = run_cli("search", "--preset", "smoke", "--population", 1_000_000_000, "--out", tmp_path / "o",
                   "--store", tmp_path / "s.sqlite", "--quiet", timeout=60)
    assert_one_line_error(proc, "--population 1000000000 is out of range")
    assert time.time() - started < 60 and not (tmp_path / "o").exists()


# --- 2. external data on a fleet ------------------------------------------------------------------
@pytest.fixture
def one_agent(tmp_path):
    """A scheduler and one agent on loopback (the fleet tests' helpers)."""
    pytest.importorskip("distributed", reason="Dask's distributed is not installed")
    from tests.helpers import FLEET_DEVICE, free_port, start, wait_for

    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if dask is None:
        pytest.skip("the dask command is not installed")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    device = tmp_path / "fleet.toml"
    device.write_text(FLEET_DEVICE)
    procs = [start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                   tmp_path / "scheduler.log")]
    try:
        time.sleep(1)
        procs.append(start([sys.executable, "-m", "ltsedge", "agent", "--scheduler", address, "--device", str(device),
                            "--name", "a1"], tmp_path / "a1.log"))
        wait_for(lambda: "measuring for" in (tmp_path / "a1.log").read_text(), 60, "agent a1")
        yield address, device
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_a_model_with_external_data_is_measured_on_the_fleet_and_its_figure_served_here(tmp_path, one_agent):
    address, device = one_agent
    model, store = tmp_path / "model" / "model.onnx", tmp_path / "s.sqlite"
    written = export_model(tiny_arch()).save_files(model, external_data=True)
    assert sorted(written) == ["model.onnx", "model.onnx_data"]
    common = ["profile", model, "--device", device, "--json", "--store", store]
    remote = run_cli(*common, "--scheduler", address)
    assert remote.returncode == 0, remote.stderr
    result = json.loads(remote.stdout)
    assert result["ok"], result["error"]
    assert result["agent"] and result["latency_ms"] > 0
    local = run_cli(*common)  # the same file here: the fleet's figure (or a new one), never a failure
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["ok"]
