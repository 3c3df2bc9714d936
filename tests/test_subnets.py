"""Sub-networks of a trained Llama model (ltsedge.subnets): genes, importance from a calibration pass, weights
sliced from the parent's, held-out loss. Tiny models with random weights drawn larger than the init, so no
term can hide; seconds in all."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from tests.helpers import larger_than_init, prompts, reference_greedy

torch = pytest.importorskip("torch")

from ltsedge.subnets.forward import final_hidden, output_weight  # noqa: E402
from ltsedge.subnets.genes import SubnetGenes, SubnetSpace  # noqa: E402
from ltsedge.subnets.heuristics import drop_least_influential, uniform_ffn, uniform_kv_groups  # noqa: E402
from ltsedge.subnets.importance import Importance, measure_importance  # noqa: E402
from ltsedge.subnets.loss import held_out_loss  # noqa: E402
from ltsedge.subnets.parent import model_of, parent_weights  # noqa: E402
from ltsedge.subnets.slicing import slice_state_dict  # noqa: E402
from ltsedge.subnets.windows import split_windows  # noqa: E402

# Per layer its own query and key/value heads (groups of 2, 2 and 3 query heads) and SwiGLU width; one head size.
PARENT = Architecture(backbone="llama", n_layer=3, d_model=48, n_head=(4, 6, 6), n_kv_head=(2, 3, 2), head_dim=8,
                      d_inner=(96, 64, 128), vocab_size=90, n_positions=64, rope_theta=500.0)


@pytest.fixture(scope="module")
def weights():
    model = larger_than_init(get_backbone("llama").build_model(PARENT), seed=4)
    return parent_weights(PARENT, model.state_dict())


def token_ids(n: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, PARENT.vocab_size, (n, length))


def logits(arch, weights, ids) -> torch.Tensor:
    with torch.no_grad():
        return model_of(arch, weights)(torch.as_tensor(ids))


@pytest.fixture(scope="module")
def importance(weights):
    return measure_importance(PARENT, weights, token_ids(3, 16))


def test_keeping_everything_is_the_parent_bit_for_bit(weights, importance):
    space = SubnetSpace(PARENT)
    child, state = slice_state_dict(PARENT, weights, space.full(), importance)
    assert child == PARENT and child.id == PARENT.id
    assert state.keys() == weights.keys()
    assert all(torch.equal(state[name], weights[name]) for name in weights)
    ids = token_ids(2, 12, seed=1)
    assert torch.equal(logits(child, state, ids), logits(PARENT, weights, ids))


def masked(weights: dict, groups: dict, channels: dict, dropped: list, heads: dict | None = None) -> dict:
    """The parent's weights with pruned parts zeroed: a dropped group's query heads (and a dropped query head)
    write nothing through o_proj, a dropped channel nothing through down_proj, a dropped layer adds nothing to
    the residual stream."""
    out = {name: tensor.clone() for name, tensor in weights.items()}
    for i, kept in (heads or {}).items():
        columns = out[f"layers.{i}.self_attn.o_proj.weight"].view(PARENT.d_model, -1, PARENT.head_dim)
        columns[:, [h for h in range(PARENT.n_head[i]) if h not in kept]] = 0
    for i, kept in groups.items():
        group = PARENT.n_head[i] // PARENT.kv_heads[i]
        columns = out[f"layers.{i}.self_attn.o_proj.weight"].view(PARENT.d_model, -1, group * PARENT.head_dim)
        columns[:, [g for g in range(PARENT.kv_heads[i]) if g not in kept]] = 0
    for i, kept in channels.items():
        out[f"layers.{i}.mlp.down_proj.weight"][:, [c for c in range(PARENT.d_inner[i]) if c not in kept]] = 0
    for i in dropped:
        out[f"layers.{i}.self_attn.o_proj.weight"].zero_()
        out[f"layers.{i}.mlp.down_proj.weight"].zero_()
    return out


def test_a_sub_network_computes_what_the_parent_does_with_its_pruned_parts_zeroed(weights):
    """The kept groups and channels are the most important, in the parent's order, and the child's layers are
    the kept ones renumbered: its logits are the masked parent's."""
    scores = Importance(ffn=(np.arange(96.0)[::-1], np.zeros(64), np.arange(128.0) % 7),
                        kv_groups=(np.array([1.0, 2.0]), np.array([3.0, 1.0, 2.0]), np.array([5.0, 4.0])),
                        block_influence=np.array([0.5, 0.1, 0.3]), tokens=1)
    genes = SubnetGenes(keep=(True, False, True), kv_groups=(1, 3, 1), ffn=(64, 64, 40))
    child, state = slice_state_dict(PARENT, weights, genes, scores)
    assert (child.n_layer, child.n_head, child.kv_heads, child.d_inner) == (2, (2, 3), (1, 1), (64, 40))
    kept_channels = sorted(sorted(range(128), key=lambda c: (-(c % 7), c))[:40])  # ties: the lower channel
    want = masked(weights, groups={0: [1], 2: [0]}, channels={0: range(64), 2: kept_channels}, dropped=[1])
    ids = token_ids(2, 10, seed=2)
    assert torch.allclose(logits(child, state, ids), logits(PARENT, want, ids), atol=1e-4, rtol=1e-4)
    q = weights["layers.2.self_attn.q_proj.weight"].view(2, 3 * 8, 48)  # group 0's three query heads
    assert torch.equal(state["layers.1.self_attn.q_proj.weight"], q[0])
    assert torch.equal(state["layers.1.mlp.up_proj.weight"], weights["layers.2.mlp.up_proj.weight"][kept_channels])


