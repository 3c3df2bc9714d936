"""``run_search``: the Python API behind ``ltsedge search`` (options -> preset, profile, settings -> run)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ltsedge.backbones import BaselineSpec, get_backbone
from ltsedge.devices import load_profile
from ltsedge.errors import LtsedgeError
from ltsedge.runners import runner_factory
from ltsedge.search.budgets import Budgets
from ltsedge.search.presets import get_preset
from ltsedge.search.loop import SearchResult, SearchRun
from ltsedge.search.settings import SearchSettings
from ltsedge.space import SearchSpace
from ltsedge.store import MeasurementStore
from ltsedge.workloads import WORKLOADS


@dataclass
class SearchOptions:
    device: str = "cpu"
    preset: str = "default"
    backbone: str | None = None  # None: the space file's, else the preset's, else gpt2
    space_file: Path | None = None
    out: Path = Path("ltsedge-out")
    population: int | None = None
    generations: int | None = None
    seed: int = 0
    max_latency_ms: float | None = None
    max_memory_mb: float | None = None
    min_params: int | None = None
    max_params: int | None = None
    sequence: int | None = None
    baseline: bool = True
    baseline_d_model: int | None = None
    baseline_d_inner: int | None = None
    baseline_n_head: int | None = None
    baseline_layers: int | None = None
    target_ort: str | None = None
    objective: str | None = None  # forward | prefill | decode; None: decode where the backbone can generate
    racing: bool = True
    measure: str = "front"  # "front": the cost model decides what is measured; "all": every candidate
    quantization: object | None = None  # precision.QuantOptions: how the precision is reached
    search_timing: str | None = None  # coarse | profile; None: coarse with --measure front, else profile
    resolution: float = 0.1  # publishing: the front thinned to models this far apart (0: all of it)
    max_bundles: int | None = None  # publishing: at most this many models written (None: no cap)
    seed_baseline: bool = True  # start the search from the layer-scaled baseline models the space holds
    precision: str | None = None  # fp32 | int8 | int4 | fp16 (CUDA); None: the profile's [export], else fp32
    scheduler: str | None = None  # a Dask scheduler whose ltsedge agents measure (runners/remote.py)
    machine: str | None = None  # with several kinds of agents: the machine fingerprint to use
    store_path: Path | None = None
    fresh: bool = False
    restart: bool = False
    quiet: bool = False
    proxy: str = "decoder"  # the quality objective: decoder parameters, or a proxy-check's JSON (its fitted proxy)


def resolve(options: SearchOptions):
    """(settings, profile) from the options: preset first, then the device's defaults, then explicit options."""
    preset = get_preset(options.preset)
    profile = preset.apply(load_profile(options.device))
    if options.sequence is not None:
        profile = profile.replace(sequence=options.sequence)
    if options.backbone is not None:
        get_backbone(options.backbone)  # an unknown name is a one-line error listing the known ones
    if options.space_file:
        space = SearchSpace.load(options.space_file, backbone=preset.backbone_for(options.backbone))
    else:
        space = preset.space(options.backbone)
    backbone = get_backbone(space.backbone)
    objective = _objective(options.objective, backbone)
    _check_workload(backbone, space, profile, objective)
    budgets = Budgets(
        max_latency_ms=_first(options.max_latency_ms, profile.max_latency_ms),
        max_memory_mb=_first(options.max_memory_mb, profile.max_memory_mb),
        min_params=options.min_params, max_params=options.max_params,
    )
    if budgets.min_params is not None and budgets.max_params is not None and budgets.min_params > budgets.max_params:
        raise LtsedgeError(f"--min-params {budgets.min_params} is above --max-params {budgets.max_params}")
    settings = SearchSettings(
        space=space, population=options.population or preset.population,
        generations=options.generations or preset.generations, seed=options.seed, budgets=budgets,
        baseline=_baseline(options, preset.baseline(space.backbone)), target_ort=_first(options.target_ort, profile.target_ort),
        objective=objective, racing=options.racing, measure=_measure(options.measure),
        seed_baseline=options.seed_baseline, timing=options.search_timing, resolution=options.resolution,
        max_bundles=options.max_bundles,
        quantization=options.quantization, proxy=_proxy(options.proxy, space),
        precision=_precision(options.precision, profile, _first(options.target_ort, profile.target_ort)),
    )
    return settings, profile


