"""The OPT backbone's own: the study's reference counts, Hugging Face's parameter names and checkpoints,
PAR block types, positions at OPT's offset, the reference's cache. What every backbone must do (the proxy
equal to the PyTorch modules, both export variants equal to the reference, cached greedy decoding with left
padding, the onnxruntime-genai bundle, pinned bytes) is tests/test_contract.py's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.exporters.trained_weights import load_state_dict
from ltsedge.proxy import count_params
from ltsedge.space import SearchSpace
from tests.helpers import counted_by_torch, larger_than_init, prompts

CPU = ["CPUExecutionProvider"]
OPT = get_backbone("opt")


def opt_arch(n_head=(2, 4, 8), d_inner=(64, 48, 80), block_types=(), **overrides) -> Architecture:
    fields = dict(backbone="opt", n_layer=len(n_head), d_model=32, n_head=n_head, d_inner=d_inner, vocab_size=60,
                  n_positions=32, block_types=block_types)
    return Architecture(**{**fields, **overrides})


def opt_shape(n_layer: int, d_inner: int) -> Architecture:
    return Architecture(backbone="opt", n_layer=n_layer, d_model=1024, n_head=[16] * n_layer,
                        d_inner=[d_inner] * n_layer, vocab_size=50272, n_positions=2048)


# --- the proxy -------------------------------------------------------------------------------------

def test_the_studys_reference_counts():
    """OPT-350M's shape -> 304.4 M decoder parameters, 26 x 1024 with d_inner 2816 -> 261.4 M; position
    table (2048 + 2 rows) counted as decoder, as OPT's code and the study count it."""
    for arch, millions in [(opt_shape(24, 4096), 304.4), (opt_shape(26, 2816), 261.4)]:
        counts = count_params(arch)
        assert round(counts.decoder_params / 1e6, 1) == millions
        assert counts.embedding_params == 50272 * 1024
        assert counted_by_torch(arch) == (counts.decoder_params, counts.total_params)
    assert count_params(opt_shape(24, 4096)).decoder_params == 304_410_624


def test_block_types_count_only_the_sub_blocks_they_have():
    d, di = 64, 200
    full, ffn, attn = (count_params(opt_arch(n_head=(4,), d_inner=(di,), d_model=d, block_types=(t,))).decoder_params
                       for t in ("attn_ffn", "ffn", "attn"))
    assert full - ffn == 2 * d + 4 * (d * d + d)  # the attention sub-block: its LayerNorm and 4 projections
    assert full - attn == 2 * d + 2 * d * di + di + d  # the FFN sub-block: its LayerNorm, fc1 and fc2


# --- the architecture and the backbone ---------------------------------------------------------------

def test_adaptive_embeddings_are_refused():
    for overrides in ({"d_embed": 16}, {"div_val": 2, "d_embed": 32}):
        with pytest.raises(LtsedgeError, match="backbone opt: it has plain embeddings"):
            opt_arch(**overrides)


def test_hugging_face_parameter_names_and_shapes():
    arch = opt_arch(n_head=(2, 4), d_inner=(64, 48), block_types=("ffn", "attn_ffn"))
    shapes = {name: tuple(t.shape) for name, t in OPT.empty_model(arch).state_dict().items()}
    assert shapes["decoder.embed_tokens.weight"] == (60, 32)
    assert shapes["decoder.embed_positions.weight"] == (32 + 2, 32)  # OPT's offset of 2
    assert shapes["decoder.final_layer_norm.weight"] == (32,)
    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
        assert shapes[f"decoder.layers.1.self_attn.{proj}.weight"] == (32, 32)
        assert shapes[f"decoder.layers.1.self_attn.{proj}.bias"] == (32,)
    assert shapes["decoder.layers.1.self_attn_layer_norm.bias"] == (32,)
    assert shapes["decoder.layers.1.fc1.weight"] == (48, 32) and shapes["decoder.layers.1.fc2.weight"] == (32, 48)
    assert shapes["decoder.layers.1.final_layer_norm.weight"] == (32,)
    assert not any(n.startswith("decoder.layers.0.self_attn") for n in shapes)  # FFN-only: no attention
    assert "decoder.layers.0.fc1.bias" in shapes and not any("lm_head" in n for n in shapes)  # tied output


