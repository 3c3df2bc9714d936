"""A whole check: the space, the text and its tokens, the plan of models, their training (resumable), the result.

Everything a check writes is in ``--out`` (an ``OutputDir``: only its own files are replaced):

    plan.json         the settings' identity and the planned models
    tokenizer.json    the tokenizer (the user's, copied, or the one trained on the text)
    tokens.bin        the text's token ids, so a resumed check neither retrains nor re-encodes (tokens.json:
                      of which text and tokenizer, their type and count)
    models.jsonl      one JSON line per finished model, fsynced: kill -9 loses at most the model in training
                      (models_log.py; trainer.py trains the models)
    proxy-check.json  the result, proxy-check.png its picture

A rerun with the same settings continues where the log ends; other settings are refused (``--restart``
discards the check).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ltsedge
from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.files import write_file
from ltsedge.proxy import count_params
from ltsedge.proxycheck import PICTURE, RESULT, report, sampling, tokens
from ltsedge.proxycheck.models_log import LOG, read_log
from ltsedge.proxycheck.trainer import plan_workers, train_models  # noqa: F401 (plan_workers: imported from here)
from ltsedge.proxycheck.text import read_text
from ltsedge.search.outdir import OutputDir
from ltsedge.space import SearchSpace

PLAN, TOKENIZER, TOKENS, TOKENS_META = "plan.json", "tokenizer.json", "tokens.bin", "tokens.json"
OUTPUTS = (PLAN, TOKENIZER, TOKENS, TOKENS_META, LOG, RESULT, PICTURE)
DEFAULT_TOKENS = {"cuda": 20_000_000, "cpu": 2_000_000}  # per model (docs/proxy-check.md: what a CPU hour affords)
# The recipe's batch, sequence and peak learning rate where not given. A GPU's is the pilot's
# (docs/proxy-check.md). A CPU affords about a million tokens per model, so the steps, not the tokens,
# decide how far a model gets: smaller batches of shorter sequences, the same rate (a higher one sped the
# small models and inverted the ranking: docs/proxy-check.md, "The recipe").
DEFAULT_RECIPE = {"cuda": {"batch": 64, "sequence": 256, "lr": 1e-3}, "cpu": {"batch": 8, "sequence": 64, "lr": 1e-3}}
MIN_LR = 1e-6  # --lr's lowest (the command line's range)
REPEAT_WARNING = 2.0  # passes over the training text per model above which memorising gets a say
ANNOUNCE_BYTES = 5_000_000  # a text this large takes long enough to tokenize to say so


@dataclass
class CheckOptions:
    text: Path
    tokenizer: Path | None = None
    space_file: Path | None = None
    preset: str = "default"
    backbone: str | None = None
    models: int = 12
    control_models: int | None = None  # None: as many as --models (when the space needs a control)
    depths: int = 4  # depths of the equal-parameter set (0: none)
    tokens_per_model: int | None = None  # None: DEFAULT_TOKENS of the device
    max_params: int | None = None
    batch: int | None = None  # None: DEFAULT_RECIPE's of the device
    sequence: int | None = None  # None: DEFAULT_RECIPE's of the device, or the space's n_positions if shorter
    lr: float | None = None  # peak learning rate; None: DEFAULT_RECIPE's of the device
    device: str = "auto"
    parallel: int | None = None  # None: trainer.DEFAULT_PARALLEL of the device
    threads: int | None = None  # torch threads per model on a CPU; None: every core, shared by the models at once
    seed: int = 0
    out: Path = Path("ltsedge-proxy-check")
    restart: bool = False
    quiet: bool = False


def resolve_space(preset: str, space_file: Path | None, backbone: str | None) -> SearchSpace:
    """The space as ``ltsedge search`` resolves it: a space file, else the preset's, for the backbone asked."""
    from ltsedge.search.presets import get_preset

    chosen = get_preset(preset)
    if backbone is not None:
        get_backbone(backbone)  # an unknown name is a one-line error listing the known ones
    if space_file is not None:
        return SearchSpace.load(space_file, backbone=chosen.backbone_for(backbone))
    return chosen.space(backbone)


