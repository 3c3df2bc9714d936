"""The deployable bundle: `ltsedge export --variant generate` with trained weights, run by onnxruntime-genai
(its Python API, as an app would) with the reference's greedy tokens; bad --weights/--tokenizer input."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.exporters import export_model
from ltsedge.exporters.genai import genai_config, hf_config
from ltsedge.exporters.options import ExportOptions
from ltsedge.generation import greedy
from tests.conftest import tiny_arch
from tests.helpers import genai_greedy, one_line_exit_2, reference_tokens, run_ltsedge

HETEROGENEOUS = Architecture(n_layer=3, d_model=64, n_head=[2, 8, 4], d_inner=[128, 256, 96], vocab_size=300,
                             n_positions=96)


def trained_like(arch, path, seed=0, suffix=".pt"):
    """A state_dict with weights far from the init (as training leaves them), saved as a user would."""
    model = get_backbone(arch.backbone).build_model(arch)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.dim() > 1 else 0.2))
    state = model.state_dict()
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    return model


def arch_file(tmp_path, arch):
    path = tmp_path / "arch.json"
    path.write_text(arch.to_json())
    return path


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_bundle_with_trained_weights_matches_the_reference(tmp_path, suffix):
    weights = tmp_path / f"w{suffix}"
    model = trained_like(HETEROGENEOUS, weights, suffix=suffix)
    proc = run_ltsedge("export", arch_file(tmp_path, HETEROGENEOUS), "--variant", "generate", "--weights", weights,
                       "-o", tmp_path / "bundle")
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "bundle"
    assert {p.name for p in bundle.iterdir()} == {"model.onnx", "model.onnx_data", "genai_config.json", "config.json",
                                                 "generation_config.json", ".ltsedge-manifest.json"}
    assert sorted(json.loads((bundle / ".ltsedge-manifest.json").read_text())["files"]) == [
        "config.json", "genai_config.json", "generation_config.json", "model.onnx",
        "model.onnx_data"]  # what ltsedge may overwrite
    config = json.loads((bundle / "config.json").read_text())
    # the weights beside the graph, where transformers.js looks for them only when told
    assert config["transformers.js_config"] == {"use_external_data_format": {"model.onnx": 1}}
    assert config["ltsedge"]["n_head_per_layer"] == [2, 8, 4]
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_modelmeta().custom_metadata_map["ltsedge.weights"] == "trained"
    prompt = [5, 17, 99, 3, 250]
    got = greedy(session, np.array([prompt]), 12).tokens[0].tolist()
    assert got == reference_tokens(model, prompt, 12)


@pytest.mark.slow
def test_onnxruntime_genai_generates_the_reference_tokens(tmp_path):
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    weights = tmp_path / "w.pt"
    model = trained_like(HETEROGENEOUS, weights, seed=3)
    assert run_ltsedge("export", arch_file(tmp_path, HETEROGENEOUS), "--variant", "generate", "--weights", weights,
                       "-o", tmp_path / "bundle").returncode == 0
    session = ort.InferenceSession(str(tmp_path / "bundle" / "model.onnx"), providers=["CPUExecutionProvider"])
    for prompt in ([5, 17, 99, 3, 250], [1, 2]):
        tokens, logits = genai_greedy(tmp_path / "bundle", prompt, 10)
        ours = greedy(session, np.array([prompt]), 10)
        for step in range(10):
            np.testing.assert_allclose(logits[step], ours.logits[step][0], atol=1e-3)
        assert tokens == ours.tokens[0].tolist() == reference_tokens(model, prompt, 10)


def test_a_bundles_weights_go_inline_only_when_asked_and_a_data_file_of_ours_goes_with_them(tmp_path):
    """By default the weights are in model.onnx_data (onnxruntime holds a model read with inline weights larger);
    --inline-data into the same directory leaves no data file of an earlier export of ours behind (one of
    an earlier version's name, model.onnx.data, included), and both bundles compute the same."""
    arch, bundle = arch_file(tmp_path, HETEROGENEOUS), tmp_path / "b"
    assert run_ltsedge("export", arch, "--variant", "generate", "-o", bundle).returncode == 0
    prompt = np.array([[5, 17, 99, 3]])
    external = greedy(ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"]), prompt, 6)
    assert (bundle / "model.onnx").stat().st_size < 50_000 < (bundle / "model.onnx_data").stat().st_size
    manifest = bundle / ".ltsedge-manifest.json"
    recorded = json.loads(manifest.read_text())
    recorded["files"].append("model.onnx.data")  # as an earlier version named it
    manifest.write_text(json.dumps(recorded))
    (bundle / "model.onnx.data").write_bytes((bundle / "model.onnx_data").read_bytes())
    (bundle / "notes.txt").write_text("the user's")
    assert run_ltsedge("export", arch, "--variant", "generate", "--inline-data", "-o", bundle).returncode == 0
    assert sorted(p.name for p in bundle.glob("model.onnx*")) == ["model.onnx"]
    assert (bundle / "notes.txt").read_text() == "the user's"
    assert "transformers.js_config" not in json.loads((bundle / "config.json").read_text())
    inline = greedy(ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"]), prompt, 6)
    np.testing.assert_array_equal(inline.tokens, external.tokens)
    np.testing.assert_array_equal(inline.logits, external.logits)


def test_tokenizer_goes_into_the_bundle_and_names_the_special_tokens(tmp_path):
    tokenizer = tmp_path / "tok" / "tokenizer.json"
    tokenizer.parent.mkdir()
    tokenizer.write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []},
                                     "added_tokens": [{"id": 299, "content": "<|endoftext|>", "special": True}]}))
    (tokenizer.parent / "tokenizer_config.json").write_text("{}")
    proc = run_ltsedge("export", arch_file(tmp_path, HETEROGENEOUS), "--variant", "generate", "--tokenizer", tokenizer,
                       "-o", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b" / "tokenizer.json").read_bytes() == tokenizer.read_bytes()
    assert (tmp_path / "b" / "tokenizer_config.json").is_file()
    genai = json.loads((tmp_path / "b" / "genai_config.json").read_text())
    assert genai["model"]["eos_token_id"] == 299 and genai["model"]["pad_token_id"] == 299


def test_bad_weights_and_tokenizer_are_one_line_exit_2(tmp_path):
    arch = arch_file(tmp_path, HETEROGENEOUS)
    other = Architecture(n_layer=3, d_model=64, n_head=[2, 8, 4], d_inner=[128, 128, 96], vocab_size=300,
                         n_positions=96)
    trained_like(other, tmp_path / "other.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a pickle at all")
    torch.save({"h.0.attn.c_attn.weight": torch.zeros(3)}, tmp_path / "partial.pt")
    (tmp_path / "tokenizer.json").write_text("{ nope")
    cases = [
        (["--weights", tmp_path / "missing.pt"], "weights file not found"),
        (["--weights", tmp_path / "other.pt"], "tensor 'h.1.mlp.c_fc.weight' has shape [128, 64], the architecture needs [256, 64]"),
        (["--weights", tmp_path / "junk.pt"], "cannot be read"),
        (["--weights", tmp_path / "partial.pt"], "tensor 'wte.weight' is missing"),
        (["--weights", arch], "expected a PyTorch state_dict"),
        (["--tokenizer", tmp_path / "tokenizer.json"], "is not a tokenizer.json"),
        (["--tokenizer", tmp_path / "nope" / "tokenizer.json"], "tokenizer file not found"),
    ]
    for extra, message in cases:
        proc = run_ltsedge("export", arch, "--variant", "generate", "-o", tmp_path / "out", *extra)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_config_json_is_the_hugging_face_familys_where_its_reading_is_true():
    """GPT-2, OPT and Llama models get their family's model_type and transformers' field names (Optimum loads
    them: tests/test_runtimes.py), adaptive embeddings, PAR layers and grouped key/value heads included;
    Transformer-XL and a model without attention (no KV cache) keep ltsedge's own."""
    gpt2 = hf_config(HETEROGENEOUS, cache_layout="uniform")  # the layout Optimum loads: every cache in 8 heads
    assert (gpt2["model_type"], gpt2["architectures"]) == ("gpt2", ["GPT2LMHeadModel"])
    assert hf_config(HETEROGENEOUS)["n_head"] == 2  # the default, per layer: the first cache's own heads
    assert {k: gpt2[k] for k in ("n_embd", "n_layer", "n_head", "n_inner", "n_positions", "vocab_size")} == {
        "n_embd": 64, "n_layer": 3, "n_head": 8, "n_inner": 128, "n_positions": 96, "vocab_size": 300}
    assert gpt2["ltsedge"]["n_head_per_layer"] == [2, 8, 4] and gpt2["ltsedge"]["d_inner_per_layer"] == [128, 256, 96]
    opt = hf_config(tiny_arch(backbone="opt", n_head=[4, 4]))
    assert (opt["model_type"], opt["architectures"]) == ("opt", ["OPTForCausalLM"])
    assert {k: opt[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim",
                                "max_position_embeddings", "word_embed_proj_dim", "do_layer_norm_before",
                                "activation_function")} == {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_dim": 128,
        "max_position_embeddings": 64, "word_embed_proj_dim": 64, "do_layer_norm_before": True,
        "activation_function": "relu"}
    assert "n_embd" not in opt
    # Adaptive embeddings and PAR layers are their family's as runtimes read it; the layer count counts caches.
    family = {"adaptive": (tiny_arch(d_embed=32, div_val=2), "n_layer", 2),
              "narrow embedding": (tiny_arch(d_embed=32), "n_layer", 2),
              "PAR": (tiny_arch(block_types=["attn_ffn", "ffn"]), "n_layer", 1),
              "PAR opt, first layer FFN-only": (
                  tiny_arch(backbone="opt", n_layer=3, n_head=[4, 4, 4], d_inner=[64, 64, 64],
                            block_types=["ffn", "attn", "attn_ffn"]), "num_hidden_layers", 2)}
    for name, (arch, count, caches) in family.items():
        config = hf_config(arch)
        assert config["model_type"] == arch.backbone, name
        assert (config[count], config["ltsedge"]["n_layer"]) == (caches, arch.n_layer), name
        assert config["ltsedge"]["cache_layers"] == list(arch.attention_layers), name
        assert config["ltsedge"]["architecture"] == arch.to_dict(), name
    # Llama: transformers' LlamaConfig names, the output layer's tying and layer 0's grouping; genai's llama type
    # with the first cache's key/value heads and head size as the graph declares them.
    llama_arch = tiny_arch(backbone="llama", n_head=[8, 4], n_kv_head=[2, 4], head_dim=16, tie_embeddings=False,
                           rope_theta=100000)
    llama = hf_config(llama_arch)
    assert (llama["model_type"], llama["architectures"]) == ("llama", ["LlamaForCausalLM"])
    assert {k: llama[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                  "head_dim", "intermediate_size", "max_position_embeddings", "rope_theta",
                                  "rms_norm_eps", "tie_word_embeddings", "vocab_size")} == {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 64, "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "vocab_size": 500}
    assert llama["ltsedge"]["n_kv_head_per_layer"] == [2, 4] and "n_kv_head_per_layer" not in gpt2["ltsedge"]
    spec = export_model(llama_arch, ExportOptions(variant="generate")).spec
    genai = genai_config(llama_arch, spec, "model.onnx")["model"]
    decoder = genai["decoder"]
    assert genai["type"] == "llama"
    assert {k: decoder[k] for k in ("num_attention_heads", "num_key_value_heads", "head_size", "hidden_size")} == {
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_size": 16, "hidden_size": 64}
    own = {"transfo_xl": tiny_arch(backbone="transfo_xl"),
           "PAR without attention": tiny_arch(block_types=["ffn", "ffn"])}
    for name, arch in own.items():
        config = hf_config(arch)
        assert config["model_type"] == f"ltsedge-{arch.backbone}", name
        assert config["n_layer"] == arch.n_layer, name
        assert config["ltsedge"]["architecture"] == arch.to_dict(), name


def llama(**fields):
    return Architecture(**{**dict(backbone="llama", n_layer=2, d_model=64, n_head=[4, 4], d_inner=[128, 96],
                                  vocab_size=300, n_positions=64), **fields})


@pytest.mark.parametrize("arch, why", [
    (llama(n_head=[4, 6], n_kv_head=[4, 2], head_dim=16),
     "its key/value heads repeat to 4 in every layer, which layer 1's 6 query heads cannot share"),
    (llama(d_model=96, n_head=[4, 6], n_kv_head=[2, 2]), "its layers' head sizes differ ([16, 24])")])
def test_a_llama_with_no_uniform_cache_layout_is_refused_it_and_the_note_offers_none(tmp_path, arch, why):
    """Optimum sizes every cache alike; a Llama whose caches cannot all be one shape is refused the uniform
    layout in one line, nothing written, and its default bundle's note names no layout."""
    proc = run_ltsedge("export", arch_file(tmp_path, arch), "--variant", "generate", "--cache-layout", "uniform",
                       "-o", tmp_path / "uniform")
    one_line_exit_2(proc, f"no uniform cache layout for this model: {why}")
    assert not (tmp_path / "uniform").exists()
    proc = run_ltsedge("export", arch_file(tmp_path, arch), "--variant", "generate", "-o", tmp_path / "default")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note:")]
    assert proc.returncode == 0 and len(notes) == 1, proc.stdout
    assert "Optimum's ORTModelForCausalLM cannot load this bundle" in notes[0] and "--cache-layout" not in notes[0]
    equal = llama(n_kv_head=[2, 2], head_dim=16)  # caches alike: Optimum loads it (tests/test_runtimes.py)
    proc = run_ltsedge("export", arch_file(tmp_path, equal), "--variant", "generate", "-o", tmp_path / "equal")
    assert proc.returncode == 0 and "note:" not in proc.stdout, proc.stdout
