"""Bad command-line input that used to give a traceback, a hang or a silent misreading: one line naming the
problem and exit 2, or a bounded wait with a message (issue 23)."""

from __future__ import annotations

import math
import sys
import socket
import time
import xml.etree.ElementTree as ET

import pytest

from ltsedge.check import run_check
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.runners import Measurement
from ltsedge.space import SearchSpace
from tests.conftest import tiny_arch
from tests.helpers import ltsedge_process, one_line_exit_2, run_ltsedge

DEEP = 100_000


@pytest.fixture
def model(tmp_path):
    """A real tiny ONNX model (input_ids -> logits)."""
    from ltsedge.exporters import export_model

    path = tmp_path / "m.onnx"
    export_model(tiny_arch()).save(path)
    return path


def quiet(_line):
    pass


def fake_measure(profile, jobs):
    return [Measurement(ok=True, latency_ms=1.0, latency_p90_ms=1.1, latency_min_ms=0.9, latency_cv=0.01, runs=5,
                        converged=True, peak_memory_mb=10.0, weights_mb=1.0, load_seconds=0.1, inference_seconds=0.1)
            for _ in jobs]


# --- 1. deeply nested JSON and TOML ----------------------------------------------------------------
def test_deeply_nested_json_and_toml_are_one_line(tmp_path):
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * DEEP + "]" * DEEP)
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("a = " + "[" * DEEP + "]" * DEEP + "\n")
    (tmp_path / "a.onnx").write_bytes(b"a model")
    one_line_exit_2(run_ltsedge("params", deep_json), "malformed JSON: nested too deeply")
    one_line_exit_2(ltsedge_process("check", "a.onnx", "--max-latency-ms", 5, "--against", deep_json, cwd=tmp_path),
                    "--against file", "nested too deeply")
    one_line_exit_2(run_ltsedge("space", "--config", deep_toml), "nested too deeply")
    one_line_exit_2(ltsedge_process("check", "a.onnx", "--budgets", deep_toml, cwd=tmp_path), "nested too deeply")


def test_json_lines_still_read_after_a_deep_first_document(tmp_path):
    """The JSON-lines fallback of --against reads each line with the same safe reader."""
    from ltsedge.check.previous import load_previous

    path = tmp_path / "prev.json"
    path.write_text("[" * DEEP + "\n" + "]" * DEEP + "\n")
    with pytest.raises(LtsedgeError, match="nested too deeply"):
        load_previous(path)


# --- 2 and 6. the fleet options -------------------------------------------------------------------
FLEET_COMMANDS = [
    ["profile", "MODEL", "--store", "STORE"],
    ["check", "MODEL", "--max-latency-ms", "5"],
    ["search", "--preset", "smoke", "--out", "OUT", "--store", "STORE", "--quiet"],
]


def fleet_args(command, tmp_path, model):
    paths = {"MODEL": model, "OUT": tmp_path / "o", "STORE": tmp_path / "s.sqlite"}
    return [paths.get(a, a) for a in command]


@pytest.mark.parametrize("command", [["agent"], *FLEET_COMMANDS])
def test_a_scheduler_that_is_not_an_address_is_one_line(tmp_path, model, command):
    proc = run_ltsedge(*fleet_args(command, tmp_path, model), "--scheduler", "notaurl")
    one_line_exit_2(proc, "--scheduler 'notaurl' is not a Dask scheduler address", "tcp://")
    assert not (tmp_path / "o").exists() and not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize("command", FLEET_COMMANDS)
def test_machine_without_a_scheduler_is_one_line(tmp_path, model, command):
    one_line_exit_2(run_ltsedge(*fleet_args(command, tmp_path, model), "--machine", "0123abcd"), "--machine", "--scheduler")
    assert not (tmp_path / "o").exists() and not (tmp_path / "s.sqlite").exists()


def test_an_agent_waits_a_bounded_time_for_its_scheduler(monkeypatch, capsys):
    pytest.importorskip("distributed")
    from ltsedge import cli
    from ltsedge.cli import search_commands

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(search_commands, "SCHEDULER_WAIT_S", 1.0)
    monkeypatch.setattr(sys, "argv", ["ltsedge", "agent", "--scheduler", f"tcp://127.0.0.1:{port}"])
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2 and time.monotonic() - started < 20
    err = capsys.readouterr().err
    assert f"cannot reach the scheduler tcp://127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1


def test_scheduler_addresses():
    from ltsedge.validate import scheduler_address

    for good in ("tcp://127.0.0.1:8786", "tls://board.local:8786", "127.0.0.1:8786", "tcp://[::1]:8786"):
        assert scheduler_address(good) == good
    for bad in ("notaurl", "tcp://host", "http://host:8786", "tcp://host:0", "tcp://host:70000", "tcp://:8786",
                "tcp://host:8786/path"):
        with pytest.raises(LtsedgeError, match="is not a Dask scheduler address"):
            scheduler_address(bad)


def test_profile_variant_of_an_onnx_model_is_checked(tmp_path, model):
    one_line_exit_2(run_ltsedge("profile", model, "--variant", "nope", "--store", tmp_path / "s.sqlite"),
                    "--variant nope", "as it was exported (forward)")
    assert not (tmp_path / "s.sqlite").exists()


