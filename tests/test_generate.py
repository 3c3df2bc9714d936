"""The generate variant: greedy decoding with the KV cache in onnxruntime equals the PyTorch reference
without a cache, token for token and logit for logit (1e-3), with and without adaptive embeddings,
batch 1 and 2 with left padding."""

from __future__ import annotations

import numpy as np
import pytest

from ltsedge.architecture import Architecture
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.generation import greedy
from tests.conftest import random_tiny_archs
from tests.helpers import exported, prompts, reference_greedy


@pytest.mark.parametrize("arch", random_tiny_archs(8, seed=21), ids=lambda a: a.id)
@pytest.mark.parametrize("batch", [1, 2])
def test_cached_generation_equals_the_reference_without_cache(arch, batch):
    session, model = exported(arch)
    prompt, mask = prompts(arch, batch, 6)
    n_new = min(8, arch.n_positions - prompt.shape[1])
    got = greedy(session, prompt, n_new, mask)
    want_tokens, want_logits = reference_greedy(model, prompt, mask, n_new)
    np.testing.assert_array_equal(got.tokens, want_tokens)
    for step_got, step_want in zip(got.logits, want_logits):
        assert np.abs(step_got - step_want).max() <= 1e-3


@pytest.mark.parametrize("overrides", [{}, {"d_embed": 32, "div_val": 1}, {"d_embed": 64, "div_val": 4}])
def test_adaptive_embeddings_and_a_long_cache(overrides):
    arch = Architecture(**{**dict(n_layer=2, d_model=64, n_head=[8, 2], d_inner=[128, 256], vocab_size=500,
                                  n_positions=64), **overrides})
    session, model = exported(arch)
    prompt, mask = prompts(arch, 2, 20, seed=3)
    got = greedy(session, prompt, 30, mask)
    want_tokens, want_logits = reference_greedy(model, prompt, mask, 30)
    np.testing.assert_array_equal(got.tokens, want_tokens)
    assert max(np.abs(a - b).max() for a, b in zip(got.logits, want_logits)) <= 1e-3


def test_left_padding_does_not_change_a_prompts_continuation():
    """The shorter prompt, left-padded in a batch, continues exactly as it does alone."""
    arch = Architecture(n_layer=2, d_model=64, n_head=[2, 4], d_inner=[128, 128], vocab_size=300, n_positions=64)
    session, _ = exported(arch)
    prompt, mask = prompts(arch, 2, 8, seed=5)
    batched = greedy(session, prompt, 6, mask)
    alone = greedy(session, prompt[1:, 4:], 6)
    np.testing.assert_array_equal(batched.tokens[1], alone.tokens[0])
    assert np.abs(batched.logits[-1][1] - alone.logits[-1][0]).max() <= 1e-3


def test_the_declared_cache_has_per_layer_heads():
    arch = Architecture(n_layer=3, d_model=64, n_head=[2, 8, 4], d_inner=[128] * 3, vocab_size=100, n_positions=32)
    spec = export_model(arch, ExportOptions(variant="generate", cache_layout="per-layer")).spec
    past = {t.name: t.dims for t in spec.input("past")}
    assert past["past_key_values.0.key"] == ("batch_size", 2, "past_sequence", 32)
    assert past["past_key_values.1.value"] == ("batch_size", 8, "past_sequence", 8)
    assert {t.name: t.dims for t in spec.output("present")}["present.2.key"] == ("batch_size", 4, "total_sequence", 16)
