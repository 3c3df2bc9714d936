"""Racing never drops a candidate that the strict figures put on the front (simulated measurements)."""

from __future__ import annotations

import numpy as np
import pytest

from ltsedge.runners.racing import Race


def true_front(points):
    """Indices of the non-dominated points (max params, min ratio, min memory)."""
    front = []
    for i, (p, r, m) in enumerate(points):
        dominated = any(q >= p and s <= r and n <= m and (q, s, n) != (p, r, m) for q, s, n in points)
        if not dominated:
            front.append(i)
    return set(front)


@pytest.mark.parametrize("seed", range(8))
def test_racing_never_drops_a_true_frontier_candidate(seed):
    rng = np.random.default_rng(seed)
    n = 120
    params = rng.integers(10_000, 5_000_000, n)
    # Latency and memory grow with parameters, with topology changing them by up to 2.8x and 5.5x.
    ratios = params / 1e6 * rng.uniform(1.0, 2.8, n)
    memory = 20 + params / 2e4 * rng.uniform(1.0, 5.5, n)
    truth = true_front(list(zip(params, ratios, memory)))
    tolerance, kept = 0.02, []  # (params, ratio, memory) of candidates timed in full, as a search keeps them
    dropped = []
    for i in range(n):
        front = tuple(kept[j] for j in true_front(kept)) if kept else ()
        race = Race("forward", int(params[i]), front, tolerance)
        # A first estimate: 6 noisy samples (lognormal, 5%: a shared VM's ratios are steadier than that).
        samples = list(ratios[i] * rng.lognormal(0.0, 0.05, 6))
        measured_memory = memory[i] * rng.uniform(0.99, 1.01)
        if race.settled(samples, measured_memory):
            dropped.append(i)
        else:  # refined: its figure is then known within the tolerance
            kept.append((int(params[i]), ratios[i] * rng.uniform(1 - tolerance, 1 + tolerance), measured_memory))
    assert not truth & set(dropped), "racing dropped a candidate of the true front"
    assert len(dropped) > n // 4  # and it does save work: most clearly dominated candidates stop early


def test_budgets_settle_a_candidate_beyond_them():
    race = Race("decode", 1000, (), 0.02, max_ratio=2.0, max_memory_mb=100.0)
    assert race.settled([2.5] * 6, 50.0)  # even its fastest sample is over the latency budget
    assert race.settled([1.0] * 6, 150.0)
    assert not race.settled([2.0] * 6, 50.0)  # at the budget's edge: could be within, refine
    assert not race.settled([2.5] * 5, 50.0)  # not before the first estimate is complete
