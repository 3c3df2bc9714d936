"""The analytic proxy equals counting the PyTorch modules' parameters, over hundreds of architectures."""

import pytest

from ltsedge.architecture import Architecture
from ltsedge.proxy import count_params
from ltsedge.space import SearchSpace
from tests.helpers import counted_by_torch, random_tiny_archs


def test_gpt2_small_reference_figures():
    small = Architecture(n_layer=12, d_model=768, n_head=[12] * 12, d_inner=[3072] * 12)
    counts = count_params(small)
    assert counts.decoder_params == 85_056_000
    assert counts.total_params == 124_439_808
    assert counted_by_torch(small) == (85_056_000, 124_439_808)


def test_matches_torch_on_300_architectures_of_the_default_space():
    archs = SearchSpace().sample(300, seed=7)
    assert sum(a.adaptive for a in archs) > 100 and sum(a.div_val > 1 for a in archs) > 100
    for arch in archs:
        counts = count_params(arch)
        assert (counts.decoder_params, counts.total_params) == counted_by_torch(arch), arch.id


@pytest.mark.parametrize("arch", random_tiny_archs(100, seed=3), ids=lambda a: a.id)
def test_matches_torch_on_random_small_architectures(arch):
    counts = count_params(arch)
    assert (counts.decoder_params, counts.total_params) == counted_by_torch(arch)


def test_decoder_params_do_not_depend_on_the_vocabulary():
    a = Architecture(n_layer=2, d_model=128, n_head=[2, 4], d_inner=[256, 512], vocab_size=1000)
    b = Architecture(n_layer=2, d_model=128, n_head=[2, 4], d_inner=[256, 512], vocab_size=50257, d_embed=64, div_val=2)
    assert count_params(a).decoder_params == count_params(b).decoder_params
    assert count_params(a).embedding_params != count_params(b).embedding_params
