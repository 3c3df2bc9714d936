"""Bundles transformers.js (Node) loads unchanged: examples/generate.mjs reads a GPT-2, OPT, Llama, per-layer-heads,
PAR or adaptive-embedding bundle as `ltsedge export --variant generate` writes it and generates the tokens
of a plain onnxruntime loop, batch 1 and batch 2 left-padded, with the empty caches it sizes itself and
with transformers.js's own.

Installs nothing: skipped without ``node`` or without $LTSEDGE_TRANSFORMERSJS_DIR, a folder whose
node_modules holds @huggingface/transformers. CI makes one with
``mkdir -p DIR && cd DIR && npm init -y && ONNXRUNTIME_NODE_INSTALL=skip npm install @huggingface/transformers``
(the skip: onnxruntime-node's post-install fetches CUDA binaries; its CPU ones are in the npm package).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import export_to_path, write_bundle
from ltsedge.exporters.options import ExportOptions
from ltsedge.exporters.trained_weights import load_state_dict

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "generate.mjs"
PACKAGE_DIR = os.environ.get("LTSEDGE_TRANSFORMERSJS_DIR")
if shutil.which("node") is None:
    pytest.skip("node is not installed", allow_module_level=True)
if not PACKAGE_DIR:
    pytest.skip("LTSEDGE_TRANSFORMERSJS_DIR is unset (a folder whose node_modules has @huggingface/transformers)",
                allow_module_level=True)
if not (Path(PACKAGE_DIR) / "node_modules" / "@huggingface" / "transformers" / "package.json").is_file():
    pytest.skip(f"LTSEDGE_TRANSFORMERSJS_DIR={PACKAGE_DIR} has no node_modules/@huggingface/transformers",
                allow_module_level=True)

PROMPTS = [[5, 17, 99, 3], [8, 42]]  # the second left-padded to the first's length in batch 2
PAD = 0
STEPS = 12


def arch(backbone="gpt2", n_head=(4, 4), **fields):
    n_layer = len(n_head)
    return Architecture(backbone=backbone, n_layer=n_layer, d_model=64, n_head=list(n_head),
                        d_inner=[128, 96, 64][:n_layer], vocab_size=300, n_positions=64, **fields)


# name -> (architecture, cache layout (None: ltsedge export's default))
BUNDLES = {
    "gpt2": (arch(), None),
    "opt": (arch("opt"), None),
    # Per-layer heads: transformers.js sizes each cache from the ONNX input's own static heads, so both layouts run.
    "gpt2 heads 2/8/4, uniform cache": (arch(n_head=(2, 8, 4)), None),
    "gpt2 heads 2/8/4, per-layer cache": (arch(n_head=(2, 8, 4)), "per-layer"),
    # PAR and adaptive embeddings: config.json says their family (tests/test_bundle.py), its layer count the
    # caches' (FFN-only layers have none), so transformers.js reads them unchanged.
    "PAR gpt2": (arch(n_head=(4, 4, 4), block_types=["attn_ffn", "ffn", "attn_ffn"]), None),
    "PAR gpt2, first layer FFN-only": (arch(n_head=(4, 4, 4), block_types=["ffn", "attn_ffn", "attn"]), None),
    "PAR opt": (arch("opt", block_types=["attn_ffn", "attn"]), None),
    "adaptive gpt2": (arch(d_embed=32, div_val=2), None),
    # Grouped key/value heads: transformers.js reads num_key_value_heads and head_dim, and each cache's static
    # heads and head size from the ONNX input, so per-layer key/value heads and a head size of the model's own
    # (attention 64, 128 and 32 wide) load too.
    "llama GQA": (arch("llama", n_kv_head=(2, 2), rope_theta=100000), None),
    "llama per-layer key/value heads, untied": (arch("llama", n_head=(4, 8, 2), n_kv_head=(2, 2, 1), head_dim=16,
                                                     tie_embeddings=False), None),
}


def make_bundle(tmp_path, name, tokenizer=None) -> Path:
    """The bundle `ltsedge export --variant generate --weights W` writes, W the reference model's random
    initial weights scaled up: a random init predicts one token over and over, trained weights a varied
    sequence."""
    model_arch, layout = BUNDLES[name]
    weights, bundle = tmp_path / "w.pt", tmp_path / "bundle"
    model = get_backbone(model_arch.backbone).build_model(model_arch, seed=1)
    torch.save({key: tensor * 8 for key, tensor in model.state_dict().items()}, weights)
    if layout is None:
        export_to_path(model_arch, bundle, ExportOptions(variant="generate"), weights=weights, tokenizer=tokenizer)
    else:  # no CLI option for the layout (yet): the API's
        write_bundle(export_model(model_arch, ExportOptions(variant="generate", cache_layout=layout),
                                  weights=load_state_dict(weights)), bundle)
    return bundle


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


def node_generate(bundle, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "LTSEDGE_TRANSFORMERSJS_DIR": PACKAGE_DIR}
    return subprocess.run(["node", str(SCRIPT), str(bundle), *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=PACKAGE_DIR, timeout=300)


def generated(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def left_padded(prompts):
    width = max(map(len, prompts))
    return [",".join(map(str, [PAD] * (width - len(p)) + p)) for p in prompts]


@pytest.mark.parametrize("name", list(BUNDLES))
def test_transformersjs_generates_the_reference_tokens_from_the_bundle_as_written(tmp_path, name):
    bundle = make_bundle(tmp_path, name)
    expected = [full_recompute_greedy(bundle / "model.onnx", prompt, STEPS) for prompt in PROMPTS]
    assert all(len(set(tokens)) > 3 for tokens in expected)  # varied: a model repeating one token proves little
    eos = json.loads((bundle / "config.json").read_text())["eos_token_id"]
    assert all(eos not in tokens for tokens in expected)  # generation runs the full STEPS

    one = node_generate(bundle, "--ids", ",".join(map(str, PROMPTS[0])), "--max-new-tokens", STEPS)
    assert generated(one)["ids"] == expected[:1]
    rows = [arg for row in left_padded(PROMPTS) for arg in ("--ids", row)]
    two = node_generate(bundle, *rows, "--pad", PAD, "--max-new-tokens", STEPS)
    assert generated(two)["ids"] == expected  # the padding changes no row's tokens


@pytest.mark.parametrize("name", ["gpt2", "opt", "gpt2 heads 2/8/4, per-layer cache",
                                  "llama per-layer key/value heads, untied"])
def test_transformersjs_own_empty_caches_also_generate_the_reference_tokens(tmp_path, name):
    """--stock-cache: generate() as a plain app calls it. transformers.js sizes an empty cache's symbolic axes
    by name and knows the batch axis only as `batch_size`, the name a bundle gives it (kv_cache.BATCH): any
    other gets 0 rows, which GroupQueryAttention (Llama's default form) refuses."""
    bundle = make_bundle(tmp_path, name)
    expected = [full_recompute_greedy(bundle / "model.onnx", prompt, STEPS) for prompt in PROMPTS]
    rows = [arg for row in left_padded(PROMPTS) for arg in ("--ids", row)]
    proc = node_generate(bundle, *rows, "--pad", PAD, "--max-new-tokens", STEPS, "--stock-cache")
    assert generated(proc)["ids"] == expected


def test_transformersjs_reads_a_par_bundle_without_being_told_its_family(tmp_path):
    """No --model-type: config.json's model_type is gpt2 and its n_layer the 2 caches of the 3 layers
    (cache 0 is layer 1: layer 0 is FFN-only); transformers.js makes its own empty caches from it."""
    bundle = make_bundle(tmp_path, "PAR gpt2, first layer FFN-only")
    config = json.loads((bundle / "config.json").read_text())
    assert (config["model_type"], config["n_layer"], config["ltsedge"]["n_layer"]) == ("gpt2", 2, 3)
    expected = full_recompute_greedy(bundle / "model.onnx", PROMPTS[0], STEPS)
    proc = node_generate(bundle, "--ids", ",".join(map(str, PROMPTS[0])), "--max-new-tokens", STEPS, "--stock-cache")
    assert generated(proc)["ids"] == [expected]

SENTENCES = ["the quick brown fox jumps over the lazy dog", "a small model speaks in small tokens",
             "the dog sleeps while the fox runs away", "tokens in, tokens out: a tiny vocabulary"]


def test_a_text_prompt_goes_through_the_bundles_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<pad>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(SENTENCES * 5, trainer)
    (tmp_path / "tok").mkdir()
    tokenizer.save(str(tmp_path / "tok" / "tokenizer.json"))
    bundle = make_bundle(tmp_path, "gpt2", tokenizer=tmp_path / "tok" / "tokenizer.json")

    text = "the lazy fox"
    expected = full_recompute_greedy(bundle / "model.onnx", tokenizer.encode(text).ids, STEPS)
    eos = json.loads((bundle / "config.json").read_text())["eos_token_id"]
    if eos in expected:  # generation stops after it
        expected = expected[:expected.index(eos) + 1]
    out = generated(node_generate(bundle, "--text", text, "--max-new-tokens", STEPS))
    assert out["ids"] == [expected]
    assert out["text"] == [tokenizer.decode(expected, skip_special_tokens=True)]


def test_bad_input_is_one_line_without_a_stack(tmp_path):
    usage = node_generate(tmp_path, "--max-new-tokens", 3)
    assert usage.returncode == 2 and usage.stderr.startswith("generate.mjs: give --ids or --text"), usage.stderr
    missing = node_generate(tmp_path / "nowhere", "--ids", "1,2")
    assert missing.returncode == 1 and "config.json" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1  # no stack trace


def assert_generates_the_reference(tmp_path, model_arch, options: ExportOptions) -> None:
    """The bundle of ``model_arch`` (its reference's weights scaled up) exported with ``options``: transformers.js
    generates the tokens of a plain onnxruntime loop on its file, batch 1 and the left-padded batch 2."""
    weights, bundle = tmp_path / "w.pt", tmp_path / "bundle"
    model = get_backbone(model_arch.backbone).build_model(model_arch, seed=1)
    torch.save({key: tensor * 8 for key, tensor in model.state_dict().items()}, weights)
    export_to_path(model_arch, bundle, options, weights=weights)
    expected = [full_recompute_greedy(bundle / "model.onnx", prompt, STEPS) for prompt in PROMPTS]
    assert all(len(set(tokens)) > 3 for tokens in expected)
    one = node_generate(bundle, "--ids", ",".join(map(str, PROMPTS[0])), "--max-new-tokens", STEPS)
    assert generated(one)["ids"] == expected[:1]
    rows = [arg for row in left_padded(PROMPTS) for arg in ("--ids", row)]
    two = node_generate(bundle, *rows, "--pad", PAD, "--max-new-tokens", STEPS)
    assert generated(two)["ids"] == expected


@pytest.mark.parametrize("options", [dict(target_ort="1.22", graph_form="contrib"), dict(precision="int4"),
                                     dict(target_ort="1.22", graph_form="contrib", precision="int4")],
                         ids=["contrib", "int4", "contrib int4"])
def test_transformersjs_generates_from_llamas_fused_operators_and_int4(tmp_path, options):
    """onnxruntime-node runs the contrib form (GroupQueryAttention, padding as its attention_bias) and int4 (the
    tied embedding read from the output layer's blocks): the reference tokens, the left-padded batch too."""
    model_arch = arch("llama", n_head=(4, 2), n_kv_head=(2, 1), head_dim=16, rope_theta=100000)  # fused: 16 wide
    assert_generates_the_reference(tmp_path, model_arch, ExportOptions(variant="generate", **options))


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("backbone", ["gpt2", "opt"])
def test_transformersjs_generates_from_gpt2s_and_opts_fused_attention(tmp_path, backbone, precision):
    """onnxruntime-node runs GPT-2's and OPT's contrib form (GroupQueryAttention, padding as its attention_bias):
    the reference tokens, the left-padded batch too."""
    model_arch = arch(backbone)  # 4 heads of 16 in both layers: both fused
    options = ExportOptions(variant="generate", target_ort="1.22", graph_form="contrib", precision=precision)
    assert_generates_the_reference(tmp_path, model_arch, options)
