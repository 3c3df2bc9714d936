"""Llama's graph forms: onnxruntime's fused operators (contrib) beside standard ONNX operators (plain).

The contract suite (tests/test_contract.py) holds the contrib form to the reference like the default export
(forward, prefill, cached greedy with a left-padded batch, onnxruntime-genai, pins); here what is its own:
its operators, the int4 embedding read from the output layer's blocks, which targets get it, its store key
and its refusals.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.precision import QuantOptions
from ltsedge.generation import greedy
from tests.helpers import larger_than_init, one_line_exit_2, run_ltsedge

CPU = ["CPUExecutionProvider"]
# Head sizes 16 and 32 (fused), grouped key/value heads, untied; a layer of head size 8 (the fused kernel
# takes multiples of 16 only) attends in standard operators.
ARCH = Architecture(backbone="llama", n_layer=3, d_model=64, n_head=(4, 2, 8), n_kv_head=(2, 1, 4),
                    d_inner=(96, 64, 128), vocab_size=256, n_positions=64, tie_embeddings=False)
TIED = Architecture(backbone="llama", n_layer=2, d_model=64, n_head=(2, 4), n_kv_head=(1, 2), d_inner=(96, 64),
                    vocab_size=256, n_positions=64)


def contrib(variant: str = "generate", **fields) -> ExportOptions:
    return ExportOptions(variant=variant, target_ort="1.22", graph_form="contrib", **fields)


def ops(exported) -> Counter:
    return Counter(n.op_type for n in exported.proto.graph.node)


def test_the_contrib_form_is_onnxruntimes_fused_operators_where_the_kernel_takes_the_head_size():
    for variant in ("forward", "generate"):
        counts = ops(export_model(ARCH, contrib(variant)))
        assert counts["GroupQueryAttention"] == 2  # layers 0 and 1; layer 2's heads are 8 wide
        assert counts["Softmax"] == 1  # layer 2, in standard operators
        assert counts["SkipSimplifiedLayerNormalization"] == 2 * ARCH.n_layer  # every RMSNorm but the first
        assert counts["ReduceMean"] == 1
    plain = ops(export_model(ARCH, ExportOptions(variant="generate", target_ort="1.22", graph_form="plain")))
    assert not {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"} & set(plain)
    assert plain["Softmax"] == ARCH.n_layer


def test_the_plain_form_projects_q_k_and_v_at_once_and_adds_one_mask_to_every_layers_scores():
    """One packed product for q, k and v (at int4 the activations are quantized once, not thrice) and the mask
    made once and added, not a Where per layer: a 512-token SmolLM2-135M prefill at int4 took 482 ms, now 427
    (genai's builder: 404), and a decode step 15.2 ms, now 13.9, on the 2-core VM."""
    counts = ops(export_model(TIED, ExportOptions(variant="generate", target_ort="1.20", precision="int4")))
    assert counts["MatMulNBits"] == 5 * TIED.n_layer + 1  # qkv, o, gate, up, down; the output layer
    assert counts["Split"] == 3 * TIED.n_layer  # q, k and v; the halves of q and of k to rotate
    assert counts["Where"] == 1 and counts["Softmax"] == TIED.n_layer


def _initializers(exported) -> dict[str, np.ndarray]:
    small = {t.name: numpy_helper.to_array(t) for t in exported.proto.graph.initializer}
    return {**small, **dict(exported.weights)}


def _dequantized(blocks: np.ndarray, scales: np.ndarray, width: int) -> np.ndarray:
    """A MatMulNBits weight ``[rows, blocks, block / 2]`` (two 4-bit values a byte, low first, zero point 8)
    times its scales ``[rows, blocks]``: the ``[rows, width]`` matrix it multiplies by."""
    values = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:2], -1).astype(np.float32) - 8
    return (values * scales.reshape(*blocks.shape[:2], 1)).reshape(len(blocks), -1)[:, :width]


