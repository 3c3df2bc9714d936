"""Quantized exports (--precision int8 | int4): onnxruntime's own quantizers on the fast exporter's graph.

What is true of a quantized model, tested as such: the MatMul + Add graph it starts from equals the
PyTorch reference; it loads and holds the quantized operators; its KV-cache path equals its own
uncached path; its next token mostly agrees with fp32 on a trained model; onnxruntime-genai generates
its tokens; its store key and metadata say its precision; a runtime or provider that cannot run it is
refused in one line.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.check.api import run_check
from ltsedge.devices import load_profile
from ltsedge.exporters import export_model, read_metadata
from ltsedge.exporters.bundle import export_to_path
from ltsedge.exporters.model_precision import precision_of
from ltsedge.exporters.options import ExportOptions
from ltsedge.precision import QuantOptions
from ltsedge.generation import greedy
from tests.helpers import fake_fingerprint, genai_greedy, max_diff, meas, randomize, run_ltsedge as run

CPU = ["CPUExecutionProvider"]
SMALL = Architecture(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 192), vocab_size=256, n_positions=64)


def session(exported) -> ort.InferenceSession:
    return ort.InferenceSession(exported.to_bytes(), providers=CPU)


def ops(exported) -> set[str]:
    return {n.op_type for n in onnx.load_from_string(exported.to_bytes()).graph.node}


# ---------------------------------------------------------------------------------------------
# The graph a quantizer is given
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", [
    SMALL,
    Architecture(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(96, 64), d_embed=32, div_val=2, vocab_size=200,
                 n_positions=32, cutoffs=(50, 120)),
    Architecture(n_layer=1, d_model=32, n_head=(4,), d_inner=(64,), d_embed=16, div_val=1, vocab_size=100,
                 n_positions=16),
    Architecture(backbone="opt", n_layer=2, d_model=32, n_head=(2, 4), d_inner=(48, 40), vocab_size=60,
                 n_positions=32),
    Architecture(backbone="transfo_xl", n_layer=2, d_model=32, n_head=(2, 4), d_inner=(48, 40), vocab_size=90,
                 n_positions=32, mem_len=6),
], ids=lambda a: a.id)
def test_matmul_form_equals_pytorch_like_the_gemm_form(arch):
    """gemm=False (what quantized exports are built from) writes no Gemm and gives PyTorch's logits."""
    model = randomize(get_backbone(arch.backbone).build_model(arch, 0), seed=1)
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    graph, initializers = get_backbone(arch.backbone).build_graph(arch, weights, 20, "forward", gemm=False)
    assert "Gemm" not in {n.op_type for n in graph.node}
    used = {i for n in graph.node for i in n.input}
    assert set(initializers) <= used  # no weight is written that only its transposed copy is read from
    graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in initializers.items())
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    proto.ir_version = 8
    onnx.checker.check_model(proto, full_check=True)
    assert max_diff(arch, model, proto.SerializeToString()) <= 1e-3


def test_fp32_is_the_gemm_export_unchanged():
    default, fp32 = export_model(SMALL), export_model(SMALL, ExportOptions(precision="fp32"))
    assert default.to_bytes() == fp32.to_bytes()
    assert "Gemm" in ops(fp32) and "precision" not in read_metadata(fp32.proto)


# ---------------------------------------------------------------------------------------------
# Quantized models load, run and hold what they say
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision,expected,bits", [("int8", {"DynamicQuantizeLinear", "MatMulInteger"}, 8),
                                                     ("int4", {"MatMulNBits"}, 4)])
