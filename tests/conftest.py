"""Shared test helpers: tiny architectures (small vocabularies, short sequences, few layers)."""

from __future__ import annotations

import random

import pytest

from ltsedge.architecture import Architecture
from ltsedge.space import SearchSpace

TINY_VOCAB = 500


def tiny_arch(**overrides) -> Architecture:
    fields = dict(n_layer=2, d_model=64, n_head=[2, 4], d_inner=[128, 192], vocab_size=TINY_VOCAB, n_positions=64)
    fields.update(overrides)
    return Architecture(**fields)


def tiny_space(**overrides) -> SearchSpace:
    """A small space of small models: fast to export and measure."""
    fields = dict(n_layer=(1, 2, 3), d_model=(32, 64), n_head=(2, 4), d_inner=tuple(range(64, 257, 32)),
                  d_embed=(16, 32, 64), div_val=(1, 2), vocab_size=TINY_VOCAB, n_positions=64)
    fields.update(overrides)
    return SearchSpace(**fields)


def random_tiny_archs(n: int, seed: int) -> list[Architecture]:
    """Random heterogeneous tiny architectures, a third of them with adaptive embeddings."""
    rng = random.Random(seed)
    archs = []
    for _ in range(n):
        d_model = rng.choice([32, 48, 64, 96])
        n_layer = rng.randint(1, 3)
        adaptive = rng.random() < 0.67
        archs.append(Architecture(
            n_layer=n_layer, d_model=d_model,
            n_head=[rng.choice([1, 2, 4, 8]) for _ in range(n_layer)],
            d_inner=[rng.randint(16, 300) for _ in range(n_layer)],
            d_embed=rng.choice([16, 32, 64]) if adaptive else None,
            div_val=rng.choice([1, 2, 4]) if adaptive else 1,
            vocab_size=rng.randint(200, 800), n_positions=rng.choice([32, 64]),
        ))
    return archs


@pytest.fixture
def arch_file(tmp_path):
    def write(arch: Architecture | None = None, text: str | None = None):
        path = tmp_path / "arch.json"
        path.write_text(text if text is not None else (arch or tiny_arch()).to_json())
        return path
    return write
