"""The search as pymoo sees it: a Problem over the integer encoding and the operators that respect it.

Nothing here measures anything: the search loop (``loop.py``) asks NSGA-II for a batch, evaluates it
through the store and the runners, and tells NSGA-II the objectives and constraints.

Objectives (all minimised): -decoder parameters (the perplexity proxy), latency, peak memory; with a
fitted proxy (``ltsedge proxy-check``, ``--proxy FILE``), its predicted held-out loss instead of -decoder
parameters.
Constraints (<= 0 is feasible): one per budget, plus one that a failed measurement violates.
"""

from __future__ import annotations

import numpy as np
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.mutation import Mutation
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.core.sampling import Sampling
from pymoo.operators.crossover.ux import UniformCrossover

from ltsedge.search.budgets import Budgets
from ltsedge.space import SearchSpace

FAILED_PENALTY = 1e9  # objective value given to a candidate that could not be measured


class ArchitectureProblem(Problem):
    """Integer genes in [0, upper bound]; evaluation happens outside (ask/tell)."""

    def __init__(self, space: SearchSpace, budgets: Budgets, quality=None):
        self.space = space
        self.budgets = budgets
        self.quality = quality  # a fitted proxy (proxycheck.fitted.FittedProxy); None: decoder parameters
        super().__init__(n_var=space.n_genes, n_obj=3, n_ieq_constr=1 + len(budgets.active()),
                         xl=np.zeros(space.n_genes), xu=np.array(space.upper_bounds), vtype=int)

    def objectives(self, params: int, latency_ms: float | None, memory_mb: float | None, ok: bool, arch=None):
        """(F, G) rows for one evaluated candidate (``arch``: what a fitted proxy predicts from)."""
        if not ok:  # the worst quality either objective can have: no parameters, or an unreachable loss
            worst = FAILED_PENALTY if self.quality is not None else 0.0
            return [worst, FAILED_PENALTY, FAILED_PENALTY], [1.0] + [FAILED_PENALTY] * len(self.budgets.active())
        values = {"max_latency_ms": latency_ms, "max_memory_mb": memory_mb, "min_params": params, "max_params": params}
        g = []
        for name in self.budgets.active():
            budget = getattr(self.budgets, name)
            g.append(budget - values[name] if name == "min_params" else values[name] - budget)
        quality = self.quality.predict(arch) if self.quality is not None else -float(params)
        return [quality, float(latency_ms), float(memory_mb)], [-1.0] + g


class SpaceSampling(Sampling):
    """The space's own uniform sampling, encoded (absent-layer genes random too), after any ``seeds``
    (architectures of the space the first generation must hold, e.g. the layer-scaled baseline)."""

    def __init__(self, seeds: list = ()):
        super().__init__()
        self.seeds = list(seeds)

    def _do(self, problem, n_samples, random_state=None, **kwargs):
        rng = random_state if random_state is not None else np.random.default_rng()
        space: SearchSpace = problem.space
        seeds = self.seeds[:n_samples]
        archs = seeds + space.sample(n_samples - len(seeds), seed=int(rng.integers(2**31)))
        fill = rng.integers(0, np.array(space.upper_bounds) + 1, size=(n_samples, space.n_genes))
        return np.array([space.encode(a, fill=f) for a, f in zip(archs, fill)])


class GeneMutation(Mutation):
    """Each gene is redrawn uniformly from its choices with probability ``prob_gene`` (0.3 in the study)."""

    def __init__(self, prob_gene: float = 0.3):
        super().__init__(prob=1.0)
        self.prob_gene = prob_gene

    def _do(self, problem, X, random_state=None, **kwargs):
        rng = random_state if random_state is not None else np.random.default_rng()
        X = np.array(X, dtype=int)
        redraw = rng.random(X.shape) < self.prob_gene
        fresh = rng.integers(0, np.array(problem.xu, dtype=int) + 1, size=X.shape)
        return np.where(redraw, fresh, X)


class SpaceRepair(Repair):
    def _do(self, problem, X, **kwargs):
        return np.array([problem.space.repair(x) for x in X])


class ArchitectureDuplicates(DuplicateElimination):
    """Two vectors are duplicates when they decode to the same architecture."""

    def __init__(self, space: SearchSpace):
        super().__init__()
        self.space = space

    def _do(self, pop, other, is_duplicate):
        seen = {self.space.decode(ind.X) for ind in other} if other is not None else set()
        for i, ind in enumerate(pop):
            arch = self.space.decode(ind.X)
            is_duplicate[i] = arch in seen
            seen.add(arch)
        return is_duplicate


def make_operators(space: SearchSpace, prob_gene: float = 0.3, seeds: list = ()) -> dict:
    """NSGA-II keyword arguments: integer-aware sampling, crossover, mutation, repair, duplicates."""
    return dict(sampling=SpaceSampling(seeds), crossover=UniformCrossover(), mutation=GeneMutation(prob_gene),
                repair=SpaceRepair(), eliminate_duplicates=ArchitectureDuplicates(space))