def run_check(options: CheckOptions, log: Callable[[str], None]) -> dict:
    """Plan, train what the log does not hold yet, and write the result; returns the summary."""
    import torch

    from ltsedge.proxycheck.training import Recipe, pick_device

    space = resolve_space(options.preset, options.space_file, options.backbone)
    device = pick_device(options.device)
    if device == "cuda" and not torch.cuda.is_available():
        raise LtsedgeError("--device cuda: torch sees no CUDA GPU on this machine (install a CUDA build of torch, "
                           "or use --device cpu)")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if options.lr is not None and not MIN_LR <= options.lr <= 1:  # as the command line's range; NaN too (plan.json)
        raise LtsedgeError(f"--lr {options.lr} is not a learning rate from {MIN_LR:g} to 1")
    defaults = DEFAULT_RECIPE[kind]
    recipe = Recipe(batch=options.batch or defaults["batch"], lr=options.lr or defaults["lr"],
                    sequence=_sequence(options.sequence, space, defaults["sequence"]))
    per_model = options.tokens_per_model or DEFAULT_TOKENS[kind]
    text = read_text(options.text)
    roles = _sample(space, options)  # a space that cannot give the models is refused before any work
    given = tokens.load_tokenizer(options.tokenizer, space.vocab_size) if options.tokenizer is not None else None
    with OutputDir(options.out, outputs=OUTPUTS, owned_dirs=(), tool="ltsedge proxy-check") as outdir:
        if options.restart:
            for name in OUTPUTS:
                outdir.remove(name)
        tokenizer_info, ids, vocab = _tokens(options, given, space, text, outdir, log)
        parts = tokens.split(ids, recipe.sequence + 1, options.seed)
        planned = [Planned(i, role, sampling.for_vocabulary(a, vocab)) for i, (role, a) in enumerate(roles)]
        settings = {"text": text.sha256, "tokenizer": tokenizer_info["identity"], "space": space.to_dict(),
                    "models": [p.to_dict() for p in planned], "tokens_per_model": per_model,
                    "recipe": recipe.to_dict(), "seed": options.seed, "precision": "bf16" if kind == "cuda" else "fp32"}
        identity = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
        done, refused = read_log(outdir, identity, planned, recipe, per_model)
        if refused:
            log(f"warning: {outdir.root / LOG}: {refused} line(s) damaged or of other models left out (a model "
                "without a good line is trained again)")
        plan_json = json.dumps({"identity": identity, **settings}, indent=1, allow_nan=False)
        write_file(outdir.path(PLAN), plan_json.encode())
        plan = _plan_summary(text, tokenizer_info, ids, parts, space, planned, recipe, per_model, device, options)
        for warning in plan["warnings"]:
            log(f"warning: {warning}")
        log(_plan_line(plan, planned, done))
        todo = [p for p in planned if p.index not in done]
        if todo:
            train_models(todo, planned, done, parts, recipe, per_model, device, kind, options, outdir, identity, log,
                         data=_tokens_data(outdir, ids, recipe, options.seed))
        missing = [p for p in planned if p.index not in done]
        summary = report.summarize([done[p.index] for p in planned if p.index in done], plan)
        summary["missing"] = [p.arch.id for p in missing]
        if len(done) >= 1:
            report.write_json(summary, outdir.path(RESULT), write_file)
            report.write_png(summary, outdir.path(PICTURE), write_file)
        return summary


def _tokens_data(outdir: OutputDir, ids: np.ndarray, recipe, seed: int):
    from ltsedge.proxycheck.workers import Data

    return Data(str(outdir.path(TOKENS)), ids.dtype.str, recipe.sequence + 1, seed)


def _sequence(given: int | None, space: SearchSpace, default: int) -> int:
    """The training sequence: as given (refused past the space's positions), else ``default`` or the space's
    positions if fewer (a learned position table ends there)."""
    limit = get_backbone(space.backbone).max_sequence(space)
    if given is not None:
        if limit is not None and given > limit:
            raise LtsedgeError(f"--sequence {given} is longer than the space's n_positions {limit}")
        return given
    return min(default, limit) if limit is not None else default


