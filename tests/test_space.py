import itertools
import math

import numpy as np
import pytest

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.space import SearchSpace
from tests.conftest import tiny_space


def enumerate_space(s: SearchSpace) -> set:
    """Brute force: every architecture the space holds."""
    out = set()
    for n, d, e, k in itertools.product(s.n_layer, s.d_model, s.d_embed, s.div_val):
        per_layer = list(itertools.product(s.n_head, s.d_inner_choices(d)))
        for layers in itertools.product(per_layer, repeat=n):
            out.add(s._architecture(n, d, [h for h, _ in layers], [i for _, i in layers], e, k))
    return out


def test_default_is_the_lts_gpt2_space():
    s = SearchSpace()
    assert s.n_layer == tuple(range(2, 17))
    assert s.d_model == tuple(range(128, 1025, 64))
    assert s.n_head == (2, 4, 8) and s.d_embed == (128, 256, 512) and s.div_val == (1, 2, 4)
    assert s.d_inner == tuple(range(256, 4097, 64))
    assert s.d_inner_choices(1024) == tuple(range(2048, 4097, 64))  # lower bound follows d_model
    # Exact count: sum over n_layer, d_model of (3 heads x valid d_inner)^n_layer, x 9 embedding choices.
    assert s.size() == 9 * sum((3 * len(s.d_inner_choices(d))) ** n for n in range(2, 17) for d in s.d_model)
    assert s.size() > 10**37


def test_size_is_exact_on_a_space_small_enough_to_enumerate():
    s = tiny_space(n_layer=(1, 2), d_model=(32, 64), d_inner=(64, 96, 128), d_embed=(32, 64), div_val=(1, 2))
    assert s.size() == len(enumerate_space(s))


def test_sampling_is_seeded_and_valid():
    s = SearchSpace()
    a, b = s.sample(20, seed=3), s.sample(20, seed=3)
    assert a == b and a != s.sample(20, seed=4)
    for arch in a:
        assert s.contains(arch)
        assert all(di >= 2 * arch.d_model for di in arch.d_inner)


def test_sampling_covers_the_choices():
    archs = tiny_space().sample(400, seed=0)
    assert {a.n_layer for a in archs} == {1, 2, 3}
    assert {a.div_val for a in archs} == {1, 2}
    assert {h for a in archs for h in a.n_head} == {2, 4}


def test_every_vector_in_bounds_decodes_to_a_valid_architecture_and_repair_is_idempotent():
    s = SearchSpace()
    rng = np.random.default_rng(0)
    for _ in range(500):
        x = rng.integers(0, np.array(s.upper_bounds) + 1)
        arch = s.decode(x)
        assert s.contains(arch)
        repaired = s.repair(x)
        assert s.decode(repaired) == arch
        assert (s.repair(repaired) == repaired).all()
        assert (0 <= repaired).all() and (repaired <= s.upper_bounds).all()


def test_genes_beyond_n_layer_are_ignored_but_kept():
    s = SearchSpace()
    arch = s.sample(1, seed=1)[0]
    x = s.encode(arch)
    tail = s.n_genes - 1  # last d_inner gene belongs to layer 16
    if arch.n_layer < 16:
        y = x.copy()
        y[tail] = (y[tail] + 5) % (s.upper_bounds[tail] + 1)
        assert s.decode(y) == arch
        assert s.repair(y)[tail] == y[tail]


def test_d_inner_below_the_bound_is_raised_to_it():
    s = SearchSpace()
    x = np.zeros(s.n_genes, dtype=int)
    x[1] = s.d_model.index(1024)
    assert all(di == 2048 for di in s.decode(x).d_inner)


def test_encode_rejects_an_architecture_outside_the_space():
    s = tiny_space()
    with pytest.raises(LtsedgeError, match="not in the search space"):
        s.encode(SearchSpace().sample(1, seed=0)[0])


