"""GPT-2's and OPT's contrib form: onnxruntime's fused attention (GroupQueryAttention) beside standard operators.

The contract suite (tests/test_contract.py) holds the form to the reference like the default export (forward,
prefill, cached greedy with a left-padded batch, onnxruntime-genai, pins); here what is its own: which layers
it fuses, that a bundle whose every cache layer is fused shares past and present in onnxruntime-genai (and
generates the reference's tokens there), its store key and the command line.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import write_bundle
from ltsedge.exporters.options import ExportOptions
from tests.helpers import larger_than_init, one_line_exit_2, reference_tokens, run_ltsedge

BACKBONES = ("gpt2", "opt")


def mixed(backbone: str) -> Architecture:
    """Head sizes 16 (4 heads of 64) and 32 (2 heads): fused; 8 (8 heads): the kernel takes multiples of 16 only."""
    return Architecture(backbone=backbone, n_layer=3, d_model=64, n_head=(4, 2, 8), d_inner=(96, 64, 128),
                        vocab_size=128, n_positions=64)


def even(backbone: str) -> Architecture:
    """Every layer 4 heads of 16, a PAR layer without attention: every cache fused in either layout."""
    return Architecture(backbone=backbone, n_layer=3, d_model=64, n_head=(4, 4, 4), d_inner=(96, 64, 128),
                        vocab_size=128, n_positions=64, block_types=("attn_ffn", "ffn", "attn_ffn"))


SEED = 1  # weights whose greedy tokens vary (a model repeating one token proves little)


def contrib(variant: str = "generate", **fields) -> ExportOptions:
    return ExportOptions(variant=variant, target_ort="1.22", graph_form="contrib", **fields)


def ops(exported) -> Counter:
    return Counter(n.op_type for n in exported.proto.graph.node)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_layers_attend_fused_where_the_kernel_takes_their_head_size_and_cache(backbone):
    MIXED, EVEN = mixed(backbone), even(backbone)
    assert ops(export_model(MIXED, contrib("forward")))["GroupQueryAttention"] == 2  # layers 0 and 1
    assert ops(export_model(MIXED, contrib()))["GroupQueryAttention"] == 2  # each cache in its layer's heads
    # The uniform layout stores every cache in 8 heads of 8: no layer attends fused there.
    assert ops(export_model(MIXED, contrib(cache_layout="uniform")))["GroupQueryAttention"] == 0
    assert ops(export_model(EVEN, contrib()))["GroupQueryAttention"] == 2  # the FFN-only layer has none
    plain = ops(export_model(EVEN, ExportOptions(variant="generate", target_ort="1.22", graph_form="plain")))
    assert "GroupQueryAttention" not in plain and plain["Softmax"] == 2


@pytest.mark.parametrize("backbone", BACKBONES)
def test_a_bundle_fused_in_every_cache_layer_shares_its_buffer_in_genai_and_generates_the_reference(tmp_path, backbone):
    pytest.importorskip("onnxruntime_genai")
    from tests.helpers import genai_greedy

    MIXED, EVEN = mixed(backbone), even(backbone)
    model = larger_than_init(get_backbone(backbone).build_model(EVEN), seed=SEED).eval()
    prompt = [5, 9, 17, 3, 44, 2]
    expected = reference_tokens(model, prompt, 20)
    assert len(set(expected)) >= 3
    for name, options, shared in (("contrib", contrib(), True), ("mixed", contrib(), False),
                                  ("plain", ExportOptions(variant="generate", graph_form="plain"), False),
                                  ("default", ExportOptions(variant="generate"), True)):
        arch = MIXED if name == "mixed" else EVEN
        weights = model.state_dict() if arch is EVEN else \
            larger_than_init(get_backbone(backbone).build_model(MIXED), seed=SEED).state_dict()
        folder = tmp_path / name
        write_bundle(export_model(arch, options, weights=weights), folder)
        config = json.loads((folder / "genai_config.json").read_text())
        assert config["search"]["past_present_share_buffer"] is shared, name
        if arch is EVEN:  # one past/present buffer, written in place: the reference's tokens all the same
            assert genai_greedy(folder, prompt, 20)[0] == expected, name


@pytest.mark.parametrize("name", BACKBONES)
def test_the_form_is_named_in_the_store_key_and_a_bundle_is_fused_where_every_cache_is(name):
    """A generation bundle is in the contrib form where every cache layer fuses (one past/present buffer in genai:
    docs/benchmarks.md), for onnxruntime 1.22 unless a target is given; the plain form elsewhere, and for older
    targets. A forward model stays plain."""
    backbone, EVEN, MIXED = get_backbone(name), even(name), mixed(name)
    assert ExportOptions(target_ort="1.22").graph_form_of(backbone, EVEN) == "plain"
    generate = ExportOptions(variant="generate")

    def form(options, arch):
        return options.resolved(backbone, arch).graph_form_of(backbone, arch)

    assert form(generate, EVEN) == "contrib" and form(generate, MIXED) == "plain"
    assert generate.resolved(backbone, EVEN).target_ort == "1.22" and generate.resolved(backbone, MIXED) is generate
    assert ExportOptions(variant="generate", target_ort="1.20").graph_form_of(backbone, EVEN) == "plain"
    # the uniform layout of models whose heads differ stores caches in other heads: plain there
    UNEQUAL = Architecture(backbone=name, n_layer=2, d_model=64, n_head=(4, 2), d_inner=(96, 64), vocab_size=128,
                           n_positions=64)
    assert form(generate, UNEQUAL) == "contrib"
    assert form(ExportOptions(variant="generate", cache_layout="uniform"), UNEQUAL) == "plain"
    keys = {form: ExportOptions(variant="generate", target_ort="1.22", graph_form=form).model_key(EVEN)
            for form in (None, "plain", "contrib")}
    assert ":form=contrib:" in keys["contrib"] and "form=" not in keys["plain"] and keys[None] == keys["contrib"]
    assert generate.model_key(EVEN) == keys["contrib"]


def test_export_cli_takes_gpt2s_graph_form(tmp_path):
    arch_file = tmp_path / "gpt2.json"
    arch_file.write_text(even("gpt2").to_json())
    proc = run_ltsedge("export", arch_file, "--variant", "generate", "--target-ort", "1.22", "--graph-form",
                       "contrib", "-o", tmp_path / "bundle")
    assert proc.returncode == 0, proc.stderr
    import onnx

    graph = onnx.load(str(tmp_path / "bundle" / "model.onnx")).graph
    assert sum(n.op_type == "GroupQueryAttention" for n in graph.node) == 2
    assert json.loads((tmp_path / "bundle" / "genai_config.json").read_text())["search"]["past_present_share_buffer"]
    one_line_exit_2(run_ltsedge("export", arch_file, "--variant", "generate", "--graph-form", "contrib", "-o",
                                tmp_path / "old"), "graph form contrib needs onnxruntime >= 1.22")
    assert not (tmp_path / "old").exists()


@pytest.mark.parametrize("backbone", BACKBONES)
def test_int8_and_int4_quantize_the_fused_form_no_worse_than_the_plain_one(backbone):
    """The quantizers leave GroupQueryAttention alone and quantize the projections around it (OPT's q, k and v
    packed into one, whose weights then share a scale per channel or tensor): each form's logits are as near the
    float32 reference's."""
    import onnxruntime as ort

    EVEN = even(backbone)
    model = larger_than_init(get_backbone(backbone).build_model(EVEN), seed=4)
    ids = np.random.default_rng(1).integers(0, EVEN.vocab_size, (1, 12))

    def logits(form: str, precision: str):
        options = ExportOptions(variant="forward", target_ort="1.22", graph_form=form, precision=precision)
        exported = export_model(EVEN, options, weights=model.state_dict())
        assert (ops(exported)["GroupQueryAttention"] == 2) == (form == "contrib"), (form, precision)
        session = ort.InferenceSession(exported.to_bytes(), providers=["CPUExecutionProvider"])
        return session.run(["logits"], {"input_ids": ids})[0]

    reference = logits("plain", "fp32")
    np.testing.assert_allclose(logits("contrib", "fp32"), reference, atol=1e-4 * np.abs(reference).max())
    for precision in ("int8", "int4"):
        errors = {form: np.abs(logits(form, precision) - reference).mean() for form in ("contrib", "plain")}
        assert errors["contrib"] <= 1.5 * errors["plain"] + 1e-3, (precision, errors)


def test_a_search_summary_says_how_its_bundles_forms_were_chosen():
    """Each GPT-2 or OPT candidate's bundle is fused or not by its own heads: the summary says so beside the form."""
    from ltsedge.search.loop import _export_summary_of
    from ltsedge.search.settings import SearchSettings
    from ltsedge.space import SearchSpace

    for name in BACKBONES:
        space = SearchSpace(backbone=name, n_layer=(1, 2), d_model=(64,), n_head=(2, 8), d_inner=(128,), d_embed=(),
                            div_val=(1,), vocab_size=128, n_positions=64)
        bundles = _export_summary_of(SearchSettings(space=space, objective="decode", baseline=None))
        assert bundles["graph_form"] == "contrib" and "where every cache layer attends fused" in \
            bundles["graph_form_rule"]
        for settings in (SearchSettings(space=space, objective="decode", baseline=None, target_ort="1.20"),
                         SearchSettings(space=space, baseline=None)):  # too old for it; forward models
            summary = _export_summary_of(settings)
            assert summary["graph_form"] == "plain" and "graph_form_rule" not in summary
