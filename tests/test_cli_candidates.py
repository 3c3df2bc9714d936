"""`ltsedge space | params | export` as a user runs them (through the CLI's entry point: exit codes, no
tracebacks)."""

import json

import onnxruntime as ort
import pytest

from ltsedge.architecture import Architecture
from ltsedge.exporters import architecture_of
from tests.helpers import ltsedge_cli, no_traceback, one_line_exit_2, tiny_arch


def run(*args, check_rc=None):
    proc = no_traceback(ltsedge_cli(*args))
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def test_params_json(arch_file):
    out = run("params", arch_file(), "--json", check_rc=0).stdout
    # per layer 4d^2 + 2 d d_inner + 9d + d_inner, plus final LayerNorm 2d; embeddings 500 x 64 + 64 x 64
    decoder = (4 * 64**2 + 2 * 64 * 128 + 9 * 64 + 128) + (4 * 64**2 + 2 * 64 * 192 + 9 * 64 + 192) + 2 * 64
    assert decoder == 75_328
    assert json.loads(out) == {"decoder_params": 75_328, "embedding_params": 36_096, "total_params": 111_424}


def test_params_table(arch_file):
    out = run("params", arch_file(), check_rc=0).stdout
    assert "decoder_params" in out and "75,328" in out and tiny_arch().id in out


def test_export_writes_a_loadable_model_that_says_what_it_is(arch_file, tmp_path):
    out = tmp_path / "sub" / "model.onnx"
    run("export", arch_file(), "-o", out, check_rc=0)
    assert architecture_of(out) == tiny_arch()
    assert ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).get_outputs()[0].name == "logits"


def test_space_describes_and_samples():
    out = run("space", check_rc=0).stdout
    assert "n_layer: 1..16" in out and "n_head (per layer): {2, 4, 8, 16}" in out and "10^39" in out
    assert "n_layer: 2..16" in (study := run("space", "--preset", "study", check_rc=0).stdout) and "10^37" in study
    lines = run("space", "--sample", 5, "--seed", 0, check_rc=0).stdout.splitlines()
    assert len(lines) == 5 and all("n_head" in json.loads(line) for line in lines)
    assert lines == run("space", "--sample", 5, "--seed", 0).stdout.splitlines()


def test_space_of_a_backbone_or_a_preset():
    lines = run("space", "--backbone", "llama", "--sample", 8, "--seed", 1, check_rc=0).stdout.splitlines()
    archs = [Architecture.from_json(line) for line in lines]
    assert len(archs) == 8 and {a.backbone for a in archs} == {"llama"}
    assert all(h % kv == 0 for a in archs for h, kv in zip(a.n_head, a.n_kv_head))
    assert len({a.head_dim for a in archs}) > 1  # a gene of its own, not d_model / n_head
    out = run("space", "--preset", "llama-edge", check_rc=0).stdout
    assert "source: preset llama-edge" in out and "n_kv_head (per layer): 1..5" in out and "~10^114" in out
    one_line_exit_2(ltsedge_cli("space", "--preset", "llama-edge", "--backbone", "opt"),
                    "preset llama-edge searches backbone llama, not opt")


def test_bad_grouped_head_range_exit_2(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("n_kv_head = [2, 4]\nn_head = [6, 9]\n")
    one_line_exit_2(ltsedge_cli("space", "--backbone", "llama", "--config", path),
                    "no n_kv_head choice divides n_head 9")
    one_line_exit_2(ltsedge_cli("space", "--config", path), "n_kv_head is not a field of backbone gpt2")


@pytest.mark.parametrize("text, message", [
    (None, "not found"),
    ('{"n_layer": 2,', "malformed JSON"),
    ('{"n_layer": 2, "d_model": 64, "n_head": [2, 2], "d_inner": [64, 64], "colour": 1}', "unknown architecture field 'colour'"),
    ('{"n_layer": 2, "d_model": 64, "n_head": [3, 2], "d_inner": [64, 64]}', "'n_head[0]' = 3"),
])
@pytest.mark.parametrize("command", ["params", "export"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, text, message, command):
    path = tmp_path / "arch.json"
    if text is not None:
        path.write_text(text)
    extra = ["-o", tmp_path / "m.onnx"] if command == "export" else []
    proc = run(command, path, *extra, check_rc=2)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_bad_space_config_exit_2(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("n_layer = [")
    proc = run("space", "--config", path, check_rc=2)
    assert "malformed TOML" in proc.stderr
