"""Bundles other runtimes load unchanged: Hugging Face Optimum's ``ORTModelForCausalLM`` reads a GPT-2, OPT or
Llama bundle's config.json as its own family's (PAR block types, adaptive embeddings and grouped key/value
heads included) and generates the tokens of a plain onnxruntime loop.

Installs nothing: skipped where Optimum is not importable. CI installs it with
``pip install "optimum[onnxruntime]" transformers torch==<the installed torch>`` (the pin keeps pip from
replacing a CPU torch).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.exporters.bundle import export_to_path
from ltsedge.exporters.options import ExportOptions
from tests.helpers import genai_greedy, run_ltsedge, trained_like_weights

optimum_ort = pytest.importorskip("optimum.onnxruntime", reason="Optimum (optimum[onnxruntime]) is not installed")
from transformers import AutoConfig  # noqa: E402 - Optimum's dependency: only once it is known to be there

PROMPT = [5, 17, 99, 3]
STEPS = 12


def arch(backbone="gpt2", n_layer=2, **fields):
    return Architecture(backbone=backbone, n_layer=n_layer, d_model=64, n_head=[4] * n_layer,
                        d_inner=[128, 96, 64][:n_layer], vocab_size=300, n_positions=64, **fields)


# name -> (architecture, its family, the layers holding a KV cache: config.json's standard layer count).
# Equal heads in every layer (the per-layer heads of tests/test_cache_layout.py reach Optimum through the
# uniform cache layout); the FFN widths may differ, Optimum never reads them.
ARCHS = {
    "gpt2": (arch(), "gpt2", 2),
    "opt": (arch("opt"), "opt", 2),
    # PAR: FFN-only layers hold no cache, so the family's layer count counts the caches (cache 0 is the first
    # attention layer, here layer 1).
    "gpt2 PAR, first layer FFN-only": (arch(n_layer=3, block_types=["ffn", "attn_ffn", "attn_ffn"]), "gpt2", 2),
    "opt PAR": (arch("opt", n_layer=3, block_types=["attn_ffn", "ffn", "attn"]), "opt", 2),
    # Adaptive embeddings: inside the graph; nothing Optimum reads differs from a plain GPT-2's.
    "gpt2 adaptive embedding": (arch(d_embed=32, div_val=2), "gpt2", 2),
    # Grouped key/value heads, the same in every layer (Optimum sizes every cache from num_key_value_heads and
    # takes the head size as hidden_size / num_attention_heads), tied and untied output layers.
    "llama GQA": (arch("llama", n_kv_head=[2, 2], rope_theta=100000), "llama", 2),
    "llama untied": (arch("llama", tie_embeddings=False), "llama", 2),
}
FFN_FIELD = {"gpt2": "n_inner", "opt": "ffn_dim", "llama": "intermediate_size"}  # transformers' names

def full_recompute_greedy(model_file, prompt: list[int], steps: int) -> list[int]:
    """Greedy tokens from plain onnxruntime: the whole sequence fed at every step, the caches empty."""
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    ids = list(prompt)
    for _ in range(steps):
        n = len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64),
                 "position_ids": np.arange(n, dtype=np.int64)[None]}
        for past in session.get_inputs()[3:]:  # [batch, heads, past, head size]: no past
            feeds[past.name] = np.zeros((1, past.shape[1], 0, past.shape[3]), np.float32)
        (logits,) = session.run(["logits"], feeds)
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("name", list(ARCHS))
def test_optimum_loads_the_bundle_unchanged_and_generates_the_reference_tokens(tmp_path, name):
    arch, family, caches = ARCHS[name]
    weights, bundle = tmp_path / "w.pt", tmp_path / "bundle"
    trained_like_weights(arch, weights)
    # what `ltsedge export` does, defaults
    export_to_path(arch, bundle, ExportOptions(variant="generate"), weights=weights)
    config = json.loads((bundle / "config.json").read_text())
    assert config["model_type"] == family
    read = AutoConfig.from_pretrained(bundle)  # transformers' own reading of the field names
    assert (read.hidden_size, read.num_hidden_layers, read.num_attention_heads, read.vocab_size) == (64, caches, 4, 300)
    assert config["ltsedge"]["n_layer"] == arch.n_layer
    assert getattr(read, FFN_FIELD[family]) == 128  # layer 0's

    expected = full_recompute_greedy(bundle / "model.onnx", PROMPT, STEPS)
    assert len(set(expected)) > 3  # varied tokens: a model repeating one token would prove little
    assert config["eos_token_id"] not in expected  # generation runs the full STEPS

    model = optimum_ort.ORTModelForCausalLM.from_pretrained(bundle, use_cache=True)
    assert model.use_cache
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         max_new_tokens=STEPS, do_sample=False, num_beams=1)
    assert out[0, len(PROMPT):].tolist() == expected


@pytest.mark.parametrize("options", [dict(target_ort="1.22", graph_form="contrib"), dict(precision="int4"),
                                     dict(target_ort="1.22", graph_form="contrib", precision="int4")],
                         ids=["contrib", "int4", "contrib int4"])
def test_optimum_generates_from_llamas_fused_operators_and_int4(tmp_path, options):
    """The contrib form (GroupQueryAttention, SkipSimplifiedLayerNormalization) and int4 (the tied embedding read
    from the output layer's blocks) are onnxruntime operators Optimum's session runs: the same tokens."""
    arch = ARCHS["llama GQA"][0]
    weights, bundle = tmp_path / "w.pt", tmp_path / "bundle"
    trained_like_weights(arch, weights)
    export_to_path(arch, bundle, ExportOptions(variant="generate", **options), weights=weights)
    expected = full_recompute_greedy(bundle / "model.onnx", PROMPT, STEPS)
    assert len(set(expected)) > 3
    model = optimum_ort.ORTModelForCausalLM.from_pretrained(bundle, use_cache=True)
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         max_new_tokens=STEPS, do_sample=False, num_beams=1)
    assert out[0, len(PROMPT):].tolist() == expected


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("name", ["gpt2", "opt"])
def test_optimum_generates_from_gpt2s_and_opts_fused_attention(tmp_path, name, precision):
    """GPT-2's and OPT's contrib form (GroupQueryAttention over a packed, biased projection; learned positions
    from position_ids) runs in Optimum's session: the same tokens as a plain onnxruntime loop on the file."""
    arch, _, _ = ARCHS[name]
    weights, bundle = tmp_path / "w.pt", tmp_path / "bundle"
    trained_like_weights(arch, weights)
    options = ExportOptions(variant="generate", target_ort="1.22", graph_form="contrib", precision=precision)
    export_to_path(arch, bundle, options, weights=weights)
    expected = full_recompute_greedy(bundle / "model.onnx", PROMPT, STEPS)
    assert len(set(expected)) > 3
    assert optimum_greedy(bundle) == expected


def optimum_greedy(bundle) -> list[int]:
    model = optimum_ort.ORTModelForCausalLM.from_pretrained(bundle, use_cache=True)
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         max_new_tokens=STEPS, do_sample=False, num_beams=1)
    return out[0, len(PROMPT):].tolist()


