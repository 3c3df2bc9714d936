"""The KV-cache layout of the generate variant (``ltsedge.backbones.kv_cache``): per-layer heads, or one
uniform layout ``[batch, H, past, d_model / H]`` that the graph regroups into each layer's heads.

With per-layer heads, the uniform graph equals the PyTorch reference (logits, and presents re-mapped to
the uniform layout), its cached greedy loop equals the uncached reference, onnxruntime-genai and
Optimum (which size every layer's empty cache from config.json's one head count) generate the
reference's tokens. Models with equal heads export the same bytes in both layouts (tests/test_pins.py).
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.backbones.kv_cache import cache_layers, uniform_heads
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import write_bundle
from ltsedge.exporters.genai import genai_config, hf_config
from ltsedge.exporters.optimum import optimum_note
from ltsedge.exporters.options import ExportOptions
from ltsedge.generation import greedy
from tests.helpers import exported, genai_greedy, prompts, reference_greedy, reference_tokens, trained_like_weights

CPU = ["CPUExecutionProvider"]
ARCHS = {
    # H = 8 (the most heads): the other layers' heads divide it
    "gpt2": Architecture(n_layer=3, d_model=64, n_head=[2, 8, 4], d_inner=[128, 256, 96], vocab_size=300,
                         n_positions=64),
    # H = 6: 3 and 2 heads divide it, 4 does not (the cache is regrouped for that layer)
    "gpt2-d96": Architecture(n_layer=4, d_model=96, n_head=[4, 6, 3, 2], d_inner=[64, 96, 128, 64], vocab_size=300,
                             n_positions=64),
    # H = 8, layer 0's
    "opt": Architecture(backbone="opt", n_layer=3, d_model=64, n_head=[8, 2, 4], d_inner=[128, 96, 64],
                        vocab_size=300, n_positions=64),
    # PAR: layer 0 is FFN-only (no cache): its 16 heads are no cache's, H is layer 2's 8
    "gpt2-par": Architecture(n_layer=4, d_model=64, n_head=[16, 4, 8, 2], d_inner=[128, 96, 64, 80], vocab_size=300,
                             n_positions=64, block_types=["ffn", "attn_ffn", "attn", "attn_ffn"]),
    "opt-par": Architecture(backbone="opt", n_layer=3, d_model=64, n_head=[2, 8, 4], d_inner=[128, 96, 64],
                            vocab_size=300, n_positions=64, block_types=["attn", "ffn", "attn_ffn"]),
}


def uniform(cache: torch.Tensor, heads: int) -> np.ndarray:
    """A PyTorch cache ``[B, n, S, d/n]`` in the uniform layout ``[B, heads, S, d/heads]``: a token's features
    in order, regrouped."""
    b, n, s, dh = cache.shape
    tokens = cache.transpose(1, 2).reshape(b, s, n * dh)
    return tokens.reshape(b, s, heads, n * dh // heads).transpose(1, 2).numpy()


def uniform_session(arch, model) -> ort.InferenceSession:
    exported_model = export_model(arch, ExportOptions(variant="generate", cache_layout="uniform"),
                                  weights=model.state_dict())
    return ort.InferenceSession(exported_model.to_bytes(), providers=CPU)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_uniform_graph_equals_pytorch_with_its_caches_remapped(name):
    arch = ARCHS[name]
    _, model = exported(arch, seed=1)
    session = uniform_session(arch, model)
    H = uniform_heads(arch)
    assert {i.shape[1] for i in session.get_inputs()[3:]} == {H}  # every cache in H heads
    assert len({arch.n_head[i] for i in cache_layers(arch)}) > 1  # ... though the layers' own heads differ
    prompt, mask = prompts(arch, 2, 6, seed=2)  # the second prompt left-padded
    outputs = ["logits"] + [o.name for o in session.get_outputs()[1:]]
    past, torch_past, feeds = None, None, {}
    for ids, new_mask in ((prompt[:, :5], mask[:, :5]), (prompt[:, 5:], mask)):  # prefill, then a step
        positions = np.clip(np.cumsum(new_mask, axis=1) - 1, 0, None)[:, -ids.shape[1]:]
        with torch.no_grad():
            logits, torch_past = model.forward_with_cache(torch.from_numpy(ids), torch.from_numpy(new_mask),
                                                          torch.from_numpy(positions), torch_past)
        feeds = {"input_ids": ids, "attention_mask": new_mask, "position_ids": positions}
        for i in range(len(cache_layers(arch))):
            for j, kind in enumerate(("key", "value")):
                feeds[f"past_key_values.{i}.{kind}"] = (np.zeros((2, H, 0, arch.d_model // H), np.float32)
                                                        if past is None else past[2 * i + j])
        got = session.run(outputs, feeds)
        np.testing.assert_allclose(got[0], logits.numpy(), atol=1e-4)
        want = [uniform(t, H) for kv in torch_past for t in kv]
        assert len(got[1:]) == len(want)
        for g, w in zip(got[1:], want):
            np.testing.assert_allclose(g, w, atol=1e-5)
        past = want  # the next step reads PyTorch's cache, re-mapped


@pytest.mark.parametrize("layout", ["uniform", "per-layer"])
@pytest.mark.parametrize("name", sorted(ARCHS))
def test_cached_greedy_equals_the_uncached_reference_in_both_layouts(name, layout):
    arch = ARCHS[name]
    _, model = exported(arch, seed=4)
    session = ort.InferenceSession(export_model(arch, ExportOptions(variant="generate", cache_layout=layout),
                                                weights=model.state_dict()).to_bytes(), providers=CPU)
    prompt, mask = prompts(arch, 2, 6, seed=5)
    got = greedy(session, prompt, 10, mask)
    want_tokens, want_logits = reference_greedy(model, prompt, mask, 10)
    np.testing.assert_array_equal(got.tokens, want_tokens)
    assert max(np.abs(a - b).max() for a, b in zip(got.logits, want_logits)) <= 1e-3


@pytest.mark.parametrize("name", ["gpt2", "opt", "gpt2-par"])
def test_onnxruntime_genai_generates_the_reference_tokens_from_the_uniform_bundle(tmp_path, name):
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    arch = ARCHS[name]
    _, model = exported(arch, seed=3)
    write_bundle(export_model(arch, ExportOptions(variant="generate", cache_layout="uniform"),
                              weights=model.state_dict()), tmp_path)
    config = json.loads((tmp_path / "genai_config.json").read_text())["model"]["decoder"]
    H = uniform_heads(arch)
    assert (config["num_key_value_heads"], config["head_size"]) == (H, arch.d_model // H)
    prompt = [5, 17, 99, 3, 250]
    tokens, _ = genai_greedy(tmp_path, prompt, 10)
    assert tokens == reference_tokens(model, prompt, 10)


@pytest.mark.parametrize("name", ["gpt2", "opt"])
def test_optimum_loads_the_bundle_unchanged_and_generates_the_reference_tokens(tmp_path, name):
    """Optimum sizes every layer's empty cache [batch, n_head, 0, d_model / n_head] from config.json:
    with per-layer heads only the uniform layout matches every layer. The default (per layer) says so in one
    line naming the layout it loads."""
    optimum_ort = pytest.importorskip("optimum.onnxruntime", reason="Optimum is not installed")
    prompt, steps = [5, 17, 99, 3], 12  # tests/test_runtimes.py's
    arch = ARCHS[name]
    trained_like_weights(arch, tmp_path / "w.pt")
    state = torch.load(tmp_path / "w.pt")
    model = get_backbone(arch.backbone).build_model(arch)
    model.load_state_dict(state)
    note = optimum_note(export_model(arch, ExportOptions(variant="generate"), weights=state))  # the default
    assert "cannot load this bundle" in note and "--cache-layout uniform exports one it loads" in note
    uniform = export_model(arch, ExportOptions(variant="generate", cache_layout="uniform"), weights=state)
    assert optimum_note(uniform) is None
    write_bundle(uniform, tmp_path / "bundle")
    config = json.loads((tmp_path / "bundle" / "config.json").read_text())
    assert config["model_type"] == arch.backbone
    H = uniform_heads(arch)
    assert config["n_head" if name == "gpt2" else "num_attention_heads"] == H
    expected = reference_tokens(model, prompt, steps)
    assert len(set(expected)) > 3  # varied tokens: a model repeating one token would prove little

    optimum_model = optimum_ort.ORTModelForCausalLM.from_pretrained(tmp_path / "bundle", use_cache=True)
    out = optimum_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=steps, do_sample=False, num_beams=1)
    assert out[0, len(prompt):].tolist() == expected


def test_the_default_layout_is_per_layer_and_the_uniform_one_declares_h_heads_everywhere():
    arch = ARCHS["gpt2-par"]  # H = 8: layer 2's, the most of any layer with a cache (layer 0's 16 have none)
    assert {get_backbone(name).default_cache_layout for name in ("gpt2", "opt", "llama")} == {"per-layer"}
    uniform = export_model(arch, ExportOptions(variant="generate", cache_layout="uniform"))
    assert uniform.cache_layout == "uniform"
    assert {t.dims for t in uniform.spec.input("past")} == {("batch_size", 8, "past_sequence", 8)}
    assert {t.dims for t in uniform.spec.output("present")} == {("batch_size", 8, "total_sequence", 8)}
    per_layer = export_model(arch, ExportOptions(variant="generate"))
    assert per_layer.cache_layout == "per-layer"
    assert [t.dims[1] for t in per_layer.spec.input("past")] == [4, 4, 8, 8, 2, 2]
    assert export_model(arch).cache_layout is None  # forward: no cache


def test_configs_say_the_layout_and_h():
    arch = ARCHS["gpt2-par"]
    config = hf_config(arch, cache_layout="uniform")
    assert config["n_head"] == 8  # H, not layer 0's 16 heads (an FFN-only layer's)
    assert {k: config["ltsedge"][k] for k in ("cache_layout", "cache_heads", "cache_head_dim")} == {
        "cache_layout": "uniform", "cache_heads": 8, "cache_head_dim": 8}
    assert config["ltsedge"]["n_head_per_layer"] == [16, 4, 8, 2]  # every layer's own heads still said
    per_layer = hf_config(arch)  # the default
    assert (per_layer["ltsedge"]["cache_layout"], per_layer["ltsedge"]["cache_heads"], per_layer["n_head"]) == (
        "per-layer", 4, 4)  # the first cache's (layer 1's) heads
    opt = hf_config(ARCHS["opt"], cache_layout="uniform")
    assert opt["num_attention_heads"] == 8 and opt["ltsedge"]["cache_heads"] == 8
    spec = export_model(arch, ExportOptions(variant="generate", cache_layout="uniform")).spec
    genai = genai_config(arch, spec, "model.onnx")["model"]["decoder"]
    assert (genai["num_attention_heads"], genai["num_key_value_heads"], genai["head_size"]) == (8, 8, 8)
    assert "cache_layout" not in hf_config(Architecture(backbone="transfo_xl", n_layer=1, d_model=64, n_head=[2],
                                                        d_inner=[64], vocab_size=100))["ltsedge"]


def test_the_store_key_names_the_layout_only_where_it_changes_the_graph():
    def key(arch, variant="generate", layout=None):
        return ExportOptions(variant=variant, cache_layout=layout).model_key(arch)

    heterogeneous, equal = ARCHS["gpt2"], Architecture(n_layer=2, d_model=64, n_head=[4, 4], d_inner=[64, 64],
                                                       vocab_size=300, n_positions=64)
    per_layer = key(heterogeneous, layout="per-layer")
    assert "cache=" not in per_layer  # the graph every generate key has always meant
    assert key(heterogeneous, layout="uniform") == per_layer.replace(":data=", ":cache=uniform:data=")  # sorted
    assert key(heterogeneous) == per_layer  # the default
    for layout in (None, "uniform", "per-layer"):
        assert "cache=" not in key(equal, layout=layout)
        assert "cache=" not in key(heterogeneous, "forward", layout)  # forward


def test_an_unknown_layout_is_a_one_line_error():
    arch = ARCHS["gpt2"]
    for call in (lambda: export_model(arch, ExportOptions(variant="generate", cache_layout="packed")),
                 lambda: ExportOptions(variant="generate", cache_layout="packed").model_key(arch)):
        with pytest.raises(LtsedgeError, match=r"cache layout 'packed' is unknown \(layouts: per-layer, uniform\)"):
            call()


def test_a_layer_whose_heads_divide_h_reads_the_cached_values_without_a_copy():
    """The cost of the layout at decode: each layer's values are read through a view (Reshape) or as they are,
    never transposed; the keys get one Transpose, as in the per-layer graph."""
    import onnx

    arch = ARCHS["gpt2"]  # 2, 8, 4 heads; H = 8
    proto = onnx.load_from_string(export_model(arch, ExportOptions(variant="generate", cache_layout="uniform"))
                                  .to_bytes())
    for i in range(3):
        readers = {kind: [n.op_type for n in proto.graph.node if f"present.{i}.{kind}" in n.input]
                   for kind in ("key", "value")}
        assert readers == ({"key": ["Transpose"], "value": ["MatMul"]} if arch.n_head[i] == 8 else
                           {"key": ["Reshape"], "value": ["Reshape"]}), i


def test_export_cache_layout_option_reaches_the_graph_and_the_bundles_config(tmp_path):
    import subprocess
    import sys

    arch_file = tmp_path / "arch.json"
    arch_file.write_text(Architecture(n_layer=3, d_model=64, n_head=[2, 8, 4], d_inner=[128] * 3, vocab_size=100,
                                      n_positions=32).to_json())
    heads = {}
    for layout in ("per-layer", "uniform"):
        proc = subprocess.run([sys.executable, "-m", "ltsedge", "export", str(arch_file), "--variant", "generate",
                               "--cache-layout", layout, "-o", str(tmp_path / layout)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        config = json.loads((tmp_path / layout / "config.json").read_text())
        assert config["ltsedge"]["cache_layout"] == layout
        session = ort.InferenceSession(str(tmp_path / layout / "model.onnx"), providers=["CPUExecutionProvider"])
        heads[layout] = [i.shape[1] for i in session.get_inputs() if i.name.startswith("past_key_values")][::2]
    assert heads == {"per-layer": [2, 8, 4], "uniform": [8, 8, 8]}
    proc = subprocess.run([sys.executable, "-m", "ltsedge", "export", str(arch_file), "--variant", "generate",
                           "--cache-layout", "diagonal", "-o", str(tmp_path / "x")], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "diagonal" in proc.stderr
