"""The backbone contract: what every backbone must do, checked for each one the registry knows
(``ltsedge.backbones.backbone_names()``) and each one the tests define (``TEST_BACKBONES``, registered
around each test here, one line each).

- the proxy (``count_params``) equals the parameters of the PyTorch module, decoder and total;
- each declared export variant equals the PyTorch reference: ``forward`` at several lengths, at the default
  and the oldest target's opset, and ``generate`` both on a whole sequence and in cached greedy decoding,
  which gives the tokens and logits of an uncached loop (the whole sequence again at each step), a
  left-padded batch included where the variant declares an attention mask; an undeclared variant is refused;
- the exports declare their I/O spec, and ``export_model``'s own shared weights are the reference model's;
- the generate bundle carries onnxruntime-genai's config exactly where the backbone declares
  ``genai_compatible``, and onnxruntime-genai generates the reference's tokens from it;
- the exported bytes of each architecture and variant are pinned (``PINS``);
- each graph form a backbone has besides its default export's (``graph_forms``: onnxruntime's fused operators)
  is held to all of the above too, exported for the oldest onnxruntime that runs it (``FORM_TARGETS``).

Which architectures a backbone is held to follows from what it declares: PAR layers where
``supports_block_types``, adaptive embeddings where ``supports_adaptive``, grouped key/value heads, a head
size of its own and an untied output layer where its ``architecture_fields`` have them, the generate parts
where ``"generate" in variants`` — never from its name. Per-backbone test files keep what is that backbone's own.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import BLOCK_TYPES, Architecture
from ltsedge.backbones import backbone_names, get_backbone, register, unregister
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model, read_metadata, weight_seed
from ltsedge.exporters.bundle import write_bundle
from ltsedge.exporters.genai import hf_config, hf_family
from ltsedge.exporters.options import ExportOptions
from ltsedge.generation import greedy
from ltsedge.iospec import ExportSpec
from ltsedge.proxy import count_params
from ltsedge.space import SearchSpace
from ltsedge.workloads import BATCH_AXES
from tests.helpers import counted_by_torch, genai_greedy, graph_digest, larger_than_init
from tests.toy_backbone import Toy

# Backbones the tests define: each is registered for the duration of each contract test, and must pass it.
TEST_BACKBONES = [Toy()]

CPU = ["CPUExecutionProvider"]
TOL = 1e-3
VARIANTS = ("forward", "generate")
OLDEST_TARGET = "1.14"  # opset 18: GELU as its erf formula, where the default target's 21 has the Gelu operator
FORM_TARGETS = {"contrib": "1.22", "plain": "1.20"}  # the oldest onnxruntime each form runs in (exporters.options)


def contract_backbones():
    """name -> backbone: the registry's, and the tests' own (not registered outside a test)."""
    return {**{name: get_backbone(name) for name in backbone_names()}, **{b.name: b for b in TEST_BACKBONES}}


BACKBONES = contract_backbones()


def contract_archs(backbone) -> dict[str, dict]:
    """The architectures (as fields) a backbone is held to, by what it declares. "plain" is
    tests/test_pins.py's "plain" architecture (for GPT-2 the same bytes, pinned there too)."""
    archs = {"plain": dict(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 192), vocab_size=512, n_positions=64)}
    small = dict(d_model=32, vocab_size=97, n_positions=32)
    if backbone.supports_block_types:
        # the first layer without attention (cache 0 is layer 1's), an attention-only layer, per-layer heads
        archs["par"] = dict(small, n_layer=4, n_head=(4, 1, 2, 8), d_inner=(40, 96, 24, 64),
                            block_types=("ffn", "attn_ffn", "attn", "ffn"))
        archs["no_attention"] = dict(small, n_layer=2, n_head=(2, 4), d_inner=(64, 48), block_types=("ffn", "ffn"))
    if backbone.supports_adaptive:
        par = ("attn", "attn_ffn") if backbone.supports_block_types else ()
        archs["adaptive"] = dict(small, n_layer=2, d_model=48, n_head=(3, 2), d_inner=(40, 56), d_embed=32, div_val=2,
                                 cutoffs=(30, 60), block_types=par)
        archs["narrow_embedding"] = dict(small, n_layer=2, n_head=(1, 2), d_inner=(16, 64), d_embed=16)
    grouped = {"n_kv_head": (2, 1, 2), "head_dim": 12, "tie_embeddings": False}  # attention 48, 72, 24 wide
    grouped = {k: v for k, v in grouped.items() if k in backbone.architecture_fields}
    if grouped:
        archs["grouped"] = dict(small, n_layer=3, n_head=(4, 6, 2), d_inner=(40, 56, 24), **grouped)
        if "contrib" in backbone.graph_forms:  # a head size fused attention takes (a multiple of 16; 12 is not)
            archs["fused_grouped"] = dict(archs["grouped"], head_dim=16)
    return archs


