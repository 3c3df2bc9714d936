"""Which sub-networks a pruning run publishes: chosen on figures timed beside the parent, not on the search's.

The search times each architecture once, coarsely, and its front is selected on those figures: a model makes
the front partly because its one measurement came out fast (the winner's curse). On SmolLM2-135M the front's
models at 1.34x and 1.54x in the search's figures ran at 1.17x and 1.23x once timed beside the parent. So
publishing shortlists, for every asked speed-up, a few front models that reach it in the search's figures,
and the best known pruning that does (``shortlist``), times them all beside the parent (``publish``), and names for each speed-up the lowest shipped
loss among the models that reach it there (``choose``).
"""

from __future__ import annotations

from typing import Callable

SHORTLIST = 3  # front models timed per asked speed-up
BAND = 1.4  # ... reaching it in the search's figures, and no faster than this factor beyond it


def shortlist(front: list, parent, speedups, limit: int, known: list = ()) -> tuple[list, list]:
    """The models to time (each once) and, among them, the spread ones (``front-k``) published whatever the
    timing says, to fill the places the asked speed-ups leave of ``limit``. Beside the front's, for each
    speed-up the ``known`` pruning (ShortGPT, uniform width) of lowest loss that reaches it in the search's
    figures: those figures err, and a known pruning the front dominates in them may not be dominated beside
    the parent; timed too, it is published only if its measured figures beat the front's."""
    models = [e for e in front if e.genes != parent.genes]

    def speedup(e) -> float:
        return parent.decode_ms / e.decode_ms

    pool: list = []
    for target in sorted(speedups):
        reach = sorted((e for e in models if speedup(e) >= target), key=speedup)  # the lowest loss first
        near = [e for e in reach if speedup(e) <= target * BAND] or reach[:1]
        pool += [e for e in spread(near, SHORTLIST) if all(e is not p for p in pool)]
        heuristic = min((e for e in known if speedup(e) >= target), key=lambda e: e.loss.nats, default=None)
        if heuristic is not None and all(heuristic is not p for p in pool):
            pool.append(heuristic)
    rest = [e for e in models if all(e is not p for p in pool)]
    extra = spread(rest, limit - len(speedups))
    return pool + extra, extra


def choose(timed: list, speedups, extra: list, limit: int, speedup: Callable, loss: Callable,
           front: list | None = None) -> tuple[list[tuple[str, object, float | None]], dict[float, str | None]]:
    """(name, model, target) to publish, and each asked speed-up's published name (None: none reached it).
    Per asked speed-up, the highest first: the lowest ``loss`` among the ``timed`` models whose ``speedup``
    (beside the parent) reaches it, named ``speedup-1.5x``; where that model is already named for a higher
    speed-up, it serves this one too. Then, as ``front-1``, ``front-2``..., up to ``limit`` in all: the
    ``extra`` spread models, then the other timed ones of the ``front`` (default: all), the fastest beside
    the parent first (their figures are measured: a missed speed-up's nearest models are worth shipping)."""
    chosen, targets = [], {}
    for target in sorted(speedups, reverse=True):
        reached = [m for m in timed if speedup(m) >= target]
        best = min(reached, key=loss) if reached else None
        named = [name for name, c, _ in chosen if c is best]
        if best is not None and not named and len(chosen) < limit:
            named = [f"speedup-{target:g}x"]
            chosen.append((named[0], best, target))
        targets[target] = named[0] if named else None
    others = sorted((m for m in (timed if front is None else front) if all(m is not e for e in extra)),
                    key=speedup, reverse=True)
    rest = [m for m in [*extra, *others] if all(m is not c for _, c, _ in chosen)]
    chosen += [(f"front-{k + 1}", m, None) for k, m in enumerate(rest[:max(limit - len(chosen), 0)])]
    return chosen, dict(sorted(targets.items()))


def spread(items: list, count: int) -> list:
    """``count`` of ``items`` evenly spread over them, the first always among them."""
    if count <= 0 or not items:
        return []
    if len(items) <= count:
        return list(items)
    if count == 1:
        return [items[0]]
    picks = sorted({round(i * (len(items) - 1) / (count - 1)) for i in range(count)})
    return [items[i] for i in picks]
