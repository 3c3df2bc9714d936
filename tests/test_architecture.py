import json
import subprocess
import sys

import pytest

from ltsedge.architecture import Architecture, default_cutoffs
from ltsedge.errors import LtsedgeError
from tests.helpers import random_tiny_archs, tiny_arch

ISSUE_EXAMPLE = {"backbone": "gpt2", "n_layer": 3, "d_model": 256, "n_head": [2, 2, 2],
                 "d_inner": [3072, 3776, 3904], "d_embed": 256, "div_val": 1, "vocab_size": 50257,
                 "n_positions": 1024}


def test_json_round_trip_of_the_documented_form():
    arch = Architecture.from_dict(ISSUE_EXAMPLE)
    assert json.loads(arch.to_json()) == ISSUE_EXAMPLE
    assert Architecture.from_json(arch.to_json()) == arch


@pytest.mark.parametrize("arch", random_tiny_archs(30, seed=1), ids=lambda a: a.id)
def test_round_trip_keeps_value_and_id(arch):
    again = Architecture.from_json(arch.to_json())
    assert again == arch and again.id == arch.id and hash(again) == hash(arch)


def test_defaults_fill_in_and_do_not_change_the_id():
    minimal = Architecture.from_dict({"n_layer": 3, "d_model": 256, "n_head": [2, 2, 2], "d_inner": [3072, 3776, 3904]})
    assert minimal == Architecture.from_dict(ISSUE_EXAMPLE)
    assert minimal.id == Architecture.from_dict(ISSUE_EXAMPLE).id
    assert (minimal.d_embed, minimal.div_val, minimal.vocab_size, minimal.n_positions) == (256, 1, 50257, 1024)


def test_id_is_content_based_and_distinguishes_layers():
    a = tiny_arch(n_head=[2, 4])
    b = tiny_arch(n_head=[4, 2])
    assert a.id != b.id
    assert a.id.startswith("gpt2-L2-d64-")


def test_id_is_the_same_in_another_process():
    arch = tiny_arch(d_embed=32, div_val=2)
    code = f"from ltsedge.architecture import Architecture; print(Architecture.from_json({arch.to_json()!r}).id)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.strip()
    assert out == arch.id


def test_architecture_is_immutable():
    arch = tiny_arch()
    with pytest.raises(AttributeError):
        arch.n_layer = 3  # type: ignore[misc]


def test_adaptive_gets_default_cutoffs_and_plain_has_none():
    assert tiny_arch().cutoffs == ()
    adaptive = Architecture(n_layer=1, d_model=256, n_head=[2], d_inner=[512], d_embed=128, div_val=2)
    assert adaptive.adaptive and adaptive.cutoffs == default_cutoffs(50257) == (20102, 40205)
    assert "cutoffs" in adaptive.to_dict() and "cutoffs" not in tiny_arch().to_dict()