def test_default_space_baseline_and_longest_sequence():
    space = SearchSpace.default("opt")
    assert (min(space.n_layer), max(space.n_layer)) == (3, 29)
    assert space.d_model == tuple(range(512, 1473, 64)) and space.n_head == (2, 4, 8, 16)
    assert space.d_inner == tuple(range(512, 6081, 64)) and space.d_inner_choices(1472)[0] == 512
    assert (space.vocab_size, space.n_positions, space.d_embed, space.div_val) == (50272, 2048, (), (1,))
    assert all(d % h == 0 for d in space.d_model for h in space.n_head)
    assert all(a.backbone == "opt" and not a.adaptive for a in space.sample(50, seed=1))
    assert OPT.max_sequence(space) == 2048
    base = OPT.baseline()
    assert (base.d_model, base.d_inner, base.n_head, base.layers) == (1024, 4096, 16, (4, 8, 12, 16, 20, 24))
    assert OPT.supports_block_types and OPT.genai_compatible and OPT.graph_version == 2


# --- export: forward --------------------------------------------------------------------------------

def randomized(arch: Architecture, seed: int = 0):
    """The reference with every tensor random and larger than the init (flat logits would hide errors)."""
    return larger_than_init(OPT.build_model(arch), seed)


def session_of(arch, model, variant="forward") -> ort.InferenceSession:
    exported = export_model(arch, ExportOptions(variant=variant), weights=model.state_dict())
    onnx.checker.check_model(onnx.load_from_string(exported.to_bytes()), full_check=True)
    return ort.InferenceSession(exported.to_bytes(), providers=CPU)


def test_positions_read_the_table_two_rows_down():
    """Rows 0 and 1 (OPT's offset) are never read: changing them changes nothing, in PyTorch and ONNX."""
    arch = opt_arch()
    model = randomized(arch)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    before = session_of(arch, model).run(["logits"], {"input_ids": ids.numpy()})[0]
    with torch.no_grad():
        expected = model(ids)
        model.decoder.embed_positions.weight[:2] = 100.0
        assert torch.equal(model(ids), expected)
        row = model.decoder.embed_positions.weight[2].clone()
        model.decoder.embed_positions.weight[2] += 1.0  # position 0 reads row 2
        assert not torch.allclose(model(ids), expected)
        model.decoder.embed_positions.weight[2] = row
    after = session_of(arch, model).run(["logits"], {"input_ids": ids.numpy()})[0]
    np.testing.assert_array_equal(before, after)


# --- export: generate -------------------------------------------------------------------------------

PAR_ARCH = opt_arch(n_head=(4, 1, 2, 8), d_inner=(40, 96, 24, 64),
                    block_types=("ffn", "attn_ffn", "ffn", "attn_ffn"))


def test_the_pytorch_cache_gives_the_prefills_logits():
    """The reference's own cache path (one cache per attention layer) equals a prefill of everything."""
    arch = PAR_ARCH
    model = randomized(arch)
    ids = torch.from_numpy(prompts(arch, 1, 9)[0])
    with torch.no_grad():
        full, _ = model.forward_with_cache(ids, torch.ones_like(ids), torch.arange(9)[None])
        _, past = model.forward_with_cache(ids[:, :6], torch.ones(1, 6, dtype=torch.long), torch.arange(6)[None])
        assert len(past) == 2  # layers 1 and 3 attend; the FFN-only layers 0 and 2 have no cache
        step, _ = model.forward_with_cache(ids[:, 6:], torch.ones_like(ids), torch.arange(6, 9)[None], past)
    assert (step - full[:, 6:]).abs().max() <= 1e-4


