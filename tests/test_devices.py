"""Device profiles: the shipped TOML files, strict validation, one-line errors."""

from __future__ import annotations

from pathlib import Path

import onnxruntime
import pytest

from ltsedge.devices import (
    DeviceProfile,
    builtin_names,
    builtin_profiles,
    check_provider,
    load_profile,
    strict,
)
from ltsedge.errors import LtsedgeError

HAS_CUDA = "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def write(tmp_path: Path, text: str, name: str = "board.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(LtsedgeError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# Builtin profiles
# ---------------------------------------------------------------------------------------------
def test_builtins_are_listed_even_without_their_provider():
    profiles = {p.name: p for p in builtin_profiles()}
    assert set(profiles) == {"cpu", "cpu-steady", "arm64", "cuda"} == set(builtin_names())
    assert all(p.source == "builtin" for p in profiles.values())
    assert profiles["cuda"].execution_provider == "CUDAExecutionProvider"


def test_cpu_profile_defaults():
    cpu = load_profile("cpu")
    assert (cpu.execution_provider, cpu.batch, cpu.sequence) == ("CPUExecutionProvider", 1, 192)
    assert (cpu.warmup, cpu.min_runs, cpu.max_runs, cpu.tolerance) == (2, 5, 50, 0.02)
    assert cpu.memory_limit_mb is None and cpu.max_temperature_c is None


def test_cpu_steady_is_cpu_with_one_thread_on_huge_pages_in_three_workers():
    cpu, steady = load_profile("cpu"), load_profile("cpu-steady")
    assert steady.replace(name="cpu", description=cpu.description) == cpu.replace(intra_op_threads=1, huge_pages=True,
                                                                                  workers=3)
    assert steady.settings_hash() != cpu.settings_hash()


def test_arm64_profile_is_for_fanless_boards():
    arm = load_profile("arm64")
    assert arm.intra_op_threads == 4 and arm.sequence == 192
    assert arm.cooldown_s == 2.0 and arm.max_temperature_c == 70.0
    assert arm.drift_check_every == 1


def test_cuda_profile():
    cuda = load_profile("cuda", check_available=False)
    assert cuda.provider_options["device_id"] == 0
    assert cuda.provider_options["arena_extend_strategy"] == "kSameAsRequested"


def test_unavailable_provider_is_a_clear_error():
    if HAS_CUDA:
        pytest.skip("this onnxruntime has CUDA")
    message = error_of(load_profile, "cuda")
    assert message.startswith("device profile 'cuda': execution provider CUDAExecutionProvider is not available")
    assert "CPUExecutionProvider" in message and "install onnxruntime-gpu" in message


def test_unavailable_custom_provider(tmp_path):
    path = write(tmp_path, '[runtime]\nexecution_provider = "NoSuchExecutionProvider"\n')
    assert load_profile(path, check_available=False).execution_provider == "NoSuchExecutionProvider"
    message = error_of(load_profile, path)
    assert "execution provider NoSuchExecutionProvider is not available" in message


# ---------------------------------------------------------------------------------------------
# Settings, hash, replace, strict
# ---------------------------------------------------------------------------------------------
def test_settings_hash_tracks_what_changes_measurements():
    cpu = load_profile("cpu")
    h = cpu.settings_hash()
    assert len(h) == 12 and h == load_profile("cpu").settings_hash()
    assert set(cpu.settings()) >= {"execution_provider", "provider_options", "intra_op_threads", "graph_optimization",
                                   "enable_cpu_mem_arena", "batch", "sequence", "min_runs", "tolerance"}
    for change in (dict(sequence=32), dict(intra_op_threads=2), dict(tolerance=0.01), dict(max_runs=60),
                   dict(graph_optimization="basic"), dict(provider_options={"x": 1})):
        assert cpu.replace(**change).settings_hash() != h, change
    for change in (dict(name="other", description="d"), dict(timeout_s=5.0), dict(max_latency_ms=10.0),
                   dict(cooldown_s=3.0), dict(memory_limit_mb=100.0)):
        assert cpu.replace(**change).settings_hash() == h, change


def test_replace_validates():
    cpu = load_profile("cpu")
    assert cpu.replace(sequence=32).sequence == 32 and cpu.sequence == 192
    assert "sequence = 0 is out of range" in error_of(cpu.replace, sequence=0)
    assert "unknown setting 'seq'" in error_of(cpu.replace, seq=32)
    assert "has the wrong type: expected an integer" in error_of(cpu.replace, min_runs=2.5)


def test_strict_doubles_the_effort():
    cpu = load_profile("cpu")
    s = strict(cpu)
    assert (s.tolerance, s.min_runs, s.max_runs, s.max_seconds) == (
        cpu.tolerance / 2, 2 * cpu.min_runs, 2 * cpu.max_runs, 2 * cpu.max_seconds)
    assert s.settings_hash() != cpu.settings_hash() and s.sequence == cpu.sequence
    odd = strict(cpu.replace(min_runs=30, max_runs=30))
    assert odd.max_runs >= odd.min_runs == 60


def test_profile_is_hashable_and_round_trips():
    cpu = load_profile("cpu", check_available=False)
    assert hash(cpu) == hash(load_profile("cpu"))
    assert DeviceProfile(**cpu.to_dict()) == cpu


# ---------------------------------------------------------------------------------------------
# Custom TOML files and their errors
# ---------------------------------------------------------------------------------------------
GOOD = """
name = "pi-zero"
description = "a tiny board"
[runtime]
intra_op_threads = 1
graph_optimization = "extended"
[runtime.provider_options]
some_option = "x"
[workload]
sequence = 64
[repeats]
tolerance = 0.05
max_seconds = 10          # an integer is fine for a number
[limits]
memory_limit_mb = 400
[thermal]
max_temperature_c = 65
"""


def test_custom_profile_file(tmp_path):
    path = write(tmp_path, GOOD)
    p = load_profile(path)
    assert (p.name, p.source, p.intra_op_threads, p.sequence) == ("pi-zero", str(path), 1, 64)
    assert p.graph_optimization == "extended" and p.provider_options == {"some_option": "x"}
    assert p.max_seconds == 10.0 and isinstance(p.max_seconds, float) and p.memory_limit_mb == 400.0
    assert load_profile(str(path)).name == "pi-zero"  # a string path works too


def test_name_defaults_to_the_file_name(tmp_path):
    assert load_profile(write(tmp_path, "[workload]\nbatch = 2\n", "jetson.toml")).name == "jetson"


def test_unknown_profile_name_lists_the_known_ones():
    message = error_of(load_profile, "raspberry")
    assert message == "unknown device profile 'raspberry' (known: arm64, cpu, cpu-steady, cuda; or give the path of a .toml file)"


def test_missing_file(tmp_path):
    assert error_of(load_profile, tmp_path / "nope.toml") == f"device profile file not found: {tmp_path / 'nope.toml'}"


def test_malformed_toml_names_the_line(tmp_path):
    path = write(tmp_path, '[workload]\nbatch = 1\nsequence = = 3\n')
    message = error_of(load_profile, path)
    assert message.startswith(f"device profile file {path}: malformed TOML")
    assert "line 3" in message


@pytest.mark.parametrize("text, expected", [
    ("[repeats]\nmin_run = 3\n", "unknown key 'min_run' in [repeats] (allowed: warmup, min_runs,"),
    ("[workload]\ntolerance = 0.1\n", "unknown key 'tolerance' in [workload]"),
    ("[runtimes]\nbatch = 1\n", "unknown key 'runtimes' at the top level"),
    ("sequence = 32\n", "unknown key 'sequence' at the top level"),
    ("workload = 3\n", "'workload' must be a table [workload], got 3"),
])
def test_unknown_keys_are_named_with_their_place(tmp_path, text, expected):
    assert expected in error_of(load_profile, write(tmp_path, text))


@pytest.mark.parametrize("text, expected", [
    ("[repeats]\nmin_runs = 2.5\n", "[repeats] min_runs = 2.5 has the wrong type: expected an integer"),
    ('[workload]\nsequence = "192"\n', '[workload] sequence = "192" has the wrong type: expected an integer'),
    ("[runtime]\nenable_mem_pattern = 1\n",
     "[runtime] enable_mem_pattern = 1 has the wrong type: expected true or false"),
    ("[repeats]\ntolerance = true\n", "[repeats] tolerance = true has the wrong type: expected a number"),
    ("[runtime]\nexecution_provider = 3\n", "[runtime] execution_provider = 3 has the wrong type: expected a string"),
    ("[runtime]\nprovider_options = [1]\n",
     "[runtime] provider_options = [1] has the wrong type: expected a table of options"),
    ("[runtime.provider_options]\nx = [1]\n",
     "[runtime] provider_options.x = [1] has the wrong type: expected a string, number or boolean"),
    ("name = 5\n", "name = 5 has the wrong type: expected a string"),
])
def test_wrong_types_name_key_value_and_type(tmp_path, text, expected):
    path = write(tmp_path, text)
    message = error_of(load_profile, path)
    assert message == f"device profile file {path}: {expected}"


@pytest.mark.parametrize("text, expected", [
    ("[workload]\nbatch = 0\n", "batch = 0 is out of range: must be >= 1"),
    ("[runtime]\nintra_op_threads = -1\n", "intra_op_threads = -1 is out of range: must be >= 0"),
    ("[repeats]\ntolerance = 2.0\n", "tolerance = 2.0 is out of range: must be between 0 and 1"),
    ("[repeats]\nmin_runs = 10\nmax_runs = 5\n", "max_runs = 5 is out of range: must be >= min_runs (10)"),
    ("[repeats]\nmax_seconds = 0\n", "max_seconds = 0.0 is out of range: must be a positive number"),
    ("[limits]\ntimeout_s = -1\n", "timeout_s = -1.0 is out of range: must be a positive number"),
    ("[limits]\nmemory_limit_mb = 0\n", "memory_limit_mb = 0.0 is out of range"),
    ("[thermal]\nmax_temperature_c = 500\n", "max_temperature_c = 500.0 is out of range"),
    ("[thermal]\ncooldown_s = -2\n", "cooldown_s = -2.0 is out of range: must be >= 0"),
    ('[runtime]\ngraph_optimization = "max"\n', 'graph_optimization = "max" is out of range: must be one of disable'),
    ('[runtime]\nexecution_mode = "async"\n', 'execution_mode = "async" is out of range: must be one of sequential'),
    ('[repeats]\ndecode_reference = "compute"\n',
     'decode_reference = "compute" is out of range: must be one of bandwidth, none'),
    ('[export]\ntarget_ort = "latest"\n', "target_ort: onnxruntime version 'latest' is not a version number"),
])
def test_out_of_range_values(tmp_path, text, expected):
    path = write(tmp_path, text, "edge.toml")
    message = error_of(load_profile, path)
    assert message.startswith(f"device profile file {path}: {expected}")


def test_check_provider_passes_for_cpu():
    check_provider(load_profile("cpu"))  # no error
