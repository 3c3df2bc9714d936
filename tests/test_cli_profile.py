"""`ltsedge profile` and `ltsedge devices` as a user runs them."""

import json
import subprocess
import sys

import pytest

from tests.helpers import FAST_DEVICE, GENERATE_DEVICE, run_ltsedge


@pytest.fixture
def device(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text(FAST_DEVICE)
    return path


@pytest.mark.slow
def test_profile_json_of_an_architecture_then_from_the_store(tmp_path, arch_file, device):
    args = ["profile", arch_file(), "--device", device, "--json", "--store", tmp_path / "s.sqlite"]
    first = run_ltsedge(*args)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    for key in ("latency_ms", "latency_p90_ms", "latency_cv", "peak_memory_mb", "weights_mb", "device", "fingerprint"):
        assert result[key] is not None, key
    assert result["ok"] and result["device"] == "fast" and result["cached"] is False
    assert result["latency_p90_ms"] >= result["latency_ms"] > 0 and result["peak_memory_mb"] > 0
    assert result["decoder_params"] == 75_328
    assert result["fingerprint"]["logical_cores"] >= 1
    second = json.loads(run_ltsedge(*args).stdout)
    assert second["cached"] is True and second["latency_ms"] == result["latency_ms"]
    third = json.loads(run_ltsedge(*args, "--fresh").stdout)
    assert third["cached"] is False


@pytest.mark.slow
def test_profile_of_an_onnx_file_prints_a_table(tmp_path, arch_file, device):
    model = tmp_path / "m.onnx"
    assert run_ltsedge("export", arch_file(), "-o", model).returncode == 0
    proc = run_ltsedge("profile", model, "--device", device, "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert "latency (median)" in proc.stdout and "peak memory" in proc.stdout
    assert "│ variant " in proc.stdout and "forward, fp32" in proc.stdout  # predict and search default to generate


def test_a_model_that_cannot_be_measured_exits_1_with_its_reason(tmp_path, device):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07 definitely not a model")
    proc = run_ltsedge("profile", broken, "--device", device, "--json", "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["ok"] is False and "failed to load" in result["error"]


@pytest.mark.parametrize("args, message", [
    (["--device", "toaster"], "toaster"),
    (["--shape", "input_ids=1xQ"], "--shape"),
])
def test_bad_profile_input_exits_2(tmp_path, arch_file, args, message):
    proc = run_ltsedge("profile", arch_file(), "--store", tmp_path / "s.sqlite", *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_model_exits_2(tmp_path):
    proc = run_ltsedge("profile", tmp_path / "nope.onnx", "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_devices_lists_the_builtin_profiles():
    out = run_ltsedge("devices").stdout
    assert {line.split()[0] for line in out.splitlines()} >= {"cpu", "arm64", "cuda"}


# --- what the store may answer (issue: nothing stale) -------------------------------------------
@pytest.mark.slow
def test_a_failure_caused_by_a_limit_is_not_answered_from_the_store(tmp_path, arch_file):
    """A timeout under one profile must not be served when a profile with a generous timeout asks."""
    short, long_ = tmp_path / "short.toml", tmp_path / "long.toml"
    short.write_text(FAST_DEVICE.replace('name = "fast"', 'name = "short"') + "[limits]\ntimeout_s = 0.001\n")
    long_.write_text(FAST_DEVICE.replace('name = "fast"', 'name = "long"') + "[limits]\ntimeout_s = 600\n")
    store = tmp_path / "s.sqlite"
    failed = run_ltsedge("profile", arch_file(), "--device", short, "--json", "--store", store)
    assert failed.returncode == 1
    result = json.loads(failed.stdout)
    assert "timed out" in result["error"] and result["failure_kind"] == "environment"
    ok = run_ltsedge("profile", arch_file(), "--device", long_, "--json", "--store", store)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["cached"] is False and json.loads(ok.stdout)["ok"]


@pytest.mark.slow
def test_profile_with_a_shape_is_keyed_by_that_shape(tmp_path, arch_file, device):
    store = tmp_path / "s.sqlite"
    default = json.loads(run_ltsedge("profile", arch_file(), "--device", device, "--json", "--store", store).stdout)
    shaped = json.loads(run_ltsedge("profile", arch_file(), "--device", device, "--json", "--store", store,
                                    "--shape", "input_ids=4x16").stdout)
    assert default["shapes"] is None and shaped["shapes"] == {"input_ids": [4, 16]}
    assert shaped["cached"] is False  # not the 1 x 16 figure
    again = json.loads(run_ltsedge("profile", arch_file(), "--device", device, "--json", "--store", store,
                                   "--shape", "input_ids=4x16").stdout)
    assert again["cached"] is True and again["latency_ms"] == shaped["latency_ms"]


@pytest.mark.slow
def test_profile_json_of_a_file_carries_its_sha256(tmp_path, arch_file, device):
    import hashlib

    model = tmp_path / "m.onnx"
    assert run_ltsedge("export", arch_file(), "-o", model).returncode == 0
    result = json.loads(run_ltsedge("profile", model, "--device", device, "--json", "--store", tmp_path / "s.sqlite").stdout)
    assert result["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()


def test_damaged_architecture_metadata_is_one_line_exit_2(tmp_path, arch_file, device):
    import onnx

    model = tmp_path / "m.onnx"
    assert run_ltsedge("export", arch_file(), "-o", model).returncode == 0
    proto = onnx.load(str(model))
    for prop in proto.metadata_props:
        if prop.key == "ltsedge.architecture":
            prop.value = '{"n_layer": 2, "d_model": '
    onnx.save(proto, str(model))
    proc = run_ltsedge("profile", model, "--device", device, "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 2 and "metadata ltsedge.architecture: malformed JSON" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_measuring_worker_never_imports_from_the_working_directory(tmp_path, arch_file, device):
    """A statistics.py (a module the worker imports) where the user runs ltsedge is never executed."""
    import os
    import shutil
    from pathlib import Path

    script = shutil.which("ltsedge", path=str(Path(sys.executable).parent)) or shutil.which("ltsedge")
    if script is None:
        pytest.skip("the ltsedge console script is not installed")
    work = tmp_path / "project"
    work.mkdir()
    marker = tmp_path / "executed"
    (work / "statistics.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(7)\n")
    model = tmp_path / "m.onnx"
    assert run_ltsedge("export", arch_file(), "-o", model).returncode == 0
    proc = subprocess.run([script, "profile", os.path.relpath(model, work), "--device", device, "--json",
                           "--store", tmp_path / "s.sqlite"], capture_output=True, text=True, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] and not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["session", "genai"])
def test_profile_of_the_generate_variant_reports_prefill_decode_and_the_cache(tmp_path, arch_file, loop):
    if loop == "genai":
        pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    device = tmp_path / "gen.toml"
    device.write_text(GENERATE_DEVICE.replace("[workload]", f'[workload]\ngenerate_loop = "{loop}"'))
    proc = run_ltsedge("profile", arch_file(), "--variant", "generate", "--device", device, "--json",
                       "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["variant"] == "generate" and r["workload"] == "decode"
    assert r["prefill_latency_ms"] > 0 and r["decode_latency_ms"] > 0
    assert r["latency_ms"] == r["decode_latency_ms"]  # a generator's latency is its time per token
    # The cache at the profile's context: keys and values of both layers, 24 tokens x d_model 64, fp32.
    assert r["kv_cache_mb"] == pytest.approx(2 * 2 * 24 * 64 * 4 / 2**20)
    if loop == "session":
        # A decode step of this tiny model is far below the timer's useful resolution: steps are timed in
        # batches inside the worker, not one round trip each.
        assert r["workloads"]["decode"]["runs_per_sample"] > 1
        assert r["loop"] == "onnxruntime session"
    else:  # genai's loop: each step after an untimed rewind to the same past, timed alone
        assert r["workloads"]["decode"]["runs_per_sample"] == 1
        assert r["loop"].startswith("onnxruntime-genai ") and r["loop"].endswith(" Generator")
    assert r["peak_memory_mb"] > r["kv_cache_mb"]


@pytest.mark.slow
@pytest.mark.parametrize("partial", [{"stopped_early": True}, {"coarse": True}])
def test_a_searchs_raced_out_or_coarse_figure_is_never_served_to_profile(tmp_path, arch_file, device, partial):
    """A search stores what it measured under the same key; profile answers only a complete figure."""
    from ltsedge.store import MeasurementStore

    store = tmp_path / "s.sqlite"
    device.write_text(FAST_DEVICE.replace("sequence = 16", "sequence = 16\ncontext = 16"))  # within n_positions
    first = json.loads(run_ltsedge("profile", arch_file(), "--variant", "generate", "--device", device, "--json", "--store", store).stdout)
    assert first["cached"] is False
    with MeasurementStore(store) as s:
        (row,) = s.rows()
        measurement = row["measurement"]
        if "coarse" in partial:  # as a decode search times the prompt's prefill
            measurement["workloads"]["prefill"]["coarse"] = True
        else:
            measurement.update(partial)
        key = (row["model_key"], row["fingerprint_hash"], row["settings_hash"], row["ort_version"])
        s.put(*key, measurement, fingerprint=row["fingerprint"], settings=row["settings"])
    again = json.loads(run_ltsedge("profile", arch_file(), "--variant", "generate", "--device", device, "--json", "--store", store).stdout)
    assert again["cached"] is False and not again.get("stopped_early")
    third = json.loads(run_ltsedge("profile", arch_file(), "--variant", "generate", "--device", device, "--json", "--store", store).stdout)
    assert third["cached"] is True  # the complete figure it measured is served again


def test_the_table_says_unknown_for_a_figure_the_platform_could_not_read(capsys):
    """A machine whose peak memory cannot be read gives None: the table says so instead of a traceback."""
    from ltsedge.cli.measure_commands import _print_profile

    _print_profile({"model": "m.onnx", "device": "cpu", "ok": True, "variant": "forward", "latency_ms": 1.0,
                    "latency_p90_ms": 1.1, "latency_min_ms": 0.9, "latency_cv": 0.01, "runs": 5, "converged": True,
                    "peak_memory_mb": None, "weights_mb": 1.0, "fingerprint": {}})
    out = capsys.readouterr().out
    assert "peak memory" in out and "unknown" in out and "1.10 ms" in out