def fast_kind(backbone, form: str | None = None) -> str:
    """The architecture the fast loop (``-m "not slow"``) checks a backbone on: the one with the most of what
    it declares (adaptive embeddings with PAR layers, PAR layers, grouped heads, or plain; grouped heads its
    fused attention takes for the contrib form); the others are ``slow``."""
    kinds = ("fused_grouped", "plain") if form == "contrib" else ("adaptive", "par", "grouped", "plain")
    return next(kind for kind in kinds if kind in contract_archs(backbone))


def extra_forms(backbone) -> list[str]:
    """The graph forms a backbone has besides the one its default export is in (the forward variant's), and
    that one too where a generation bundle's default is another (Llama's bundles: contrib)."""
    default = ExportOptions().graph_form_of(backbone)
    generate_default = backbone.generate_graph_form or default
    return [form for form in backbone.graph_forms if form != default or generate_default != default]


def cases(*, variants: bool = False, all_fast: bool = False):
    """(backbone, architecture kind[, variant], graph form) for every backbone, as pytest params: the form None
    (the default export) and each of ``extra_forms``."""
    out = []
    for name, backbone in BACKBONES.items():
        for form in (None, *extra_forms(backbone)):
            for kind in contract_archs(backbone):
                marks = () if all_fast or kind == fast_kind(backbone, form) else (pytest.mark.slow,)
                for variant in (VARIANTS if variants else (None,)):
                    values = (name, kind) if variant is None else (name, kind, variant)
                    out.append(pytest.param(*values, form, id="-".join(values + ((form,) if form else ())),
                                            marks=marks))
    return out


def form_options(form: str | None) -> dict:
    """The ExportOptions fields of a case's graph form (none for the default export)."""
    return {} if form is None else {"graph_form": form, "target_ort": FORM_TARGETS[form]}


@contextlib.contextmanager
def registered(name: str):
    """The backbone called ``name``, registered while the test runs when it is one of the tests' own."""
    own = {b.name: b for b in TEST_BACKBONES}.get(name)
    if own is None:
        yield get_backbone(name)
        return
    register(own)
    try:
        yield own
    finally:
        unregister(name)


@pytest.fixture
def backbone(request):
    with registered(request.node.callspec.params["name"]) as backbone:
        yield backbone


def arch_of(backbone, kind: str) -> Architecture:
    return Architecture(backbone=backbone.name, **contract_archs(backbone)[kind])


def randomized(backbone, arch, seed: int = 0) -> torch.nn.Module:
    """The reference with every tensor random and larger than the init: std 0.02 makes nearly flat logits,
    where a greedy choice would hinge on rounding; biases and LayerNorms random too, so no term can hide."""
    return larger_than_init(backbone.build_model(arch), seed)


def session_of(exported) -> ort.InferenceSession:
    onnx.checker.check_model(onnx.load_from_string(exported.to_bytes()), full_check=True)
    return ort.InferenceSession(exported.to_bytes(), providers=CPU)


def declared(exported) -> ExportSpec:
    """The I/O spec the export declares, after checking its metadata names its architecture and variant."""
    meta = read_metadata(onnx.load_from_string(exported.to_bytes()))
    spec = ExportSpec.from_json(meta["io_spec"])
    assert Architecture.from_json(meta["architecture"]) == exported.arch and meta["variant"] == spec.variant
    return spec


def reference_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).numpy()