def _reference_of_quantized(arch, model, exported) -> torch.nn.Module:
    """The reference with every weight the int4 model multiplies by replaced by its dequantized blocks (the
    token embedding too, where the model reads it from the output layer's)."""
    arrays = _initializers(exported)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for node in exported.proto.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        name = node.input[1].removesuffix(".T_Q4")
        width = next(a.i for a in node.attribute if a.name == "K")
        weight = torch.from_numpy(_dequantized(arrays[node.input[1]], arrays[node.input[2]], width))
        if name.endswith("qkv_proj.weight"):
            prefix = name.removesuffix("qkv_proj.weight")
            sizes = [state[f"{prefix}{p}_proj.weight"].shape[0] for p in "qkv"]
            for p, part in zip("qkv", weight.split(sizes)):
                state[f"{prefix}{p}_proj.weight"] = part
        else:
            state[name] = weight
    reference = get_backbone(arch.backbone).build_model(arch)
    reference.load_state_dict(state)
    return reference.eval()


@pytest.mark.parametrize("form", ["plain", "contrib"])
@pytest.mark.parametrize("arch", [TIED, ARCH], ids=["tied", "untied"])
def test_int4_computes_the_reference_of_its_dequantized_weights_with_the_embedding_stored_once(arch, form):
    """Accuracy level 1 (fp32 compute): the int4 model is the reference whose weights are its 4-bit blocks; a
    tied embedding is read from the output layer's blocks (contrib: GatherBlockQuantized; plain: standard
    operators, loaded by the default target), the fp32 table not stored."""
    model = larger_than_init(get_backbone("llama").build_model(arch), seed=3)
    quantization = QuantOptions(accuracy_level=1)
    options = contrib(precision="int4", quantization=quantization) if form == "contrib" else \
        ExportOptions(variant="generate", target_ort="1.20", precision="int4", quantization=quantization)
    exported = export_model(arch, options, weights=model.state_dict())
    names = {name for name, _ in exported.weights}
    fused_lookups = ops(exported)["GatherBlockQuantized"]
    lookups = {n.input[0] for n in exported.proto.graph.node if n.op_type == "Gather"} & {
        "embed_tokens.weight.T_Q4", "embed_tokens.weight.T_scales"}
    if arch.tie_embeddings:
        assert "embed_tokens.weight" not in names and "embed_tokens.weight.T_Q4" in names
        assert (fused_lookups, len(lookups)) == ((1, 0) if form == "contrib" else (0, 2))  # blocks and scales
    else:
        assert fused_lookups == 0 and "embed_tokens.weight" in names  # its own table: nothing to share
    reference = _reference_of_quantized(arch, model, exported)
    session = ort.InferenceSession(exported.to_bytes(), providers=CPU)
    prompt = np.random.default_rng(0).integers(0, arch.vocab_size, (2, 6))
    mask = np.ones_like(prompt)
    mask[1, :2] = 0
    got = greedy(session, prompt, 5, mask)
    with torch.no_grad():
        for row in range(2):
            ids = torch.from_numpy(prompt[row][mask[row] == 1][None])
            for step in range(5):
                logits = reference(ids)[0, -1].numpy()
                assert np.abs(logits - got.logits[step][row]).max() <= 1e-3, (row, step)
                ids = torch.cat([ids, torch.tensor([[got.tokens[row, step]]])], 1)


def test_the_tied_embedding_stays_fp32_where_the_blocks_do_not_hold_it_as_rows():
    """Asymmetric blocks (zero points) or blocks that do not tile d_model: the lookup keeps its fp32 table."""
    for quantization in (QuantOptions(symmetric=False), QuantOptions(block_size=128)):
        for options in (contrib(precision="int4", quantization=quantization),
                        ExportOptions(variant="generate", precision="int4", quantization=quantization)):
            exported = export_model(TIED, options)
            assert ops(exported)["GatherBlockQuantized"] == 0 and "embed_tokens.weight" in dict(exported.weights)


