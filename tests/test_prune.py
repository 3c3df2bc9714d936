"""``ltsedge prune`` (ltsedge/subnets): the search over a trained model's sub-networks, on tiny Hugging Face
folders transformers saves. Repair's least squares, the encoding, the known prunings' ladders, the loss of a
shipped file against PyTorch's, a whole run's outputs and its bad inputs."""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from tests.helpers import FAST_DEVICE, larger_than_init, one_line_exit_2, run_ltsedge

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from ltsedge.subnets.genes import SubnetGenes, SubnetSpace  # noqa: E402
from ltsedge.subnets.heuristics import known_prunings  # noqa: E402
from ltsedge.subnets.importance import measure_importance  # noqa: E402
from ltsedge.subnets.loss import held_out_loss  # noqa: E402
from ltsedge.subnets.parent import model_of, parent_weights  # noqa: E402
from ltsedge.subnets.problem import SubnetEncoding  # noqa: E402
from ltsedge.subnets.repair import measure_grams, refit, repaired_state_dict  # noqa: E402
from ltsedge.subnets.slicing import slice_state_dict  # noqa: E402
from tests.test_hf_folder import llama_folder  # noqa: E402

PARENT = Architecture(backbone="llama", n_layer=3, d_model=48, n_head=(4, 6, 6), n_kv_head=(2, 3, 2), head_dim=8,
                      d_inner=(96, 64, 128), vocab_size=90, n_positions=64, rope_theta=500.0)


@pytest.fixture(scope="module")
def weights():
    model = larger_than_init(get_backbone("llama").build_model(PARENT), seed=7)
    return parent_weights(PARENT, model.state_dict())


def ids(n: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, PARENT.vocab_size, (n, length))


def down_proj_inputs(arch, state, windows, layer: int) -> torch.Tensor:
    """The SwiGLU products entering layer ``layer``'s down_proj, [tokens, d_inner]."""
    seen = []
    model = model_of(arch, state)
    handle = model.layers[layer].mlp.down_proj.register_forward_pre_hook(lambda _, a: seen.append(a[0]))
    with torch.no_grad():
        model(torch.as_tensor(windows))
    handle.remove()
    return torch.cat([s.reshape(-1, s.size(-1)) for s in seen])


def test_repair_fits_the_parents_layer_output_better_than_slicing_on_calibration_tokens(weights):
    """Least squares is least squares: on the calibration tokens the refitted down_proj reproduces the parent's
    output of that layer more closely than the sliced one; keeping every channel (more tokens than channels)
    returns the parent's weight, up to the ridge."""
    calibration = ids(16, 16, seed=1)
    importance = measure_importance(PARENT, weights, calibration)
    grams = measure_grams(PARENT, weights, calibration)
    genes = SubnetGenes((True, True, True), PARENT.kv_heads, (96, 64, 40))
    _, sliced = slice_state_dict(PARENT, weights, genes, importance)
    _, fixed = repaired_state_dict(PARENT, weights, genes, importance, grams)
    x = down_proj_inputs(PARENT, weights, calibration, 2).double()
    want = x @ weights["layers.2.mlp.down_proj.weight"].double().T
    kept = torch.as_tensor(np.sort(np.argsort(-importance.ffn[2], kind="stable")[:40]))
    errors = [float(((x[:, kept] @ state["layers.2.mlp.down_proj.weight"].double().T - want) ** 2).sum())
              for state in (sliced, fixed)]
    assert errors[1] < 0.9 * errors[0], errors
    assert torch.equal(fixed["layers.0.mlp.down_proj.weight"], weights["layers.0.mlp.down_proj.weight"])  # unpruned
    whole = refit(weights["layers.2.mlp.down_proj.weight"], grams.ffn[2], torch.arange(128))
    assert torch.allclose(whole, weights["layers.2.mlp.down_proj.weight"], atol=0.05, rtol=0.05)


