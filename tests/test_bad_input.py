"""Bad input that used to leak a traceback or a wrong exit code: one line on stderr, exit 2 (or 1 when
nothing could be measured), nothing lost."""

from __future__ import annotations

import json

import pytest

from tests.helpers import one_line_exit_2, run_ltsedge


@pytest.mark.parametrize("args, message", [
    (["search", "--seed", "-1"], "--seed"),
    (["search", "--population", "1"], "--population"),
    (["space", "--sample", "-2"], "--sample"),
    (["profile"], "ARCH.json or --from DIR"),
    (["no-such-command"], "No such command"),
])
def test_bad_options_are_one_line(args, message):
    one_line_exit_2(run_ltsedge(*args), message)


def test_export_to_an_empty_name_or_a_directory(tmp_path, arch_file):
    one_line_exit_2(run_ltsedge("export", arch_file(), "-o", ""), "give a file name")
    one_line_exit_2(run_ltsedge("export", arch_file(), "-o", tmp_path), "give a file name")


def test_an_architecture_too_large_for_memory_is_refused_before_allocating(tmp_path):
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"n_layer": 1, "d_model": 10**8, "n_head": [2], "d_inner": [10**8]}))
    one_line_exit_2(run_ltsedge("export", huge, "-o", tmp_path / "h.onnx"), "GiB of memory available")
    assert not (tmp_path / "h.onnx").exists()


SMOLLM2 = {"backbone": "llama", "n_layer": 2, "d_model": 576, "n_head": [9, 9], "n_kv_head": [3, 3], "head_dim": 64,
           "d_inner": [1536, 1536], "vocab_size": 49152, "tie_embeddings": True, "rope_theta": 100000,
           "n_positions": 8192}


@pytest.mark.parametrize("change, message", [
    ({"n_kv_head": [3, 4]}, "'n_kv_head[1]' = 4 is invalid: n_head[1] = 9 must be a multiple of it"),
    ({"head_dim": 63}, "'head_dim' = 63 is invalid: rotary positions"),
    ({"n_kv_heads": [3, 3]}, "unknown architecture field 'n_kv_heads'"),
    ({"n_kv_head": [3, 3, 3]}, "'n_kv_head' has 3 entries: must have one per layer"),
    ({"d_inner": [1536]}, "'d_inner' has 1 entries: must have one per layer"),
])
def test_a_bad_llama_architecture_is_one_line(tmp_path, change, message):
    path = tmp_path / "arch.json"
    path.write_text(json.dumps({**SMOLLM2, **change}))
    one_line_exit_2(run_ltsedge("params", "--json", path), message)
    path.write_text(json.dumps(SMOLLM2))
    assert run_ltsedge("params", "--json", path).returncode == 0  # the same architecture without the mistake


def test_a_space_of_ten_to_the_thousands_is_described(tmp_path):
    config = tmp_path / "space.toml"
    config.write_text("n_layer = {min = 2, max = 2000}\nd_model = [128]\nn_head = [2]\nd_inner = {min = 256, max = 512, step = 64}\n")
    proc = run_ltsedge("space", "--config", config)
    assert proc.returncode == 0, proc.stderr
    assert "~10^" in proc.stdout


def test_an_impossible_workload_is_refused_up_front(tmp_path):
    proc = run_ltsedge("search", "--preset", "smoke", "--sequence", 100000, "--out", tmp_path / "o",
                       "--store", tmp_path / "s.sqlite", "--quiet")
    one_line_exit_2(proc, "sequence 100000 is longer than the space's n_positions 64")
    assert not (tmp_path / "o" / "candidates.jsonl").exists()


@pytest.mark.slow
def test_a_search_whose_every_measurement_failed_exits_1_and_says_why(tmp_path):
    device = tmp_path / "slow.toml"
    device.write_text('name = "hopeless"\n[limits]\ntimeout_s = 0.01\n[repeats]\ndrift_check_every = 0\n')
    out = tmp_path / "o"
    proc = run_ltsedge("search", "--preset", "smoke", "--generations", 1, "--device", device, "--out", out,
                       "--store", tmp_path / "s.sqlite", "--quiet", "--no-baseline")
    assert proc.returncode == 1
    assert "no candidate could be measured" in proc.stderr and "timed out" in proc.stderr
    assert (out / "candidates.csv").is_file()  # what was tried is still written