@pytest.mark.parametrize("change, words", [
    ({"n_head": [3, 2]}, ["n_head[0]", "3", "divide d_model = 64"]),
    ({"n_head": [2]}, ["n_head", "1 entries", "one per layer"]),
    ({"d_inner": [128, 0]}, ["d_inner[1]", "0", ">= 1"]),
    ({"n_layer": 0, "n_head": [], "d_inner": []}, ["n_layer", "0", ">= 1"]),
    ({"d_model": 64.0}, ["d_model", "64.0"]),
    ({"n_layer": True}, ["n_layer", "True"]),
    ({"backbone": "mamba"}, ["backbone", "mamba", "gpt2"]),
    ({"vocab_size": 1}, ["vocab_size", "1", ">= 2"]),
    ({"d_embed": 32, "div_val": 2, "cutoffs": [300, 200]}, ["cutoffs", "strictly increasing"]),
    ({"d_embed": 32, "div_val": 2, "cutoffs": [100, 600]}, ["cutoffs", "1..499"]),
    ({"d_embed": 4, "div_val": 4}, ["div_val", "no embedding dimension"]),
    ({"n_head": "2,4"}, ["n_head", "list of integers"]),
    # fields of the families that have them (Llama's)
    ({"n_kv_head": [1, 2]}, ["n_kv_head", "backbone gpt2 has no such field"]),
    ({"backbone": "llama", "n_kv_head": [2, 3]}, ["n_kv_head[1]", "3", "n_head[1] = 4", "multiple"]),
    ({"backbone": "llama", "n_kv_head": [2]}, ["n_kv_head", "1 entries", "one per layer"]),
    ({"backbone": "llama", "n_kv_head": [2, 0]}, ["n_kv_head[1]", "0", ">= 1"]),
    ({"backbone": "llama", "head_dim": 15}, ["head_dim", "15", "even"]),
    ({"backbone": "llama", "head_dim": 0}, ["head_dim", "0", ">= 1"]),
    ({"backbone": "llama", "n_head": [64, 4]}, ["n_head[0]", "64", "head size", "even"]),
    ({"backbone": "llama", "n_head": [3, 4]}, ["n_head[0]", "divide d_model = 64", "or give head_dim"]),
    ({"backbone": "llama", "rope_theta": 0}, ["rope_theta", "0", "> 0"]),
    ({"backbone": "llama", "rope_theta": 10**400}, ["rope_theta", "finite"]),
    ({"backbone": "llama", "rms_norm_eps": "1e-5"}, ["rms_norm_eps", "'1e-5'", "number"]),
    ({"backbone": "llama", "tie_embeddings": 1}, ["tie_embeddings", "1", "true or false"]),
    ({"backbone": "llama", "d_embed": 32}, ["backbone llama", "plain embeddings"]),
])
def test_validation_errors_name_field_value_and_rule(change, words):
    fields = tiny_arch().to_dict()
    fields.update(change)
    with pytest.raises(LtsedgeError) as err:
        Architecture.from_dict(fields)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_a_familys_own_fields_are_filled_in_once_and_kept_out_of_other_families():
    """Llama's fields unset are its defaults, written out: one architecture, one id, however it is given."""
    minimal = Architecture.from_dict({"backbone": "llama", "n_layer": 2, "d_model": 64, "n_head": [4, 4],
                                      "d_inner": [128, 128]})
    explicit = Architecture.from_dict({**minimal.to_dict(), "rope_theta": 10000})  # an integer theta
    assert minimal == explicit and minimal.id == explicit.id == Architecture.from_json(minimal.to_json()).id
    assert {k: minimal.to_dict()[k] for k in ("n_kv_head", "head_dim", "tie_embeddings", "rope_theta",
                                             "rms_norm_eps")} == {
        "n_kv_head": [4, 4], "head_dim": 16, "tie_embeddings": True, "rope_theta": 10000.0, "rms_norm_eps": 1e-5}
    per_layer = Architecture(backbone="llama", n_layer=2, d_model=64, n_head=[2, 4], d_inner=[128, 128])
    assert per_layer.head_dim is None and per_layer.d_head == (32, 16) and "head_dim" not in per_layer.to_dict()
    wide = Architecture(backbone="llama", n_layer=1, d_model=64, n_head=[6], n_kv_head=[2], head_dim=32, d_inner=[96])
    assert wide.d_head == (32,) and wide.kv_heads == (2,)
    assert not set(tiny_arch().to_dict()) & {"n_kv_head", "head_dim", "tie_embeddings", "rope_theta", "rms_norm_eps"}
    assert tiny_arch().kv_heads == tiny_arch().n_head


def test_unknown_and_missing_fields(tmp_path):
    with pytest.raises(LtsedgeError, match="unknown architecture field 'heads'"):
        Architecture.from_dict({**tiny_arch().to_dict(), "heads": 2})
    with pytest.raises(LtsedgeError, match="'d_inner' is missing"):
        Architecture.from_dict({"n_layer": 1, "d_model": 64, "n_head": [2]})
    with pytest.raises(LtsedgeError, match="must be a JSON object"):
        Architecture.from_json("[1, 2]")


def test_load_errors(tmp_path):
    with pytest.raises(LtsedgeError, match="not found"):
        Architecture.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"n_layer": 2,')
    with pytest.raises(LtsedgeError, match=r"bad.json: malformed JSON"):
        Architecture.load(bad)