def test_repaired_heads_keep_shapes_and_the_child_runs(weights):
    calibration = ids(3, 16, seed=2)
    importance = measure_importance(PARENT, weights, calibration)
    grams = measure_grams(PARENT, weights, calibration)
    genes = SubnetGenes((True, False, True), (1, 3, 1), (64, 64, 128))
    child, state = repaired_state_dict(PARENT, weights, genes, importance, grams)
    _, sliced = slice_state_dict(PARENT, weights, genes, importance)
    assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in sliced.items()}
    assert not torch.equal(state["layers.1.self_attn.o_proj.weight"], sliced["layers.1.self_attn.o_proj.weight"])
    loss = held_out_loss(child, state, ids(2, 12, seed=3))
    assert np.isfinite(loss.nats)
    # query heads dropped inside a group: o_proj is refitted on the heads kept, the cache untouched
    genes = SubnetGenes((True, True, True), PARENT.kv_heads, PARENT.d_inner, (1, 2, 2))
    child, state = repaired_state_dict(PARENT, weights, genes, importance, grams)
    _, sliced = slice_state_dict(PARENT, weights, genes, importance)
    assert child.kv_heads == PARENT.kv_heads and child.n_head[0] == PARENT.kv_heads[0]
    assert state["layers.0.self_attn.k_proj.weight"] is weights["layers.0.self_attn.k_proj.weight"]
    assert not torch.equal(state["layers.0.self_attn.o_proj.weight"], sliced["layers.0.self_attn.o_proj.weight"])


def test_the_encoding_round_trips_and_never_drops_every_layer(weights):
    space = SubnetSpace(PARENT, ffn_step=32)
    importance = measure_importance(PARENT, weights, ids(2, 16))
    encoding = SubnetEncoding(space, importance.block_influence)
    genes = SubnetGenes((True, False, True), (1, 3, 2), (64, 32, 96))
    assert encoding.decode(encoding.encode(genes)) == space.canonical(genes)
    assert encoding.decode(encoding.encode(space.full())) == space.full()
    fewer_heads = SubnetGenes((True, True, True), (2, 3, 2), (64, 64, 128), (1, 2, 2))
    assert encoding.decode(encoding.encode(fewer_heads)) == fewer_heads
    assert list(encoding.upper[9:]) == [space.group_size(i) for i in range(3)]
    nothing = encoding.decode(np.concatenate([[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1]]))
    assert nothing.kept_layers == (int(np.argmax(importance.block_influence)),)


def test_the_known_prunings_are_ladders_of_the_space():
    parent = Architecture(backbone="llama", n_layer=10, d_model=64, n_head=(6,) * 10, n_kv_head=(3,) * 10,
                          head_dim=8, d_inner=(192,) * 10, vocab_size=90, n_positions=64)
    space = SubnetSpace(parent, ffn_step=32)
    rng = np.random.default_rng(0)
    from ltsedge.subnets.importance import Importance

    importance = Importance(tuple(rng.random(192) for _ in range(10)), tuple(rng.random(3) for _ in range(10)),
                            rng.random(10), 1)
    points = dict(known_prunings(space, importance))
    assert list(points) == ["shortgpt-drop-1", "shortgpt-drop-2", "shortgpt-drop-3", "shortgpt-drop-4",
                            "uniform-ffn-160", "uniform-ffn-128", "uniform-ffn-96", "uniform-ffn-64",
                            "uniform-kv-2", "uniform-kv-1", "uniform-q-1"]
    least = np.argsort(importance.block_influence)[:3]
    assert [i for i, kept in enumerate(points["shortgpt-drop-3"].keep) if not kept] == sorted(least.tolist())
    assert points["uniform-ffn-96"].ffn == (96,) * 10 and points["uniform-kv-1"].kv_groups == (1,) * 10
    assert points["uniform-q-1"].q_heads == (1,) * 10 and points["uniform-q-1"].kv_groups == (3,) * 10


def test_the_shipped_files_loss_is_pytorchs(weights):
    """bundle_loss runs the exported generate model over each window: at fp32 it is PyTorch's loss."""
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.subnets.bundle_loss import bundle_loss

    windows = ids(3, 20, seed=4)
    path = None
    for form in ("plain", "contrib"):
        exported = export_model(PARENT, ExportOptions(variant="generate", target_ort="1.22", graph_form=form),
                                weights=weights)
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            path.write_bytes(exported.to_bytes())
            got = bundle_loss(path, windows)
        want = held_out_loss(PARENT, weights, windows)
        assert got.tokens == want.tokens == 3 * 19
        assert got.nats == pytest.approx(want.nats, rel=1e-4), form


