"""Generation bundles timed in onnxruntime-genai's own generator loop (runners/genai_loop.py, runners/loop.py):
what timed a figure is said in every output and is part of its store key; a bundle genai refuses is one line."""

from __future__ import annotations

import json
import shutil

import pytest

from ltsedge.architecture import Architecture
from ltsedge.devices import DeviceProfile
from ltsedge.errors import LtsedgeError
from ltsedge.runners import loop, timing
from tests.helpers import GENERATE_DEVICE, one_line_exit_2, run_ltsedge

LLAMA = {"backbone": "llama", "n_layer": 2, "d_model": 64, "n_head": [4, 4], "n_kv_head": [2, 2], "head_dim": 16,
         "d_inner": [128, 96], "vocab_size": 300, "n_positions": 128}


def _bundle(tmp_path, name="bundle", **changes) -> tuple:
    arch = tmp_path / f"{name}.json"
    arch.write_text(json.dumps({**LLAMA, **changes}))
    out = tmp_path / name
    run_ltsedge("export", arch, "--variant", "generate", "-o", out)
    return arch, out


def _device(tmp_path, loop_choice: str | None = None):
    device = tmp_path / f"gen-{loop_choice}.toml"
    text = GENERATE_DEVICE
    if loop_choice:
        text = text.replace("[workload]", f'[workload]\ngenerate_loop = "{loop_choice}"')
    device.write_text(text)
    return device


def _profile(target, device, store) -> dict:
    proc = run_ltsedge("profile", target, "--device", device, "--json", "--store", store)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def genai():
    return pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")


def test_a_bundle_is_timed_in_genais_loop_and_its_figures_are_keyed_apart_from_a_sessions(tmp_path, genai):
    _, bundle = _bundle(tmp_path)
    store = tmp_path / "s.sqlite"
    in_genai = _profile(bundle, _device(tmp_path), store)  # the bundle's directory stands for its model
    assert in_genai["ok"] and in_genai["variant"] == "generate" and not in_genai["cached"]
    assert in_genai["loop"] == f"onnxruntime-genai {genai.__version__} Generator"
    assert in_genai["settings"]["loop"] == in_genai["loop"]  # what check --against holds equal
    assert in_genai["prefill_latency_ms"] > 0 and in_genai["decode_latency_ms"] > 0
    assert in_genai["workloads"]["decode"]["runs_per_sample"] == 1  # a step after an untimed rewind
    assert in_genai["kv_cache_mb"] == pytest.approx(2 * 2 * 2 * 24 * 16 * 4 / 2**20)  # 2 layers x K,V x 2 heads
    in_session = _profile(bundle / "model.onnx", _device(tmp_path, "session"), store)
    assert in_session["loop"] == "onnxruntime session" and not in_session["cached"]  # another figure
    assert _profile(bundle / "model.onnx", _device(tmp_path), store)["cached"]  # the file and its folder: one key


def test_a_bundles_genai_config_is_part_of_its_key(tmp_path, genai):
    _, bundle = _bundle(tmp_path)
    store, device = tmp_path / "s.sqlite", _device(tmp_path)
    assert not _profile(bundle, device, store)["cached"]
    config = json.loads((bundle / "genai_config.json").read_text())
    config["search"]["max_length"] = 100  # a config genai reads differently: the figure is another
    (bundle / "genai_config.json").write_text(json.dumps(config))
    assert not _profile(bundle, device, store)["cached"]


def test_per_layer_key_value_heads_decode_in_genais_loop(tmp_path, genai):
    """genai 0.18 cannot rewind a cache of per-layer shapes in separate buffers: the steps go on from one fill."""
    _, bundle = _bundle(tmp_path, n_kv_head=[2, 1])
    r = _profile(bundle, _device(tmp_path), tmp_path / "s.sqlite")
    assert r["ok"], r["error"]
    assert r["loop"].startswith("onnxruntime-genai") and r["decode_latency_ms"] > 0


def test_a_search_candidate_without_its_bundle_is_timed_in_genais_loop(tmp_path, genai):
    """A search measures bare model files: genai loads them beside the config their bundle would hold."""
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.runners import Runner

    arch = Architecture.from_dict(LLAMA)
    data = export_model(arch, ExportOptions(variant="generate")).to_bytes()
    profile = DeviceProfile(name="gen", sequence=16, context=24, warmup=1, min_runs=3, max_runs=5, max_seconds=1.0,
                            tolerance=0.1, drift_check_every=0)
    with Runner(profile) as runner:
        measurement = runner.measure(data)
    assert measurement.ok, measurement.error
    assert measurement.loop.startswith("onnxruntime-genai") and measurement.decode_latency_ms > 0