@pytest.mark.parametrize("form", [[], ["--target-ort", "1.20"]], ids=["default (contrib)", "plain"])
def test_a_llama_with_per_layer_key_value_heads_names_the_layout_optimum_loads(tmp_path, form):
    """Optimum gives every cache config.json's one key/value head count: the default per-layer bundle (2 and 1
    heads) fails there, and export says so in one line; --cache-layout uniform repeats layer 1's head to 2 and
    Optimum (and genai) generate the per-layer bundle's very tokens from it."""
    per_layer_kv = arch("llama", n_kv_head=[2, 1], head_dim=16)
    weights, arch_json = tmp_path / "w.pt", tmp_path / "arch.json"
    trained_like_weights(per_layer_kv, weights)
    arch_json.write_text(per_layer_kv.to_json())

    def export(out, *extra):
        proc = run_ltsedge("export", arch_json, "--variant", "generate", "--weights", weights, *form, *extra,
                           "-o", out)
        assert proc.returncode == 0, proc.stderr
        return [line for line in proc.stdout.splitlines() if line.startswith("note:")]

    notes = export(tmp_path / "default")
    assert len(notes) == 1 and "Optimum's ORTModelForCausalLM cannot load this bundle" in notes[0]
    assert "--cache-layout uniform" in notes[0]
    expected = full_recompute_greedy(tmp_path / "default" / "model.onnx", PROMPT, STEPS)
    assert len(set(expected)) > 3
    with pytest.raises(Exception, match="invalid dimensions"):  # what the note says
        optimum_greedy(tmp_path / "default")

    assert export(tmp_path / "uniform", "--cache-layout", "uniform") == []
    config = json.loads((tmp_path / "uniform" / "config.json").read_text())
    assert (config["num_key_value_heads"], config["ltsedge"]["n_kv_head_per_layer"]) == (2, [2, 1])
    session = ort.InferenceSession(str(tmp_path / "uniform" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [tuple(i.shape[1:]) for i in session.get_inputs()[3:]] == [(2, "past_sequence", 16)] * 4
    assert optimum_greedy(tmp_path / "uniform") == expected
    if importlib.util.find_spec("onnxruntime_genai"):
        assert genai_greedy(tmp_path / "uniform", PROMPT, STEPS)[0] == expected
