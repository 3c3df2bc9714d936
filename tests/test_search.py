"""The search end to end on tiny models: outputs, non-dominance, budgets, kill and resume, Ctrl-C, SIGTERM."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import architecture_of
from ltsedge.files import sha256_of
from ltsedge.generation import greedy
from ltsedge.proxy import count_params
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.candidate import Candidate
from ltsedge.search.loop import SearchRun
from ltsedge.search.baseline import stacked
from ltsedge.space import SearchSpace
from ltsedge.runners.measurement import Measurement
from ltsedge.store import MeasurementStore
from tests.helpers import ltsedge_cli


def dominates(a: dict, b: dict) -> bool:
    ka = (-a["decoder_params"], a["latency_ms"], a["peak_memory_mb"])
    kb = (-b["decoder_params"], b["latency_ms"], b["peak_memory_mb"])
    return all(x <= y for x, y in zip(ka, kb)) and ka != kb


def ltsedge_scratch(folder: Path) -> list[str]:
    """ltsedge's scratch directories in ``folder`` (a run's TMPDIR; torch keeps its own there too)."""
    return [p.name for p in folder.iterdir() if p.name.startswith("ltsedge-")]


def read_jsonl(path: Path) -> list[dict]:
    """The candidate records of a log (its first line is the header naming the run)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert "ltsedge_candidate_log" in records[0]
    return records[1:]


@pytest.fixture(scope="module")
def smoke_search(tmp_path_factory):
    """One tiny search shared by the output tests (3 generations of 6, vocabulary 512, sequence 16)."""
    out = tmp_path_factory.mktemp("search")
    options = SearchOptions(preset="smoke", out=out / "out", generations=3, seed=1,
                            store_path=out / "store.sqlite", quiet=True)
    settings, profile = resolve(options)
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, options.out, store, log=lambda m: None).run()
    return result


@pytest.mark.slow
def test_outputs_exist_and_agree(smoke_search):
    out = smoke_search.out_dir
    for name in ("frontier.json", "frontier.csv", "candidates.csv", "search.json", "baseline.csv"):
        assert (out / name).is_file(), name
    frontier = json.loads((out / "frontier.json").read_text())["models"]
    assert frontier and len(frontier) == len(smoke_search.frontier)
    assert {m["id"] for m in frontier} == {r["id"] for r in csv.DictReader(open(out / "frontier.csv"))}
    # The default objective is decode: every frontier model ships as a generation bundle.
    assert sorted(p.name for p in (out / "models").iterdir()) == sorted(m["id"] for m in frontier)
    assert json.loads((out / "frontier.json").read_text())["objective"] == "decode"


@pytest.mark.slow
def test_every_frontier_bundle_loads_matches_its_architecture_and_hashes(smoke_search):
    out = smoke_search.out_dir
    for m in json.loads((out / "frontier.json").read_text())["models"]:
        bundle = out / m["bundle"]
        assert {p.name for p in bundle.iterdir()} == {"model.onnx", "model.onnx_data", "genai_config.json",
                                                     "config.json", "generation_config.json"}
        assert set(m["files"]) == {f"{m['bundle']}/{p.name}" for p in bundle.iterdir()}  # the weights too
        assert m["files"] and all(sha256_of(out / rel) == sha for rel, sha in m["files"].items())
        path = out / m["onnx"]
        assert path == bundle / "model.onnx" and sha256_of(path) == m["sha256"]
        arch = architecture_of(path)
        assert arch.to_dict() == m["architecture"] and arch.id == m["id"]
        assert m["decode_latency_ms"] == m["latency_ms"] > 0 and m["prefill_latency_ms"] > 0 and m["kv_cache_mb"] > 0
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert greedy(session, np.zeros((1, 4), dtype=np.int64), 3).tokens.shape == (1, 3)