@pytest.mark.parametrize("variant", ["forward", "generate"])
def test_quantized_exports_load_run_and_hold_their_operators(precision, expected, bits, variant):
    fp32 = export_model(SMALL, ExportOptions(variant=variant))
    quantized = export_model(SMALL, ExportOptions(variant=variant, precision=precision))
    found = ops(quantized)
    assert expected <= found and "Gemm" not in found
    # attention's activation x activation products stay fp32: MatMul, or the fused attention of a bundle
    assert "MatMul" in found or (variant == "generate" and "GroupQueryAttention" in found)
    proto = onnx.load_from_string(quantized.to_bytes())
    assert precision_of(proto)["precision"] == precision
    if bits == 4:
        assert all(a.i == 4 for n in proto.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
                   if a.name == "bits")
    assert (proto.ir_version, proto.opset_import[0].version) == (fp32.target.ir_version, fp32.target.opset)
    meta = read_metadata(proto)
    assert meta["precision"] == precision and meta["id"] == SMALL.id
    assert quantized.nbytes < fp32.nbytes
    ids = np.random.default_rng(0).integers(0, SMALL.vocab_size, (2, 9))
    feeds = {"input_ids": ids}
    if variant == "generate":
        got = greedy(session(quantized), ids, 3)
        assert got.tokens.shape == (2, 3)
    else:
        (logits,) = session(quantized).run(["logits"], feeds)
        assert logits.shape == (2, 9, SMALL.vocab_size) and np.isfinite(logits).all()


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_kv_cache_path_equals_the_models_own_uncached_path(precision, trained):
    """Prefill then decode with past_key_values gives the tokens (and nearly the logits) of running the
    same quantized file on the whole sequence each step, its cache empty."""
    exported = export_model(SMALL, ExportOptions(variant="generate", precision=precision), weights=trained.state_dict())
    s = session(exported)
    prompt = np.array([list(b"the cat ")])
    cached = greedy(s, prompt, 8)
    ids = prompt
    for step in range(8):
        uncached = greedy(s, ids, 1)  # a fresh cache: the whole sequence in one pass
        logits = uncached.logits[0][0]
        # int8 scales activations per tensor at run time: a one-token decode and a full pass scale differently.
        tolerance = 1e-3 if precision == "int4" else 0.05 * float(np.abs(logits).max())
        assert np.abs(cached.logits[step][0] - logits).max() <= tolerance
        ids = np.concatenate([ids, uncached.tokens], axis=1)
    assert cached.tokens[0].tolist() == ids[0, prompt.shape[1]:].tolist()


# ---------------------------------------------------------------------------------------------
# Truth: a trained model's next token
# ---------------------------------------------------------------------------------------------
TEXT = (b"the cat sat on the mat. the dog ran to the park. a bird sang in the tree. "
        b"the sun rose over the hill and the day began. ") * 40
HELD_OUT = b"the dog sat on the hill. a cat ran to the tree. the bird sang over the mat and the sun rose."