def test_a_sub_network_keeping_fewer_query_heads_per_group_is_the_parent_without_them(weights):
    """Each kept group keeps its most important query heads, in order, so the child's query head j reads its
    group j // q_heads as the parent's did; its cache (key/value heads) is the parent's where no group goes."""
    scores = Importance(ffn=tuple(np.zeros(d) for d in PARENT.d_inner),
                        kv_groups=(np.array([1.0, 2.0]), np.array([3.0, 1.0, 2.0]), np.array([5.0, 4.0])),
                        block_influence=np.zeros(3), tokens=1,
                        q_heads=(np.array([1.0, 2.0, 3.0, 0.5]), np.array([0.0, 1.0, 2.0, 3.0, 5.0, 4.0]),
                                 np.array([3.0, 1.0, 2.0, 1.0, 9.0, 1.0])))
    genes = SubnetGenes(keep=(True, True, True), kv_groups=(2, 2, 2), ffn=PARENT.d_inner, q_heads=(1, 2, 2))
    child, state = slice_state_dict(PARENT, weights, genes, scores)
    assert (child.n_head, child.kv_heads) == ((2, 4, 4), (2, 2, 2))
    # layer 0: head 1 of group 0, head 2 of group 1; layer 1: groups 0 and 2, all their heads; layer 2: heads
    # 0 and 2 of group 0, then of group 1 head 4 and, of 3 and 5 tied, the lower
    want = masked(weights, groups={1: [0, 2]}, channels={}, dropped=[], heads={0: [1, 2], 2: [0, 2, 3, 4]})
    ids = token_ids(2, 10, seed=2)
    assert torch.allclose(logits(child, state, ids), logits(PARENT, want, ids), atol=1e-4, rtol=1e-4)
    assert state["layers.0.self_attn.k_proj.weight"] is weights["layers.0.self_attn.k_proj.weight"]
    q = weights["layers.2.self_attn.q_proj.weight"].view(6, 8, 48)
    assert torch.equal(state["layers.2.self_attn.q_proj.weight"].view(4, 8, 48), q[[0, 2, 3, 4]])
    no_heads = Importance(scores.ffn, scores.kv_groups, scores.block_influence, 1)
    with pytest.raises(LtsedgeError, match="no figures per query head"):
        slice_state_dict(PARENT, weights, genes, no_heads)