@pytest.mark.slow
def test_objective_forward_ships_single_files(tmp_path):
    out = tmp_path / "out"
    proc = ltsedge_cli("search", "--preset", "smoke", "--generations", 1, "--objective", "forward", "--out", out,
                   "--store", tmp_path / "s.sqlite", "--quiet", "--no-baseline")
    assert proc.returncode == 0, proc.stderr
    frontier = json.loads((out / "frontier.json").read_text())
    assert frontier["objective"] == "forward" and frontier["models"]
    for m in frontier["models"]:
        assert m["bundle"] is None and m["decode_latency_ms"] is None
        session = ort.InferenceSession(str(out / m["onnx"]), providers=["CPUExecutionProvider"])
        (logits,) = session.run(None, {"input_ids": np.zeros((1, 8), dtype=np.int64)})
        assert logits.shape == (1, 8, m["architecture"]["vocab_size"])
    assert sorted(p.name for p in (out / "models").iterdir()) == sorted(f"{m['id']}.onnx" for m in frontier["models"])


@pytest.mark.slow
def test_frontier_is_non_dominated(smoke_search):
    frontier = json.loads((smoke_search.out_dir / "frontier.json").read_text())["models"]
    for a in frontier:
        assert a["latency_ms"] > 0 and a["peak_memory_mb"] is not None
        for b in frontier:
            assert not dominates(b, a), (b["id"], a["id"])


@pytest.mark.slow
def test_candidates_log_and_summary(smoke_search):
    out = smoke_search.out_dir
    rows = list(csv.DictReader(open(out / "candidates.csv")))
    assert len(rows) == len({r["id"] for r in rows}) >= 6  # every distinct candidate, once
    assert {int(r["generation"]) for r in rows} <= {1, 2, 3} and "1" in {r["generation"] for r in rows}
    summary = json.loads((out / "search.json").read_text())
    assert summary["generations_completed"] == 3
    assert [h["generation"] for h in summary["hypervolume"]] == [1, 2, 3]
    assert all(0 <= h["hypervolume"] <= 1 for h in summary["hypervolume"])
    assert summary["fingerprint"]["onnxruntime"] == ort.__version__
    assert summary["settings"]["seed"] == 1 and summary["versions"]["onnxruntime"] == ort.__version__
    assert summary["export"]["opset"] >= 17


@pytest.mark.slow
def test_baseline_comparison(smoke_search):
    rows = list(csv.DictReader(open(smoke_search.out_dir / "baseline.csv")))
    assert [int(r["n_layer"]) for r in rows] == [1, 2]
    for r in rows:
        if r["frontier_id"]:
            assert int(r["frontier_decoder_params"]) >= int(r["decoder_params"])
            assert float(r["speedup"]) == pytest.approx(float(r["latency_ms"]) / float(r["frontier_latency_ms"]))


@pytest.mark.slow
def test_budgets_exclude_what_they_should(tmp_path):
    # A parameter window and a latency budget: the frontier respects both, the log says why others failed.
    out = tmp_path / "out"
    proc = ltsedge_cli("search", "--preset", "smoke", "--out", out, "--store", tmp_path / "s.sqlite", "--quiet",
                   "--min-params", 20_000, "--max-params", 60_000, "--max-latency-ms", 1000, "--no-baseline")
    assert proc.returncode == 0, proc.stderr
    frontier = json.loads((out / "frontier.json").read_text())["models"]
    assert frontier
    assert all(20_000 <= m["decoder_params"] <= 60_000 and m["latency_ms"] <= 1000 for m in frontier)
    rows = list(csv.DictReader(open(out / "candidates.csv")))
    skipped = [r for r in rows if r["source"] == "skipped"]
    assert skipped and all(r["feasible"] == "False" and "skipped" in r["error"] for r in skipped)
    assert all(not (20_000 <= int(r["decoder_params"]) <= 60_000) for r in skipped)
    assert not (out / "baseline.csv").exists()