def train_tiny(steps: int = 200, seed: int = 0) -> torch.nn.Module:
    """SMALL trained on a made-up text (byte tokens): logits that vary with the input, unlike random init."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains 30x slower with threads fighting on a shared machine
    try:
        return _train(steps, seed)
    finally:
        torch.set_num_threads(threads)


def _train(steps: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    data = torch.tensor(np.frombuffer(TEXT, dtype=np.uint8).astype(np.int64))
    model = get_backbone(SMALL.backbone).build_model(SMALL, seed=seed).train()
    for p in model.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - 33, (16,))
        batch = torch.stack([data[s:s + 33] for s in starts])
        loss = F.cross_entropy(model(batch[:, :-1]).reshape(-1, SMALL.vocab_size), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained():
    return train_tiny()


def test_quantized_next_token_agrees_with_fp32_on_a_trained_model(trained):
    ids = np.array([list(HELD_OUT[:SMALL.n_positions])])
    logits = {p: session(export_model(SMALL, ExportOptions(precision=p), weights=trained.state_dict())).run(["logits"],
                                                                                            {"input_ids": ids})[0]
              for p in ("fp32", "int8", "int4")}
    top1 = {p: v[0, :-1].argmax(-1) for p, v in logits.items()}
    assert len(set(top1["fp32"].tolist())) > 5  # trained: the reference's next token varies
    agreement = {p: float((top1[p] == top1["fp32"]).mean()) for p in ("int8", "int4")}

    def perplexity(v):
        log_probs = torch.log_softmax(torch.from_numpy(v[0, :-1]), -1)
        return float(torch.exp(-log_probs[torch.arange(len(ids[0]) - 1), torch.from_numpy(ids[0, 1:])].mean()))

    print({p: round(perplexity(v), 3) for p, v in logits.items()}, agreement)  # the perplexity change (-s)
    assert agreement["int8"] >= 0.95 and agreement["int4"] >= 0.90, agreement


def test_onnxruntime_genai_generates_an_int4_bundles_greedy_tokens(tmp_path, trained):
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    weights = tmp_path / "w.pt"
    torch.save(trained.state_dict(), weights)
    exported, _ = export_to_path(SMALL, tmp_path / "b", ExportOptions(variant="generate", precision="int4"),
                                 weights=weights)
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["ltsedge"]["precision"] == "int4" and config["ltsedge"]["quantization"]["block_size"] == 32
    prompt = list(b"the cat ")
    tokens, logits = genai_greedy(tmp_path / "b", prompt, 10)
    plain = greedy(ort.InferenceSession(str(tmp_path / "b" / "model.onnx"), providers=CPU), np.array([prompt]), 10)
    assert tokens == plain.tokens[0].tolist()
    for step in range(10):
        assert np.abs(logits[step] - plain.logits[step][0]).max() <= 1e-3


# ---------------------------------------------------------------------------------------------
# Keys, options, refusals
# ---------------------------------------------------------------------------------------------
def test_store_key_names_the_precision_and_fp32_keys_are_unchanged():
    arch = Architecture(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 192), vocab_size=512, n_positions=64)
    def key(precision="fp32", quantization=None):
        return ExportOptions(target_ort="1.20", precision=precision, quantization=quantization).model_key(arch)

    fp32 = key()
    assert fp32 == key("fp32") == ExportOptions().model_key(arch) == \
        "arch:gpt2-L2-d64-e3e80f2a5f:graph=2:ir=10:opset=21:weights=shared-v1"  # tests/test_pins.py's pin
    int8, int4 = key("int8"), key("int4")
    assert len({fp32, int8, int4}) == 3
    assert int4 == "arch:gpt2-L2-d64-e3e80f2a5f:graph=2:ir=10:opset=21:precision=int4:weights=shared-v1"
    assert key("int4", QuantOptions()) == int4
    other = key("int4", QuantOptions(block_size=64))
    assert other not in (int4, fp32) and "block_size64" in other


def test_quantization_options_change_the_file():
    default = export_model(SMALL, ExportOptions(precision="int4"))
    coarse = export_model(SMALL, ExportOptions(precision="int4",
                                               quantization=QuantOptions(block_size=64, symmetric=False)))
    blocks = {a.i for n in coarse.proto.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
              if a.name == "block_size"}
    assert blocks == {64} and default.to_bytes() != coarse.to_bytes()
    assert json.loads(read_metadata(coarse.proto)["quantization"])["symmetric"] is False


def test_a_precision_the_target_or_provider_cannot_run_is_one_line_exit_2(tmp_path, arch_file):
    path = arch_file(SMALL)
    proc = run("export", path, "-o", tmp_path / "m.onnx", "--precision", "int4", "--target-ort", "1.16")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "int4 needs onnxruntime >= 1.17" in proc.stderr and not (tmp_path / "m.onnx").exists()
    proc = run("export", path, "-o", tmp_path / "m.onnx", "--precision", "fp16")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "CUDA" in proc.stderr
    proc = run("profile", path, "--precision", "fp16", "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "CUDA" in proc.stderr
    proc = run("profile", path, "--precision", "int3", "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "fp32, fp16, int8, int4" in proc.stderr
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store was opened


def test_export_cli_writes_the_precision_and_check_reports_it(tmp_path, arch_file):
    proc = run("export", arch_file(SMALL), "-o", tmp_path / "m.onnx", "--precision", "int4")
    assert proc.returncode == 0, proc.stderr
    assert "int4" in proc.stdout
    export_model(SMALL).save(tmp_path / "f.onnx")
    export_model(SMALL, ExportOptions(precision="int8")).save(tmp_path / "q.onnx")
    profile = load_profile("cpu")
    models = [tmp_path / "m.onnx", tmp_path / "f.onnx", tmp_path / "q.onnx"]
    report = run_check(models, profile, budgets={"max_latency_ms": 1e6}, log=lambda _: None,
                       fingerprint=fake_fingerprint(profile),
                       measure=lambda _, jobs: [meas() for _ in jobs])  # what check finds, not what it times
    results = {r["model"].rsplit("/", 1)[-1]: r for r in report.to_json()["results"]}
    assert results["m.onnx"]["precision"] == "int4" and results["m.onnx"]["quantized_ops"]["MatMulNBits"] == 9
    assert results["f.onnx"]["precision"] == "fp32" and results["f.onnx"]["quantized_ops"] == {}
    assert results["q.onnx"]["precision"] == "int8" and results["q.onnx"]["quantized_ops"]["MatMulInteger"] == 9


def test_fp16_for_a_cuda_provider_holds_fp16_weights_behind_fp32_inputs_and_outputs():
    """fp16 is refused on CPU (above); for a CUDA provider the export converts (this machine has no GPU to
    time it on: only its form is checked here)."""
    fp16 = export_model(SMALL, ExportOptions(variant="generate", precision="fp16"),
                        execution_provider="CUDAExecutionProvider")
    proto = onnx.load_from_string(fp16.to_bytes())
    assert precision_of(proto)["precision"] == "fp16" and read_metadata(proto)["precision"] == "fp16"
    assert {o.type.tensor_type.elem_type for o in proto.graph.output} == {onnx.TensorProto.FLOAT}
    assert fp16.nbytes < 0.6 * export_model(SMALL, ExportOptions(variant="generate")).nbytes


@pytest.mark.slow
def test_a_search_at_int4_measures_and_publishes_int4_models(tmp_path):
    out, store = tmp_path / "out", tmp_path / "s.sqlite"
    done = run("search", "--preset", "smoke", "--generations", "1", "--precision", "int4", "--block-size", "64",
               "--out", out, "--store", store, "--quiet", "--no-baseline")
    assert done.returncode == 0, done.stderr
    frontier = json.loads((out / "frontier.json").read_text())
    assert frontier["precision"] == "int4" and frontier["models"]
    model = onnx.load(out / frontier["models"][0]["onnx"], load_external_data=False)
    assert precision_of(model)["precision"] == "int4"
    keys = [k for (k,) in sqlite3.connect(store).execute("SELECT model_key FROM measurements")]
    assert keys and all(":precision=int4" in k for k in keys)  # an int4 figure never answers for fp32
    assert all(":quantization=block_size64-" in k for k in keys)  # nor one of other quantization options
    options = json.loads(read_metadata(model)["quantization"])
    assert options["block_size"] == 64  # the published model was quantized as the search measured it
    refused = run("search", "--preset", "smoke", "--precision", "int4", "--target-ort", "1.16",
                  "--out", tmp_path / "old", "--store", store, "--quiet")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "old" / "candidates.jsonl").exists()  # refused before anything was measured


def test_quantization_flags_reach_the_file_and_the_store_key_and_a_flag_of_another_precision_is_refused(
        tmp_path, arch_file):
    path = arch_file(SMALL)
    done = run("export", path, "-o", tmp_path / "b.onnx", "--precision", "int4", "--block-size", "64", "--asymmetric",
               "--accuracy-level", "0")
    assert done.returncode == 0, done.stderr
    options = json.loads(read_metadata(onnx.load(tmp_path / "b.onnx", load_external_data=False))["quantization"])
    assert options == {"block_size": 64, "symmetric": False, "accuracy_level": 0}
    for args, words in ((("--precision", "int8", "--block-size", "64"), "--block-size: for --precision int4, not int8"),
                        (("--precision", "int4", "--per-channel"), "--per-channel: for --precision int8, not int4"),
                        (("--precision", "int4", "--block-size", "48"), "block size 48 must be one of")):
        refused = run("export", path, "-o", tmp_path / "r.onnx", *args)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1 and words in refused.stderr
        assert not (tmp_path / "r.onnx").exists()
    model = tmp_path / "b.onnx"
    refused = run("profile", model, "--block-size", "64", "--store", tmp_path / "s.sqlite")
    assert refused.returncode == 2 and "is measured as it is" in refused.stderr  # an ONNX file is not re-quantized