def test_published_models_are_chosen_on_side_by_side_figures_not_the_searchs():
    """The search said candidate B reaches 1.5x; beside the parent it did not: the speed-up goes to C."""
    from types import SimpleNamespace as NS

    from ltsedge.subnets.choice import choose, shortlist

    parent = NS(genes="p", decode_ms=30.0)
    a, b, c, d = (NS(genes=k, decode_ms=ms, loss=l) for k, ms, l in
                  (("a", 24.0, 0.1), ("b", 20.0, 0.2), ("c", 17.0, 0.4), ("d", 10.0, 1.5)))
    shortgpt = NS(genes="s", decode_ms=22.0, loss=NS(nats=0.15))  # dominated by a in the search's figures
    pool, extra = shortlist([parent, a, b, c, d], parent, (1.25, 1.5), limit=3, known=[shortgpt])
    assert pool == [a, b, shortgpt, c, d] and extra == [d]  # 1.25x: a, b and ShortGPT; 1.5x: b, c
    pool.remove(shortgpt)
    beside = {"a": 1.2, "b": 1.4, "c": 1.6, "d": 2.9}  # a and b were measured fast in the search
    chosen, targets = choose(pool, (1.25, 1.5), extra, 3, speedup=lambda m: beside[m.genes], loss=lambda m: m.loss)
    assert [(name, m.genes) for name, m, _ in chosen] == [("speedup-1.5x", "c"), ("speedup-1.25x", "b"),
                                                           ("front-1", "d")]
    assert targets == {1.25: "speedup-1.25x", 1.5: "speedup-1.5x"}
    chosen, targets = choose(pool, (1.25, 3.0), extra, 3, speedup=lambda m: beside[m.genes], loss=lambda m: m.loss)
    assert targets == {1.25: "speedup-1.25x", 3.0: None}
    assert [m.genes for _, m, _ in chosen] == ["b", "d", "c"]  # then the fastest timed of the rest
    beside["s"] = 1.3  # the known pruning timed: beside the parent it beats the front's models at 1.25x
    chosen, targets = choose([*pool, shortgpt], (1.25, 1.5), extra, 3, speedup=lambda m: beside[m.genes],
                             loss=lambda m: m.loss if isinstance(m.loss, float) else m.loss.nats, front=pool)
    assert [(name, m.genes) for name, m, _ in chosen] == [("speedup-1.5x", "c"), ("speedup-1.25x", "s"),
                                                           ("front-1", "d")]
    beside["b"] = 1.1  # now c, the lowest loss at 1.5x, is the lowest at 1.25x too: it serves both
    chosen, targets = choose(pool, (1.25, 1.5), extra, 3, speedup=lambda m: beside[m.genes], loss=lambda m: m.loss)
    assert targets == {1.25: "speedup-1.5x", 1.5: "speedup-1.5x"}
    assert [(name, m.genes) for name, m, _ in chosen] == [("speedup-1.5x", "c"), ("front-1", "d"), ("front-2", "a")]


# --- the command ---------------------------------------------------------------------------------------

def tiny_folder(root):
    folder = root / "model"
    llama_folder(folder, num_hidden_layers=4, intermediate_size=128)
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3, 96)]
    phrases = [" ".join(rng.choice(words, 6)) for _ in range(12)]
    (root / "text.txt").write_text(" ".join(phrases[i] for i in rng.integers(0, 12, 120)))
    (root / "fast.toml").write_text(FAST_DEVICE)
    return folder


def prune_args(root, out, **changes):
    options = {"--device": root / "fast.toml", "--store": root / "store.sqlite", "--population": 6,
               "--generations": 2, "--window": 32, "--calibration": 3, "--held-out": 3, "--ffn-step": 32,
               "--context": 24, **{f"--{k}": v for k, v in changes.items()}}
    return ["prune", "--from", root / "model", "--text", root / "text.txt", "-o", out,
            *[part for pair in options.items() for part in pair]]


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    root = tmp_path_factory.mktemp("prune")
    tiny_folder(root)
    proc = run_ltsedge(*prune_args(root, root / "out"))
    assert proc.returncode == 0, proc.stderr
    return root, proc