@pytest.mark.slow
def test_max_bundles_1_leaves_exactly_one_bundle(tmp_path):
    """It left 3: the baseline's stand-ins the cap left out were written beside the front."""
    out = tmp_path / "out"
    proc = ltsedge_cli("search", "--preset", "smoke", "--out", out, "--store", tmp_path / "s.sqlite", "--quiet",
                       "--max-bundles", 1)
    assert proc.returncode == 0, proc.stderr
    assert len(list((out / "models").iterdir())) == 1
    assert json.loads((out / "search.json").read_text())["publish"]["published"] == 1
    rows = list(csv.DictReader(open(out / "baseline.csv")))
    assert len(rows) == 2 and all(r["latency_ms"] for r in rows)  # every point still compared


@pytest.mark.slow
def test_latency_budget_below_everything_leaves_an_empty_frontier(tmp_path):
    out = tmp_path / "out"
    proc = ltsedge_cli("search", "--preset", "smoke", "--out", out, "--store", tmp_path / "s.sqlite", "--quiet",
                   "--generations", 1, "--max-latency-ms", 0.000001, "--no-baseline")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "frontier.json").read_text())["models"] == []
    rows = list(csv.DictReader(open(out / "candidates.csv")))
    assert rows and all(r["feasible"] == "False" and "max_latency_ms" in r["violations"] for r in rows)


