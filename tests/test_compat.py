"""Models for apps with an older onnxruntime: stamped with an opset and IR version that runtime loads, by
default the oldest release ltsedge supports (``OLDEST_ORT``), or the one given with --target-ort.

The strongest test loads the model in that older runtime: set LTSEDGE_OLD_ORT_PYTHON to a Python
interpreter that has it (``.ci/run`` builds one with onnxruntime 1.20.1); without it, that test skips.
"""

from __future__ import annotations

import os
import subprocess

import onnx
import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model, read_metadata
from ltsedge.exporters.options import ExportOptions
from ltsedge.ortcompat import (
    OLDEST_ORT,
    ORT_RELEASES,
    local_target,
    parse_version,
    target_for,
    writer_limits,
)
from tests.helpers import ltsedge_cli, tiny_arch

OLD_PYTHON = os.environ.get("LTSEDGE_OLD_ORT_PYTHON")


@pytest.mark.parametrize("version, expected", [("1.20", (21, 10)), ("1.20.1", (21, 10)), ("1.17.3", (20, 9)),
                                               ("1.15", (18, 9)), ("1.22", (22, 10)), ("1.23", (23, 11)),
                                               ("1.26.0", (26, 13))])
def test_target_versions_follow_the_release_table(version, expected):
    max_opset, max_ir = writer_limits()
    target = target_for(version)
    assert (target.opset, target.ir_version) == (min(expected[0], max_opset), min(expected[1], max_ir))


def test_a_newer_runtime_than_the_table_gets_at_least_the_newest_known_pair():
    newest = ORT_RELEASES[max(ORT_RELEASES)]
    target = target_for("9.0")
    assert (target.opset, target.ir_version) == tuple(min(a, b) for a, b in zip(newest, writer_limits()))


@pytest.mark.parametrize("version, message", [("1.10", "lacks opset 17"), ("banana", "not a version number"),
                                              ("1.x", "not a version number")])
def test_impossible_targets_are_clear_errors(version, message):
    with pytest.raises(LtsedgeError, match=message):
        target_for(version)


def test_exported_model_carries_the_promised_versions():
    exported = export_model(tiny_arch(d_embed=32, div_val=2), ExportOptions(target_ort="1.20"))
    proto = onnx.load_from_string(exported.to_bytes())
    expected = target_for("1.20")
    assert proto.ir_version == expected.ir_version and proto.opset_import[0].version == expected.opset
    meta = read_metadata(proto)
    assert (meta["opset"], meta["ir_version"], meta["target_ort"]) == (str(expected.opset), str(expected.ir_version),
                                                                       "1.20")
    onnx.checker.check_model(proto)


def test_local_target_is_loadable_locally():
    import onnxruntime as ort

    target = local_target()
    assert target.runtime == ort.__version__
    proto = onnx.load_from_string(export_model(tiny_arch()).to_bytes())
    proto.opset_import[0].version, proto.ir_version = target.opset, target.ir_version
    ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def test_default_target_is_the_oldest_supported_runtime_not_the_local_one(tmp_path):
    """An app's older onnxruntime loads a default export (the local 1.2x's newest IR it would refuse)."""
    import onnxruntime as ort

    assert OLDEST_ORT == "1.20" and parse_version(ort.__version__) >= parse_version(OLDEST_ORT)
    expected = tuple(min(a, b) for a, b in zip(ORT_RELEASES[1, 20], writer_limits()))  # (21, 10)
    assert (target_for(None).opset, target_for(None).ir_version, target_for(None).runtime) == (*expected, "1.20")
    # a forward model, and a generation bundle in standard operators (a head size of 8 the fused kernel does not
    # take); a bundle whose every cache fuses targets 1.22, the oldest that runs GroupQueryAttention
    for arch, variant, target in ((tiny_arch(), "forward", "1.20"), (tiny_arch(n_head=[8, 4]), "generate", "1.20"),
                                  (tiny_arch(), "generate", "1.22")):
        proto = onnx.load_from_string(export_model(arch, ExportOptions(variant=variant)).to_bytes())
        assert (proto.opset_import[0].version, proto.ir_version) == (expected if target == "1.20" else (22, 10))
        assert read_metadata(proto)["target_ort"] == target
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])  # and the local one


def test_version_parsing():
    assert parse_version("1.20.1") == (1, 20) and parse_version("1.31.1+cu12") == (1, 31)


