"""A bundle's tokenizer (issue 19): `--tokenizer` takes a tokenizer.json or the folder holding one; the
companions onnxruntime-genai and transformers need (tokenizer_config.json, special_tokens_map.json) are
made from tokenizer.json when absent; a tokenizer whose ids do not fit the model's vocabulary is refused
in one line (exit 2) before anything is written."""

from __future__ import annotations

import json

import pytest
import torch

from ltsedge.backbones import get_backbone
from ltsedge.exporters.bundle import export_to_path
from ltsedge.exporters.options import ExportOptions
from tests.conftest import TINY_VOCAB, tiny_arch
from tests.helpers import one_line_exit_2, reference_tokens, run_ltsedge

SENTENCES = ["the quick brown fox jumps over the lazy dog", "a small model speaks in small tokens",
             "the dog sleeps while the fox runs away", "tokens in, tokens out: a tiny vocabulary"]
SENTENCE = "the lazy fox sleeps over a small dog, quickly"
TRAINED_VOCAB = 300  # under tiny_arch's 500


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A byte-level BPE tokenizer.json trained on a few sentences, alone in its folder."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TRAINED_VOCAB, special_tokens=["<|endoftext|>", "<pad>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(SENTENCES * 5, trainer)
    assert tokenizer.get_vocab_size() == TRAINED_VOCAB
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def reference(path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def test_a_bundle_with_only_tokenizer_json_loads_in_genai_and_transformers(tmp_path, trained):
    og = pytest.importorskip("onnxruntime_genai")
    bundle = tmp_path / "b"
    _, files = export_to_path(tiny_arch(), bundle, ExportOptions(variant="generate"), tokenizer=trained)
    assert files.generated == (str(bundle / "tokenizer_config.json"), str(bundle / "special_tokens_map.json"))
    config = json.loads((bundle / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["model_max_length"] == 64
    assert json.loads((bundle / "special_tokens_map.json").read_text()) == {
        "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<pad>", "unk_token": "<unk>"}

    ours = reference(trained).encode(SENTENCE).ids
    genai = og.Tokenizer(og.Model(str(bundle)))  # failed: "Failed to open a json file: .../tokenizer_config.json"
    assert [int(i) for i in genai.encode(SENTENCE)] == ours
    assert genai.decode(genai.encode(SENTENCE)) == reference(trained).decode(ours) == SENTENCE

    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(bundle))
    assert hf(SENTENCE).input_ids == ours and hf.decode(ours) == SENTENCE
    genai_config = json.loads((bundle / "genai_config.json").read_text())["model"]
    assert (hf.eos_token_id, hf.pad_token_id, hf.model_max_length) == (
        genai_config["eos_token_id"], genai_config["pad_token_id"], 64) == (0, 1, 64)


def test_the_folder_form_takes_its_tokenizer_json_and_companions_and_makes_the_missing_one(tmp_path, arch_file,
                                                                                           trained):
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(trained.read_bytes())
    mine = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32, "eos_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(mine))
    proc = run_ltsedge("export", arch_file(), "--variant", "generate", "--tokenizer", folder, "-o", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "b"
    assert (bundle / "tokenizer.json").read_bytes() == trained.read_bytes()
    assert json.loads((bundle / "tokenizer_config.json").read_text()) == mine  # the user's, not made
    assert json.loads((bundle / "special_tokens_map.json").read_text())["pad_token"] == "<pad>"
    made = [line for line in proc.stdout.splitlines() if "made from tokenizer.json" in line]
    assert len(made) == 1 and str(bundle / "special_tokens_map.json") in made[0]  # said, for the one made

    (folder / "tokenizer.json").unlink()
    proc = run_ltsedge("export", arch_file(), "--variant", "generate", "--tokenizer", folder, "-o", tmp_path / "c")
    one_line_exit_2(proc, f"tokenizer folder {folder} has no tokenizer.json")
    assert not (tmp_path / "c").exists()


HUGE_ADDED = {"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
              "added_tokens": [{"id": TINY_VOCAB, "content": "<|endoftext|>", "special": True}]}
HUGE_UNIGRAM = {"version": "1.0", "model": {"type": "Unigram", "vocab": [["a", -1.0]] * (TINY_VOCAB + 1)}}


@pytest.mark.parametrize("content, largest", [(None, TRAINED_VOCAB - 1), (HUGE_ADDED, TINY_VOCAB),
                                              (HUGE_UNIGRAM, TINY_VOCAB)])
def test_a_tokenizer_whose_ids_do_not_fit_the_vocabulary_is_one_line_and_nothing_is_written(
        tmp_path, arch_file, request, content, largest):
    if content is None:  # the trained one, for a model of fewer tokens
        tokenizer, arch = request.getfixturevalue("trained"), tiny_arch(vocab_size=200)
    else:
        tokenizer, arch = tmp_path / "tok" / "tokenizer.json", tiny_arch()
        tokenizer.parent.mkdir()
        tokenizer.write_text(json.dumps(content))
    proc = run_ltsedge("export", arch_file(arch), "--variant", "generate", "--tokenizer", tokenizer, "-o", tmp_path / "b")
    one_line_exit_2(proc, f"token ids go up to {largest}, the architecture's vocab_size is {arch.vocab_size}")
    assert not (tmp_path / "b").exists()


def test_a_tokenizer_that_fits_exactly_is_accepted(tmp_path):
    tokenizer = tmp_path / "tok" / "tokenizer.json"
    tokenizer.parent.mkdir()
    tokenizer.write_text(json.dumps({**HUGE_ADDED, "added_tokens": [{**HUGE_ADDED["added_tokens"][0],
                                                                     "id": TINY_VOCAB - 1}]}))
    _, files = export_to_path(tiny_arch(), tmp_path / "b", ExportOptions(variant="generate"), tokenizer=tokenizer)
    assert str(tmp_path / "b" / "tokenizer.json") in files
    assert json.loads((tmp_path / "b" / "tokenizer_config.json").read_text())["eos_token"] == "<|endoftext|>"


CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2: SmolLM2's special tokens
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def chatml_tokenizer(folder, **named):
    """A tokenizer folder as transformers saves it (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
    chat_template.jinja): byte-level BPE, bos <|im_start|> (1), eos and pad <|im_end|> (2) unless ``named`` says
    otherwise. tokenizer.json's names alone give none of them (<|endoftext|> looks like GPT-2's eos)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    model = tokenizers.Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    model.train_from_iterator(SENTENCES * 5, trainers.BpeTrainer(
        vocab_size=TRAINED_VOCAB, special_tokens=CHATML, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    special = {"bos_token": CHATML[1], "eos_token": CHATML[2], "pad_token": CHATML[2], **named}
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=model, unk_token=CHATML[0], **special)
    hf.chat_template = TEMPLATE
    hf.save_pretrained(str(folder))
    return folder


def tokens_hitting(arch, prompt, eos: int, step: int):
    """A tied Llama's trained-like weights whose greedy generation after ``prompt`` yields ``eos`` at ``step``:
    the token it yields there is swapped with ``eos`` in the tied embedding (in and out), which relabels the
    two and changes nothing else. Returns (state_dict, the tokens before eos)."""
    model = get_backbone(arch.backbone).build_model(arch, seed=1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8)  # far from the init: a varied sequence
        greedy = reference_tokens(model, prompt, step + 1)
        hit = greedy[step]
        assert hit not in (*prompt, *greedy[:step], eos) and eos not in (*prompt, *greedy[:step]), greedy
        table = model.embed_tokens.weight
        table[[eos, hit]] = table[[hit, eos]].clone()
        assert reference_tokens(model, prompt, step + 1) == greedy[:step] + [eos]
    return model.state_dict(), greedy[:step]


def test_the_tokenizers_special_tokens_and_chat_template_reach_every_config_and_genai_stops_at_eos(tmp_path,
                                                                                                   arch_file):
    og = pytest.importorskip("onnxruntime_genai")
    transformers = pytest.importorskip("transformers")
    arch = tiny_arch(backbone="llama", n_head=[4, 4], n_kv_head=[2, 2], head_dim=16, d_inner=[128, 96])
    prompt = [5, 9, 12, 20]
    state, before = tokens_hitting(arch, prompt, eos=2, step=3)
    torch.save(state, tmp_path / "w.pt")
    folder = chatml_tokenizer(tmp_path / "tok")
    proc = run_ltsedge("export", arch_file(arch), "--variant", "generate", "--weights", tmp_path / "w.pt",
                       "--tokenizer", folder, "-o", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "b"
    for name in ("genai_config.json", "config.json", "generation_config.json"):
        document = json.loads((bundle / name).read_text())
        document = document.get("model", document)
        assert [document[f"{kind}_token_id"] for kind in ("bos", "eos", "pad")] == [1, 2, 2], name  # were 0, 0, 0
    assert (bundle / "chat_template.jinja").read_text() == TEMPLATE
    assert json.loads((bundle / "tokenizer_config.json").read_text())["chat_template"] == TEMPLATE

    model = og.Model(str(bundle))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 12)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    generated = []
    while not generator.is_done():
        generator.generate_next_token()
        generated.append(int(generator.get_next_tokens()[0]))
    assert generated == before + [2]  # stopped at <|im_end|>, not at max_length

    messages = [{"role": "user", "content": "hi there"}]
    hf = transformers.AutoTokenizer.from_pretrained(str(bundle))
    text = hf.apply_chat_template(messages, tokenize=False)
    assert text == "<|im_start|>user\nhi there<|im_end|>\n" and hf.eos_token_id == 2
    assert og.Tokenizer(model).apply_chat_template(json.dumps(messages)) == text  # genai: tokenizer_config.json's


def test_a_model_config_beside_the_tokenizer_names_its_ids_first_and_an_id_beyond_the_vocabulary_is_refused(
        tmp_path, arch_file):
    """SmolLM2's converted tokenizer_config.json names <|im_start|> as eos where its config.json says 2: the
    model's configs decide (what transformers generates with); a generation_config.json's list of eos ids is kept."""
    folder = chatml_tokenizer(tmp_path / "tok", eos_token=CHATML[1], pad_token=CHATML[0])
    (folder / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0], "pad_token_id": None}))
    _, _ = export_to_path(tiny_arch(), tmp_path / "b", ExportOptions(variant="generate"), tokenizer=folder)
    for name in ("genai_config.json", "config.json", "generation_config.json"):
        document = json.loads((tmp_path / "b" / name).read_text())
        document = document.get("model", document)
        assert [document[f"{kind}_token_id"] for kind in ("bos", "eos", "pad")] == [1, [2, 0], 2], name

    (folder / "config.json").write_text(json.dumps({"bos_token_id": TINY_VOCAB}))
    proc = run_ltsedge("export", arch_file(), "--variant", "generate", "--tokenizer", folder, "-o", tmp_path / "c")
    one_line_exit_2(proc, f"{folder / 'config.json'}: bos_token_id {TINY_VOCAB} is not a token id of the model "
                          f"(0 to {TINY_VOCAB - 1})")
    assert not (tmp_path / "c").exists()