@pytest.mark.slow
def test_kill_and_resume_measures_nothing_twice(tmp_path):
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    args = ["search", "--preset", "smoke", "--generations", 4, "--out", out, "--store", store, "--quiet",
            "--no-baseline", "--seed", 3]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "ltsedge", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env=env)
    deadline = time.time() + 120
    while not (out / "checkpoint.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 the whole group, worker included
    proc.wait()
    assert (out / "checkpoint.json").exists() and not (out / "frontier.json").exists()
    measured_before = {r["id"] for r in read_jsonl(out / "candidates.jsonl")}
    assert ltsedge_scratch(scratch)  # nothing could remove it

    resumed = subprocess.run([sys.executable, "-m", "ltsedge", *map(str, args)], capture_output=True, text=True,
                             env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    records = read_jsonl(out / "candidates.jsonl")
    ids = [r["id"] for r in records]
    measured = [r["id"] for r in records if r["source"] != "predicted"]  # a prediction may be settled later
    assert len(measured) == len(set(measured))  # no architecture measured twice across the kill
    assert measured_before < set(ids)
    summary = json.loads((out / "search.json").read_text())
    assert summary["generations_completed"] == 4
    assert ltsedge_scratch(scratch) == []  # the killed run's scratch removed by the resumed one's runner


@pytest.mark.slow
def test_same_seed_same_store_replays_the_same_search(tmp_path):
    store = tmp_path / "s.sqlite"
    common = ["search", "--preset", "smoke", "--store", store, "--quiet", "--no-baseline", "--seed", 5]
    assert ltsedge_cli(*common, "--out", tmp_path / "a").returncode == 0
    assert ltsedge_cli(*common, "--out", tmp_path / "b").returncode == 0
    a = read_jsonl(tmp_path / "a" / "candidates.jsonl")
    b = read_jsonl(tmp_path / "b" / "candidates.jsonl")
    assert [r["id"] for r in a] == [r["id"] for r in b]
    assert all(r["source"] == "store" for r in b)  # nothing measured again


@pytest.mark.slow
def test_changed_settings_refuse_to_resume_unless_restart(tmp_path):
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    base = ["search", "--preset", "smoke", "--generations", 1, "--out", out, "--store", store, "--quiet", "--no-baseline"]
    assert ltsedge_cli(*base).returncode == 0
    changed = ltsedge_cli(*base, "--seed", 9)
    assert changed.returncode == 2 and "different settings" in changed.stderr and "Traceback" not in changed.stderr
    assert ltsedge_cli(*base, "--seed", 9, "--restart").returncode == 0
    shipped = sorted(p.name for p in (out / "models").iterdir())  # no model of the discarded search left
    assert shipped == sorted(m["id"] for m in json.loads((out / "frontier.json").read_text())["models"])


@pytest.mark.slow
@pytest.mark.parametrize("stop, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_writes_the_frontier_found_so_far(tmp_path, stop, code):
    # SIGTERM as `timeout`, systemd or a cancelled CI job send it, to the whole group as they do.
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    args = ["search", "--preset", "smoke", "--generations", 50, "--out", out, "--store", tmp_path / "s.sqlite",
            "--quiet", "--no-baseline"]
    # As a terminal starts it: Ctrl-C at its default. (A job started in the background by a non-interactive
    # shell, as CI may run this suite, inherits SIGINT ignored, and so would the search: it must not.)
    proc = subprocess.Popen([sys.executable, "-m", "ltsedge", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(scratch)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not (out / "checkpoint.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, stop)  # as a terminal's Ctrl-C does: the worker gets it too
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "search.json").read_text())
    assert summary["interrupted"] is True and summary["generations_completed"] >= 1
    frontier = json.loads((out / "frontier.json").read_text())["models"]
    assert frontier and all((out / m["onnx"]).is_file() for m in frontier)
    errors = [r["error"] for r in csv.DictReader(open(out / "candidates.csv")) if r["error"]]
    assert errors == []  # the signal is not recorded as a crashed candidate
    assert ltsedge_scratch(scratch) == []  # the runners' scratch (the 100 MB reference) removed


@pytest.mark.parametrize("args, message", [
    (["--device", "nope"], "nope"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--space", "missing.toml"], "not found"),
    (["--min-params", 10, "--max-params", 5], "--min-params 10 is above --max-params 5"),
])
def test_bad_search_input(tmp_path, args, message):
    proc = ltsedge_cli("search", "--preset", "smoke", "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_progress_display_and_summary(tmp_path):
    proc = ltsedge_cli("search", "--preset", "smoke", "--generations", 1, "--out", tmp_path / "o",
                   "--store", tmp_path / "s.sqlite", "--no-baseline", env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    assert "measured" in proc.stderr and "front" in proc.stderr and "HV" in proc.stderr
    assert "Pareto frontier" in proc.stdout and "ltsedge search done" in proc.stdout


@pytest.mark.slow
def test_a_log_left_before_the_first_checkpoint_is_refused_under_other_settings(tmp_path):
    """Killed during generation 1 (a log, no checkpoint yet), then re-run with another workload: the old
    log's figures must not be taken as this run's measurements."""
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    base = ["search", "--preset", "smoke", "--generations", 1, "--out", out, "--store", store, "--quiet", "--no-baseline"]
    assert ltsedge_cli(*base).returncode == 0
    (out / "checkpoint.json").unlink()
    assert read_jsonl(out / "candidates.jsonl")
    other = ltsedge_cli(*base, "--sequence", 8)
    assert other.returncode == 2 and "candidates.jsonl was written by a search with different settings" in other.stderr
    again = ltsedge_cli(*base)  # the same settings: the log is this run's, nothing is measured again
    assert again.returncode == 0, again.stderr
    assert "re-using what was measured" in again.stderr


@pytest.mark.slow
def test_the_baseline_is_the_seeded_model_or_takes_its_match_s_embedding_settings(smoke_search):
    """A baseline model the search started from is compared as seeded (the space's cheapest embedding),
    on its figure re-measured beside the front, so it is never faster than its match; any other takes
    its match's embedding settings (decoder parameters do not depend on them)."""
    from ltsedge.search.baseline import seeds_in_space

    settings, _ = resolve(SearchOptions(preset="smoke", quiet=True))
    seeded = {a.id for a in seeds_in_space(settings.baseline, settings.space, len(settings.baseline.layers))}
    rows = list(csv.DictReader(open(smoke_search.out_dir / "baseline.csv")))
    frontier = {m["id"]: m for m in json.loads((smoke_search.out_dir / "frontier.json").read_text())["models"]}
    assert rows and all(r["baseline_id"] in seeded for r in rows)  # the smoke space holds both baseline models
    assert all(float(r["speedup"]) >= 1.0 for r in rows if r["frontier_id"])
    assert all(r["frontier_id"] in frontier for r in rows if r["frontier_id"])


def test_a_baseline_model_not_seeded_takes_its_match_s_embedding_settings():
    from ltsedge.search.baseline import baseline_architectures

    settings, _ = resolve(SearchOptions(preset="default", quiet=True))
    plain = baseline_architectures(settings.baseline, settings.space)
    assert all(a.div_val == 1 and a.d_embed == a.d_model for a in plain)
    big = Architecture.from_dict({**plain[3].to_dict(), "d_embed": 256, "div_val": 4, "cutoffs": []})
    matched = baseline_architectures(settings.baseline, settings.space, [Candidate(
        big, count_params(big), Measurement(ok=True, latency_ms=1.0), "final", 1)])
    assert [(a.d_embed, a.div_val) for a in matched[:4]] == [(256, 4)] * 4  # its match: big, >= their parameters
    assert [(a.d_embed, a.div_val) for a in matched[4:]] == [(256, 4)] * 12  # no match: the front's largest


def test_the_default_gpt2_space_holds_the_baseline_s_own_block_and_the_study_preset_the_study_s_space():
    """A default search lost to the study's baseline at 14 of 16 points (0.80x at 1 layer, 0.86-0.99x
    elsewhere): its space stopped at 8 heads and 2 layers, and a 16-head layer of the baseline's width
    decodes faster than its 8-head stand-in. The default space now holds the block itself at every point,
    so the search starts from it; ``--preset study`` keeps the paper's space."""
    from ltsedge.search.baseline import in_space_shape, seeds_in_space, shape_changes

    default, _ = resolve(SearchOptions(preset="default", quiet=True))
    points = [stacked(default.baseline, n, default.space) for n in default.baseline.layers]
    assert [p.n_layer for p in points] == list(range(1, 17)) and {p.n_head[0] for p in points} == {16}
    shapes = [in_space_shape(p, default.space) for p in points]
    assert [shape_changes(p, s) for p, s in zip(points, shapes)] == [""] * 16  # the block, in the space's embedding
    assert all(default.space.contains(s) for s in shapes)
    seeds = seeds_in_space(default.baseline, default.space, default.population // 2)
    assert [(a.n_layer, set(a.n_head), a.d_model, set(a.d_inner)) for a in seeds] == \
        [(n, {16}, 1024, {3072}) for n in range(1, 17)]
    study, _ = resolve(SearchOptions(preset="study", quiet=True))
    assert (study.space.n_layer, study.space.n_head) == (tuple(range(2, 17)), (2, 4, 8))
    assert study.space.to_dict() == {**SearchSpace().to_dict(), "backbone": "gpt2"}  # the class's: the study's ranges
    assert (study.population, study.generations, study.baseline) == (100, 30, default.baseline)
    with pytest.raises(LtsedgeError, match="preset study searches backbone gpt2, not transfo_xl"):
        resolve(SearchOptions(preset="study", backbone="transfo_xl", quiet=True))


def test_a_search_whose_baseline_lies_outside_its_space_starts_from_the_nearest_shapes_in_it(tmp_path):
    """The study's GPT-2 block has 16 heads and its first point 1 layer, where the study's space offers 2, 4
    or 8 heads and 2..16 layers: no baseline model was seeded, and the search's front lost to the baseline
    at 15 of 16 points. Each point now seeds the space's nearest shape: every size snapped to the nearest
    choice, a tie to the larger, d_inner within its floor."""
    from types import SimpleNamespace

    from ltsedge.search.baseline import seeds_in_space

    study, _ = resolve(SearchOptions(preset="study", quiet=True))
    seeds = seeds_in_space(study.baseline, study.space, study.population // 2)
    assert [(a.n_layer, set(a.n_head), a.d_model, set(a.d_inner)) for a in seeds] == \
        [(n, {8}, 1024, {3072}) for n in range(2, 17)]  # 1 and 2 layers: one shape
    assert all(study.space.contains(a) for a in seeds)
    assert all(count_params(a).decoder_params == count_params(stacked(study.baseline, a.n_layer, study.space))
               .decoder_params for a in seeds)  # GPT-2's heads do not change its parameters

    out = tmp_path / "out"
    settings, profile = resolve(SearchOptions(preset="smoke", out=out, quiet=True, baseline_d_model=48,
                                              baseline_d_inner=100, baseline_n_head=8, baseline_layers=3))
    seeds = seeds_in_space(settings.baseline, settings.space, settings.population // 2)
    # d_model 48 lies between 32 and 64: the larger; 8 heads: 4; d_inner 100: 128, the floor at d_model 64
    assert [(a.n_layer, a.n_head, a.d_model, a.d_inner) for a in seeds] == \
        [(1, (4,), 64, (128,)), (2, (4, 4), 64, (128, 128))]
    run = SearchRun(settings, profile, out, store=None, log=lambda m: None)
    first = run._algorithm(SimpleNamespace(candidates=lambda: []), identity="").ask().get("X")
    assert set(seeds) <= {settings.space.decode(x) for x in first}


def test_a_llama_baseline_outside_its_space_stands_in_it_with_its_grouped_heads_snapped(tmp_path):
    """The rule holds for a family's own sizes: key/value heads snapped among those dividing the snapped
    query heads, one head size among the space's."""
    from ltsedge.search.baseline import seeds_in_space

    space = tmp_path / "space.toml"
    space.write_text("[space]\nn_layer = [1, 2]\nd_model = [32, 64]\nn_head = [2, 4]\nn_kv_head = [1, 2]\n"
                     "head_dim = [16, 32]\nd_inner = [64, 128]\nvocab_size = 512\n")
    settings, _ = resolve(SearchOptions(preset="llama-edge", space_file=space, baseline_d_model=64,
                                        baseline_d_inner=128, baseline_n_head=6, baseline_layers=2, quiet=True))
    assert (settings.baseline.n_kv_head, settings.baseline.head_dim) == (3, 64)  # SmolLM2's block
    seeds = seeds_in_space(settings.baseline, settings.space, settings.population // 2)
    assert [(a.n_layer, a.n_head, a.n_kv_head, a.head_dim) for a in seeds] == \
        [(1, (4,), (2,), 32), (2, (4, 4), (2, 2), 32)]
    assert all(settings.space.contains(a) for a in seeds)
    from ltsedge.search.baseline import shape_changes  # what baseline.csv's stand_in says

    assert shape_changes(stacked(settings.baseline, 1, settings.space), seeds[0]) == \
        "n_head 6->4; n_kv_head 3->2; head_dim 64->32"


def test_progress_after_the_last_generation_keeps_a_full_bar_and_no_negative_eta():
    """Settling measures candidates after the last generation: the bar must not run past its total nor
    the ETA below zero (a 100 x 30 search showed "ETA -1:59:01" while settling)."""
    import io

    from rich.console import Console

    from ltsedge.search.progress import SearchProgress

    progress = SearchProgress(2, 3, console=Console(file=io.StringIO(), width=200))
    for _ in range(3):
        progress.candidate_done()
    progress.generation_done(1, {"front_size": 2, "hypervolume": 0.1})
    assert progress.progress.tasks[0].fields["eta"] != "?" and not progress.progress.tasks[0].fields["eta"].startswith("-")
    for _ in range(3):
        progress.candidate_done()
    progress.generation_done(2, {"front_size": 3, "hypervolume": 0.2})
    for _ in range(5):  # settling
        progress.candidate_done()
    task = progress.progress.tasks[0]
    assert task.completed == task.total == 6
    assert task.fields["eta"] == "-" and task.fields["phase"] == "settling the front"
