"""``ltsedge prune``: the user's trained model made faster on their device, keeping its weights.

    read     the Hugging Face folder (architecture, weights, tokenizer) and the user's text, cut into
             calibration and held-out windows that share no token
    measure  importance (one calibration pass) and, for repair, the output projections' input moments;
             the parent's held-out loss; the known prunings (ShortGPT's layer removal, uniform width) as
             points of the space, their loss and speed measured
    search   NSGA-II over every layer's genes (kept, key/value groups, SwiGLU width): each candidate's
             held-out loss measured with its inherited weights, its decode latency measured in the app's
             runtime or predicted by the device's cost model, predictions that would enter the front
             measured after each generation and at the end, so the front is of measured figures only
    publish  bundles of the front at the asked speed-ups (``publish``), the parent timed beside them

Every loss is written to ``OUT/losses.jsonl`` as it is measured and read back by a later run of the same
model, text and windows; every speed figure goes to the measurement store. An interrupted run loses neither.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.files import sha256_of
from ltsedge.subnets.evaluated import LOSSES, Evaluated

DEFAULT_CONTEXT = 2048  # an app's chat: the time per token once 2048 tokens are in the cache
DEFAULT_SEQUENCE = 512  # the prompt whose prefill is timed beside it
NEEDS = ("torch", "pymoo", "safetensors", "tokenizers")
OUTPUTS = ("frontier.json", "frontier.csv", "candidates.csv", "prune.json", LOSSES)


@dataclass(frozen=True)
class PruneOptions:
    folder: Path  # a Hugging Face Llama folder: config.json, model.safetensors, tokenizer.json
    text: Path  # the user's text: calibration and held-out windows
    out_dir: Path
    device: object = "cpu"  # a profile name, TOML path or DeviceProfile
    store_path: Path | None = None
    population: int = 24
    generations: int = 10
    window: int = 512  # tokens per window
    calibration: int = 8  # windows for importance and repair
    held_out: int = 4  # windows for the loss
    ffn_step: int = 64
    repair: bool = True
    speedups: tuple[float, ...] = (1.25, 1.5)
    max_bundles: int = 4
    precision: str = "int4"
    context: int = DEFAULT_CONTEXT
    settle: int = 3  # predicted candidates measured after each generation, at most
    seed: int = 0
    threads: int | None = None  # torch's threads for losses (None: torch's default)

    def check(self) -> None:
        for name, low in (("population", 4), ("generations", 1), ("window", 16), ("calibration", 1),
                          ("held_out", 1), ("ffn_step", 1), ("max_bundles", 1), ("context", 1), ("settle", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise LtsedgeError(f"--{name.replace('_', '-')} {value!r}: must be an integer >= {low}")
        if not self.speedups or any(not (s > 1.0) or s != s for s in self.speedups):
            raise LtsedgeError(f"--speedups {','.join(map(str, self.speedups))}: each must be a number above 1")


@dataclass
class PruneRun:
    """What a run read, measured and found; ``publish`` and ``outputs`` turn it into files."""

    options: PruneOptions
    folder: object
    space: object
    quality: object
    oracle: object
    profile: object
    export: object
    parent: Evaluated | None = None
    heuristics: list[Evaluated] = field(default_factory=list)
    evaluated: dict[str, Evaluated] = field(default_factory=dict)  # by genes key
    repair_probe: dict = field(default_factory=dict)
    predictions: list = field(default_factory=list)  # the cost model's decode predictions, and what was measured
    use_repair: bool = False
    seconds: dict = field(default_factory=dict)
    identity: str = ""


def run_prune(options: PruneOptions, log: Callable[[str], None] = print):
    """Read, measure, search, publish; returns the ``publish.Published`` result (its files written)."""
    from ltsedge.extras import require

    for module in NEEDS:  # the extra's modules, each named in one line where missing, before any work
        require(module, "ltsedge prune")
    from ltsedge.search.outdir import OWNED_DIRS, SCRATCH, OutputDir
    from ltsedge.store import MeasurementStore
    from ltsedge.subnets.publish import publish

    started = time.time()
    options.check()
    inputs = _read_inputs(options, log)  # every bad input refused here, before anything is written
    with OutputDir(options.out_dir, outputs=OUTPUTS, owned_dirs=OWNED_DIRS, tool="ltsedge prune") as outdir, \
            MeasurementStore(options.store_path) as store:
        for rel in outdir.files_under(SCRATCH):  # what a killed run was writing or timing
            outdir.remove(rel)
        run = _measure_parent(options, inputs, outdir, store, log, started)
        return publish(run, outdir, store, log)


@dataclass(frozen=True)
class _Inputs:
    folder: object
    weights: dict
    windows: object
    identity: str
    profile: object


def _read_inputs(options: PruneOptions, log) -> _Inputs:
    from ltsedge.devices import DeviceProfile, load_profile
    from ltsedge.exporters.trained_weights import load_state_dict
    from ltsedge.hf_folder import read_folder
    from ltsedge.subnets.genes import check_parent
    from ltsedge.subnets.parent import parent_weights
    from ltsedge.subnets.text import text_tokens
    from ltsedge.subnets.windows import split_windows

    profile = options.device if isinstance(options.device, DeviceProfile) else load_profile(options.device)
    profile = profile.replace(context=options.context, sequence=min(DEFAULT_SEQUENCE, options.context))
    folder = read_folder(options.folder)
    check_parent(folder.arch)
    if options.context >= folder.arch.n_positions:
        raise LtsedgeError(f"--context {options.context}: the model holds {folder.arch.n_positions} positions "
                           f"(max_position_embeddings); decode is timed after a shorter past")
    tokens = text_tokens(options.text, folder.tokenizer, folder.arch.vocab_size)
    windows = split_windows(tokens, options.window, options.calibration, options.held_out)
    log(f"{options.text}: {len(tokens):,} tokens; {options.calibration} calibration and {options.held_out} held-out "
        f"windows of {options.window}")
    weights = parent_weights(folder.arch, load_state_dict(folder.weights), f"weights file {folder.weights}")
    identity = json.dumps({"weights": sha256_of(folder.weights, "weights"), "text": sha256_of(options.text, "text"),
                           "window": options.window, "calibration": options.calibration,
                           "held_out": options.held_out, "ffn_step": options.ffn_step}, sort_keys=True)
    return _Inputs(folder, weights, windows, identity, profile)


def _measure_parent(options, inputs: _Inputs, outdir, store, log, started) -> PruneRun:
    from ltsedge.exporters.options import ExportOptions
    from ltsedge.runners import Runner
    from ltsedge.runners.policy import pinned_calibration
    from ltsedge.devices import coarse
    from ltsedge.backbones import get_backbone
    from ltsedge.subnets.genes import SubnetSpace
    from ltsedge.subnets.importance import measure_importance
    from ltsedge.subnets.latency import SpeedOracle
    from ltsedge.subnets.quality import Quality
    from ltsedge.subnets.repair import measure_grams
    from ltsedge.subnets.search import evolve

    folder, windows = inputs.folder, inputs.windows
    profile = inputs.profile
    export = ExportOptions(variant="generate", precision=options.precision).resolved(get_backbone("llama"))
    space = SubnetSpace(folder.arch, ffn_step=options.ffn_step)
    t = time.time()
    importance = measure_importance(folder.arch, inputs.weights, windows.calibration, threads=options.threads)
    grams = measure_grams(folder.arch, inputs.weights, windows.calibration, threads=options.threads) \
        if options.repair else None
    log(f"importance{' and repair moments' if grams else ''} from {importance.tokens:,} calibration tokens: "
        f"{time.time() - t:.0f} s")
    quality = Quality(space, inputs.weights, importance, grams, windows.held_out, threads=options.threads)
    _reload_losses(quality, outdir, inputs.identity)
    with Runner(coarse(profile), log=log) as runner:
        runner.use_pinned(pinned_calibration(store, runner, log=log))
        oracle = SpeedOracle(profile, runner, store, outdir, export)
        run = PruneRun(options, folder, space, quality, oracle, profile, export, identity=inputs.identity)
        run.seconds["setup"] = time.time() - started
        evolve(run, outdir, log)
        run.seconds["search"] = time.time() - started - run.seconds["setup"]
    return run


def _reload_losses(quality, outdir, identity: str) -> None:
    """Losses an earlier run measured for the same weights, text and windows (``losses.jsonl``)."""
    from ltsedge.subnets.loss import HeldOutLoss

    path = outdir.root / LOSSES
    if not path.is_file():
        return
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            if row["identity"] == identity and np.isfinite(row["nats_per_token"]):
                quality.losses[row["key"]] = HeldOutLoss(float(row["nats_per_token"]), int(row["tokens"]),
                                                         float(row["seconds"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a kill: measured again