def test_toml_config(tmp_path):
    path = tmp_path / "space.toml"
    path.write_text("""
n_layer = {min = 2, max = 4}
d_model = {min = 64, max = 128, step = 64}
n_head = [2, 4]
d_inner = {min = 128, max = 512, step = 128}
d_embed = [64]
div_val = [1, 2]
vocab_size = 1000
n_positions = 128
""")
    s = SearchSpace.load(path)
    assert s.n_layer == (2, 3, 4) and s.d_model == (64, 128) and s.d_inner == (128, 256, 384, 512)
    assert s.vocab_size == 1000 and s.source == str(path)
    assert all(a.vocab_size == 1000 for a in s.sample(5, seed=0))
    # a [space] table works too
    path.write_text("[space]\nn_layer = [2]\n")
    assert SearchSpace.load(path).n_layer == (2,)


@pytest.mark.parametrize("text, words", [
    ("n_layer = [2, 3", ["malformed TOML"]),
    ("layers = [2]", ["unknown search-space key 'layers'"]),
    ("n_layer = {min = 4, max = 2}", ["n_layer", "min <= max"]),
    ("n_layer = [0, 1]", ["n_layer", ">= 1"]),
    ("n_head = [3]", ["n_head 3 does not divide d_model 128"]),
    ("d_inner = {min = 64, max = 128}\nd_model = [128]", ["no d_inner choice", "d_model = 128"]),
    ("vocab_size = 'big'", ["vocab_size", "wrong type"]),
    ("n_head = 'two'", ["n_head", "list of integers"]),
])
def test_bad_config_gives_one_line_errors(tmp_path, text, words):
    path = tmp_path / "space.toml"
    path.write_text(text)
    with pytest.raises(LtsedgeError) as err:
        SearchSpace.load(path)
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(LtsedgeError, match="not found"):
        SearchSpace.load(tmp_path / "nope.toml")


def test_describe_reports_the_size():
    d = SearchSpace().describe()
    assert d["size"] == SearchSpace().size() and math.isclose(d["size_log10"], math.log10(d["size"]), abs_tol=0.01)


def test_empty_d_embed_means_plain_embeddings_of_width_d_model(tmp_path):
    space = SearchSpace(n_layer=(1, 2), d_model=(64, 128), n_head=(2,), d_inner=(256,), d_embed=(), div_val=(1,))
    archs = space.sample(30, seed=0)
    assert all(a.d_embed == a.d_model and not a.adaptive and space.contains(a) for a in archs)
    assert space.size() == 2 * (1 + 1)  # (n_layer 1 or 2) x d_model; one choice per layer gene
    adaptive = Architecture(n_layer=1, d_model=64, n_head=[2], d_inner=[256], d_embed=32)
    assert not space.contains(adaptive)
    toml = tmp_path / "space.toml"
    toml.write_text("n_layer = [1, 2]\nd_model = [64, 128]\nn_head = [2]\nd_inner = [256]\nd_embed = []\ndiv_val = [1]\n")
    assert SearchSpace.load(toml) == space
    assert space.describe()["d_embed"] == "= d_model"


# --- PAR block types -----------------------------------------------------------------------------

def enumerate_par_space(s: SearchSpace) -> set:
    """Brute force over block types too: every architecture, irrelevant genes at their first choice,
    kept when it obeys the PAR rules (if the space has them)."""
    out = set()
    for n, d, e, k in itertools.product(s.n_layer, s.d_model, s.d_embed, s.div_val):
        inner_choices = s.d_inner_choices(d)
        per_type = {"attn_ffn": list(itertools.product(s.n_head, inner_choices)),
                    "ffn": [(s.n_head[0], i) for i in inner_choices],
                    "attn": [(h, inner_choices[0]) for h in s.n_head]}
        for types in itertools.product(s.block_types, repeat=n):
            attention = [i for i, t in enumerate(types) if t != "ffn"]
            if s.par_rules and not (attention and max(attention) < math.ceil(2 * n / 3)
                                    and len(attention) <= max(1, math.ceil(n / 5))):
                continue
            for layers in itertools.product(*(per_type[t] for t in types)):
                out.add(s._architecture(n, d, [h for h, _ in layers], [i for _, i in layers], e, k, types))
    return out


