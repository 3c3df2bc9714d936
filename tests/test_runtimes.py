"""Bundles other runtimes load unchanged: Hugging Face Optimum's ``ORTModelForCausalLM`` reads a GPT-2 or
OPT bundle's config.json as its own family's and generates the tokens of a plain onnxruntime loop.

Installs nothing: skipped where Optimum is not importable. CI installs it with
``pip install "optimum[onnxruntime]" transformers torch==<the installed torch>`` (the pin keeps pip from
replacing a CPU torch).
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.exporters.bundle import export_to_path

optimum_ort = pytest.importorskip("optimum.onnxruntime", reason="Optimum (optimum[onnxruntime]) is not installed")
from transformers import AutoConfig  # noqa: E402 - Optimum's dependency: only once it is known to be there

PROMPT = [5, 17, 99, 3]
STEPS = 12
# Equal heads in every layer (the per-layer heads of tests/test_cache_layout.py reach Optimum through the
# uniform cache layout); the FFN widths may differ, Optimum never reads them.
ARCHS = {
    "gpt2": Architecture(backbone="gpt2", n_layer=2, d_model=64, n_head=[4, 4], d_inner=[128, 96], vocab_size=300,
                         n_positions=64),
    "opt": Architecture(backbone="opt", n_layer=2, d_model=64, n_head=[4, 4], d_inner=[128, 96], vocab_size=300,
                        n_positions=64),
}


def trained_like_weights(arch, path) -> None:
    """The reference model's random initial weights, scaled up: a random init predicts one token over
    and over, trained weights (like these) a varied sequence."""
    model = get_backbone(arch.backbone).build_model(arch, seed=1)
    torch.save({name: tensor * 8 for name, tensor in model.state_dict().items()}, path)


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


@pytest.mark.parametrize("family", sorted(ARCHS))
def test_optimum_loads_the_bundle_unchanged_and_generates_the_reference_tokens(tmp_path, family):
    arch = ARCHS[family]
    weights, bundle = tmp_path / "w.pt", tmp_path / "bundle"
    trained_like_weights(arch, weights)
    export_to_path(arch, bundle, variant="generate", weights=weights)  # what `ltsedge export` does, defaults
    config = json.loads((bundle / "config.json").read_text())
    assert config["model_type"] == family
    read = AutoConfig.from_pretrained(bundle)  # transformers' own reading of the field names
    assert (read.hidden_size, read.num_hidden_layers, read.num_attention_heads, read.vocab_size) == (64, 2, 4, 300)
    assert (read.n_inner if family == "gpt2" else read.ffn_dim) == 128  # layer 0's

    expected = full_recompute_greedy(bundle / "model.onnx", PROMPT, STEPS)
    assert len(set(expected)) > 3  # varied tokens: a model repeating one token would prove little
    assert config["eos_token_id"] not in expected  # generation runs the full STEPS

    model = optimum_ort.ORTModelForCausalLM.from_pretrained(bundle, use_cache=True)
    assert model.use_cache
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         max_new_tokens=STEPS, do_sample=False, num_beams=1)
    assert out[0, len(PROMPT):].tolist() == expected
