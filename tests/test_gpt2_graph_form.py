"""GPT-2's contrib form: onnxruntime's fused attention (GroupQueryAttention) beside standard operators.

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

# Head sizes 16 (4 heads of 64) and 32 (2 heads): fused; 8 (8 heads): the kernel takes multiples of 16 only.
MIXED = Architecture(n_layer=3, d_model=64, n_head=(4, 2, 8), d_inner=(96, 64, 128), vocab_size=128, n_positions=64)
# Every layer 4 heads of 16, a PAR layer without attention: every cache fused in either layout.
EVEN = Architecture(n_layer=3, d_model=64, n_head=(4, 4, 4), d_inner=(96, 64, 128), vocab_size=128, n_positions=64,
                    block_types=("attn_ffn", "ffn", "attn_ffn"))


SEED = 1  # weights whose greedy tokens vary (a model repeating one token proves little)


def contrib(variant: str = "generate", **fields) -> ExportOptions:
    return ExportOptions(variant=variant, target_ort="1.22", graph_form="contrib", **fields)


def ops(exported) -> Counter:
    return Counter(n.op_type for n in exported.proto.graph.node)


def test_layers_attend_fused_where_the_kernel_takes_their_head_size_and_cache():
    assert ops(export_model(MIXED, contrib("forward")))["GroupQueryAttention"] == 2  # layers 0 and 1
    assert ops(export_model(MIXED, contrib(cache_layout="per-layer")))["GroupQueryAttention"] == 2
    # The uniform layout (GPT-2's default) stores every cache in 8 heads of 8: no layer attends fused there.
    assert ops(export_model(MIXED, contrib()))["GroupQueryAttention"] == 0
    assert ops(export_model(EVEN, contrib()))["GroupQueryAttention"] == 2  # the FFN-only layer has none
    plain = ops(export_model(EVEN, ExportOptions(variant="generate", target_ort="1.22")))
    assert "GroupQueryAttention" not in plain and plain["Softmax"] == 2


def test_a_bundle_fused_in_every_cache_layer_shares_its_buffer_in_genai_and_generates_the_reference(tmp_path):
    pytest.importorskip("onnxruntime_genai")
    from tests.helpers import genai_greedy

    model = larger_than_init(get_backbone("gpt2").build_model(EVEN), seed=SEED).eval()
    prompt = [5, 9, 17, 3, 44, 2]
    expected = reference_tokens(model, prompt, 20)
    assert len(set(expected)) > 3
    for name, options, shared in (("contrib", contrib(), True), ("mixed", contrib(cache_layout="per-layer"), False),
                                  ("plain", ExportOptions(variant="generate", target_ort="1.22"), False)):
        arch = MIXED if name == "mixed" else EVEN
        weights = model.state_dict() if arch is EVEN else \
            larger_than_init(get_backbone("gpt2").build_model(MIXED), seed=SEED).state_dict()
        folder = tmp_path / name
        write_bundle(export_model(arch, options, weights=weights), folder)
        config = json.loads((folder / "genai_config.json").read_text())
        assert config["search"]["past_present_share_buffer"] is shared, name
        if arch is EVEN:  # one past/present buffer, written in place: the reference's tokens all the same
            assert genai_greedy(folder, prompt, 20)[0] == expected, name


def test_the_form_is_named_in_the_store_key_and_plain_stays_the_default():
    backbone = get_backbone("gpt2")
    assert ExportOptions(target_ort="1.22").graph_form_of(backbone) == "plain"
    assert ExportOptions(variant="generate", target_ort="1.22").graph_form_of(backbone) == backbone.graph_forms[0]
    keys = {form: ExportOptions(variant="generate", target_ort="1.22", graph_form=form).model_key(EVEN)
            for form in (None, "plain", "contrib")}
    assert ":form=contrib:" in keys["contrib"] and "form=" not in keys["plain"] and keys[None] == keys["plain"]


def test_export_cli_takes_gpt2s_graph_form(tmp_path):
    arch_file = tmp_path / "gpt2.json"
    arch_file.write_text(EVEN.to_json())
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


def test_int8_and_int4_quantize_the_fused_form_as_the_plain_one():
    """The quantizers leave GroupQueryAttention alone and quantize the same projections around it as in the plain
    form: at each precision both forms give the same logits."""
    import onnxruntime as ort

    model = larger_than_init(get_backbone("gpt2").build_model(EVEN), seed=4)
    ids = np.random.default_rng(1).integers(0, EVEN.vocab_size, (1, 12))
    for precision in ("int8", "int4"):
        outputs = []
        for form in ("contrib", "plain"):
            options = ExportOptions(variant="forward", target_ort="1.22", graph_form=form, precision=precision)
            exported = export_model(EVEN, options, weights=model.state_dict())
            assert (ops(exported)["GroupQueryAttention"] == 2) == (form == "contrib"), precision
            session = ort.InferenceSession(exported.to_bytes(), providers=["CPUExecutionProvider"])
            outputs.append(session.run(["logits"], {"input_ids": ids})[0])
        np.testing.assert_allclose(outputs[0], outputs[1], atol=2e-3 * np.abs(outputs[1]).max(), err_msg=precision)