@pytest.mark.parametrize("types, rules", [(("attn_ffn", "ffn", "attn"), False), (("attn_ffn", "ffn"), True),
                                          (("attn_ffn", "ffn", "attn"), True)])
def test_block_type_genes_count_exactly_and_every_vector_decodes_inside(types, rules):
    s = tiny_space(n_layer=(1, 2, 3, 6), d_model=(32,), d_inner=(64, 96), d_embed=(32,), div_val=(1,),
                   block_types=types, par_rules=rules)
    assert s.n_genes == 4 + 3 * 6
    everything = enumerate_par_space(s)
    assert s.size() == len(everything)
    rng = np.random.default_rng(1)
    decoded = set()
    for _ in range(3000):
        x = rng.integers(0, np.array(s.upper_bounds) + 1)
        arch = s.decode(x)
        assert arch in everything and s.contains(arch)
        repaired = s.repair(x)
        assert s.decode(repaired) == arch and (s.repair(repaired) == repaired).all()
        decoded.add(arch)
    assert len(decoded) > min(len(everything), 3000) // 5  # the decoder reaches far into the space


@pytest.mark.parametrize("types, rules", [(("ffn", "attn"), False), (("ffn", "attn"), True), (("attn", "ffn"), False)])
def test_a_space_without_the_standard_block_samples_inside_itself(types, rules):
    s = tiny_space(n_layer=(1, 2, 3, 6), d_model=(32,), d_inner=(64, 96), d_embed=(32,), div_val=(1,),
                   block_types=types, par_rules=rules)
    archs = s.sample(60, seed=4)  # sampling once encoded a standard layer first: "not in the search space"
    everything = enumerate_par_space(s)
    assert all(a in everything and s.contains(a) for a in archs)
    assert {t for a in archs for t in a.block_types} == set(types)


def test_par_rules_keep_attention_early_and_rare():
    s = SearchSpace(block_types=("attn_ffn", "ffn", "attn"), par_rules=True)
    for arch in s.sample(200, seed=0):
        attention = arch.attention_layers
        assert attention and max(attention) < math.ceil(2 * arch.n_layer / 3)
        assert len(attention) <= max(1, math.ceil(arch.n_layer / 5))
        assert s.contains(arch)


def test_block_types_leave_spaces_without_them_unchanged():
    plain = SearchSpace()
    assert plain.n_genes == 4 + 2 * 16 and all(not a.block_types for a in plain.sample(50, seed=2))
    with pytest.raises(LtsedgeError, match="unknown block type 'conv'"):
        SearchSpace(block_types=("attn_ffn", "conv"))
    with pytest.raises(LtsedgeError, match="par_rules need the block type 'ffn'"):
        SearchSpace(block_types=("attn_ffn", "attn"), par_rules=True)