def test_a_sliced_child_exports_and_generates_in_onnxruntime_as_in_pytorch(weights, importance):
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.generation import greedy

    ort = pytest.importorskip("onnxruntime")
    genes = SubnetGenes(keep=(True, True, False), kv_groups=(1, 2, 2), ffn=(32, 64, 128), q_heads=(2, 1, 3))
    child, state = slice_state_dict(PARENT, weights, genes, importance)
    assert child.n_head == (2, 2)
    exported = export_model(child, ExportOptions(variant="generate"), weights=state)
    session = ort.InferenceSession(exported.to_bytes(), providers=["CPUExecutionProvider"])
    prompt, mask = prompts(child, 2, 6, seed=3)
    got = greedy(session, prompt, 6, mask)
    want_tokens, want_logits = reference_greedy(model_of(child, state), prompt, mask, 6)
    np.testing.assert_array_equal(got.tokens, want_tokens)
    assert max(np.abs(a - b).max() for a, b in zip(got.logits, want_logits)) <= 1e-3


def test_importance_measures_each_part_and_is_deterministic(weights):
    """A channel whose up row is zero, a group whose values are zero and a layer adding nothing score zero."""
    silent = {name: tensor.clone() for name, tensor in weights.items()}
    silent["layers.0.mlp.up_proj.weight"][5] = 0
    silent["layers.1.self_attn.v_proj.weight"][8:16] = 0  # key/value head 1 of layer 1
    silent["layers.2.self_attn.o_proj.weight"].zero_()
    silent["layers.2.mlp.down_proj.weight"].zero_()
    ids = token_ids(3, 16)
    first, again = (measure_importance(PARENT, silent, ids, batch=2) for _ in range(2))
    assert first.to_dict() == again.to_dict()
    assert first.tokens == 48
    assert first.ffn[0][5] == 0 and np.all(np.delete(first.ffn[0], 5) > 0)
    assert first.kv_groups[1][1] == 0 and np.all(first.kv_groups[1][[0, 2]] > 0)
    assert first.q_heads[1][[2, 3]].tolist() == [0, 0] and np.all(np.delete(first.q_heads[1], [2, 3]) > 0)
    assert [len(v) for v in first.q_heads] == list(PARENT.n_head)
    assert abs(first.block_influence[2]) < 1e-6 and np.all(first.block_influence[:2] > 1e-3)
    back = Importance.from_dict(json.loads(json.dumps(first.to_dict(), allow_nan=False)))
    assert back.to_dict() == first.to_dict()


