"""The backbone seam: a backbone defined here, in the test suite, is counted, exported and profiled
like a built-in one, through the registry alone. The toy is also held to the backbone contract
(tests/test_contract.py: proxy = module counts, export = reference, declared I/O spec, pinned bytes)."""

from __future__ import annotations

import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import (
    backbone_names,
    register,
    unregister,
)
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.profiling import profile_model
from ltsedge.proxy import count_params
from ltsedge.space import SearchSpace
from tests.toy_backbone import Toy


@pytest.fixture
def toy():
    backbone = register(Toy())
    yield backbone
    unregister("toy")


def toy_arch(**changes):
    fields = dict(backbone="toy", n_layer=2, d_model=32, n_head=[2, 2], d_inner=[64, 96], vocab_size=97,
                  n_positions=32)
    return Architecture(**{**fields, **changes})


def test_an_unregistered_backbone_is_refused():
    assert "toy" not in backbone_names()
    with pytest.raises(LtsedgeError, match="'backbone' = 'toy' is invalid: must be one of"):
        toy_arch()


def test_the_backbones_declarations_and_own_rules_are_applied(toy):
    """What the proxy, the exports and the bundle must do is tests/test_contract.py's (it runs the toy too)."""
    toy_arch()
    with pytest.raises(LtsedgeError, match="backbone toy: it has plain embeddings"):
        toy_arch(d_embed=16)
    with pytest.raises(LtsedgeError, match="no per-layer block types"):
        toy_arch(block_types=["ffn", "attn_ffn"])
    with pytest.raises(LtsedgeError, match="at most 4 layers"):  # Toy.validate
        toy_arch(n_layer=5, n_head=[2] * 5, d_inner=[64] * 5)


def test_profile_and_space_through_the_registry(toy, tmp_path):
    arch_file = tmp_path / "toy.json"
    arch_file.write_text(toy_arch().to_json())
    profile = load_profile("cpu").replace(sequence=8, warmup=1, min_runs=3, max_runs=5, max_seconds=1.0,
                                          tolerance=0.5, drift_check_every=0)
    result = profile_model(arch_file, profile, store_path=tmp_path / "store.sqlite")
    assert result["ok"] and result["latency_ms"] > 0 and result["decoder_params"] == count_params(toy_arch()).decoder_params
    again = profile_model(arch_file, profile, store_path=tmp_path / "store.sqlite")
    assert again["cached"] and again["latency_ms"] == result["latency_ms"]

    space = SearchSpace.default("toy")
    assert space.backbone == "toy" and space.vocab_size == 97
    assert all(a.backbone == "toy" and space.contains(a) for a in space.sample(20, seed=1))