def test_block_types_from_toml(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text('[space]\nn_layer = [2, 3]\nblock_types = ["attn_ffn", "ffn"]\npar_rules = true\n')
    s = SearchSpace.load(f)
    assert s.block_types == ("attn_ffn", "ffn") and s.par_rules
    f.write_text('[space]\nblock_types = "ffn"\n')
    with pytest.raises(LtsedgeError, match="block_types must be a list"):
        SearchSpace.load(f)
    f.write_text('[space]\npar_rules = 1\n')
    with pytest.raises(LtsedgeError, match="par_rules = 1 has the wrong type"):
        SearchSpace.load(f)


# --- grouped key/value heads, head size and tying (backbones with those architecture fields) -------------

def grouped_space(**overrides) -> SearchSpace:
    fields = dict(backbone="llama", n_layer=(1, 2), d_model=(32,), n_head=(2, 3, 4), n_kv_head=(1, 2, 3),
                  head_dim=(8, 16), tie_embeddings=(True, False), d_inner=(32, 64), d_inner_min_ratio=0.0,
                  d_embed=(), div_val=(1,), vocab_size=64, n_positions=64)
    return SearchSpace(**{**fields, **overrides})


def enumerate_grouped_space(s: SearchSpace) -> set:
    """Brute force: every (heads, key/value heads dividing them, d_inner) per layer, every head size and tying."""
    out = set()
    per_layer = [(h, kv, i) for h in s.n_head for kv in s.n_kv_head if h % kv == 0 for i in s.d_inner]
    for n, head_dim, tied in itertools.product(s.n_layer, s.head_dim, s.tie_embeddings):
        for layers in itertools.product(per_layer, repeat=n):
            out.add(s._architecture(n, 32, [h for h, _, _ in layers], [i for _, _, i in layers], None, 1,
                                    kv=[kv for _, kv, _ in layers], head_dim=head_dim, tie_embeddings=tied))
    return out


def test_grouped_head_genes_count_exactly_and_every_vector_decodes_inside():
    s = grouped_space()
    assert s.n_genes == 4 + 3 * 2 + 2  # n_head, d_inner, n_kv_head per layer; head_dim and tying once
    everything = enumerate_grouped_space(s)
    # 6 (heads, key/value heads) pairs: 2/1 2/2 3/1 3/3 4/1 4/2, each with 2 d_inner; 2 head sizes x 2 tyings
    assert s.size() == len(everything) == 2 * 2 * (6 * 2 + (6 * 2) ** 2)
    assert math.isclose(s.size_log10(), math.log10(s.size()), abs_tol=1e-9)
    rng = np.random.default_rng(2)
    decoded = set()
    for _ in range(2000):
        x = rng.integers(0, np.array(s.upper_bounds) + 1)
        arch = s.decode(x)  # a key/value gene that does not divide the layer's heads is repaired, never refused
        assert arch in everything and s.contains(arch)
        repaired = s.repair(x)
        assert s.decode(repaired) == arch and (s.repair(repaired) == repaired).all()
        decoded.add(arch)
    assert len(decoded) > len(everything) // 2
    sampled = s.sample(300, seed=1)
    assert all(a in everything for a in sampled)
    assert {kv for a in sampled for kv in a.n_kv_head} == {1, 2, 3}
    assert {a.tie_embeddings for a in sampled} == {True, False}


def test_a_key_value_gene_decodes_to_the_largest_divisor_at_most_its_choice():
    s = grouped_space(n_layer=(1,), n_head=(4, 6), n_kv_head=(1, 2, 3, 4))
    x = np.zeros(s.n_genes, dtype=int)
    kv_gene = 4 + 2  # after the n_head and d_inner genes of the one layer
    for head_choice, kv_choice, expected in ((0, 2, 2), (0, 3, 4), (1, 3, 3), (1, 2, 3), (0, 0, 1)):
        x[4], x[kv_gene] = head_choice, kv_choice  # 4 heads with 3 key/value heads: 2; 6 heads with 4: 3
        assert s.decode(x).n_kv_head == (expected,)


def test_the_llama_space_holds_the_shapes_apps_ship():
    s = SearchSpace.default("llama")
    assert s.vocab_size == 49152 and s.n_positions >= 2049

    def shape(n, d, heads, kv, inner, head_dim=64):
        return Architecture(backbone="llama", n_layer=n, d_model=d, n_head=heads, n_kv_head=kv, d_inner=inner,
                            head_dim=head_dim, vocab_size=s.vocab_size, n_positions=s.n_positions)

    shipped = {
        "SmolLM2-135M": shape(30, 576, [9] * 30, [3] * 30, [1536] * 30),
        "SmolLM2-360M": shape(32, 960, [15] * 32, [5] * 32, [2560] * 32),
        "Qwen2.5-0.5B": shape(24, 896, [14] * 24, [2] * 24, [4864] * 24),
        "OpenELM-270M": shape(16, 1280, [12, 12, 12, 12, 16, 16, 16, 16, 16, 16, 16, 16, 20, 20, 20, 20],
                              [3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5], list(range(768, 5121, 256))[:16]),
    }
    for name, arch in shipped.items():
        assert s.contains(arch), name
    assert math.isclose(s.size_log10(), math.log10(s.size()), rel_tol=1e-9)
    for arch in s.sample(40, seed=0):
        assert s.contains(arch) and arch.tie_embeddings
        assert all(h % kv == 0 for h, kv in zip(arch.n_head, arch.n_kv_head))


def test_spaces_without_grouped_heads_are_what_they_were():
    plain = SearchSpace()
    assert plain.n_genes == 4 + 2 * 16 and not {"n_kv_head", "head_dim", "tie_embeddings"} & set(plain.to_dict())
    grouped = Architecture(backbone="llama", n_layer=2, d_model=256, n_head=[4, 4], n_kv_head=[2, 2],
                           d_inner=[512, 512], vocab_size=49152, n_positions=8192)
    mha = SearchSpace.default("llama", n_kv_head=(), head_dim=(), n_head=(2, 4, 8))
    multi_head = Architecture.from_dict({**grouped.to_dict(), "n_kv_head": [4, 4]})
    assert not mha.contains(grouped) and mha.contains(multi_head)
    assert all(a.n_kv_head == a.n_head for a in mha.sample(20, seed=0))


@pytest.mark.parametrize("changes, words", [
    (dict(n_kv_head=(1, 2)), ["n_kv_head is not a field of backbone gpt2"]),
    (dict(head_dim=(64,)), ["head_dim is not a field of backbone gpt2"]),
    (dict(backbone="llama", n_head=(6, 7), n_kv_head=(2, 3)), ["no n_kv_head choice divides n_head 7"]),
    (dict(backbone="llama", head_dim=(32, 40, 45)), ["'head_dim' = 45", "even"]),
    (dict(backbone="llama", head_dim=(), d_model=(96,), n_head=(2, 32)), ["d_model 96 / n_head 32 = 3", "even"]),
])
def test_bad_grouped_head_ranges_are_one_line_errors(changes, words):
    with pytest.raises(LtsedgeError) as err:
        SearchSpace.default(changes.pop("backbone", "gpt2"), **changes)
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), str(err.value)


