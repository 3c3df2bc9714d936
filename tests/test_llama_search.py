"""Searching Llama-family decoders for an app (``--preset llama-edge``): its settings, its layer-scaled
SmolLM2-135M baseline, and a tiny search of it end to end publishing int4 llama bundles."""

from __future__ import annotations

import importlib.util

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ltsedge.exporters import architecture_of
from ltsedge.files import sha256_of
from ltsedge.generation import greedy
from ltsedge.proxy import count_params
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.loop import SearchRun
from ltsedge.store import MeasurementStore
from ltsedge.search.baseline import stacked
from tests.helpers import ltsedge_cli, one_line_exit_2

SMOLLM2_135M_PARAMS = 134_515_008  # transformers' count of HuggingFaceTB/SmolLM2-135M
MB = 2**20


def test_the_llama_edge_preset_times_a_token_after_2048_at_int4():
    settings, profile = resolve(SearchOptions(preset="llama-edge", quiet=True))
    assert settings.space.backbone == "llama" and settings.space.n_kv_head and settings.space.head_dim
    assert (profile.context, profile.sequence) == (2048, 512)
    assert settings.objective == "decode" and settings.precision == "int4"
    assert (settings.export_options.variant, settings.export_options.precision) == ("generate", "int4")
    assert (settings.population, settings.generations) == (100, 30)
    # the user's options still win
    settings, profile = resolve(SearchOptions(preset="llama-edge", precision="int8", population=8, generations=2,
                                              sequence=64, quiet=True))
    assert (settings.precision, settings.population, settings.generations, profile.sequence) == ("int8", 8, 2, 64)


def test_the_llama_baseline_is_smollm2_135m_scaled_by_layers():
    settings, _ = resolve(SearchOptions(preset="llama-edge", quiet=True))
    spec, space = settings.baseline, settings.space
    assert spec.layers == tuple(range(2, 31, 2))
    smollm2 = stacked(spec, 30, space)
    assert (smollm2.n_head, smollm2.n_kv_head, smollm2.head_dim) == ((9,) * 30, (3,) * 30, 64)
    assert (smollm2.d_model, smollm2.d_inner, smollm2.vocab_size, smollm2.tie_embeddings) == (576, (1536,) * 30,
                                                                                              49152, True)
    assert count_params(smollm2).total_params == SMOLLM2_135M_PARAMS
    assert all(space.contains(stacked(spec, n, space)) for n in spec.layers)  # the search can start from them


def test_baseline_options_are_checked_against_its_grouped_heads(tmp_path):
    proc = ltsedge_cli("search", "--preset", "llama-edge", "--baseline-n-head", 8, "--out", tmp_path / "o",
                       "--store", tmp_path / "s.sqlite", "--quiet")
    one_line_exit_2(proc, "--baseline-n-head 8 is not a multiple of the baseline's 3 key/value heads")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_tiny_llama_edge_search_publishes_int4_llama_bundles_timed_after_2048_tokens(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text("[space]\nn_layer = [1, 2]\nd_model = [32, 64]\nn_head = [2, 4]\nn_kv_head = [1, 2]\n"
                     "head_dim = [16, 32]\nd_inner = [64, 128]\nvocab_size = 512\n")
    device = tmp_path / "device.toml"  # the preset's workload, with a short repeat policy
    device.write_text('name = "tiny"\n[repeats]\nwarmup = 1\nmin_runs = 3\nmax_runs = 5\nmax_seconds = 1.0\n'
                      'tolerance = 0.1\ndrift_check_every = 0\n')
    options = SearchOptions(preset="llama-edge", device=str(device), space_file=space, population=6, generations=2,
                            sequence=32, baseline_d_model=64, baseline_d_inner=128, baseline_n_head=6,
                            baseline_layers=2, out=tmp_path / "out", store_path=tmp_path / "s.sqlite", quiet=True)
    settings, profile = resolve(options)
    assert profile.context == 2048
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, options.out, store, log=lambda m: None).run()
    frontier = json.loads((result.out_dir / "frontier.json").read_text())
    assert frontier["objective"] == "decode" and frontier["precision"] == "int4"
    summary = json.loads((result.out_dir / "search.json").read_text())
    # the candidates were bundles of GroupQueryAttention for onnxruntime 1.22, timed where apps run them
    assert summary["export"]["graph_form"] == "contrib" and summary["export"]["target_ort"] == "1.22"
    if importlib.util.find_spec("onnxruntime_genai"):
        assert summary["measured_in"].startswith("onnxruntime-genai ")
    else:
        assert summary["measured_in"] == "onnxruntime session"
    assert frontier["models"]
    for m in frontier["models"]:
        arch = architecture_of(result.out_dir / m["onnx"])
        assert arch.to_dict() == m["architecture"] and arch.backbone == "llama"
        assert sha256_of(result.out_dir / m["onnx"]) == m["sha256"]
        genai = json.loads((result.out_dir / m["bundle"] / "genai_config.json").read_text())
        assert genai["model"]["type"] == "llama"
        model = onnx.load(str(result.out_dir / m["onnx"]), load_external_data=False)
        assert any(n.op_type == "MatMulNBits" for n in model.graph.node)  # int4 weights
        # the decode step was timed with a cache of 2048 tokens: keys and values, fp32, of every layer
        cache = sum(2 * kv * arch.head_dim * 2048 * 4 for kv in arch.n_kv_head) / MB
        assert m["kv_cache_mb"] == pytest.approx(cache) and m["decode_latency_ms"] > 0
        session = ort.InferenceSession(str(result.out_dir / m["onnx"]), providers=["CPUExecutionProvider"])
        generated = greedy(session, np.arange(6, dtype=np.int64)[None, :], 3)
        assert generated.tokens.shape == (1, 3)
