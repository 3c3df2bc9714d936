"""PAR block types on GPT-2: a layer may be standard, FFN-only or attention-only. The proxy counts only
the sub-blocks present; both export variants leave the absent ones out (no nodes, no weights, no cache);
a PAR layer computes what a standard layer without the absent sub-block does. That the proxy equals the
PyTorch modules, both variants equal the reference (cached greedy with left padding included) and
onnxruntime-genai runs the bundle, PAR layers and a model without attention included, is
tests/test_contract.py's (for every backbone that declares ``supports_block_types``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.backbones.kv_cache import cache_layers
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.generation import greedy
from ltsedge.proxy import count_params
from tests.helpers import exported, randomize


def par(block_types, **overrides) -> Architecture:
    n = len(block_types)
    fields = dict(n_layer=n, d_model=64, n_head=[2, 8, 4, 1, 2][:n], d_inner=[128, 96, 64, 80, 48][:n],
                  vocab_size=300, n_positions=64, block_types=block_types)
    return Architecture(**{**fields, **overrides})


MIXES = [
    par(["attn_ffn", "ffn", "attn", "ffn"]),
    par(["ffn", "attn_ffn", "attn"]),  # the first layer has no cache: cache 0 belongs to layer 1
]
ALL_FFN = par(["ffn", "ffn", "ffn"])


def initializers(proto: onnx.ModelProto) -> set[str]:
    return {t.name for t in proto.graph.initializer}


def test_proxy_counts_only_the_sub_blocks_present():
    full = par(["attn_ffn", "attn_ffn"])
    ffn, attn = par(["attn_ffn", "ffn"]), par(["attn_ffn", "attn"])
    d, d_inner = 64, 96
    attention = 2 * d + (d * 3 * d + 3 * d) + (d * d + d)  # ln_1 and the attention's two linear layers
    mlp = 2 * d + (d * d_inner + d_inner) + (d_inner * d + d)  # ln_2 and the MLP's two linear layers
    assert count_params(full).decoder_params - count_params(ffn).decoder_params == attention
    assert count_params(full).decoder_params - count_params(attn).decoder_params == mlp


def test_absent_sub_blocks_have_no_parameters_and_standard_names_stay():
    arch = MIXES[0]  # attn_ffn, ffn, attn, ffn
    names = set(get_backbone("gpt2").empty_model(arch).state_dict())
    layer = {i: {n.split(".", 2)[2] for n in names if n.startswith(f"h.{i}.")} for i in range(arch.n_layer)}
    attention = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                 "attn.c_proj.bias"}
    mlp = {"ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}
    assert layer == {0: attention | mlp, 1: mlp, 2: attention, 3: mlp}


@pytest.mark.parametrize("variant", ["forward", "generate"])
def test_an_ffn_layer_has_no_attention_nodes_weights_or_cache(variant):
    arch = MIXES[1]  # ffn, attn_ffn, attn
    options = ExportOptions(variant=variant, cache_layout="per-layer" if variant == "generate" else None)
    proto = onnx.load_from_string(export_model(arch, options).to_bytes())
    assert sum(n.op_type == "Softmax" for n in proto.graph.node) == len(arch.attention_layers) == 2
    names = initializers(proto)
    assert not any(n.startswith(("h.0.attn.", "h.0.ln_1.")) for n in names)
    assert not any(n.startswith(("h.2.mlp.", "h.2.ln_2.")) for n in names)
    assert {"h.0.mlp.c_fc.weight", "h.1.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "h.2.attn.c_proj.weight"} <= names
    if variant == "generate":
        past = [i.name for i in proto.graph.input if i.name.startswith("past_key_values.")]
        assert past == [f"past_key_values.{k}.{kind}" for k in (0, 1) for kind in ("key", "value")]
        dims = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
        assert cache_layers(arch) == (1, 2)  # cache 0 is layer 1's (8 heads of 8), cache 1 layer 2's (4 of 16)
        assert dims["past_key_values.0.key"] == ["batch_size", 8, "past_sequence", 8]
        assert dims["past_key_values.1.value"] == ["batch_size", 4, "past_sequence", 16]


def test_a_model_without_attention_has_no_cache_and_still_generates():
    proto = onnx.load_from_string(export_model(ALL_FFN, ExportOptions(variant="generate")).to_bytes())
    assert [i.name for i in proto.graph.input] == ["input_ids", "attention_mask", "position_ids"]
    assert [o.name for o in proto.graph.output] == ["logits"]
    assert not any(n.op_type == "Softmax" for n in proto.graph.node)
    session, _ = exported(ALL_FFN)
    assert greedy(session, np.array([[1, 2, 3]]), 4).tokens.shape == (1, 4)


def test_trained_weights_of_another_block_layout_are_refused():
    standard, ffn = par(["attn_ffn", "attn_ffn"]), par(["attn_ffn", "ffn"])
    state = {arch: get_backbone("gpt2").build_model(arch).state_dict() for arch in (standard, ffn)}
    with pytest.raises(LtsedgeError, match="tensor 'h.1.ln_1.weight' is not part of"):
        export_model(ffn, weights=state[standard])
    with pytest.raises(LtsedgeError, match="tensor 'h.1.ln_1.weight' is missing"):
        export_model(standard, weights=state[ffn])


def test_a_par_layer_is_a_standard_layer_without_the_absent_sub_block():
    """Independent of how Block is written: zeroing a standard layer's attention (or MLP) output projection
    leaves the residual stream as the FFN-only (attention-only) layer computes it."""
    backbone = get_backbone("gpt2")
    standard = backbone.build_model(par(["attn_ffn"] * 3))
    randomize(standard, seed=5)
    state = standard.state_dict()
    for name in ("h.0.attn.c_proj", "h.2.mlp.c_proj"):
        state[f"{name}.weight"].zero_()
        state[f"{name}.bias"].zero_()
    layout = par(["ffn", "attn_ffn", "attn"])
    model = backbone.build_model(layout)
    model.load_state_dict({k: v for k, v in state.items() if k in model.state_dict()})
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 300, (2, 9)))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), standard(ids))
