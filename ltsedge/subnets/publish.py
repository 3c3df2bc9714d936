"""Publishing a pruning run: bundles a user can ship, with the parent's weights sliced (and repaired where
the measured loss says it helps), its tokenizer and chat template; every figure of them measured on the files.

- Which: for each asked speed-up (1.25x, 1.5x the parent's decode speed), the front's lowest-loss sub-network
  at least that fast in the search's figures; then others of the front, spread over it, up to ``max_bundles``.
- Loss: measured for each published model in PyTorch at float32, with and without repair (the lower is
  shipped), then on the shipped file itself in onnxruntime at its precision (``bundle_loss``).
- Speed: the parent's bundle and the published ones timed side by side in one run, twice, in opposite orders,
  at the device profile's own repeat policy; their figures are the mean of the two medians.
- Against the known prunings: at each one's measured decode latency, the best loss the search found at that
  latency or less.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ltsedge.subnets.search import measured_front

MODELS = "models"
MODEL_FILE = "model.onnx"
ROUNDS = 2


@dataclass
class PublishedSubnet:
    name: str
    evaluated: object  # prune.Evaluated (the search's figures)
    target: float | None  # the speed-up it was chosen for
    repaired: bool
    fp32_loss: object  # HeldOutLoss in PyTorch, float32
    shipped_loss: object | None = None  # HeldOutLoss of the bundle in onnxruntime
    bundle: Path | None = None
    files: dict = field(default_factory=dict)
    rounds: list = field(default_factory=list)  # Measurement per side-by-side round

    def figure(self, name: str) -> float | None:
        values = [getattr(m, name) for m in self.rounds if m.ok and getattr(m, name) is not None]
        return sum(values) / len(values) if values else None


@dataclass
class Published:
    run: object
    parent: PublishedSubnet
    models: list[PublishedSubnet]
    front: list
    comparison: list[dict]
    missed: list[float]  # speed-ups no front model reached
    seconds: dict


def publish(run, outdir, store, log) -> Published:
    from ltsedge.subnets.outputs import write_outputs

    started = time.time()
    front = measured_front(run)
    chosen, missed = choose(front, run.parent, run.options.speedups, run.options.max_bundles)
    for target in missed:
        log(f"no sub-network of the front reached {target:g}x the parent's decode speed")
    parent = PublishedSubnet("parent", run.parent, None, False, run.parent.loss)
    models = [_decided(run, name, e, target) for name, e, target in chosen]
    for p in [parent, *models]:
        _write_bundle(run, outdir, p)
    log(f"wrote {len(models)} bundles and the parent's under {outdir.root / MODELS}")
    _time_side_by_side(run, store, [parent, *models], log)
    for p in [parent, *models]:
        from ltsedge.subnets.bundle_loss import bundle_loss

        p.shipped_loss = bundle_loss(p.bundle / MODEL_FILE, run.quality.held_out, threads=run.options.threads)
    result = Published(run, parent, models, front, compare_known(run), missed,
                       {**run.seconds, "publish": time.time() - started})
    write_outputs(result, outdir)
    return result


def choose(front: list, parent, speedups, limit: int) -> tuple[list, list[float]]:
    """(name, sub-network, speed-up) to publish, and the speed-ups none reached."""
    chosen, missed, taken = [], [], set()
    for target in sorted(speedups):
        fast = [e for e in front if e.decode_ms * target <= parent.decode_ms and e.genes != parent.genes]
        if not fast:
            missed.append(target)
            continue
        best = min(fast, key=lambda e: e.loss.nats)
        if id(best) not in taken and len(chosen) < limit:
            taken.add(id(best))
            chosen.append((f"speedup-{target:g}x", best, target))
    rest = [e for e in front if id(e) not in taken and e.genes != parent.genes]
    room = limit - len(chosen)
    if room > 0 and rest:
        step = len(rest) / room
        picks = sorted({int(i * step) for i in range(min(room, len(rest)))})
        chosen += [(f"front-{k + 1}", rest[i], None) for k, i in enumerate(picks)]
    return chosen, missed


def _decided(run, name: str, e, target) -> PublishedSubnet:
    """The model as shipped: repaired or not, whichever the measured float32 loss prefers."""
    raw = run.quality.loss(e.genes, repaired=False)
    if not run.options.repair or not run.quality.repairable(e.genes):
        return PublishedSubnet(name, e, target, False, raw)
    fixed = run.quality.loss(e.genes, repaired=True)
    better = fixed.nats < raw.nats
    return PublishedSubnet(name, e, target, better, fixed if better else raw)


def _write_bundle(run, outdir, p: PublishedSubnet) -> None:
    from ltsedge.exporters import export_model
    from ltsedge.exporters.bundle import write_bundle

    arch, state = run.quality.child(p.evaluated.genes, p.repaired)
    exported = export_model(arch, run.export, weights=state, weights_source=f"the parent's weights ({p.name})")
    folder = outdir.root / MODELS / p.name
    files = write_bundle(exported, folder, tokenizer=run.folder.tokenizer,
                         claim=lambda path: outdir.path(path.relative_to(outdir.root).as_posix()))
    p.bundle, p.files = folder, {f"{MODELS}/{p.name}/{name}": sha for name, sha in files.items()}
    _write_sources(outdir, p.name, arch, state)


def _write_sources(outdir, name: str, arch, state: dict) -> None:
    """Beside the bundle, what re-exports it after healing: the architecture (``ltsedge export NAME.json``)
    and its float32 weights in the reference model's names (``--weights NAME.safetensors``)."""
    from safetensors.torch import save_file

    from ltsedge.files import write_atomically

    write_atomically(outdir.path(f"{MODELS}/{name}.json"), arch.to_json() + "\n")
    path = outdir.path(f"{MODELS}/{name}.safetensors")
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def _time_side_by_side(run, store, models: list[PublishedSubnet], log) -> None:
    from ltsedge.runners import Runner
    from ltsedge.runners.policy import pinned_calibration

    paths = [p.bundle / MODEL_FILE for p in models]
    with Runner(run.profile, log=log) as runner:
        runner.use_pinned(pinned_calibration(store, runner, log=log))
        for round_ in range(ROUNDS):
            order = list(range(len(models)))[:: 1 if round_ % 2 == 0 else -1]
            measured = runner.measure_many([paths[i] for i in order])
            for i, m in zip(order, measured):
                models[i].rounds.append(m)
                if not m.ok:
                    log(f"warning: {models[i].name} failed its measurement ({m.error})")


def compare_known(run) -> list[dict]:
    """Each known pruning beside the best the search found at its measured decode latency or less."""
    found = [e for e in run.evaluated.values() if e.source == "search" and e.speed.measured]
    rows = []
    for h in run.heuristics:
        if not h.speed.measured:
            continue
        at = [e for e in found if e.decode_ms <= h.decode_ms and e.genes != h.genes]  # not the pruning itself
        best = min(at, key=lambda e: e.loss.nats) if at else None
        rows.append({"pruning": h.source, "decode_ms": h.decode_ms, "loss": h.loss.nats, "repaired": h.repaired,
                     "search_loss": best.loss.nats if best else None,
                     "search_decode_ms": best.decode_ms if best else None,
                     "search_lower": bool(best and best.loss.nats < h.loss.nats)})
    return rows