def test_prune_publishes_bundles_whose_files_were_measured(pruned):
    root, proc = pruned
    out = root / "out"
    frontier = json.loads((out / "frontier.json").read_text())
    parent, models = frontier["parent"], frontier["models"]
    assert parent["name"] == "parent" and parent["layers"] == 4 and parent["loss_fp32_delta"] == 0.0
    assert models and len(models) <= 4
    for row in [parent, *models]:
        for rel, sha in row["files"].items():
            assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == sha  # the file measured is the file
        assert row["decode_ms"] > 0 and row["loss_shipped"] is not None and np.isfinite(row["loss_shipped"])
        assert (out / row["bundle"] / "genai_config.json").is_file() and (out / row["bundle"] / "tokenizer.json").is_file()
        assert row["decode_speedup"] == pytest.approx(parent["decode_ms"] / row["decode_ms"])
        assert row["loads_in"][:2] == ["onnxruntime-genai", "transformers.js"]  # where it loads: said per model
        assert ("optimum" in row["loads_in"]) == (row["optimum_note"] is None)
        assert row["optimum_export"] is None or "--cache-layout uniform" in row["optimum_export"]
    for m in models:  # a model named for a speed-up reached it beside the parent
        if m["target_speedup"]:
            assert m["decode_speedup"] >= m["target_speedup"]
    for target, name in frontier["speedups"].items():  # every asked speed-up served or said missed
        assert (name is None) == (float(target) in frontier["missed_speedups"])
        if name:
            assert next(m for m in models if m["name"] == name)["decode_speedup"] >= float(target)
    timed = frontier["timed"]
    assert {t["published_as"] for t in timed} - {None} == {m["name"] for m in models}
    for t in timed:  # the figures a choice was made on; the bundles not chosen are gone
        assert t["decode_speedup"] > 0 and np.isfinite(t["loss_shipped"])
        if t["published_as"] is None:
            assert not (out / "models" / t["candidate"]).exists()
    assert not (out / ".scratch").exists() or not any((out / ".scratch").rglob("*.onnx"))
    rows = list(csv.DictReader((out / "candidates.csv").open()))
    assert {r["decode_figure"] for r in rows} <= {"measured", "predicted"}
    assert any(r["source"] == "parent" for r in rows) and any(r["source"].startswith("shortgpt") for r in rows)
    assert {r["pruning"] for r in frontier["known_prunings"]} >= {"shortgpt-drop-1", "uniform-kv-1"}
    assert (out / "report" / "loss_vs_decode.png").read_bytes()[:4] == b"\x89PNG"
    assert "published sub-networks" in proc.stdout


def test_a_published_bundle_generates_as_its_pytorch_child(pruned):
    """models/NAME.json and NAME.safetensors are the child the bundle was exported from: at fp32 onnxruntime's
    greedy tokens are its PyTorch model's. The int4 bundle itself generates in onnxruntime-genai (the app's loop)
    the tokens onnxruntime's greedy loop gives on the same file."""
    import onnxruntime as ort
    from safetensors.torch import load_file

    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.generation import greedy
    from tests.helpers import genai_greedy, reference_greedy

    root, _ = pruned
    out = root / "out"
    name = json.loads((out / "frontier.json").read_text())["models"][0]["name"]
    arch = Architecture.load(out / "models" / f"{name}.json")
    state = load_file(str(out / "models" / f"{name}.safetensors"))
    prompt = np.array([[5, 9, 17, 3, 44]], dtype=np.int64)
    fp32 = export_model(arch, ExportOptions(variant="generate"), weights=state)
    tokens = greedy(ort.InferenceSession(fp32.to_bytes(), providers=["CPUExecutionProvider"]), prompt, 4).tokens
    want, _ = reference_greedy(model_of(arch, state), prompt, np.ones_like(prompt), 4)
    np.testing.assert_array_equal(tokens, want)
    pytest.importorskip("onnxruntime_genai")
    session = ort.InferenceSession(str(out / "models" / name / "model.onnx"), providers=["CPUExecutionProvider"])
    genai_tokens, _ = genai_greedy(out / "models" / name, prompt[0].tolist(), 4)
    eos = json.loads((out / "models" / name / "genai_config.json").read_text())["model"]["eos_token_id"]
    assert until_eos(genai_tokens, eos) == until_eos(greedy(session, prompt, 4).tokens[0].tolist(), eos)