def test_grouped_head_genes_from_toml(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text('backbone = "llama"\nn_kv_head = {min = 1, max = 3}\nhead_dim = [64, 96]\n'
                 'tie_embeddings = [true, false]\n')
    s = SearchSpace.load(f)
    assert (s.n_kv_head, s.head_dim, s.tie_embeddings) == ((1, 2, 3), (64, 96), (False, True))
    assert s.to_dict()["tie_embeddings"] == [False, True]
    f.write_text('backbone = "llama"\nn_kv_head = []\nhead_dim = []\ntie_embeddings = true\nn_head = [2, 4]\n')
    s = SearchSpace.load(f)
    assert not s.n_kv_head and not s.head_dim and s.tie_embeddings == (True,)
    for text, words in (('tie_embeddings = "yes"', "tie_embeddings must be true, false or a list of them"),
                        ("n_kv_head = [0, 1]", "n_kv_head = [0, 1] is invalid")):
        f.write_text(f'backbone = "llama"\n{text}\n')
        with pytest.raises(LtsedgeError, match=words.replace("[", r"\[").replace("]", r"\]")):
            SearchSpace.load(f)


def test_no_module_of_ltsedge_is_over_300_lines_and_the_split_modules_names_still_import():
    """space.py had grown to 404 lines and architecture.py to 306: the encoding and the field rules are
    modules of their own, and what other modules import from the two still comes from them."""
    from pathlib import Path

    from ltsedge.architecture import BLOCK_TYPES, FAMILY_FIELDS, STANDARD_BLOCK, default_cutoffs  # noqa: F401
    from ltsedge.space import EXACT_SIZE_DIGITS, FAMILY_GENES, MAX_LAYERS  # noqa: F401

    package = Path(__file__).resolve().parents[1] / "ltsedge"
    long = {str(p.relative_to(package)): n for p in package.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 300}
    assert long == {}
