"""NSGA-II over the sub-networks of one parent (pymoo's Problem and operators): a vector of integers per
candidate, four genes per layer of the parent, each layer choosing for itself.

    x[i]          1 keeps layer i, 0 drops it
    x[n + i]      the key/value groups it keeps (1 .. the parent's)
    x[2n + i]     the index of its SwiGLU width among ``SubnetSpace.ffn_choices(i)``
    x[3n + i]     the query heads each kept group keeps (1 .. the parent's group size)

A vector that drops every layer keeps the layer of most block influence (``SubnetRepair``); two vectors are
duplicates when they describe one sub-network (a dropped layer's counts are not read).
"""

from __future__ import annotations

import numpy as np
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.mutation import Mutation
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.core.sampling import Sampling
from pymoo.operators.crossover.ux import UniformCrossover

from ltsedge.subnets.genes import SubnetGenes, SubnetSpace

OBJECTIVES = ("held-out loss (nats per token)", "decode latency (ms)")


class SubnetEncoding:
    def __init__(self, space: SubnetSpace, block_influence=None):
        self.space, n = space, space.n_layer
        self.n = n
        self.lower = np.array([0] * n + [1] * n + [0] * n + [1] * n)
        self.upper = np.array([1] * n + [space.parent.kv_heads[i] for i in range(n)]
                              + [len(space.ffn_choices(i)) - 1 for i in range(n)]
                              + [space.group_size(i) for i in range(n)])
        # the layer kept where a vector would keep none: the most influential (ShortGPT's last to go)
        self.last_layer = int(np.argmax(block_influence)) if block_influence is not None else 0

    def decode(self, x) -> SubnetGenes:
        x = np.asarray(x, dtype=int)
        n = self.n
        keep = tuple(bool(v) for v in x[:n])
        if not any(keep):
            keep = tuple(i == self.last_layer for i in range(n))
        ffn = tuple(self.space.ffn_choices(i)[x[2 * n + i]] for i in range(n))
        return self.space.canonical(SubnetGenes(keep, tuple(int(v) for v in x[n:2 * n]), ffn,
                                                tuple(int(v) for v in x[3 * n:])))

    def encode(self, genes: SubnetGenes) -> np.ndarray:
        genes = self.space.canonical(genes)
        ffn = [self.space.ffn_choices(i).index(w) for i, w in enumerate(genes.ffn)]
        q_heads = [self.space.q_heads(genes, i) for i in range(self.n)]
        return np.array([int(k) for k in genes.keep] + list(genes.kv_groups) + ffn + q_heads)


class SubnetProblem(Problem):
    """Two objectives, both minimised: held-out loss and decode latency. Evaluated outside pymoo (ask/tell):
    loss is measured, latency measured or predicted, by the run (``prune``)."""

    def __init__(self, encoding: SubnetEncoding):
        super().__init__(n_var=len(encoding.lower), n_obj=len(OBJECTIVES), xl=encoding.lower, xu=encoding.upper,
                         vtype=int)
        self.encoding = encoding

    def _evaluate(self, X, out, *args, **kwargs):
        raise NotImplementedError("sub-networks are evaluated by ltsedge.subnets.prune, not by pymoo")


class SeededSampling(Sampling):
    """The first generation: the ``seeds`` (the parent and the known prunings), then light prunings of the
    parent: each layer kept with probability 0.95 (dropping a layer costs the most loss), its key/value groups
    drawn from all their choices, its SwiGLU width and its groups' query heads from the upper half of theirs."""

    def __init__(self, seeds: list[SubnetGenes]):
        super().__init__()
        self.seeds = list(seeds)

    def _do(self, problem, n_samples, random_state=None, **kwargs):
        rng = random_state if random_state is not None else np.random.default_rng()
        enc: SubnetEncoding = problem.encoding
        rows = [enc.encode(g) for g in self.seeds[:n_samples]]
        while len(rows) < n_samples:
            n = enc.n
            keep = (rng.random(n) < 0.95).astype(int)
            kv = rng.integers(enc.lower[n:2 * n], enc.upper[n:2 * n] + 1)
            ffn = rng.integers((enc.upper[2 * n:3 * n] + 1) // 2, enc.upper[2 * n:3 * n] + 1)
            q = rng.integers((enc.upper[3 * n:] + 1) // 2, enc.upper[3 * n:] + 1)
            rows.append(np.concatenate([keep, kv, ffn, q]))
        return np.array(rows)


class SubnetMutation(Mutation):
    """Each gene changes with probability ``prob_gene``: a layer kept or dropped, a count one step up or down
    (a SwiGLU width up to three steps): small moves around a trained model, whose neighbours are close in loss."""

    def __init__(self, prob_gene: float):
        super().__init__(prob=1.0)
        self.prob_gene = prob_gene

    def _do(self, problem, X, random_state=None, **kwargs):
        rng = random_state if random_state is not None else np.random.default_rng()
        X = np.array(X, dtype=int)
        n = problem.encoding.n
        moves = rng.integers(1, 4, size=X.shape) * rng.choice([-1, 1], size=X.shape)
        moves[:, :n] = 1 - 2 * X[:, :n]  # flip keep
        moves[:, n:2 * n] = np.sign(moves[:, n:2 * n])
        moves[:, 3 * n:] = np.sign(moves[:, 3 * n:])
        changed = rng.random(X.shape) < self.prob_gene
        return np.clip(X + np.where(changed, moves, 0), problem.xl, problem.xu)


class SubnetRepair(Repair):
    def _do(self, problem, X, **kwargs):
        enc: SubnetEncoding = problem.encoding
        return np.array([enc.encode(enc.decode(x)) for x in X])


class SubnetDuplicates(DuplicateElimination):
    """Equal (repaired, so canonical) vectors: one sub-network."""

    def _do(self, pop, other, is_duplicate):
        seen = {tuple(np.asarray(ind.X, dtype=int)) for ind in other} if other is not None else set()
        for i, ind in enumerate(pop):
            key = tuple(np.asarray(ind.X, dtype=int))
            is_duplicate[i] = key in seen
            seen.add(key)
        return is_duplicate


def operators(seeds: list[SubnetGenes], n_layer: int) -> dict:
    """NSGA-II keyword arguments. Repaired vectors are canonical, so equal vectors are equal sub-networks."""
    return dict(sampling=SeededSampling(seeds), crossover=UniformCrossover(),
                mutation=SubnetMutation(prob_gene=2.0 / (4 * n_layer)), repair=SubnetRepair(),
                eliminate_duplicates=SubnetDuplicates())