def test_the_form_follows_the_target_and_is_named_in_the_store_key_unless_plain():
    backbone = get_backbone("llama")
    default_form = backbone.graph_forms[0]
    assert ExportOptions().graph_form_of(backbone) == "plain"  # the default target, 1.20: no contrib operators
    assert ExportOptions(target_ort="1.21").graph_form_of(backbone) == "plain"
    assert ExportOptions(target_ort="1.22").graph_form_of(backbone) == default_form
    assert ExportOptions(target_ort="1.22", graph_form="plain").graph_form_of(backbone) == "plain"
    keys = {form: ExportOptions(variant="generate", target_ort="1.22", graph_form=form).model_key(TIED)
            for form in ("plain", "contrib")}
    assert ":form=contrib:" in keys["contrib"] and "form=" not in keys["plain"]
    # A generation bundle's own default, the fastest in onnxruntime-genai's loop, where the target runs it ...
    assert ExportOptions(variant="generate", target_ort="1.22").model_key(TIED) == keys[backbone.generate_graph_form]
    # ... and without a target, the oldest onnxruntime that runs it; a target too old for it keeps plain ops.
    assert ExportOptions(variant="generate").model_key(TIED) == keys["contrib"]
    assert ExportOptions(variant="generate").resolved(backbone).target_ort == "1.22"
    assert "form=" not in ExportOptions(variant="generate", target_ort="1.20").model_key(TIED)
    assert "form=" not in ExportOptions(variant="forward").model_key(TIED)  # forward keeps its default, plain
    # GPT-2's forward models are plain; its bundles fused where every cache fuses (tests/test_fused_attention_forms.py)
    gpt2, narrow = (Architecture(n_layer=1, d_model=32, n_head=(h,), d_inner=(64,), vocab_size=50, n_positions=16)
                    for h in (2, 4))  # heads of 16; of 8, which the fused kernel does not take
    assert "form=" not in ExportOptions(target_ort="1.22").model_key(gpt2)
    assert ExportOptions(variant="generate").resolved(get_backbone("gpt2"), gpt2).target_ort == "1.22"
    assert ExportOptions(variant="generate").resolved(get_backbone("gpt2"), narrow).target_ort is None


def test_a_bundles_default_form_shares_past_and_present_in_genai_and_the_plain_one_does_not(tmp_path):
    from ltsedge.exporters.bundle import write_bundle

    for options, shared in ((ExportOptions(variant="generate"), True),
                            (ExportOptions(variant="generate", target_ort="1.20"), False)):
        exported = export_model(TIED, options)
        assert (ops(exported)["GroupQueryAttention"] > 0) == shared
        folder = tmp_path / str(shared)
        write_bundle(exported, folder)
        config = json.loads((folder / "genai_config.json").read_text())
        assert config["search"]["past_present_share_buffer"] is shared
    # A layer whose head size the fused kernel does not take attends in standard operators: no shared buffer.
    mixed = export_model(ARCH, ExportOptions(variant="generate"))
    assert 0 < ops(mixed)["GroupQueryAttention"] < ARCH.n_layer
    write_bundle(mixed, tmp_path / "mixed")
    config = json.loads((tmp_path / "mixed" / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is False


def test_contrib_is_refused_for_a_target_without_its_operators_and_for_a_backbone_without_the_form():
    with pytest.raises(LtsedgeError, match=r"graph form contrib needs onnxruntime >= 1\.22.*the target is "
                                           r"onnxruntime 1\.20"):
        ExportOptions(graph_form="contrib")
    with pytest.raises(LtsedgeError, match="graph form 'fused' is unknown"):
        ExportOptions(graph_form="fused")
    transfo_xl = Architecture(backbone="transfo_xl", n_layer=1, d_model=32, n_head=(2,), d_inner=(64,),
                              vocab_size=50, n_positions=16)
    with pytest.raises(LtsedgeError, match="backbone transfo_xl has no graph form 'contrib' \\(forms: plain\\)"):
        export_model(transfo_xl, ExportOptions(target_ort="1.22", graph_form="contrib"))


def test_export_cli_takes_the_graph_form(tmp_path):
    arch_file = tmp_path / "llama.json"
    arch_file.write_text(TIED.to_json())
    proc = run_ltsedge("export", str(arch_file), "-o", str(tmp_path / "m.onnx"), "--target-ort", "1.22",
                       "--graph-form", "contrib")
    assert proc.returncode == 0, proc.stderr
    import onnx

    assert "GroupQueryAttention" in {n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node}
    one_line_exit_2(run_ltsedge("export", str(arch_file), "-o", str(tmp_path / "old.onnx"), "--graph-form",
                                "contrib"), "graph form contrib needs onnxruntime >= 1.22")
    assert not (tmp_path / "old.onnx").exists()
