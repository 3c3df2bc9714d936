"""The evolution of a pruning run (``prune``): the parent and the known prunings measured first, then
NSGA-II over the sub-networks, each generation's predictions that could enter the front measured.

A candidate's loss is always measured (seconds); its decode latency is measured, or predicted by the cost model
fitted on this device's figures of this parent's sub-networks (the parent and the known prunings first).
A prediction whose optimistic end (its interval's low end) would beat the measured front at its loss is
measured, the most promising first: the front a run publishes is made of measured figures only.
"""

from __future__ import annotations

import time

from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.evaluator import Evaluator
from pymoo.problems.static import StaticProblem
from pymoo.termination.max_gen import MaximumGenerationTermination

from ltsedge.subnets.heuristics import combined_prunings, known_prunings
from ltsedge.subnets.problem import SubnetEncoding, SubnetProblem, operators
from ltsedge.subnets.quality import genes_key


def evolve(run, outdir, log) -> None:
    space, quality, options = run.space, run.quality, run.options
    full = space.full()
    ladder = known_prunings(space, quality.importance)
    t = time.time()
    run.oracle.measure(_unique([space.architecture(g) for g in [full] + [g for _, g in ladder]]))
    log(f"the parent and {len(ladder)} known prunings timed: {time.time() - t:.0f} s")
    run.parent = evaluate(run, outdir, full, "parent", -1, repaired=False)
    log(f"parent: held-out loss {run.parent.loss.nats:.3f} nats, decode {run.parent.decode_ms:.2f} ms/token")
    run.heuristics = [_known(run, outdir, name, genes, options.repair) for name, genes in ladder]
    if options.repair:
        probed = [h for h in run.heuristics if "raw" in run.repair_probe.get(h.source, {})]
        helped = sum(run.repair_probe[h.source]["repaired"] < run.repair_probe[h.source]["raw"] for h in probed)
        run.use_repair = helped * 2 > len(probed)
        log(f"repair lowered the held-out loss of {helped} of {len(probed)} width prunings: the search "
            f"{'repairs' if run.use_repair else 'does not repair'} its candidates")

    encoding = SubnetEncoding(space, quality.importance.block_influence)
    problem = SubnetProblem(encoding)
    seeds = [full] + [h.genes for h in run.heuristics] + [g for _, g in combined_prunings(space, quality.importance)]
    algorithm = NSGA2(pop_size=options.population, **operators(seeds, space.n_layer))
    algorithm.setup(problem, termination=MaximumGenerationTermination(options.generations), seed=options.seed,
                    verbose=False)
    generation = 0
    while algorithm.has_next():
        pop = algorithm.ask()
        generation += 1
        t = time.time()
        found = [evaluate(run, outdir, encoding.decode(x), "search", generation, run.use_repair)
                 for x in pop.get("X")]
        Evaluator().eval(StaticProblem(problem, F=[[e.loss.nats, e.decode_ms] for e in found]), pop)
        algorithm.tell(infills=pop)
        settled = settle(run, options.settle)
        front = measured_front(run)
        log(f"generation {generation}/{options.generations}: {len(found)} candidates, {settled} predictions "
            f"measured, front of {len(front)} ({time.time() - t:.0f} s)")
    settled = settle(run, options.population)
    log(f"settled {settled} more predictions: the front is measured")


def evaluate(run, outdir, genes, source: str, generation: int, repaired: bool):
    """The sub-network ``genes``: loss measured (once), speed measured or predicted."""
    from ltsedge.subnets.evaluated import Evaluated, append_loss

    space, quality = run.space, run.quality
    genes = space.canonical(genes)
    repaired = repaired and quality.repairable(genes)
    key = genes_key(genes, repaired)
    if key in run.evaluated:
        return run.evaluated[key]
    known = quality.known(genes, repaired)
    loss = known or quality.loss(genes, repaired)
    if known is None:
        append_loss(outdir, run.identity, key, loss)
    arch = space.architecture(genes)
    run.evaluated[key] = Evaluated(genes, arch, loss, repaired, run.oracle.speed(arch), generation, source)
    return run.evaluated[key]


def _known(run, outdir, name: str, genes, repair: bool):
    """A known pruning at its best: repaired where that lowers its loss (its width pruned), as it would be
    shipped by someone who knew the repair; what each gave is kept in ``run.repair_probe``."""
    raw = evaluate(run, outdir, genes, name, 0, repaired=False)
    if not repair or not run.quality.repairable(genes):
        return raw
    fixed = evaluate(run, outdir, genes, name, 0, repaired=True)
    run.repair_probe[name] = {"raw": raw.loss.nats, "repaired": fixed.loss.nats}
    return fixed if fixed.loss.nats < raw.loss.nats else raw


def settle(run, limit: int) -> int:
    """Measure (at most ``limit`` architectures) the predicted candidates that could enter the measured front,
    the most promising first, re-judged after each; returns how many were measured."""
    done = 0
    while done < limit:
        _refresh(run)
        front = measured_front(run)
        ranked = sorted(((_promise(e, front), e) for e in run.evaluated.values() if not e.speed.measured),
                        key=lambda pe: -pe[0])
        batch = _unique([e.arch for p, e in ranked if p > 1.0])[:min(4, limit - done)]
        if not batch:
            break
        predicted = {e.arch.id: e.speed for _, e in ranked}
        for arch, measured in zip(batch, run.oracle.measure(batch)):
            guess = predicted[arch.id]
            run.predictions.append({"architecture": arch.id, "predicted_ms": guess.decode_ms, "low_ms": guess.low_ms,
                                    "high_ms": guess.high_ms, "measured_ms": measured.decode_ms})
        done += len(batch)
    _refresh(run)
    return done


def _promise(e, front) -> float:
    """How far the optimistic decode latency of ``e`` beats the measured front's at ``e``'s loss (> 1: it would
    enter the front)."""
    at_loss = [f.decode_ms for f in front if f.loss.nats <= e.loss.nats]
    return (min(at_loss) if at_loss else float("inf")) / max(e.speed.low_ms, 1e-9)


def _refresh(run) -> None:
    for e in run.evaluated.values():
        if not e.speed.measured:
            e.speed = run.oracle.measured(e.arch) or run.oracle.speed(e.arch)


def measured_front(run) -> list:
    """The evaluated sub-networks of measured speed that no other beats on both loss and decode latency."""
    points = sorted((e for e in run.evaluated.values() if e.speed.measured and e.speed.decode_ms < float("inf")),
                    key=lambda e: (e.decode_ms, e.loss.nats))
    front, best = [], float("inf")
    for e in points:
        if e.loss.nats < best:
            front.append(e)
            best = e.loss.nats
    return front


def _unique(archs: list) -> list:
    seen, out = set(), []
    for a in archs:
        if a.id not in seen:
            seen.add(a.id)
            out.append(a)
    return out