def test_a_candidate_whose_weights_are_beside_it_under_another_name_is_timed_in_genais_loop(tmp_path, genai):
    """As a fleet's agent holds a candidate: the model written under a name of its own, its weights in the data
    file the graph names, and genai's folder in another directory; genai reads the weights through that folder."""
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.runners import Runner
    from ltsedge.runners.genai_files import genai_dir

    exported = export_model(Architecture.from_dict(LLAMA), ExportOptions(variant="generate"))
    held = tmp_path / "agent"
    assert sorted(exported.save_files(held / "cand.onnx", digest=False)) == ["cand.onnx", "cand.onnx_data"]
    (held / "cand.onnx").rename(held / "model-sent.onnx")
    folder = genai_dir(held / "model-sent.onnx", tmp_path / "scratch")
    assert (folder / "cand.onnx_data").resolve() == (held / "cand.onnx_data").resolve()
    profile = DeviceProfile(name="gen", sequence=16, context=24, warmup=1, min_runs=3, max_runs=5, max_seconds=1.0,
                            tolerance=0.1, drift_check_every=0)
    with Runner(profile) as runner:
        measurement = runner.measure(held / "model-sent.onnx")
    assert measurement.ok, measurement.error
    assert measurement.loop.startswith("onnxruntime-genai") and measurement.decode_latency_ms > 0


def test_a_bundle_genai_refuses_is_one_line_naming_genais_reason(tmp_path, genai):
    _, bundle = _bundle(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    config = json.loads((broken / "genai_config.json").read_text())
    config["model"]["decoder"]["inputs"]["input_ids"] = "tokens"  # no such input in the graph
    (broken / "genai_config.json").write_text(json.dumps(config))
    from tests.helpers import ltsedge_cli

    store, device = tmp_path / "s.sqlite", _device(tmp_path)
    _profile(bundle, device, store)  # pins the machine's calibration: its line is said once, before
    proc = ltsedge_cli("profile", broken, "--device", device, "--store", store)
    one_line_exit_2(proc, "onnxruntime-genai cannot run the bundle", "Model input was not found: tokens")


def test_genai_required_where_it_cannot_run_is_refused_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(loop, "version", lambda: None)
    assert not loop.genai_runs(DeviceProfile(name="auto"))
    assert loop.loop_label(DeviceProfile(name="auto"), "generate") == "onnxruntime session"
    with pytest.raises(LtsedgeError, match="onnxruntime-genai is not installed"):
        loop.genai_runs(DeviceProfile(name="req", generate_loop="genai"))
    assert not loop.genai_runs(DeviceProfile(name="s", generate_loop="session"))


def test_a_batch_of_several_is_timed_in_a_session(monkeypatch):
    monkeypatch.setattr(loop, "version", lambda: "0.18.0")
    assert loop.genai_runs(DeviceProfile(name="one"))
    assert not loop.genai_runs(DeviceProfile(name="four", batch=4))


def test_an_unknown_loop_is_refused_in_one_line(tmp_path):
    device = tmp_path / "d.toml"
    device.write_text(GENERATE_DEVICE.replace("[workload]", '[workload]\ngenerate_loop = "app"'))
    from tests.helpers import ltsedge_cli

    proc = ltsedge_cli("profile", tmp_path / "missing.onnx", "--device", device)
    one_line_exit_2(proc, "generate_loop", "auto, genai, session")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_preparation_before_a_sample_is_not_timed():
    """A decode step after a rewind: the rewind (10 ms here) is no part of the step's 1 ms."""
    clock = FakeClock()
    calls = []

    def rewind():
        calls.append("rewind")
        clock.now += 0.010

    def step():
        calls.append("step")
        clock.now += 0.001

    settings = DeviceProfile(name="t", warmup=2, min_runs=4, max_runs=4, max_seconds=60.0)
    timed = timing.time_paired(step, None, 0.0, settings, reference_scale=1.0, clock=clock, before_sample=rewind)
    assert timed.model_ms == pytest.approx([1.0] * 4) and timed.runs_per_sample == 1
    assert calls[:4] == ["rewind", "step", "rewind", "step"]  # every run, warm-up too, after its rewind