# --- the text's tokens --------------------------------------------------------------------------------
def _tokens(options: CheckOptions, given, space: SearchSpace, text, outdir: OutputDir,
            log) -> tuple[dict, np.ndarray, int]:
    """(what the tokenizer is, the text's ids, the models' vocabulary). The user's tokenizer (``given``) keeps
    the space's vocabulary; a trained one is at most ``DEFAULT_BPE_VOCAB`` tokens and the models take its size."""
    tokenizer = given
    if given is not None:
        raw = Path(options.tokenizer).read_bytes()
        info = {"kind": "given", "path": str(options.tokenizer), "identity": hashlib.sha256(raw).hexdigest()}
        vocab = space.vocab_size
    else:
        size = min(space.vocab_size, tokens.DEFAULT_BPE_VOCAB)
        if size <= tokens.BYTE_ALPHABET:
            raise LtsedgeError(f"the space's vocabulary of {space.vocab_size} leaves no room for a byte-level BPE "
                               f"(256 bytes and merges): give --tokenizer")
        info = {"kind": "byte-level BPE trained on the text", "identity": f"bpe-{size}"}
        raw = None
    cached = _cached_tokens(outdir, text.sha256, info["identity"])
    if cached is not None:
        ids, vocab_cached = cached
        return {**info, "vocab_size": vocab_cached}, ids, vocab_cached
    say = log if text.bytes >= ANNOUNCE_BYTES else (lambda _: None)
    if tokenizer is None:
        say(f"training a byte-level BPE of {size} tokens on the text ({text.bytes / 1e6:.1f} MB)")
        tokenizer = tokens.train_tokenizer(text.documents, size)
        vocab = tokens.vocabulary(tokenizer)
        raw = tokenizer.to_str().encode()
    say(f"encoding the text ({text.bytes / 1e6:.1f} MB)")
    ids = tokens.encode(tokenizer, text.documents, vocab)
    write_file(outdir.path(TOKENIZER), raw)
    write_file(outdir.path(TOKENS), memoryview(ids))
    write_file(outdir.path(TOKENS_META), json.dumps({"text": text.sha256, "tokenizer": info["identity"],
                                                          "dtype": ids.dtype.str, "count": int(ids.size),
                                                          "vocab_size": vocab}, allow_nan=False).encode())
    return {**info, "vocab_size": vocab}, ids, vocab


def _cached_tokens(outdir: OutputDir, text_sha: str, tokenizer_identity: str) -> tuple[np.ndarray, int] | None:
    """The ids a previous run encoded, when of this text and tokenizer (and whole)."""
    meta_path = outdir.root / TOKENS_META
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta["text"] != text_sha or meta["tokenizer"] != tokenizer_identity:
            return None
        ids = np.fromfile(outdir.root / TOKENS, dtype=meta["dtype"])
        return (ids, int(meta["vocab_size"])) if ids.size == meta["count"] else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --- the plan -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    index: int
    role: str  # "sample", "control" or "depth"
    arch: Architecture

    def to_dict(self) -> dict:
        return {"index": self.index, "role": self.role, "id": self.arch.id, "architecture": self.arch.to_dict()}


def _sample(space: SearchSpace, options: CheckOptions) -> list[tuple[str, Architecture]]:
    """(role, architecture) of every model, in training order: the sample, the depth set, the control."""
    sample = sampling.spread_sample(space, options.models, options.seed, options.max_params)
    sizes = [count_params(a).decoder_params for a in sample]
    depth = sampling.depth_set(space, math.sqrt(sizes[0] * sizes[-1]), options.depths, options.seed, options.max_params)
    control_space = sampling.control_space(space)
    control = []
    if control_space is not None and (options.control_models is None or options.control_models > 0):
        control = sampling.spread_sample(control_space, options.control_models or options.models, options.seed,
                                         options.max_params)
    return [("sample", a) for a in sample] + [("depth", a) for a in depth] + [("control", a) for a in control]