def prefill_logits(session, spec: ExportSpec, ids: np.ndarray) -> np.ndarray:
    """The generate variant's logits over a whole sequence, after an empty cache, fed as it declares."""
    batch, seq = ids.shape
    feeds = {"input_ids": ids}
    for t in spec.inputs:
        if t.role == "attention_mask":
            feeds[t.name] = np.ones((batch, seq), np.int64)
        elif t.role == "position_ids":
            feeds[t.name] = np.broadcast_to(np.arange(seq), (batch, seq)).copy()
        elif t.role == "past":
            feeds[t.name] = np.zeros([batch if d in BATCH_AXES else 0 if isinstance(d, str) else d for d in t.dims],
                                     np.dtype(t.dtype))
    return session.run(["logits"], feeds)[0]


def uncached_greedy(model, rows: list[list[int]], n_new: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The PyTorch model's greedy tokens after each prompt alone (no padding), the whole sequence recomputed
    at every step: tokens [batch, n_new] and, per step, the last position's logits [batch, vocab]."""
    tokens, logits = [], []
    for row in rows:
        ids, row_logits = torch.tensor([row]), []
        with torch.no_grad():
            for _ in range(n_new):
                last = model(ids)[:, -1]
                row_logits.append(last[0].numpy())
                ids = torch.cat([ids, last.argmax(-1, keepdim=True)], 1)
        tokens.append(ids[0, len(row):].numpy())
        logits.append(row_logits)
    return np.stack(tokens), [np.stack(step) for step in zip(*logits)]


# --- the proxy -----------------------------------------------------------------------------------


def random_archs(backbone, n: int, seed: int) -> list[Architecture]:
    """Random heterogeneous architectures, large ones included (counted on the meta device: free), a third
    adaptive and half with PAR layers where the backbone declares them, three quarters with grouped key/value
    heads, a head size of their own and a random output layer tying where its fields have them; those it
    refuses are left out."""
    rng = random.Random(seed)
    archs = []
    for _ in range(n):
        d_model, n_layer = 2 * rng.randint(4, 512), rng.randint(1, 4)
        heads = [h for h in (1, 2, 3, 4, 6, 8, 16) if d_model % h == 0]
        adaptive = backbone.supports_adaptive and rng.random() < 0.33
        fields = dict(backbone=backbone.name, n_layer=n_layer, d_model=d_model,
                      n_head=[rng.choice(heads) for _ in range(n_layer)],
                      d_inner=[rng.randint(1, 4096) for _ in range(n_layer)],
                      vocab_size=rng.randint(50, 60000), n_positions=rng.choice([16, 64, 1024]))
        if adaptive:
            fields.update(d_embed=rng.choice([16, 64, 128, d_model]), div_val=rng.choice([1, 2, 4]))
        if backbone.supports_block_types and rng.random() < 0.5:
            fields["block_types"] = [rng.choice(BLOCK_TYPES) for _ in range(n_layer)]
        if backbone.architecture_fields and rng.random() < 0.75:  # (odd head sizes are refused without head_dim)
            fields.update(_grouped_fields(rng, fields["n_head"], backbone.architecture_fields))
        with contextlib.suppress(LtsedgeError):
            archs.append(Architecture(**fields))
    return archs


def _grouped_fields(rng: random.Random, heads: list[int], declared: tuple[str, ...]) -> dict:
    """Random values of the grouped-attention fields a backbone declares: key/value heads dividing each
    layer's heads, an even head size, a tied or untied output layer."""
    fields = {"n_kv_head": [rng.choice([k for k in range(1, h + 1) if h % k == 0]) for h in heads],
              "head_dim": 2 * rng.randint(1, 64), "tie_embeddings": rng.random() < 0.5}
    return {k: v for k, v in fields.items() if k in declared}


@pytest.mark.parametrize("name", list(BACKBONES))
def test_the_proxy_equals_the_pytorch_modules(name, backbone):
    archs = [arch_of(backbone, kind) for kind in contract_archs(backbone)]
    archs += SearchSpace.default(name).sample(30, seed=3) + random_archs(backbone, 120, seed=5)
    assert len(archs) > 120
    if backbone.supports_adaptive:
        assert sum(a.adaptive for a in archs) > 30
    if backbone.supports_block_types:
        assert sum(bool(a.block_types) for a in archs) > 40
    if "n_kv_head" in backbone.architecture_fields:
        assert sum(a.kv_heads != a.n_head for a in archs) > 30
    for arch in archs:
        counts = count_params(arch)
        assert counted_by_torch(arch) == (counts.decoder_params, counts.total_params), arch.to_json()


@pytest.mark.parametrize("name", list(BACKBONES))
def test_the_proxy_counts_as_transformers_builds_the_bundles_config(name, backbone):
    """Where the bundle's config.json is a Hugging Face family's (``hf_family``), transformers builds from it a
    model of the proxy's total parameters: an architecture whose layers are alike (a config holds one value
    per field), with grouped key/value heads, a head size of its own and an untied output layer where the
    backbone's fields have them."""
    fields = dict(n_layer=2, d_model=64, n_head=(4, 4), d_inner=(96, 96), vocab_size=300, n_positions=64)
    grouped = {"n_kv_head": (2, 2), "head_dim": 24, "tie_embeddings": False}
    arch = Architecture(backbone=name, **fields, **{k: v for k, v in grouped.items()
                                                    if k in backbone.architecture_fields})
    if hf_family(arch) is None:
        pytest.skip(f"backbone {name}'s bundles are not a Hugging Face family's")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config = hf_config(arch)
    read = transformers.AutoConfig.for_model(config["model_type"], **{
        k: v for k, v in config.items() if k not in ("model_type", "architectures", "ltsedge")})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(read)
    assert type(model).__name__ == config["architectures"][0]
    assert model.num_parameters() == count_params(arch).total_params


# --- export --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,kind,form", cases())
def test_forward_equals_pytorch(name, kind, form, backbone):
    arch = arch_of(backbone, kind)
    model = randomized(backbone, arch)
    for target in ((None, OLDEST_TARGET) if form is None else (FORM_TARGETS[form],)):
        exported = export_model(arch, ExportOptions(variant="forward", target_ort=target, graph_form=form),
                                weights=model.state_dict())
        assert declared(exported) == backbone.export_spec(arch, "forward")
        session = session_of(exported)
        rng = np.random.default_rng(0)
        for batch, seq in [(1, 1), (2, 7), (1, arch.n_positions)]:
            ids = rng.integers(0, arch.vocab_size, (batch, seq))
            logits = session.run(["logits"], {"input_ids": ids})[0]
            assert logits.shape == (batch, seq, arch.vocab_size)
            assert np.abs(logits - reference_logits(model, ids)).max() <= TOL, (target, batch, seq)


@pytest.mark.parametrize("name,kind,form", cases())
def test_generate_equals_pytorch_and_cached_greedy_equals_uncached(name, kind, form, backbone):
    arch = arch_of(backbone, kind)
    if "generate" not in backbone.variants:
        with pytest.raises(LtsedgeError, match="no export variant 'generate'"):
            export_model(arch, ExportOptions(variant="generate"))
        pytest.skip(f"backbone {name} declares no generate variant")
    model = randomized(backbone, arch, seed=1)
    exported = export_model(arch, ExportOptions(variant="generate", **form_options(form)), weights=model.state_dict())
    spec = declared(exported)
    assert spec == backbone.export_spec(arch, "generate", **({"cache_layout": exported.cache_layout}
                                                            if backbone.kv_cache else {}))
    session = session_of(exported)
    ids = np.random.default_rng(2).integers(0, arch.vocab_size, (2, 9))
    assert np.abs(prefill_logits(session, spec, ids) - reference_logits(model, ids)).max() <= TOL

    rng = np.random.default_rng(3)
    prompt = rng.integers(0, arch.vocab_size, (2, 6))
    mask = np.ones_like(prompt)
    if spec.input("attention_mask"):
        mask[1, :3] = 0  # left padding: the second prompt is 3 tokens
    for batch in (1, 2):
        got = greedy(session, prompt[:batch], 10, mask[:batch])
        want_tokens, want_logits = uncached_greedy(model, [p[m == 1].tolist() for p, m in zip(prompt[:batch], mask)],
                                                   10)
        np.testing.assert_array_equal(got.tokens, want_tokens)
        assert max(np.abs(a - b).max() for a, b in zip(got.logits, want_logits)) <= TOL


@pytest.mark.parametrize("name,kind,form", cases())
def test_the_exports_own_shared_weights_are_the_reference_models(name, kind, form, backbone):
    """``export_model`` without weights: the reference built from ``weight_seed`` with shared weights."""
    arch = arch_of(backbone, kind)
    model = backbone.build_model(arch, seed=weight_seed(arch), shared_weights=True)
    ids = np.random.default_rng(4).integers(0, arch.vocab_size, (2, 9))
    for variant in backbone.variants:
        exported = export_model(arch, ExportOptions(variant=variant, **form_options(form)))
        session = ort.InferenceSession(exported.to_bytes(), providers=CPU)
        logits = prefill_logits(session, declared(exported), ids)
        assert np.abs(logits - reference_logits(model, ids)).max() <= TOL, variant


@pytest.mark.parametrize("name,kind,form", cases())
def test_the_bundle_runs_where_the_backbone_declares_a_generation_runtime(name, kind, form, backbone, tmp_path):
    if "generate" not in backbone.variants:
        pytest.skip(f"backbone {name} declares no generate variant: it has no bundle")
    arch = arch_of(backbone, kind)
    model = randomized(backbone, arch, seed=7)
    files = write_bundle(export_model(arch, ExportOptions(variant="generate", **form_options(form)),
                                      weights=model.state_dict()), tmp_path)
    assert ("genai_config.json" in files) == backbone.genai_compatible
    if not backbone.genai_compatible:
        pytest.skip(f"backbone {name} declares no onnxruntime-genai support (genai_compatible)")
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    for prompt in ([5, 17, 9, 3, 25], [1, 2]):
        tokens, logits = genai_greedy(tmp_path, prompt, 10)
        want_tokens, want_logits = uncached_greedy(model, [prompt], 10)
        for step in range(10):
            np.testing.assert_allclose(logits[step], want_logits[step][0], atol=TOL)
        assert tokens == want_tokens[0].tolist()


# --- pins ----------------------------------------------------------------------------------------

# The graph_version the pins below are of, and (backbone, architecture, variant[, graph form]) -> sha256 of the
# default export's bytes (or the form's, exported for FORM_TARGETS), metadata aside (it carries the ltsedge version). A test failing here means the exported
# graph (or its weights) changed: when intended, bump the backbone's graph_version, so that stored figures
# of the old graph are never reused, and update the pins and PINNED_GRAPH_VERSION in the same commit.
PINNED_GRAPH_VERSION = {"gpt2": 2, "opt": 2, "transfo_xl": 2, "llama": 4, "toy": 1}
PINS = {
    ("gpt2", "plain", "forward"): "8fa5c319970278625568f9d57f00c5279502206df4112f2a9e43c03cea5f5f8e",
    ("gpt2", "plain", "generate"): "356c8e78ae998a0c6f9f68c3f02e4bde06f10be3d6aa518e3a58f5c6600d19ff",  # contrib: every cache fuses
    ("gpt2", "par", "forward"): "a1748d7643604b99b220e82a53ef5886634604c2b002b96cadf24cf869e25c80",
    ("gpt2", "par", "generate"): "07196a77ede53565d7cbd0a5a8cdf5c7c55deab7b81f67b0db8e23640b363574",  # contrib: every cache fuses
    ("gpt2", "no_attention", "forward"): "69d09113b9b0791b0ae82805a83cf6c6c7e6c56088918c22acd27e154e7f916c",
    ("gpt2", "no_attention", "generate"): "f901fc3b849e6b6c0855918fea23432147ed31e7c864f28d28079b006d91bdbf",
    ("gpt2", "adaptive", "forward"): "d17c4f484ea3d2ab6131f5c8eae4205462ad2f4d26c13f4b8331dc50aa1f2294",
    ("gpt2", "adaptive", "generate"): "2d366e54062addcab203d3e6b4d6d9a93da99d9b62b28b845507b177b1f299a4",  # plain, per-layer caches: a head size of 24
    ("gpt2", "narrow_embedding", "forward"): "512489d86d63bf20a2371130b60c01f3318c1138654de32be63e5543a2ff71ff",
    ("gpt2", "narrow_embedding", "generate"): "15732570147527579c4a38b6a9c615f05f719554b239ac4a2d1a577aeb104ea9",  # contrib: every cache fuses
    ("transfo_xl", "plain", "forward"): "59edc71962cc251c5493e2fce60d5195653c27a41b6f3546863c5f01cff76caf",
    ("transfo_xl", "plain", "generate"): "66da48f804d75be193c0f0aeed0819e89ba12ab5a9a745165410ff514d8a963e",
    ("transfo_xl", "par", "forward"): "855dfe48f30d86aebfad7380e10a0c8e5e1e6b93e6e6df4f2bb1b7f8bdfb4c2a",
    ("transfo_xl", "par", "generate"): "222a5d02371d0a9c7e5ea53f791359a1e2db64ed8220358ef2d94775e71d0f4e",
    ("transfo_xl", "no_attention", "forward"): "b803e16b30d4cbe577753c47106ea7f71b744076b14b864c2bdc662370cbf55d",
    ("transfo_xl", "no_attention", "generate"): "033de713e15f5ecc7824810d926c924dd5b81af0eedde00391fd1b58f7e8d559",
    ("transfo_xl", "adaptive", "forward"): "7bbc4db0674107aa8d90814d2e5f564acb988895846fccc8499b8d76efd7c24a",
    ("transfo_xl", "adaptive", "generate"): "647972cca899ce4e45c15c922633c1b6b8988b0f0937bf69af119aa6031c8bbf",
    ("transfo_xl", "narrow_embedding", "forward"): "dc601837a9736cb66eb907d708724141a09c3b3438c419285c7a5b474cf1452a",
    ("transfo_xl", "narrow_embedding", "generate"): "a0a38304bf0b82226256103f9c4d57d4c4e5f845c8401d40f0ddaf7b73382c20",
    ("opt", "plain", "forward"): "bafe80a8288dc1dd29c8216041706c8da7bba3448c8816ed8d19a4637094bf85",
    ("opt", "plain", "generate"): "383015b9089dadd872b353d2cf905c10874ab5fb37c9c4ea214434760d87236c",  # contrib: every cache fuses
    ("opt", "par", "forward"): "1fd5c4c051a93c86fa7b6b9b32ed9db711aa612b150c8becaab3bd29c050728b",
    ("opt", "par", "generate"): "83685568e964c9ec068bb4a12f7836188767b3f7822d0aa8c590f9edc9d69709",  # contrib: every cache fuses
    ("opt", "no_attention", "forward"): "4d09c3006fb86eb3c6a1e34a52b93d12eb2d15b4b90622c374a112d42f661782",
    ("opt", "no_attention", "generate"): "eff865e9120ac249af947616f7841c63c0f3c6f400f8de6db6c83f72731774c9",
    ("llama", "plain", "forward"): "f423d874d1e43f151491f4eaafeae2a2f12ef2310c226187fd5137728a0b9380",
    ("llama", "plain", "generate"): "2c3dab490698491e423750cd550ecdbc36c7d676770834f15731c92d9619af9f",  # its bundles default to the contrib form
    ("llama", "grouped", "forward"): "043e6c9fd750a631e7d152dbb8231f87ac4566b754b1a1b0dee99f81c45c4c3e",
    ("llama", "grouped", "generate"): "94bcf2dda776bef72f2e6f99af8a005e7ebe9687d8c31729417634493841b3cc",  # its bundles default to the contrib form
    ("llama", "fused_grouped", "forward"): "ff406c79448fc5c553477a937c285e9092db703cd752dd7ad13f105c529f3cbb",
    ("llama", "fused_grouped", "generate"): "ed5d5efd1efa0cecd24fe6bcd1e2e861e0d8af582dfa3743e22407fddea8df33",  # its bundles default to the contrib form
    # the contrib form, exported for onnxruntime 1.22 (FORM_TARGETS)
    ("llama", "plain", "forward", "contrib"): "530037a4f8bf88a031b15e1a4a3f7814af0b585d89f59f7d8c9952c75ca2fcfa",
    ("llama", "plain", "generate", "contrib"): "2c3dab490698491e423750cd550ecdbc36c7d676770834f15731c92d9619af9f",
    ("llama", "grouped", "forward", "contrib"): "56a9234068535b4cf9051b0f9fd00d3c48394cf5d231959b51bf5b9458c2b384",
    ("llama", "grouped", "generate", "contrib"): "94bcf2dda776bef72f2e6f99af8a005e7ebe9687d8c31729417634493841b3cc",
    ("llama", "fused_grouped", "forward", "contrib"): "0c387b306c65f042a42001c8c244bb502f9fa0a4635d7feed6aa959bd0bf9c61",
    ("llama", "fused_grouped", "generate", "contrib"): "ed5d5efd1efa0cecd24fe6bcd1e2e861e0d8af582dfa3743e22407fddea8df33",
    # GPT-2's and OPT's contrib form (GroupQueryAttention where the head size and cache take it), for onnxruntime 1.22,
    # in their default cache layout, per layer (the uniform layout's, which their keys name, are no longer pinned)
    ("gpt2", "plain", "forward", "contrib"): "7d7b4ce5ef43dc61b65896e35ffa7f958a1bfebe0b10864a0cedffbe4fc9650b",
    ("gpt2", "plain", "generate", "contrib"): "356c8e78ae998a0c6f9f68c3f02e4bde06f10be3d6aa518e3a58f5c6600d19ff",
    ("gpt2", "par", "forward", "contrib"): "17c258cb274091135463d5a33db83dae1384357ec3025e7422064fdffde71159",
    ("gpt2", "par", "generate", "contrib"): "07196a77ede53565d7cbd0a5a8cdf5c7c55deab7b81f67b0db8e23640b363574",
    ("gpt2", "no_attention", "forward", "contrib"): "e05433c6d78cfc7402379ba24960d4a83a72361b2ee1b6f0d8655cf2e73c91ec",
    ("gpt2", "no_attention", "generate", "contrib"): "9e14b16a4fae91bb3bb69a8318524ba6b2760cff86c1d3fe58da72052e6c303a",
    ("gpt2", "adaptive", "forward", "contrib"): "7dd34de5988fb657ef3a01d5aa82cfd7d16633a0b8d6a990748591264917e92c",
    ("gpt2", "adaptive", "generate", "contrib"): "f975aabc4ad99b119a8d77293ed57e8f3d81477c54e37a50c259e03d26d4bc25",
    ("gpt2", "narrow_embedding", "forward", "contrib"): "2d1b4af8fef8337bec9b5bdc526a23b11ba950c295dc6927d0ac65064d5f1099",
    ("gpt2", "narrow_embedding", "generate", "contrib"): "15732570147527579c4a38b6a9c615f05f719554b239ac4a2d1a577aeb104ea9",
    ("opt", "plain", "forward", "contrib"): "d21b222753c6df57c63da54afc2b11e13528ea74eb11804609c5edda45bb55da",
    ("opt", "plain", "generate", "contrib"): "383015b9089dadd872b353d2cf905c10874ab5fb37c9c4ea214434760d87236c",
    ("opt", "par", "forward", "contrib"): "8ef7646742a263cec620147110afe5bace31c09789a6ea7e469854f09ff175cd",
    ("opt", "par", "generate", "contrib"): "83685568e964c9ec068bb4a12f7836188767b3f7822d0aa8c590f9edc9d69709",
    ("opt", "no_attention", "forward", "contrib"): "14b4518f8022ec9a1d872c58af89bd7c1729df064152bf8b42caa26479a42d61",
    ("opt", "no_attention", "generate", "contrib"): "1bc6e23714ca6685707e30a53e85dec1410ed2cba5306c261efa3e154553a048",
    # GPT-2's and OPT's plain form named, for onnxruntime 1.20: the forward default's bytes, and the bundles' in
    # their default cache layout (per layer) where fused attention is not their default
    ("gpt2", "plain", "forward", "plain"): "8fa5c319970278625568f9d57f00c5279502206df4112f2a9e43c03cea5f5f8e",
    ("gpt2", "plain", "generate", "plain"): "6b57069c97b67c0abcd8e74c2ec7d852205c58adb6d3f1c61f2989d95dbef8cc",
    ("gpt2", "par", "forward", "plain"): "a1748d7643604b99b220e82a53ef5886634604c2b002b96cadf24cf869e25c80",
    ("gpt2", "par", "generate", "plain"): "d6b4d8dc06c51f230e55b9388fe86be0ab3a3b7a1ab3c1e0afff82ff9e75a2dc",
    ("gpt2", "no_attention", "forward", "plain"): "69d09113b9b0791b0ae82805a83cf6c6c7e6c56088918c22acd27e154e7f916c",
    ("gpt2", "no_attention", "generate", "plain"): "f901fc3b849e6b6c0855918fea23432147ed31e7c864f28d28079b006d91bdbf",
    ("gpt2", "adaptive", "forward", "plain"): "d17c4f484ea3d2ab6131f5c8eae4205462ad2f4d26c13f4b8331dc50aa1f2294",
    ("gpt2", "adaptive", "generate", "plain"): "2d366e54062addcab203d3e6b4d6d9a93da99d9b62b28b845507b177b1f299a4",
    ("gpt2", "narrow_embedding", "forward", "plain"): "512489d86d63bf20a2371130b60c01f3318c1138654de32be63e5543a2ff71ff",
    ("gpt2", "narrow_embedding", "generate", "plain"): "6d2df994ebf688d37baae1b4c6d0d1b0b1a98d96dca7c33fe9c02829d2ca079f",
    ("opt", "plain", "forward", "plain"): "bafe80a8288dc1dd29c8216041706c8da7bba3448c8816ed8d19a4637094bf85",
    ("opt", "plain", "generate", "plain"): "9173fc27a1036b341c9e986886861a4463a97347541234c2c962056f890d22da",
    ("opt", "par", "forward", "plain"): "1fd5c4c051a93c86fa7b6b9b32ed9db711aa612b150c8becaab3bd29c050728b",
    ("opt", "par", "generate", "plain"): "dc7aa3cd5bdffebdb41824b8a69de9cd190ba86fb6fc7f8fa7e82500388b39ef",
    ("opt", "no_attention", "forward", "plain"): "4d09c3006fb86eb3c6a1e34a52b93d12eb2d15b4b90622c374a112d42f661782",
    ("opt", "no_attention", "generate", "plain"): "eff865e9120ac249af947616f7841c63c0f3c6f400f8de6db6c83f72731774c9",
    # the plain form named, for onnxruntime 1.20 (FORM_TARGETS): the forward default's bytes, and the bundles'
    # of before the contrib form became theirs
    ("llama", "plain", "forward", "plain"): "f423d874d1e43f151491f4eaafeae2a2f12ef2310c226187fd5137728a0b9380",
    ("llama", "plain", "generate", "plain"): "18ea5a95bb1858ca9ada9b3241b6bd6d2880f8ff52555cc51031c0eaa4c26a0f",
    ("llama", "grouped", "forward", "plain"): "043e6c9fd750a631e7d152dbb8231f87ac4566b754b1a1b0dee99f81c45c4c3e",
    ("llama", "grouped", "generate", "plain"): "4b5e6e71ec69e8423e580da22864f20b0152dcb87523762e9364b3158bcaaba4",
    ("llama", "fused_grouped", "forward", "plain"): "ff406c79448fc5c553477a937c285e9092db703cd752dd7ad13f105c529f3cbb",
    ("llama", "fused_grouped", "generate", "plain"): "08235cfe2cb910eb8d91cb5afdafaff62b03df42be62f39b45447f3fa8ec1dab",
    ("toy", "plain", "forward"): "7521394f4af9e8dec01e34627945a3a814e2a09ef7a7497e1b86ea6c2d718fc2",
}


@pytest.mark.parametrize("name,kind,variant,form", cases(variants=True, all_fast=True))  # exports only: cheap
def test_exported_bytes_are_pinned(name, kind, variant, form, backbone):
    if variant not in backbone.variants:
        pytest.skip(f"backbone {name} declares no {variant} variant")
    arch = arch_of(backbone, kind)
    options = ExportOptions(variant=variant, **form_options(form))
    digest = graph_digest(export_model(arch, options).to_bytes())
    key = options.model_key(arch)
    pin = (name, kind, variant) + ((form,) if form else ())
    assert pin in PINS, f"no pin: add {pin!r}: {digest!r}  # {key}"
    assert backbone.graph_version == PINNED_GRAPH_VERSION[name], "graph_version bumped: update the pins"
    assert digest == PINS[pin], (
        f"the exported graph changed ({key}): bump {name}'s graph_version and update the pins")