def until_eos(tokens: list[int], eos) -> list[int]:
    """The tokens up to the first end token, inclusive: genai's loop is done there (it pads after it)."""
    ends = set(eos) if isinstance(eos, list) else {eos}
    return next((tokens[:i + 1] for i, t in enumerate(tokens) if t in ends), tokens)


def test_a_second_run_reuses_every_measured_loss(pruned, tmp_path):
    from ltsedge.search.outdir import OutputDir

    root, _ = pruned
    out = root / "out"
    losses = (out / "losses.jsonl").read_text().splitlines()
    with OutputDir(out, outputs=(), owned_dirs=(".scratch",), tool="ltsedge prune") as recorded:
        recorded.path(".scratch/killed.onnx")  # recorded, then killed while writing it
    (out / ".scratch" / "killed.onnx.partial").write_bytes(b"half")
    proc = run_ltsedge(*prune_args(root, out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "losses.jsonl").read_text().splitlines() == losses  # nothing measured twice
    assert not (out / ".scratch").exists()  # what the killed run left is cleared, not refused


@pytest.mark.parametrize("text, changes, message", [
    ("w3 w4 w5", {}, "3 calibration and 3 held-out windows of 32 need"),
    (None, {"speedups": "0.8"}, "--speedups 0.8"),
    (None, {"device": "no-such-device"}, "no-such-device"),
    (b"\xff\xfe\x00abc" * 50, {}, "is not UTF-8 text"),
    (None, {"context": 500}, "--context 500"),
    (None, {"held-out": 0}, "--held-out 0"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, text, changes, message):
    tiny_folder(tmp_path)
    if isinstance(text, str):
        (tmp_path / "text.txt").write_text(text)
    elif text is not None:
        (tmp_path / "text.txt").write_bytes(text)
    one_line_exit_2(run_ltsedge(*prune_args(tmp_path, tmp_path / "out", **changes)), message)
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_of_another_model_is_refused(tmp_path):
    tiny_folder(tmp_path)
    data = json.loads((tmp_path / "model" / "tokenizer.json").read_text())
    data["model"]["vocab"].update({f"extra{i}": 96 + i for i in range(10)})
    (tmp_path / "model" / "tokenizer.json").write_text(json.dumps(data))
    one_line_exit_2(run_ltsedge(*prune_args(tmp_path, tmp_path / "out")), "106 tokens but the model embeds 96")
    assert not (tmp_path / "out").exists()


def test_a_published_model_re_exports_byte_for_byte_from_its_saved_weights(pruned, tmp_path):
    """What healing needs: NAME.json and NAME.safetensors beside each bundle give its exact model again through
    ``ltsedge export --weights`` (a fine-tuned state dict of the same names goes the same way)."""
    root, _ = pruned
    models = root / "out" / "models"
    name = json.loads((root / "out" / "frontier.json").read_text())["models"][0]["name"]
    proc = run_ltsedge("export", models / f"{name}.json", "--variant", "generate", "--precision", "int4",
                       "--weights", models / f"{name}.safetensors", "-o", tmp_path / "again")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "again" / "model.onnx").read_bytes() == (models / name / "model.onnx").read_bytes()


def test_a_folder_without_weights_is_one_line(tmp_path):
    tiny_folder(tmp_path)
    (tmp_path / "model" / "model.safetensors").unlink()
    one_line_exit_2(run_ltsedge(*prune_args(tmp_path, tmp_path / "out")), "holds no weights")
    assert not (tmp_path / "out").exists()
