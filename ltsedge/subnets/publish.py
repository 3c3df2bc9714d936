"""Publishing a pruning run: bundles a user can ship, with the parent's weights sliced (and repaired where
the measured loss says it helps), its tokenizer and chat template; every figure of them measured on the files.

- Which: for each asked speed-up (1.25x, 1.5x the parent's decode speed), a few front models that reach it in
  the search's figures are written as bundles and timed beside the parent (``choice``); the one of lowest
  shipped loss that reaches it there is published under the speed-up's name; then others of the front, spread
  over it, up to ``max_bundles``. The bundles not chosen are deleted; every timed one is listed in the outputs.
- Loss: measured for each timed model in PyTorch at float32, with and without repair (the lower is shipped),
  then on the bundle's file itself in onnxruntime at its precision (``bundle_loss``).
- Speed: the parent's bundle and the others timed side by side in one run, twice, in opposite orders, at the
  device profile's own repeat policy; their figures are the mean of the two medians. A chosen bundle is moved,
  not rewritten: the published file is the file measured.
- Against the known prunings: at each one's measured decode latency, the best loss the search found at that
  latency or less.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ltsedge.subnets.choice import choose, shortlist
from ltsedge.subnets.search import measured_front

MODELS = "models"
TIMED = ".scratch/publish"  # the shortlisted bundles while they are timed; the chosen ones move to models/
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
    candidate: str = ""  # its name while it was timed (candidate-N)
    optimum: str | None = None  # why Optimum's ORTModelForCausalLM cannot load the bundle (None: it loads)
    optimum_uniform: bool = False  # ... and the uniform cache layout of the same model would load there

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
    seconds: dict
    timed: list = field(default_factory=list)  # every front model timed beside the parent, published or not
    targets: dict = field(default_factory=dict)  # asked speed-up -> the published model's name (None: missed)

    @property
    def missed(self) -> list[float]:
        """The asked speed-ups no timed model reached beside the parent."""
        return [target for target, name in self.targets.items() if name is None]


def publish(run, outdir, store, log) -> Published:
    from ltsedge.subnets.bundle_loss import bundle_loss
    from ltsedge.subnets.outputs import write_outputs

    started = time.time()
    front = measured_front(run)
    pool, extra = shortlist(front, run.parent, run.options.speedups, run.options.max_bundles, run.heuristics)
    parent = PublishedSubnet("parent", run.parent, None, False, run.parent.loss)
    timed = [_decided(run, f"candidate-{i + 1}", e) for i, e in enumerate(pool)]
    _write_bundle(run, outdir, parent, f"{MODELS}/parent")
    for p in timed:
        _write_bundle(run, outdir, p, f"{TIMED}/{p.name}")
    log(f"timing the parent's bundle beside {len(timed)} of the front's and the known prunings'")
    _time_side_by_side(run, store, [parent, *timed], log)
    for p in [parent, *timed]:
        p.shipped_loss = bundle_loss(p.bundle / MODEL_FILE, run.quality.held_out, threads=run.options.threads)
    base = parent.figure("decode_latency_ms")
    chosen, targets = choose(timed, run.options.speedups, [p for p in timed if any(p.evaluated is e for e in extra)],
                            run.options.max_bundles, speedup=lambda p: _speedup(base, p),
                            loss=lambda p: p.shipped_loss.nats,
                            front=[p for p in timed if any(p.evaluated is e for e in front)])
    for target in [t for t, name in targets.items() if name is None]:
        best = max((_speedup(base, p) for p in timed), default=0.0)
        log(f"no sub-network of the front reached {target:g}x the parent's decode speed beside it "
            f"(the fastest timed: {best:.2f}x)")
    for target, name in targets.items():
        if name and name != f"speedup-{target:g}x":
            log(f"{name} is also the lowest loss at {target:g}x the parent's decode speed")
    models = [_publish_one(run, outdir, p, name, target) for name, p, target in chosen]
    for p in timed:
        if all(p is not m for m in models):
            for rel in list(p.files):
                outdir.remove(rel)
            p.bundle, p.files = None, {}
    _clear_stale(outdir, [parent, *models])
    result = Published(run, parent, models, front, compare_known(run),
                       {**run.seconds, "publish": time.time() - started}, timed, targets)
    write_outputs(result, outdir)
    return result


def _speedup(base: float | None, p: PublishedSubnet) -> float:
    decode = p.figure("decode_latency_ms")
    return base / decode if base and decode else 0.0


def _clear_stale(outdir, published: list[PublishedSubnet]) -> None:
    """An earlier run's bundles in models/ that this one did not publish: its frontier.json no longer lists
    them (removed only now, so a run cut short leaves the earlier run's bundles whole)."""
    keep = {rel for p in published for rel in p.files}
    keep |= {f"{MODELS}/{p.name}.{ext}" for p in published for ext in ("json", "safetensors")}
    for rel in outdir.files_under(MODELS):
        if rel not in keep:
            outdir.remove(rel)


def _publish_one(run, outdir, p: PublishedSubnet, name: str, target) -> PublishedSubnet:
    """A chosen bundle moved (its bytes unchanged) to ``models/NAME``, its sources written beside it."""
    p.candidate, p.name, p.target = p.name, name, target
    files = {}
    for rel, sha in p.files.items():
        moved = f"{MODELS}/{name}/{rel.rsplit('/', 1)[1]}"
        outdir.move(rel, moved)
        files[moved] = sha
    p.bundle, p.files = outdir.root / MODELS / name, files
    _write_sources(outdir, name, *run.quality.child(p.evaluated.genes, p.repaired))
    return p


def _decided(run, name: str, e) -> PublishedSubnet:
    """The model as shipped: repaired or not, whichever the measured float32 loss prefers."""
    raw = run.quality.loss(e.genes, repaired=False)
    if not run.options.repair or not run.quality.repairable(e.genes):
        return PublishedSubnet(name, e, None, False, raw)
    fixed = run.quality.loss(e.genes, repaired=True)
    better = fixed.nats < raw.nats
    return PublishedSubnet(name, e, None, better, fixed if better else raw)


def _write_bundle(run, outdir, p: PublishedSubnet, rel: str) -> None:
    from ltsedge.exporters import export_model
    from ltsedge.exporters.bundle import write_bundle
    from ltsedge.exporters.optimum import optimum_note, uniform_loads

    arch, state = run.quality.child(p.evaluated.genes, p.repaired)
    exported = export_model(arch, run.export, weights=state, weights_source=f"the parent's weights ({p.name})")
    files = write_bundle(exported, outdir.root / rel, tokenizer=run.folder.tokenizer,
                         claim=lambda path: outdir.path(path.relative_to(outdir.root).as_posix()))
    p.bundle, p.files = outdir.root / rel, {f"{rel}/{name}": sha for name, sha in files.items()}
    p.optimum, p.optimum_uniform = optimum_note(exported), uniform_loads(exported)
    if p.name == "parent":
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
