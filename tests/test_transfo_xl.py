"""Transformer-XL's own: the proxy reproduces the study's figures; relative positions (rel_shift, the causal
mask over memory + segment); the generate variant's recurrence memory equals the PyTorch reference's, carried
over several segments and truncated to mem_len, in greedy generation too; an FFN-only layer has no memory; the
exported model is measured like any other. What every backbone must do (the proxy equal to the PyTorch modules,
both export variants equal to the reference, cached greedy = uncached, the bundle without onnxruntime-genai's
config, pinned bytes) is tests/test_contract.py's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.backbones.transfo_xl.mems import mem_layers, mems_bytes
from ltsedge.backbones.transfo_xl.model import TransfoXL, causal_mask, inverse_frequencies, rel_shift
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.generation import greedy
from ltsedge.profiling import profile_model
from ltsedge.proxy import count_params
from tests.helpers import counted_by_torch, larger_than_init

CPU = ["CPUExecutionProvider"]
TOL = 1e-3
BACKBONE = get_backbone("transfo_xl")


def txl(**fields) -> Architecture:
    base = dict(backbone="transfo_xl", n_layer=2, d_model=32, n_head=[2, 4], d_inner=[48, 40], vocab_size=90,
                mem_len=6)
    return Architecture(**{**base, **fields})


ARCHS = {  # mem_len 6 < the 13 tokens of SEGMENTS: the memory is truncated
    "plain": txl(),
    "adaptive_div2": txl(d_model=48, n_head=[3, 2], d_embed=32, div_val=2, cutoffs=[30, 60], vocab_size=97),
    "adaptive_div1": txl(n_layer=3, n_head=[1, 2, 8], d_inner=[16, 64, 24], d_embed=16),
    "block_types": txl(n_layer=4, n_head=[2, 4, 1, 2], d_inner=[40, 24, 56, 32], mem_len=4,
                       block_types=["attn", "ffn", "attn_ffn", "ffn"], d_embed=24, div_val=2),
}
SEGMENTS = (5, 3, 1, 4)


# --- the proxy ---------------------------------------------------------------------------------------
def test_the_studys_transformer_xl_figures():
    small = txl(n_layer=2, d_model=512, n_head=[2, 2], d_inner=[1216, 1280], vocab_size=267735)
    larger = txl(n_layer=3, d_model=320, n_head=[2, 4, 2], d_inner=[1472, 2368, 3392], vocab_size=267735)
    assert count_params(small).decoder_params == 5_187_008  # the study's 5.2 M
    assert count_params(larger).decoder_params == 6_178_432  # 6.2 M
    for arch in (small, larger):
        assert counted_by_torch(arch) == (count_params(arch).decoder_params, count_params(arch).total_params)


def test_backbone_settings():
    assert BACKBONE.default_space() == {} and BACKBONE.max_sequence(None) is None
    assert BACKBONE.baseline().to_dict() == {"d_model": 512, "d_inner": 2048, "n_head": 8, "layers": list(range(1, 17))}
    assert BACKBONE.genai_compatible is False and BACKBONE.supports_block_types
    assert txl(mem_len=None).mem_len == 192
    with pytest.raises(LtsedgeError, match="even d_model"):
        txl(d_model=33, n_head=[3, 1])
    arch = ARCHS["block_types"]
    assert mem_layers(arch) == (0, 2) and mems_bytes(arch, 2, 100) == 2 * 4 * 32 * 2 * 4


# --- the reference model -----------------------------------------------------------------------------
def test_rel_shift_puts_every_visible_key_at_its_distance():
    T, M = 4, 3
    K = M + T
    rows = torch.arange(K, dtype=torch.float32).expand(1, 1, T, K)  # entry = the pos_emb row it scores
    shifted = rel_shift(rows)[0, 0]
    for i in range(T):
        for j in range(M + i + 1):
            assert shifted[i, j] == K - 1 - (M + i - j)
    assert causal_mask(T, M).sum() == sum(M + i + 1 for i in range(T))


@pytest.mark.parametrize("d_model", [32, 48, 64, 512])
def test_the_frequency_table_is_the_nearest_float32_to_the_exact_values(d_model):
    """The table is in the exported bytes: a float32 power's last bits differ by CPU (numpy's float32 table
    for d_model 48 was 3 ulp off), the nearest float32 to the exact value is one number everywhere."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 200
    table = inverse_frequencies(d_model)
    assert table.dtype == np.float32 and table.shape == (d_model // 2,)
    for k, value in enumerate(table):
        exact = mpmath.power(10000, mpmath.mpf(-2 * k) / d_model)
        error = abs(mpmath.mpf(float(value)) - exact)
        for step in (np.nextafter(value, np.float32(0)), np.nextafter(value, np.float32(np.inf))):
            assert error < abs(mpmath.mpf(float(step)) - exact), (k, value)
    if d_model == 48:  # the exported graph holds this table, as the reference does
        arch = txl(d_model=48, n_head=[3, 2])
        graph = onnx.load_from_string(export_model(arch, ExportOptions(variant="forward")).to_bytes()).graph
        held = [onnx.numpy_helper.to_array(t) for t in graph.initializer if tuple(t.dims) == (d_model // 2,)]
        assert any(h.dtype == np.float32 and h.tobytes() == table.tobytes() for h in held)


def test_segments_with_a_long_enough_memory_equal_one_pass():
    """Recurrence with nothing truncated = attention over the whole sequence at once."""
    arch = txl(n_layer=3, n_head=[2, 4, 1], d_inner=[48, 40, 24], mem_len=64, block_types=["attn", "ffn", "attn_ffn"])
    model = larger_than_init(BACKBONE.build_model(arch))
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, arch.vocab_size, (2, sum(SEGMENTS))))
    with torch.no_grad():
        whole = model(ids)
        mems, start = None, 0
        for length in SEGMENTS:
            logits, mems = model.forward_with_mems(ids[:, start : start + length], mems)
            torch.testing.assert_close(logits, whole[:, start : start + length], atol=1e-4, rtol=1e-4)
            start += length


# --- ONNX --------------------------------------------------------------------------------------------
def exported(arch: Architecture, variant: str, seed: int = 0, target_ort: str | None = None):
    model = larger_than_init(BACKBONE.build_model(arch), seed)
    exported_model = export_model(arch, ExportOptions(variant=variant, target_ort=target_ort),
                                  weights=model.state_dict())
    onnx.checker.check_model(onnx.load_from_string(exported_model.to_bytes()), full_check=True)
    return ort.InferenceSession(exported_model.to_bytes(), providers=CPU), model


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", ARCHS)
def test_generate_export_carries_the_memory_like_pytorch(name, batch):
    arch = ARCHS[name]
    session, model = exported(arch, "generate")
    n_mems = len(mem_layers(arch))
    ids = np.random.default_rng(3).integers(0, arch.vocab_size, (batch, sum(SEGMENTS)))
    ort_mems = [np.zeros((batch, 0, arch.d_model), np.float32)] * n_mems
    torch_mems, start, worst = None, 0, 0.0
    for length in SEGMENTS:
        segment = ids[:, start : start + length]
        feeds = {"input_ids": segment, **{f"mems.{k}": m for k, m in enumerate(ort_mems)}}
        logits, *ort_mems = session.run(None, feeds)
        with torch.no_grad():
            expected, torch_mems = model.forward_with_mems(torch.from_numpy(segment), torch_mems)
        start += length
        assert [m.shape for m in ort_mems] == [(batch, min(start, arch.mem_len), arch.d_model)] * n_mems
        worst = max(worst, np.abs(logits - expected.numpy()).max(),
                    *(np.abs(got - want.numpy()).max() for got, want in zip(ort_mems, torch_mems)))
    assert worst <= TOL


def test_an_ffn_only_layer_has_no_attention_and_no_memory():
    arch = txl(n_layer=3, n_head=[2, 4, 2], d_inner=[48, 40, 32], block_types=["ffn", "attn_ffn", "ffn"])
    spec = BACKBONE.export_spec(arch, "generate")
    assert [t.name for t in spec.input("past")] == ["mems.0"]
    assert [t.name for t in spec.output("present")] == ["new_mems.0"]
    assert spec.input("past")[0].dims == ("batch", "past_sequence", 32)
    model = BACKBONE.empty_model(arch)
    assert model.layers[0].dec_attn is None and model.layers[1].dec_attn is not None
    for variant in ("forward", "generate"):
        proto = onnx.load_from_string(export_model(arch, ExportOptions(variant=variant)).to_bytes())
        assert [n.op_type for n in proto.graph.node].count("Softmax") == 1
        names = {t.name for t in proto.graph.initializer}
        assert not any(n.startswith(("layers.0.dec_attn", "layers.2.dec_attn")) for n in names)
        assert any(n.startswith("layers.1.dec_attn") for n in names)
    assert [i.name for i in proto.graph.input] == ["input_ids", "mems.0"]


def reference_greedy(model: TransfoXL, prompt: np.ndarray, n_new: int):
    """The PyTorch loop: the prompt after an empty memory, then one token at a time after the memory."""
    batch, n_mems = prompt.shape[0], len(mem_layers(model.arch))
    ids, mems = torch.from_numpy(prompt), [torch.zeros(batch, 0, model.arch.d_model)] * n_mems
    tokens, logits = [], []
    with torch.no_grad():
        for _ in range(n_new):
            out, mems = model.forward_with_mems(ids, mems)
            logits.append(out[:, -1].numpy())
            ids = out[:, -1].argmax(-1, keepdim=True)
            tokens.append(ids[:, 0].numpy())
    return np.stack(tokens, 1), logits


@pytest.mark.parametrize("name", ["plain", "block_types"])
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_generation_with_a_truncated_memory_equals_the_pytorch_loop(name, batch):
    """Prompt 7 + 10 tokens after a memory of at most 6 (4): the memory is truncated as generation goes (the
    contract's uncached comparison holds only while nothing is truncated)."""
    arch = ARCHS[name]
    session, model = exported(arch, "generate", seed=4)
    prompt = np.random.default_rng(5).integers(0, arch.vocab_size, (batch, 7))
    got = greedy(session, prompt, 10)
    want_tokens, want_logits = reference_greedy(model, prompt, 10)
    np.testing.assert_array_equal(got.tokens, want_tokens)
    assert max(np.abs(a - b).max() for a, b in zip(got.logits, want_logits)) <= TOL


@pytest.mark.parametrize("variant", ["forward", "generate"])
def test_profile_through_the_registry(variant, tmp_path):
    arch = ARCHS["block_types"]
    arch_file = tmp_path / "txl.json"
    arch_file.write_text(arch.to_json())
    profile = load_profile("cpu").replace(sequence=8, context=8, warmup=1, min_runs=3, max_runs=5, max_seconds=1.0,
                                          tolerance=0.5, drift_check_every=0)
    result = profile_model(arch_file, profile, store_path=tmp_path / "store.sqlite", variant=variant)
    assert result["ok"] and result["latency_ms"] > 0 and result["variant"] == variant
    assert result["decoder_params"] == count_params(arch).decoder_params
    if variant == "generate":
        assert result["kv_cache_mb"] > 0 and result["prefill_latency_ms"] > 0
