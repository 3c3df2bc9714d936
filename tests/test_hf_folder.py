"""``--from DIR``: a Hugging Face Llama folder as input to export, params and profile (ltsedge/hf_folder.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.helpers import GENERATE_DEVICE, ltsedge_cli, one_line_exit_2, run_ltsedge

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
torch = pytest.importorskip("torch")

VOCAB = 96


def _tokenizer(folder) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                                         eos_token="</s>").save_pretrained(folder)


def llama_folder(folder, *, shards: bool = False, **config_changes):
    """A tiny LlamaForCausalLM saved by transformers, with its tokenizer; returns the model."""
    fields = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    config = transformers.LlamaConfig(**{**fields, **config_changes})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)  # a peaked distribution: greedy tokens that do not hang on rounding
    model.save_pretrained(folder, max_shard_size="200KB" if shards else "5GB")
    _tokenizer(folder)
    return model


def _greedy_transformers(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_params_from_a_folder_count_as_transformers_does(tmp_path):
    model = llama_folder(tmp_path / "hf")
    counts = json.loads(run_ltsedge("params", "--from", tmp_path / "hf", "--json").stdout)
    assert counts["total_params"] == model.num_parameters()


@pytest.mark.parametrize("shards", [False, True], ids=["one file", "sharded"])
def test_export_from_a_folder_generates_transformers_tokens_in_genai(tmp_path, shards):
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    model = llama_folder(tmp_path / "hf", shards=shards)
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file() == shards
    proc = run_ltsedge("export", "--from", tmp_path / "hf", "--variant", "generate", "-o", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    genai = json.loads((tmp_path / "b" / "genai_config.json").read_text())["model"]
    assert (genai["bos_token_id"], genai["eos_token_id"]) == (1, 2)  # the folder's, not the defaults
    prompt = [5, 17, 42, 8]
    expected = _greedy_transformers(model, prompt, 8)
    bundle = og.Model(str(tmp_path / "b"))
    params = og.GeneratorParams(bundle)
    params.set_search_options(max_length=len(prompt) + 8, do_sample=False)
    generator = og.Generator(bundle, params)
    generator.append_tokens(np.array(prompt, dtype=np.int32))
    got = []
    while not generator.is_done() and len(got) < 8:
        generator.generate_next_token()
        got.append(int(generator.get_next_tokens()[0]))
    cut = expected.index(2) + 1 if 2 in expected else len(expected)  # genai stops at the end token
    assert got == expected[:cut]


def test_profile_from_a_folder_measures_its_architecture(tmp_path):
    llama_folder(tmp_path / "hf")
    device = tmp_path / "d.toml"
    device.write_text(GENERATE_DEVICE)
    proc = run_ltsedge("profile", "--from", tmp_path / "hf", "--variant", "generate", "--device", device, "--json",
                       "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["ok"] and r["architecture_id"].startswith("llama-L2-d64") and r["decode_latency_ms"] > 0


@pytest.mark.parametrize("change, message", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 64}}, "rope_scaling"),
    ({"attention_bias": True}, "attention_bias = true is not supported"),
    ({"model_type": "qwen3"}, "model_type 'qwen3'"),
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_a_config_the_backbone_cannot_express_is_one_line(tmp_path, change, message):
    llama_folder(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config.update(change)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    for command in (["params"], ["export", "-o", tmp_path / "out", "--variant", "generate"]):
        one_line_exit_2(ltsedge_cli(*command, "--from", tmp_path / "hf"), message)
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_folder_without_usable_weights_is_one_line(tmp_path):
    model = llama_folder(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").unlink()
    one_line_exit_2(ltsedge_cli("export", "--from", tmp_path / "hf", "-o", tmp_path / "o"), "holds no weights")
    model.save_pretrained(tmp_path / "hf", safe_serialization=False)  # pytorch_model.bin only
    one_line_exit_2(ltsedge_cli("export", "--from", tmp_path / "hf", "-o", tmp_path / "o"), "PyTorch pickles",
                    "pytorch_model.bin")
    one_line_exit_2(ltsedge_cli("params", "--from", tmp_path / "missing"), "not a folder")
    one_line_exit_2(ltsedge_cli("params"), "ARCH.json or --from DIR")
    assert not (tmp_path / "o").exists()


def test_a_config_that_disagrees_with_its_weights_is_one_line(tmp_path):
    llama_folder(tmp_path / "hf")
    other = tmp_path / "other"
    llama_folder(other, intermediate_size=128)
    shutil.copy(other / "model.safetensors", tmp_path / "hf" / "model.safetensors")
    proc = ltsedge_cli("export", "--from", tmp_path / "hf", "--variant", "generate", "-o", tmp_path / "o")
    one_line_exit_2(proc, "mlp")
    assert not (tmp_path / "o").exists()