@pytest.mark.skipif(not OLD_PYTHON, reason="set LTSEDGE_OLD_ORT_PYTHON to a Python with an older onnxruntime")
def test_model_for_an_older_runtime_loads_and_runs_in_it(tmp_path):
    probe = subprocess.run([OLD_PYTHON, "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                           capture_output=True, text=True, check=True)
    old_version = probe.stdout.strip()
    path = tmp_path / "m.onnx"
    export_model(tiny_arch(d_embed=32, div_val=2), ExportOptions(target_ort=old_version)).save(path)
    code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1], "
            "providers=['CPUExecutionProvider']); (y,) = s.run(None, {'input_ids': np.zeros((1, 5), np.int64)});"
            "print(y.shape)")
    ran = subprocess.run([OLD_PYTHON, "-c", code, str(path)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "(1, 5, 500)"
    # the default export loads there too (a runtime ltsedge supports: OLDEST_ORT or newer) ...
    if parse_version(old_version) >= parse_version(OLDEST_ORT):
        default = tmp_path / "default.onnx"
        export_model(tiny_arch(d_embed=32, div_val=2)).save(default)
        ran = subprocess.run([OLD_PYTHON, "-c", code, str(default)], capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stdout.strip() == "(1, 5, 500)", ran.stderr
    # ... and the local runtime's newest stamp is refused there when it is newer: why it is not the default
    if local_target().ir_version > target_for(old_version).ir_version:
        newest = tmp_path / "newest.onnx"
        export_model(tiny_arch(), ExportOptions(target_ort=local_target().runtime)).save(newest)
        refused = subprocess.run([OLD_PYTHON, "-c", code, str(newest)], capture_output=True, text=True)
        assert refused.returncode != 0 and ("IR version" in refused.stderr or "opset" in refused.stderr)


def test_cli_export_with_target(tmp_path, arch_file):
    out = tmp_path / "m.onnx"
    proc = ltsedge_cli("export", arch_file(), "-o", out, "--target-ort", "1.20")
    assert proc.returncode == 0, proc.stderr
    assert onnx.load(str(out)).ir_version == target_for("1.20").ir_version
    bad = ltsedge_cli("export", arch_file(), "-o", out, "--target-ort", "0.5")
    assert bad.returncode == 2 and "lacks opset 17" in bad.stderr


@pytest.mark.skipif(not OLD_PYTHON, reason="set LTSEDGE_OLD_ORT_PYTHON to a Python with an older onnxruntime")
@pytest.mark.parametrize("overrides", [dict(n_head=[2, 4]),  # per-layer heads
                                       dict(backbone="opt", n_head=[4, 4]),
                                       dict(n_layer=3, n_head=[2, 4, 4], d_inner=[128] * 3,
                                            block_types=["ffn", "attn_ffn", "attn_ffn"])])
def test_a_bundle_for_the_oldest_supported_runtime_generates_the_same_tokens_there(tmp_path, overrides):
    """What an app bundling onnxruntime 1.20 runs: a generate export for it (``--target-ort 1.20``: standard
    operators, where a default bundle whose caches all fuse needs 1.22), greedy with its KV cache
    (ltsedge.generation, which needs only numpy and onnxruntime), the same tokens as here."""
    import json

    import numpy as np
    import onnxruntime as ort
    import torch

    from ltsedge.backbones import get_backbone
    from ltsedge.generation import greedy
    arch = tiny_arch(**overrides)
    torch.manual_seed(3)  # the random initial weights scaled up: unscaled, a model predicts one token over again
    state = {k: v * 8 for k, v in get_backbone(arch.backbone).build_model(arch).state_dict().items()}
    path = tmp_path / "model.onnx"
    export_model(arch, ExportOptions(variant="generate", target_ort=OLDEST_ORT), weights=state).save(path)
    prompt = np.array([[5, 17, 99, 3]], np.int64)
    here = greedy(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), prompt, 12).tokens
    assert len(set(here[0].tolist())) > 1  # tokens that vary, or the comparison proves little
    code = ("import sys, json, numpy as np, onnxruntime as ort; from ltsedge.generation import greedy; "
            "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']); "
            "print(ort.__version__, json.dumps(greedy(s, np.array([[5, 17, 99, 3]], np.int64), 12).tokens.tolist()))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ran = subprocess.run([OLD_PYTHON, "-c", code, str(path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": root})
    assert ran.returncode == 0, ran.stderr
    version, tokens = ran.stdout.split(" ", 1)
    assert parse_version(version) <= parse_version(OLDEST_ORT)  # the app's runtime, not this one
    assert json.loads(tokens) == here.tolist()