def test_an_ffn_only_layer_has_no_attention_nodes_and_no_cache():
    arch = PAR_ARCH  # layers 0 and 2 FFN-only
    for variant in ("forward", "generate"):
        proto = onnx.load_from_string(export_model(arch, ExportOptions(variant=variant)).to_bytes())
        assert sum(n.op_type == "Softmax" for n in proto.graph.node) == 2
        weights = {t.name for t in proto.graph.initializer}
        assert not any(w.startswith(("decoder.layers.0.self_attn", "decoder.layers.2.self_attn")) for w in weights)
        assert {"decoder.layers.0.fc1.weight", "decoder.layers.3.self_attn.q_proj.weight"} <= weights
    spec = OPT.export_spec(arch, "generate", cache_layout="per-layer")
    past = {t.name: t.dims for t in spec.input("past")}
    assert list(past) == [f"past_key_values.{k}.{kind}" for k in (0, 1) for kind in ("key", "value")]
    assert past["past_key_values.0.key"] == ("batch_size", 1, "past_sequence", 32)  # cache 0 = layer 1
    assert past["past_key_values.1.value"] == ("batch_size", 8, "past_sequence", 4)  # cache 1 = layer 3
    assert [t.name for t in spec.output("present")][-1] == "present.1.value"


def test_a_hugging_face_opt_state_dict_maps_by_name(tmp_path):
    """Where transformers is installed: OPTForCausalLM's weights (``model.`` stripped, the tied
    ``lm_head`` dropped) give our reference and our ONNX export Hugging Face's logits."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    arch = opt_arch(n_head=(4, 4), d_inner=(80, 80))
    config = transformers.OPTConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, ffn_dim=80,
                                    num_attention_heads=4, max_position_embeddings=32, word_embed_proj_dim=32,
                                    do_layer_norm_before=True, activation_function="relu", pad_token_id=1,
                                    tie_word_embeddings=True, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    hf = transformers.OPTForCausalLM(config).eval()
    state = {k.removeprefix("model."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    torch.save(hf.state_dict(), tmp_path / "hf.pt")  # as saved: ``model.`` prefix, tied lm_head included
    model = OPT.build_model(arch)
    model.load_state_dict(state)
    ids = torch.tensor([[5, 7, 11, 13, 17, 19]])
    with torch.no_grad():
        expected = hf(ids).logits
        assert (model(ids) - expected).abs().max() <= 1e-4
    session = ort.InferenceSession(export_model(arch, weights=state).to_bytes(), providers=CPU)
    assert np.abs(session.run(["logits"], {"input_ids": ids.numpy()})[0] - expected.numpy()).max() <= 1e-3
    from_file = export_model(arch, weights=load_state_dict(tmp_path / "hf.pt"))
    assert from_file.to_bytes() == export_model(arch, weights=state).to_bytes()


def test_a_checkpoint_in_hugging_face_layout_loads_with_its_tied_output_layer(tmp_path):
    """``--weights`` takes an OPTForCausalLM-style file: names under ``model.``, the tied ``lm_head.weight``
    beside the embedding (dropped when equal to it, refused when not)."""
    arch = opt_arch()
    state = {k: v.clone() for k, v in OPT.build_model(arch, seed=3).state_dict().items()}
    hf_style = {f"model.{k}": v for k, v in state.items()}
    hf_style["lm_head.weight"] = state["decoder.embed_tokens.weight"]
    torch.save(hf_style, tmp_path / "hf.pt")
    assert export_model(arch, weights=load_state_dict(tmp_path / "hf.pt")).to_bytes() == \
        export_model(arch, weights=state).to_bytes()
    hf_style["lm_head.weight"] = hf_style["lm_head.weight"] + 1
    torch.save(hf_style, tmp_path / "untied.pt")
    with pytest.raises(LtsedgeError, match="'lm_head.weight' differs from 'decoder.embed_tokens.weight'"):
        export_model(arch, weights=load_state_dict(tmp_path / "untied.pt"))