def _proxy(given: str, space):
    """None for decoder parameters (the study's proxy), else the fitted proxy of a proxy-check's file."""
    from ltsedge.proxycheck.fitted import PROXIES, load_proxy

    return None if given in PROXIES else load_proxy(given, space.backbone, space)


def _objective(given: str | None, backbone) -> str:
    """The latency a search optimises: as given, else the per-token decode where the backbone exports a
    generate variant (what an app's user feels), else the study's full forward pass."""
    objective = given or ("decode" if "generate" in backbone.variants else "forward")
    if objective not in WORKLOADS:
        raise LtsedgeError(f"--objective {objective!r} is not one of {', '.join(WORKLOADS)}")
    variant = WORKLOADS[objective].variant
    if variant not in backbone.variants:
        raise LtsedgeError(f"--objective {objective} needs the {variant} variant, which backbone {backbone.name} "
                           f"does not export (variants: {', '.join(backbone.variants)})")
    return objective


def _check_workload(backbone, space, profile, objective: str) -> None:
    """Refuse up front a workload no model of the space can take (it would fail every candidate)."""
    limit = backbone.max_sequence(space)
    if limit is None:
        return
    if profile.sequence > limit:  # a forward pass, or a generate model's prompt
        raise LtsedgeError(f"sequence {profile.sequence} is longer than the space's n_positions {limit}: no "
                           f"{space.backbone} model of this space can take it; use --sequence <= {limit}")
    if objective != "forward" and profile.context + 1 > limit:
        raise LtsedgeError(f"context {profile.context} + 1 new token is longer than the space's n_positions {limit}: "
                           f"set the profile's [workload] context <= {limit - 1}")


def _precision(given: str | None, profile, target_ort: str | None) -> str:
    """The precision every candidate is exported at, refused up front where the target cannot run it."""
    from ltsedge.precision import check_precision
    from ltsedge.ortcompat import target_for

    precision = given or profile.precision or "fp32"
    check_precision(precision, target_for(target_ort).runtime, profile.execution_provider)
    return precision


def _measure(mode: str) -> str:
    from ltsedge.search.screening import MEASURE_MODES

    if mode not in MEASURE_MODES:
        raise LtsedgeError(f"--measure {mode!r} is not one of {', '.join(MEASURE_MODES)}")
    return mode


def _first(*values):
    return next((v for v in values if v is not None), None)


def _baseline(options: SearchOptions, spec: BaselineSpec) -> BaselineSpec | None:
    if not options.baseline:
        return None
    changes = {k: v for k, v in {"d_model": options.baseline_d_model, "d_inner": options.baseline_d_inner,
                                 "n_head": options.baseline_n_head}.items() if v is not None}
    if options.baseline_layers is not None:
        changes["layers"] = tuple(range(1, options.baseline_layers + 1))
    spec = replace(spec, **changes)
    if spec.head_dim is None and spec.d_model % spec.n_head:
        raise LtsedgeError(f"--baseline-n-head {spec.n_head} does not divide --baseline-d-model {spec.d_model}")
    if spec.n_kv_head is not None and spec.n_head % spec.n_kv_head:
        raise LtsedgeError(f"--baseline-n-head {spec.n_head} is not a multiple of the baseline's {spec.n_kv_head} "
                           f"key/value heads")
    return spec


def run_search(options: SearchOptions, log=None) -> SearchResult:
    settings, profile = resolve(options)
    progress = None
    if not options.quiet:
        from ltsedge.search.progress import SearchProgress

        progress = SearchProgress(settings.generations, settings.population)
    if log is None:
        log = _stderr_logger(progress)
    with MeasurementStore(options.store_path) as store:
        search = SearchRun(settings, profile, options.out, store, fresh=options.fresh, restart=options.restart,
                           log=log, progress=progress,
                           runner_factory=runner_factory(options.scheduler, options.machine))
        return search.run()


def _stderr_logger(progress):
    import sys

    def log(message: str) -> None:
        if progress is not None:
            progress.progress.console.print(message)
        else:
            print(message, file=sys.stderr)

    return log