def _plan_summary(text, tokenizer_info: dict, ids: np.ndarray, parts, space: SearchSpace, planned: list[Planned],
                  recipe, per_model: int, device: str, options: CheckOptions) -> dict:
    """What the check is about to do, with its warnings and limits: the head of the result JSON."""
    sample = [p.arch for p in planned if p.role == "sample"]
    spread = sampling.spread(sample)
    steps = recipe.steps(per_model)
    used = steps * recipe.tokens_per_step
    passes = used / max(1, parts.train.size)
    largest = max(count_params(p.arch).decoder_params for p in planned)
    warnings = []
    if passes > REPEAT_WARNING:
        warnings.append(f"each model reads the training text {passes:.1f} times ({used:,} tokens of a "
                        f"{parts.train.size:,}-token text): repeated text rewards memorising; give more text or "
                        f"fewer --tokens-per-model")
    if parts.train.size < largest:
        warnings.append(f"the text ({parts.train.size:,} training tokens) is too small for the models (the largest "
                        f"has {largest:,} decoder parameters): large models can memorise it and overfit, which "
                        f"reverses the ranking (-0.32 on 200 KB of text); give more text or --max-params")
    if spread < sampling.MIN_SPREAD:
        warnings.append(f"the sample spans {spread:.1f}x in decoder parameters, under {sampling.MIN_SPREAD:.0f}x: "
                        f"a ranking over a narrow range is weak evidence; widen the space")
    limits = [f"{used:,} tokens per model is a short budget: it ranks models after short training, not converged "
              f"perplexity; short training favours shallow, wide models (MobileLLM found deep-thin models better "
              f"when fully trained)",
              "a ranking that still moves between the last checkpoints may move further with longer training"]
    if not any(p.role == "depth" for p in planned) and options.depths >= 2:
        limits.append("no equal-parameter depth set: the space has no two depths within "
                      f"{sampling.DEPTH_TOLERANCE:.0%} of the sample's middle size")
    return {
        "ltsedge": ltsedge.__version__,
        "text": {"source": text.source, "files": text.files, "skipped_files": text.skipped, "bytes": text.bytes,
                 "sha256": text.sha256, "tokens": int(ids.size), "train_tokens": int(parts.train.size),
                 "held_out_tokens": int(parts.held_out.size), "held_out_share": round(parts.share, 4),
                 "held_out_chunks": int(len(parts.starts))},
        "tokenizer": {k: v for k, v in tokenizer_info.items() if k != "identity"},
        "space": space.to_dict(), "space_source": space.source,
        "recipe": {**recipe.to_dict(), "optimizer": "AdamW", "schedule": "linear warmup, cosine decay"},
        "tokens_per_model": used, "steps_per_model": steps, "passes_per_model": round(passes, 3),
        "device": device, "spread": round(spread, 2), "warnings": warnings, "limits": limits,
    }


def _plan_line(plan: dict, planned: list[Planned], done: dict) -> str:
    roles = {r: [p for p in planned if p.role == r] for r in ("sample", "depth", "control")}
    sizes = [count_params(p.arch).decoder_params for p in roles["sample"]]
    parts = [f"{len(roles['sample'])} models of {sizes[0] / 1e6:.2f}-{sizes[-1] / 1e6:.2f} M decoder parameters "
             f"({plan['spread']:.0f}x)"]
    if roles["depth"]:
        parts.append(f"{len(roles['depth'])} at equal parameters (depths "
                     f"{', '.join(str(p.arch.n_layer) for p in roles['depth'])})")
    if roles["control"]:
        parts.append(f"{len(roles['control'])} control models of standard GPT-2 layers")
    t = plan["text"]
    resumed = f"; {len(done)} already trained, resuming" if done else ""
    return (f"plan: {', '.join(parts)}; {plan['tokens_per_model']:,} tokens each ({plan['steps_per_model']} steps of "
            f"{plan['recipe']['batch']} x {plan['recipe']['sequence']}) on {plan['device']}; text {t['tokens']:,} "
            f"tokens, {t['held_out_share']:.1%} held out in {t['held_out_chunks']} chunks{resumed}")