# --- 3. huge spaces ---------------------------------------------------------------------------------
def test_a_space_of_a_hundred_million_layer_choices_is_refused_at_once(tmp_path):
    config = tmp_path / "space.toml"
    config.write_text("n_layer = {min = 1, max = 100000000}\n")
    started = time.monotonic()
    one_line_exit_2(run_ltsedge("space", "--config", config), "100,000,000 choices", "at most 10,000")
    config.write_text("n_layer = [2, 100000000]\n")
    one_line_exit_2(run_ltsedge("space", "--config", config), "n_layer 100000000 is over the 10,000 layers")
    assert time.monotonic() - started < 30


def test_a_space_of_ten_thousand_layers_is_sized_without_enumerating():
    started = time.monotonic()
    described = SearchSpace.from_dict({"n_layer": {"min": 2, "max": 10_000}}).describe()
    assert time.monotonic() - started < 5  # was 29 s
    assert described["size"] is None and math.isclose(described["size_log10"], 23874.85, abs_tol=0.01)  # 4 head choices a layer


@pytest.mark.parametrize("changes", [
    {},
    {"block_types": ("attn_ffn", "ffn")},
    {"block_types": ("attn_ffn", "ffn", "attn"), "par_rules": True, "n_layer": tuple(range(1, 40))},
    {"block_types": ("ffn", "attn"), "par_rules": True, "n_layer": (1, 2, 7)},
])
def test_the_size_in_logarithms_is_the_exact_sizes(changes):
    space = SearchSpace.default("gpt2", **changes)
    assert math.isclose(space.size_log10(), math.log10(space.size()), abs_tol=1e-9)


# --- 4. profile --shape for an input the model lacks ------------------------------------------------
def test_profile_refuses_a_shape_for_an_input_the_model_lacks(tmp_path, model, arch_file):
    store = tmp_path / "s.sqlite"
    one_line_exit_2(run_ltsedge("profile", model, "--shape", "foo=1x2", "--store", store),
                    "shape given for 'foo', which is not an input of the model (inputs: input_ids)")
    assert not store.exists()
    one_line_exit_2(run_ltsedge("profile", arch_file(), "--shape", "foo=1x2", "--store", store),
                    "shape given for 'foo'")
    if store.exists():  # an architecture is exported first (its inputs are the export's): nothing stored
        from ltsedge.store import MeasurementStore

        with MeasurementStore(store) as opened:
            assert opened.count() == 0


# --- 5. weights files --------------------------------------------------------------------------------
def test_an_unreadable_weights_file_is_ltsedges_own_line_without_torch_warnings(tmp_path, arch_file):
    import pickle

    weights = tmp_path / "w.pt"
    weights.write_bytes(pickle.dumps([1, 2, 3], protocol=4))  # a pickle torch warns about, then refuses
    proc = run_ltsedge("export", arch_file(), "-o", tmp_path / "m.onnx", "--weights", weights)
    one_line_exit_2(proc, "weights file", "not a plain state_dict of tensors", "never runs code")
    assert "weights_only" not in proc.stderr and "Warning" not in proc.stderr


@pytest.mark.parametrize("dtype", ["complex64", "int64", "bool"])
def test_weights_that_are_not_floating_point_are_refused(dtype):
    torch = pytest.importorskip("torch")
    from ltsedge.backbones import get_backbone
    from ltsedge.exporters.trained_weights import checked_weights

    arch = tiny_arch()
    backbone = get_backbone(arch.backbone)
    state = backbone.build_model(arch).state_dict()
    state["wte.weight"] = state["wte.weight"].to(getattr(torch, dtype))
    with pytest.raises(LtsedgeError, match=f"tensor 'wte.weight' is {dtype}: weights must be floating point"):
        checked_weights(state, backbone.empty_model(arch), "w.pt", backbone.tied_aliases)


# --- 7. JUnit and directories -------------------------------------------------------------------------
def test_junit_of_a_model_named_with_a_control_character_parses(tmp_path):
    profile = load_profile("cpu")
    model = tmp_path / "bad\x1bname\x01.onnx"
    model.write_bytes(b"not onnx")
    report = run_check([model], profile, budgets={"max_latency_ms": 5}, measure=fake_measure, log=quiet,
                       fingerprint={"cpu_model": "Test CPU", "onnxruntime": "1.20.0"})
    path = tmp_path / "report.xml"
    report.write_junit(path)
    root = ET.parse(path).getroot()  # was: "not well-formed (invalid token)"
    assert any("bad\\x1bname\\x01.onnx" in suite.get("name") for suite in root.iter("testsuite"))


def test_a_directory_given_as_a_model_says_so(tmp_path):
    (tmp_path / "models").mkdir()
    one_line_exit_2(ltsedge_process("check", "models", "--max-latency-ms", 5, cwd=tmp_path), "models is a directory")
    one_line_exit_2(ltsedge_process("profile", "models", "--store", tmp_path / "s.sqlite", cwd=tmp_path), "models is a directory")


def test_the_python_api_checks_a_scheduler_address_as_the_cli_does():
    from ltsedge.runners import runner_factory

    with pytest.raises(LtsedgeError, match="'notaurl' is not a Dask scheduler address"):
        runner_factory("notaurl")
