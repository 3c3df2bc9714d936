"""``ltsedge proxy-check`` at a tiny scale on the CPU: the sample's spread, the held-out split, the JSON and PNG,
resuming after kill -9, several models at once, bad input. Whether the proxy ranks held-out loss is a
benchmark (benchmarks/proxy_check.py), not a test."""

from __future__ import annotations

import inspect
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ltsedge.proxy import count_params
from ltsedge.proxycheck import sampling, stats
from ltsedge.proxycheck.tokens import HELD_OUT_SHARE, split
from ltsedge.search.presets import get_preset
from ltsedge.space import SearchSpace
from tests.helpers import one_line_exit_2, run_ltsedge

# 3 smoke-preset models x 20 steps of 2 x 16 tokens, one thread (a busy 2-core machine runs tiny models
# faster on one)
TINY = ("--preset", "smoke", "--models", "3", "--tokens-per-model", "640", "--batch", "2", "--sequence", "16",
        "--depths", "0", "--threads", "1", "--parallel", "1", "--quiet")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """About 8 KB of real English: the docstrings of a few standard-library modules."""
    import argparse
    import csv
    import textwrap

    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n\n".join(inspect.getdoc(m) for m in (json, csv, argparse, textwrap)))
    return path


@pytest.fixture(scope="module")
def checked(tmp_path_factory, text_file):
    out = tmp_path_factory.mktemp("check") / "out"
    proc = run_ltsedge("proxy-check", "--text", text_file, *TINY, "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_the_sample_spreads_over_the_space_s_decoder_parameter_range():
    sizes = [count_params(a).decoder_params for a in sampling.spread_sample(SearchSpace(), 12, seed=0)]
    assert len(set(sizes)) == 12 and sizes == sorted(sizes)
    assert sizes[-1] / sizes[0] >= sampling.MIN_SPREAD
    gaps = np.diff(np.log(sizes))  # log-spaced: no gap far from the others (uniform draws bunch in the middle)
    assert gaps.max() < 3 * gaps.mean()
    smoke = [count_params(a).decoder_params for a in sampling.spread_sample(get_preset("smoke").space(), 3, seed=0)]
    assert smoke[-1] / smoke[0] >= sampling.MIN_SPREAD


def test_the_depth_set_holds_equal_parameters_at_several_depths():
    archs = sampling.depth_set(SearchSpace(), 10e6, 4, seed=0)
    assert [a.n_layer for a in archs] == [2, 4, 8, 16]
    for a in archs:
        assert abs(count_params(a).decoder_params / 10e6 - 1) <= sampling.DEPTH_TOLERANCE


def test_a_par_or_llama_space_gets_a_standard_gpt2_control():
    assert sampling.control_space(SearchSpace()) is None  # the study's kind of space is its own control
    for space in (SearchSpace(block_types=("attn_ffn", "ffn")), SearchSpace.default("llama")):
        control = sampling.control_space(space)
        assert control.backbone == "gpt2" and not control.block_types and control.n_layer == space.n_layer


def test_held_out_chunks_are_spread_over_the_text_not_its_tail():
    tokens = np.arange(1_000_000, dtype=np.uint32)  # each id names its position
    parts = split(tokens, window=257, seed=3)
    held = parts.held_out.ravel()
    assert parts.share >= HELD_OUT_SHARE and parts.held_out.shape[1] == 257
    assert held.min() < 0.1 * len(tokens) and held.max() > 0.9 * len(tokens)  # from the start to the end
    assert np.intersect1d(held, parts.train).size == 0  # nothing held out is trained on
    assert parts.train.size + held.size == tokens.size
    assert np.all(np.diff(parts.held_out[:, 0]) > 257)  # separate chunks, not one block


def test_a_check_writes_its_json_and_png(checked):
    out, proc = checked
    summary = json.loads((out / "proxy-check.json").read_text())
    assert [m["role"] for m in summary["models"]] == ["sample"] * 3
    assert summary["text"]["held_out_share"] >= HELD_OUT_SHARE
    for m in summary["models"]:
        assert m["tokens"] == 640 and m["seconds"] > 0 and math.isfinite(m["held_out_loss"])
        assert [c["fraction"] for c in m["checkpoints"]] == [0.25, 0.5, 0.75, 1.0]
        assert m["decoder_params"] < m["total_params"] and 0 < m["attention_params"] < m["decoder_params"]
    assert summary["ranking"]["decoder_params"] is None  # 3 models: too few for a ranking, and it says so
    assert summary["verdict"] == "not enough evidence"
    assert any("short budget" in line for line in summary["limits"])
    assert "tokens/s" in proc.stdout and "640" in proc.stdout  # tokens and time per model, printed
    import matplotlib.image

    pixels = matplotlib.image.imread(out / "proxy-check.png")
    assert pixels.shape[0] > 300 and pixels.std() > 0.05
    lines = (out / "models.jsonl").read_text().splitlines()
    assert len(lines) == 4 and "identity" in json.loads(lines[0])  # a header, then one line per model


def test_a_rerun_of_other_settings_is_refused_and_restart_discards_it(checked, text_file):
    out, _ = checked
    args = [a if a != "640" else "960" for a in TINY]
    one_line_exit_2(run_ltsedge("proxy-check", "--text", text_file, *args, "--out", out), "other settings",
                    "--restart")
    again = run_ltsedge("proxy-check", "--text", text_file, *TINY, "--out", out)  # the same settings: all done
    assert again.returncode == 0 and again.stdout.count("sample ") >= 3


def test_a_killed_check_continues_where_it_stopped(tmp_path, text_file):
    out = tmp_path / "out"
    args = ["proxy-check", "--text", text_file, *TINY[:-1], "--out", out]
    args[args.index("640")] = "6400"  # 200 steps: long enough to be killed while a model trains
    proc = subprocess.Popen([sys.executable, "-m", "ltsedge", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    log = out / "models.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 2:  # the header and the first model
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = log.read_text().splitlines()
    assert 2 <= len(before) <= 3, before  # killed while a later model trained
    rerun = run_ltsedge(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(before) - 1} already trained, resuming" in rerun.stderr
    after = log.read_text().splitlines()
    assert after[:len(before)] == before and len(after) == 4  # nothing finished was trained again


def test_several_models_at_once_in_processes_give_what_one_at_a_time_gives(tmp_path, text_file, checked):
    out, _ = checked
    parallel = run_ltsedge("proxy-check", "--text", text_file, *TINY, "--parallel", "2", "--out", tmp_path / "p")
    assert parallel.returncode == 0, parallel.stderr
    serial = {m["id"]: m["held_out_loss"] for m in json.loads((out / "proxy-check.json").read_text())["models"]}
    result = json.loads((tmp_path / "p" / "proxy-check.json").read_text())
    both = {m["id"]: m["held_out_loss"] for m in result["models"]}
    assert both.keys() == serial.keys()
    assert all(abs(both[k] - serial[k]) < 1e-4 for k in serial)  # the same recipe, seed and batches


def _log_of(out) -> tuple[str, list[dict]]:
    """models.jsonl's header line and its rows."""
    lines = (out / "models.jsonl").read_text().splitlines()
    return lines[0], [json.loads(line) for line in lines[1:]]


def _rerun_with_log(checked, tmp_path, text_file, lines: list[str]):
    """The tiny check again, on a copy of ``checked``'s folder whose models.jsonl holds ``lines``."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(checked[0], out)
    (out / "models.jsonl").write_text("".join(line + "\n" for line in lines))
    return out, run_ltsedge("proxy-check", "--text", text_file, *TINY, "--out", out)


def test_a_damaged_line_of_the_log_is_trained_again(checked, tmp_path, text_file):
    header, rows = _log_of(checked[0])
    wider = {**rows[1]["architecture"], "d_model": rows[1]["d_model"] * 2}  # not the model planned at 1
    lines = [header, json.dumps({**rows[0], "held_out_loss": "x"}), json.dumps({**rows[1], "architecture": wider}),
             json.dumps(rows[2])]
    out, proc = _rerun_with_log(checked, tmp_path, text_file, lines)
    assert proc.returncode == 0, proc.stderr
    assert "2 line(s) damaged" in proc.stderr and "1 already trained, resuming" in proc.stderr
    _, after = _log_of(out)
    assert [r["index"] for r in after[3:]] == [0, 1]  # the two models trained again, the third kept
    for again, before in zip(after[3:], rows):
        assert again["architecture"] == before["architecture"]
        assert abs(again["held_out_loss"] - before["held_out_loss"]) < 1e-4  # the same recipe, seed and batches
    result = json.loads((out / "proxy-check.json").read_text())
    assert [m["index"] for m in result["models"]] == [0, 1, 2]


def test_no_damaged_line_of_the_log_stands_for_a_model(checked, tmp_path, text_file):
    """Each line after the log's good ones damages one field of the last model's; none may replace it."""
    header, rows = _log_of(checked[0])
    good = rows[2]
    other = rows[1]
    changes = [{"held_out_loss": "x"}, {"held_out_loss": math.nan}, {"held_out_loss": -1.0},
               {"held_out_loss": math.inf, "checkpoints": good["checkpoints"][:-1] + [{**good["checkpoints"][-1],
                                                                                     "held_out_loss": math.inf}]},
               {"index": 99}, {"index": True}, {"index": 1}, {"checkpoints": "x"}, {"checkpoints": []},
               {"decoder_params": -5}, {"decoder_params": good["decoder_params"] + 1}, {"attention_params": 0},
               {"n_layer": good["n_layer"] + 1}, {"id": other["id"], "architecture": other["architecture"]},
               {"architecture": {**good["architecture"], "n_positions": 7}}, {"steps": 3}, {"tokens": "640"},
               {"diverged": True}, {"train_loss": math.nan}, {"seconds": -1}, {"tokens_per_second": math.inf},
               {"device": None}]
    damaged = [json.dumps({**good, **change}) for change in changes] + ["[1]", '"x"', "{}"]
    out, proc = _rerun_with_log(checked, tmp_path, text_file, [header, *map(json.dumps, rows), *damaged])
    assert proc.returncode == 0, proc.stderr
    assert f"{len(damaged)} line(s) damaged" in proc.stderr and "3 already trained" in proc.stderr
    assert len(_log_of(out)[1]) == len(rows) + len(damaged)  # nothing trained again
    before = json.loads((checked[0] / "proxy-check.json").read_text())["models"]
    assert json.loads((out / "proxy-check.json").read_text())["models"] == before


def test_a_learning_rate_that_is_not_a_number_is_refused_before_any_work(tmp_path, text_file):
    from ltsedge.errors import LtsedgeError
    from ltsedge.proxycheck.run import CheckOptions, run_check

    one_line_exit_2(run_ltsedge("proxy-check", "--text", text_file, *TINY, "--lr", "nan", "--out", tmp_path / "o"),
                    "--lr")
    options = CheckOptions(text=text_file, preset="smoke", models=3, tokens_per_model=640, batch=2, sequence=16,
                           depths=0, threads=1, parallel=1, lr=math.nan, out=tmp_path / "o", quiet=True)
    with pytest.raises(LtsedgeError, match="--lr nan is not a learning rate"):  # plan.json would hold NaN
        run_check(options, log=lambda _: None)
    assert not (tmp_path / "o").exists()


def _tokenizer_of(tmp_path, vocab: int):
    from ltsedge.proxycheck.tokens import train_tokenizer

    path = tmp_path / "tokenizer.json"
    train_tokenizer(["the quick brown fox jumps over the lazy dog " * 50 + "".join(map(chr, range(33, 1200)))],
                    vocab).save(str(path))
    return path


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing.txt", "not found"),
    (lambda tmp: _write(tmp / "empty.txt", b""), "is empty"),
    (lambda tmp: _write(tmp / "data.bin", b"PK\x03\x04\x00\x00binary"), "is binary"),
    (lambda tmp: _write(tmp / "folder" / "x.bin", b"\x00\x01") and tmp / "folder", "holds no text file"),
])
def test_no_text_is_one_line(tmp_path, make, message):
    one_line_exit_2(run_ltsedge("proxy-check", "--text", make(tmp_path), *TINY, "--out", tmp_path / "o"), message)
    assert not (tmp_path / "o").exists()


def test_a_tokenizer_beyond_the_space_s_vocabulary_is_one_line(tmp_path, text_file):
    tokenizer = _tokenizer_of(tmp_path, 700)  # the smoke space has 512 tokens
    one_line_exit_2(run_ltsedge("proxy-check", "--text", text_file, "--tokenizer", tokenizer, *TINY, "--out",
                                tmp_path / "o"), "token ids up to", "vocabulary of 512")


def test_a_space_without_enough_distinct_sizes_is_one_line(tmp_path, text_file):
    space = tmp_path / "space.toml"
    space.write_text("n_layer = [2]\nd_model = [64]\nn_head = [2]\nd_inner = [128]\nd_embed = []\ndiv_val = [1]\n"
                     "vocab_size = 512\nn_positions = 64\n")
    args = [a for a in TINY if a not in ("--preset", "smoke")]
    one_line_exit_2(run_ltsedge("proxy-check", "--text", text_file, "--space", space, *args, "--out", tmp_path / "o"),
                    "1 distinct", "fewer than the 3 models")


def _write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- statistics ---------------------------------------------------------------------------------------
def test_spearman_counts_ties_and_the_sign_of_loss():
    assert stats.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert stats.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833)  # scipy.stats.spearmanr's value
    ranked = stats.ranking([1, 2, 3, 4, 5, 6], [6.0, 5.5, 5.0, 4.8, 4.1, 4.0])  # more parameters, lower loss
    assert ranked["spearman"] == pytest.approx(1.0)


def test_a_wide_interval_or_a_handful_of_models_is_not_enough_evidence():
    rng = np.random.default_rng(0)
    x = rng.random(9)
    assert stats.ranking(x, rng.random(9))["verdict"] == "not enough evidence"
    few = stats.ranking([1, 2, 3, 4, 5], [5.0, 4.0, 3.0, 2.0, 1.0])  # in perfect order, the interval is [1, 1]
    assert few["low"] == few["high"] == 1.0 and few["verdict"] == "not enough evidence"
    assert stats.ranking(range(8), -np.arange(8.0))["verdict"] == "ranks well"


def test_no_count_is_named_best_when_every_interval_is_wide():
    from ltsedge.proxycheck import report

    def summary(losses) -> dict:
        models = [{"role": "sample", "id": f"m{i}", "n_layer": 1 + i % 4, "d_model": 64,
                   "decoder_params": 1000 * (i + 1), "total_params": 9000 + 1000 * i,
                   "attention_params": 300 * (i + 1), "held_out_loss": float(loss),
                   "checkpoints": [{"fraction": 1.0, "tokens": 64, "held_out_loss": float(loss)}], "tokens": 64,
                   "seconds": 1.0} for i, loss in enumerate(losses)]
        return report.summarize(models, {"space": {"backbone": "gpt2"}})

    noise = summary(6 + np.random.default_rng(2).random(6) * 0.1)
    assert noise["best_proxy"] is None and "none ranks the held-out loss" in "\n".join(report.lines(noise))
    clear = summary(6 - 0.1 * np.arange(12))  # loss falls with every count: they rank it well
    assert clear["best_proxy"] in ("decoder_params", "total_params", "attention_params", "fitted")


def test_a_ranking_that_ranks_poorly_is_never_named_best():
    """A CPU hour's check on 35 MB of documentation (benchmarks/proxy_check.py): the counts had no evidence,
    and the fit, nearly flat, anti-ranked the losses with its leave-one-out predictions (-0.83, a narrow
    interval below zero). That ranks nothing, so nothing is named best."""
    from ltsedge.proxycheck import report

    measured = [("sample", 1, 132736, 5.728), ("sample", 1, 165632, 5.7595), ("sample", 1, 198528, 5.6515),
                ("sample", 1, 264320, 5.3718), ("sample", 1, 322048, 5.7917), ("sample", 1, 395904, 5.3679),
                ("sample", 2, 495488, 5.4126), ("sample", 1, 617728, 5.8053), ("sample", 2, 766912, 5.8449),
                ("sample", 4, 957824, 5.4539), ("sample", 1, 1192576, 5.5556), ("sample", 6, 1485952, 5.7975),
                ("depth", 1, 445248, 5.8271), ("depth", 2, 446144, 5.6087)]
    models = [{"role": role, "id": f"m{i}", "n_layer": layers, "d_model": 128, "decoder_params": params,
               "total_params": params + 1_000_000, "attention_params": params // 4, "held_out_loss": loss,
               "checkpoints": [{"fraction": 1.0, "tokens": 2_000_384, "held_out_loss": loss}], "tokens": 2_000_384,
               "seconds": 300.0} for i, (role, layers, params, loss) in enumerate(measured)]
    summary = report.summarize(models, {"space": {"backbone": "gpt2"}})
    assert summary["ranking"]["fitted"]["verdict"] == "ranks poorly" and summary["ranking"]["fitted"]["high"] < 0
    assert summary["best_proxy"] is None
    assert "none ranks the held-out loss with evidence" in "\n".join(report.lines(summary))


def test_the_leave_one_out_error_is_that_of_refitting_without_each_model():
    rng = np.random.default_rng(1)
    features = np.column_stack([rng.random(9) * 5, rng.integers(2, 16, 9)])
    losses = 6 - 0.3 * features[:, 0] + 0.02 * features[:, 1] + rng.normal(0, 0.05, 9)
    fitted = stats.fit(features, losses)
    X = np.column_stack([np.ones(9), features])
    by_refit = [X[i] @ np.linalg.lstsq(np.delete(X, i, 0), np.delete(losses, i), rcond=None)[0] for i in range(9)]
    assert np.allclose(fitted["loo_predictions"], by_refit)


def test_a_cpu_check_takes_the_cpu_recipe_unless_told(tmp_path, text_file):
    """A CPU affords few tokens per model: its recipe takes more, smaller steps than a GPU's
    (run.DEFAULT_RECIPE); --batch, --sequence and --lr override it, and the plan records it."""
    from ltsedge.proxycheck.run import DEFAULT_RECIPE

    tiny = ("--preset", "smoke", "--models", "3", "--tokens-per-model", "64", "--depths", "0", "--threads", "1",
            "--device", "cpu", "--quiet")
    smoke_positions = get_preset("smoke").space().n_positions
    for extra, expected in (((), {"batch": 8, "sequence": min(64, smoke_positions), "lr": 1e-3}),
                            (("--batch", "2", "--sequence", "16", "--lr", "0.01"), {"batch": 2, "sequence": 16,
                                                                                     "lr": 0.01})):
        out = tmp_path / f"out{len(extra)}"
        proc = run_ltsedge("proxy-check", "--text", text_file, *tiny, *extra, "--out", out)
        assert proc.returncode == 0, proc.stderr
        recipe = json.loads((out / "plan.json").read_text())["recipe"]
        assert {k: recipe[k] for k in expected} == expected
    cpu, gpu = DEFAULT_RECIPE["cpu"], DEFAULT_RECIPE["cuda"]
    assert cpu["batch"] * cpu["sequence"] < gpu["batch"] * gpu["sequence"]  # more steps for the same tokens
    one_line_exit_2(run_ltsedge("proxy-check", "--text", text_file, *tiny, "--lr", "0", "--out", tmp_path / "bad"),
                    "--lr")


def test_a_cpu_trains_one_model_per_core_and_a_gpu_four_unless_told():
    from ltsedge.proxycheck.run import plan_workers

    assert plan_workers("cpu", None, None, models=14, cores=2) == (2, 1)
    assert plan_workers("cpu", None, None, models=14, cores=16) == (14, 1)  # never more than the models
    assert plan_workers("cpu", None, None, models=3, cores=2) == (2, 1)
    assert plan_workers("cpu", 1, None, models=14, cores=2) == (1, 2)  # one model: every core
    assert plan_workers("cpu", None, 2, models=14, cores=8) == (8, 2)
    assert plan_workers("cuda", None, None, models=12, cores=16) == (4, 4)
    assert plan_workers("cuda", 8, None, models=3, cores=16) == (3, 5)