def test_held_out_loss_is_transformers_loss_from_a_hugging_face_state_dict():
    """A LlamaForCausalLM's own state_dict (``model.`` names, a tied lm_head) in, its own loss out."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=90, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=6, num_key_value_heads=2, head_dim=8, rope_theta=500.0,
                                      rms_norm_eps=1e-5, max_position_embeddings=64, tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = larger_than_init(transformers.LlamaForCausalLM(config), seed=5).eval()
    hf.tie_weights()
    arch = Architecture(backbone="llama", n_layer=2, d_model=48, n_head=(6, 6), n_kv_head=(2, 2), head_dim=8,
                        d_inner=(96, 96), vocab_size=90, n_positions=64, rope_theta=500.0)
    windows = torch.as_tensor(token_ids(3, 20, seed=6))
    loss = held_out_loss(arch, parent_weights(arch, hf.state_dict()), windows, batch=2)
    with torch.no_grad():
        want = hf(windows, labels=windows).loss.item()
    assert loss.tokens == 3 * 19
    assert loss.nats == pytest.approx(want, rel=1e-5)
    assert loss.perplexity == pytest.approx(np.exp(want), rel=1e-5)


def test_the_scoring_pass_equals_the_reference_models_forward(weights):
    ids = torch.as_tensor(token_ids(2, 16, seed=7))
    model = model_of(PARENT, weights)
    with torch.no_grad():
        ours = final_hidden(model, ids) @ output_weight(model).T
        assert torch.allclose(ours, model(ids), atol=1e-4, rtol=1e-4)


def test_token_windows_are_disjoint_spread_and_say_how_much_text_they_need():
    tokens = np.arange(1000)
    split = split_windows(tokens, 50, calibration=6, held_out=4)
    assert split.calibration.shape == (6, 50) and split.held_out.shape == (4, 50)
    assert not set(split.calibration.ravel()) & set(split.held_out.ravel())
    starts = sorted(split.held_out[:, 0])
    assert starts[0] == 0 and starts[-1] == 950  # the whole text, first to last window
    with pytest.raises(LtsedgeError, match="the text has 449 tokens: 6 calibration and 3 held-out windows of 50 "
                                           "need 450"):
        split_windows(np.arange(449), 50, calibration=6, held_out=3)


def test_genes_outside_the_space_are_one_line_naming_the_gene():
    space = SubnetSpace(PARENT, ffn_step=32)
    assert space.ffn_choices(0) == (32, 64, 96) and space.kv_choices(1) == (1, 2, 3)
    full = space.full()
    bad = {"ffn": SubnetGenes(full.keep, full.kv_groups, (96, 48, 128)),
           "kv_groups": SubnetGenes(full.keep, (2, 4, 2), full.ffn),
           "keep": SubnetGenes((False,) * 3, full.kv_groups, full.ffn)}
    messages = {"ffn": r"gene 'ffn\[1\]' = 48 is invalid: must be one of 32, 64",
                "kv_groups": r"gene 'kv_groups\[1\]' = 4 is invalid: must be one of 1, 2, 3",
                "keep": "must keep at least one layer"}
    for name, genes in bad.items():
        with pytest.raises(LtsedgeError, match=messages[name]):
            space.architecture(genes)
    dropped = SubnetGenes((True, False, True), (1, 1, 2), (32, 32, 64))
    assert space.canonical(dropped) == SubnetGenes((True, False, True), (1, 3, 2), (32, 64, 64))
    assert SubnetGenes.from_dict(json.loads(json.dumps(dropped.to_dict()))) == dropped
    assert space.q_choices(2) == (1, 2, 3)
    with pytest.raises(LtsedgeError, match=r"gene 'q_heads\[2\]' = 4 is invalid: must be one of 1, 2, 3"):
        space.architecture(SubnetGenes(full.keep, full.kv_groups, full.ffn, (2, 2, 4)))
    # every group keeping all its query heads is one sub-network, however it is written
    assert space.canonical(SubnetGenes(full.keep, full.kv_groups, full.ffn, (2, 2, 3))) == full
    fewer = SubnetGenes((True, False, True), (1, 3, 2), (32, 64, 64), (1, 1, 3))
    assert space.canonical(fewer).q_heads == (1, 2, 3)  # a dropped layer's count is the parent's
    assert SubnetGenes.from_dict(json.loads(json.dumps(fewer.to_dict()))) == fewer
    assert space.architecture(fewer).n_head == (1, 6)
    with pytest.raises(LtsedgeError, match="an object with the lists keep, kv_groups and ffn"):
        SubnetGenes.from_dict({"keep": [True], "kv_groups": 1, "ffn": [64]})
    with pytest.raises(LtsedgeError, match="cut from a llama model, not a gpt2 one"):
        SubnetSpace(Architecture(n_layer=1, d_model=32, n_head=(2,), d_inner=(64,)))


def test_the_heuristics_are_points_of_the_space(importance):
    space = SubnetSpace(PARENT, ffn_step=32)
    least = int(np.argmin(importance.block_influence))
    assert drop_least_influential(space, importance, 1).keep == tuple(i != least for i in range(3))
    assert uniform_ffn(space, 64).ffn == (64, 64, 64)
    assert uniform_kv_groups(space, 2).kv_groups == (2, 2, 2)


def test_text_tokenized_for_another_model_is_one_line(weights):
    with pytest.raises(LtsedgeError, match="token ids 0 .. 95 do not fit the model's vocabulary of 90"):
        held_out_loss(PARENT, weights, np.array([[0, 95, 3]]))
    state = dict(weights)
    state["layers.1.mlp.up_proj.weight"] = state["layers.1.mlp.up_proj.weight"][:32]
    with pytest.raises(LtsedgeError, match="tensor 'layers.1.mlp.up_proj.weight' has shape"):
        parent_weights(PARENT, state)
