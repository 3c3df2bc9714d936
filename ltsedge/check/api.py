"""``run_check``: resolve models and budgets, measure, re-measure the doubtful verdicts, judge, report.

Bad input (a missing model, a malformed budgets or --against file, an unknown device, a model with no
budget, another machine's --against without --force) raises ``LtsedgeError`` before anything is
measured. A model that is present but cannot be measured (does not load, crashes the runtime, times
out) is a failure of the gate, reported per model, never raised.

Milliseconds are ratios times the machine's pinned calibration (the measurement store's, made by the
first run that needs it; ``ltsedge calibrate`` redoes it), and a timed figure's interval is widened by
the spread this machine showed between runs (verdict.py): a budget inside that band is marginal, and
counts as the ``marginal`` policy says. A timed figure over its limit or marginal is measured again,
and decided on the lowest of its measurements (``_confirm``; why: verdict.py).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ltsedge.check.budgets_file import BUDGET_KEYS, Target, load_budgets, resolve_targets
from ltsedge.check.model_files import ModelInfo, check_cli_shapes, inspect_model, model_shapes
from ltsedge.check.previous import FigureKind, Previous, check_comparable, check_entry, load_previous
from ltsedge.check.result import CheckReport, ModelResult
from ltsedge.check.verdict import MARGINAL_POLICIES, Check
from ltsedge.devices import DeviceProfile, load_profile, strict
from ltsedge.devices.fingerprint import machine_fingerprint
from ltsedge.errors import LtsedgeError
from ltsedge.keys import figure_settings
from ltsedge.runners import Measurement, Runner, runner_factory
from ltsedge.runners.policy import PinnedCalibration
from ltsedge.validate import is_number

# measure(profile, [(path, shapes), ...]) -> one Measurement per job, in order. Injectable for tests.
Measure = Callable[[DeviceProfile, list[tuple[Path, dict[str, list[int]]]]], list[Measurement]]

# Re-measurements a doubtful timed verdict gets at most. Under the benchmark's competing neighbour one
# measurement in ten read a model >10% slow; a fail needs each of 1 + CONFIRMATIONS to (docs/benchmarks-history.md).
CONFIRMATIONS = 2


def run_check(models: list[str | Path], device: str | DeviceProfile = "cpu", *,
              budgets: Mapping[str, float | None] | None = None, budgets_file: str | Path | None = None,
              shapes: dict[str, list[int]] | None = None, against: str | Path | None = None,
              max_regression: float = 0.10, force: bool = False,
              measure: Measure | None = None, fingerprint: dict | None = None,
              log: Callable[[str], None] | None = None, scheduler: str | None = None,
              machine: str | None = None, marginal: str | None = None, spread: float | None = None,
              store_path: str | Path | None = None) -> CheckReport:
    """Check ``models`` against their budgets (and ``against``'s measurements) on ``device``.

    ``budgets``: budget key -> limit, as the command line gives them (``BUDGET_KEYS``: ``max_latency_ms``,
    ``max_memory_mb`` and each workload's, e.g. ``max_decode_ms``; None: not given); ``budgets_file``
    and the device profile's ``[budgets]`` fill in the rest (``check.budgets_file``).
    ``measure`` and ``fingerprint`` replace the onnxruntime worker and this machine's fingerprint
    (tests); ``log`` receives progress lines (default: stderr). ``marginal`` ("pass" | "fail"): how a
    check within the noise of its limit counts (None: by its value). ``spread``: the machine's relative
    between-run spread (default: the pinned calibration's in the store at ``store_path``; 0 with an
    injected ``measure``).
    """
    log = log or _stderr
    if marginal is not None and marginal not in MARGINAL_POLICIES:
        raise LtsedgeError(f"--marginal {marginal!r} must be one of: {', '.join(MARGINAL_POLICIES)}")
    if spread is not None and (not is_number(spread) or not 0 <= spread < float("inf")):
        raise LtsedgeError(f"between-run spread {spread!r} must be a fraction >= 0")
    started = time.monotonic()
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    if not is_number(max_regression) or not 0 <= max_regression < float("inf"):
        raise LtsedgeError(f"--max-regression {max_regression!r} must be a fraction >= 0 (0.10 = 10%)")
    file = load_budgets(budgets_file) if budgets_file is not None else None
    targets, skipped = resolve_targets(list(models), profile, budgets=budgets, budgets_file=file)
    fleet_spread = None
    if fingerprint is None:
        if scheduler is None:
            fingerprint = machine_fingerprint(profile)
        else:
            fingerprint, fleet_spread = _fleet_machine(profile, scheduler, machine)
    previous = load_previous(against) if against is not None else None
    notes = check_comparable(previous, fingerprint, force=force) if previous else []
    infos = [inspect_model(t.path) for t in targets]
    check_cli_shapes(shapes or {}, infos)
    jobs = [(t.path, model_shapes(t, info, shapes or {}, profile)) for t, info in zip(targets, infos, strict=True)]

    kinds = [figure_kind(info, profile) for info in infos]
    matches = (previous.match_all([(t.display, i.sha256, i.architecture_id) for t, i in zip(targets, infos)], kinds)
               if previous else [(None, None)] * len(targets))
    for target, kind, (entry, how) in zip(targets, kinds, matches, strict=True):
        note = check_entry(previous, target.display, entry, how, kind, force=force) if entry else None
        if note:  # a difference refused raised above, before anything is measured
            notes.append(note)
    results = [_result(t, info, kind, job_shapes, previous, match, float(max_regression))
               for t, info, kind, (_, job_shapes), match in zip(targets, infos, kinds, jobs, matches, strict=True)]
    pinned = None
    if measure is None:
        if scheduler is None:
            pinned = machine_calibration(profile, store_path)
            factory = functools.partial(Runner, pinned=pinned)
        else:
            factory = runner_factory(scheduler, machine)
        measure = functools.partial(measure_with_runner, factory=factory)
    if spread is None:
        spread = pinned.figure_spread if pinned is not None else (fleet_spread or 0.0)
    for check in (c for r in results for c in r.checks):
        check.spread, check.marginal_policy = float(spread), marginal
    log(f"ltsedge check: measuring {len(jobs)} model(s) on {profile.name}")
    for result, m in zip(results, measure(profile, jobs), strict=True):
        result.measurement = m
        _comparable_with_previous(result, m, float(max_regression))
        for check in result.checks:
            check.decide(m, profile.tolerance)

    _confirm(results, jobs, measure, strict(profile), log)
    return CheckReport(profile=profile, fingerprint=fingerprint, results=results, skipped=skipped,
                       against=previous.path if previous else None, max_regression=float(max_regression),
                       forced=bool(force and previous), notes=notes, seconds=time.monotonic() - started,
                       marginal_policy=marginal, between_run_spread=float(spread),
                       calibration=pinned.to_dict() if pinned is not None else None)


def _confirm(results: list[ModelResult], jobs: list, measure, careful: DeviceProfile, log) -> None:
    """Measure the doubtful verdicts again (verdict.py): models with a timed figure marginal or over its
    limit, up to CONFIRMATIONS times while it stays so, or a marginal memory figure, once. Each time with
    the stricter policy, each model in a fresh worker; every check of a doubtful metric is judged again."""
    for _ in range(CONFIRMATIONS):
        doubtful = [i for i, r in enumerate(results) if r.ok and any(c.doubtful for c in r.checks)]
        if not doubtful:
            return
        log(f"ltsedge check: {len(doubtful)} model(s) over a limit or within measurement noise of one; "
            f"measuring again with min_runs {careful.min_runs}, max_runs {careful.max_runs}, "
            f"tolerance {careful.tolerance:g} (a timed figure is decided on the lowest of its measurements)")
        for i, m in zip(doubtful, measure(careful, [jobs[i] for i in doubtful]), strict=True):
            r = results[i]
            r.remeasurements.append(m)
            metrics = {c.metric for c in r.checks if c.doubtful}
            for check in r.checks:
                if check.metric in metrics:
                    check.decide(m, careful.tolerance, remeasured=len(r.remeasurements))


def _comparable_with_previous(result: ModelResult, m: Measurement, max_regression: float) -> None:
    """Regression limits in figures that compare: the previous latency as its ratio to the reference
    times this run's calibration (milliseconds drift with the machine between two CI runs, ratios
    hardly do); no memory regression check across peak-isolation methods."""
    entry = result.previous
    if entry is None or not m.ok:
        return
    for check in list(result.checks):
        if check.kind != "regression":
            continue
        if check.metric == "latency" and entry.latency_ratio and m.latency_ratio and m.calibration_ms:
            check.previous = entry.latency_ratio * m.calibration_ms
            check.limit = check.previous * (1 + max_regression)
            check.notes.append("compared as ratios to the reference model timed beside each")
        then, now = _isolation(entry.memory_method), _isolation(m.memory_method)
        if check.metric == "memory" and then and now and then != now:
            result.checks.remove(check)
            result.notes.append(f"memory measured by another method then ({entry.memory_method}, now "
                                f"{m.memory_method}): no memory regression check")


def _isolation(method: str | None) -> str | None:
    """fresh_process and reset_peak both isolate the model's peak; no_reset does not."""
    return None if method is None else ("no_reset" if method == "no_reset" else "isolated")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def figure_kind(info: ModelInfo, profile: DeviceProfile) -> FigureKind:
    """What the figures ``profile`` gives of the model ``info`` describes are figures of."""
    return FigureKind(info.variant, info.precision["precision"] if info.precision else None,
                      figure_settings(profile, info.variant))


def _result(target: Target, info: ModelInfo, kind: FigureKind, shapes: dict, previous: Previous | None,
            match: tuple, max_regression: float) -> ModelResult:
    checks = [Check(target.display, metric, "budget", target.budgets.get(key), target.budgets.sources[key])
              for key, metric in BUDGET_KEYS.items() if target.budgets.get(key) is not None]
    result = ModelResult(target=target, sha256=info.sha256, architecture_id=info.architecture_id, shapes=shapes,
                         checks=checks, precision=info.precision, kind=kind)
    if previous is None:
        return result
    entry, how = match
    if entry is None:
        result.notes.append(f"not in {previous.path}: no regression check")
        return result
    result.previous, result.matched_by = entry, how
    if entry.shapes is not None and entry.shapes != shapes:
        result.notes.append(f"measured at other input shapes in {previous.path} ({json.dumps(entry.shapes)}): "
                            f"no regression check")
        return result
    for metric, prev in (("latency", entry.latency_ms), ("memory", entry.peak_memory_mb)):
        if prev is None:
            continue
        source = f"previous x {1 + max_regression:g}"
        checks.append(Check(target.display, metric, "regression", prev * (1 + max_regression), source, previous=prev))
    return result


def _fleet_machine(profile: DeviceProfile, scheduler: str, machine: str | None) -> tuple[dict, float]:
    """The fleet's machine fingerprint, and the widest between-run spread its boards have pinned."""
    from ltsedge.runners.remote import RemoteRunner

    with RemoteRunner(profile, scheduler, machine=machine) as runner:
        return runner.fingerprint(), runner.spread


def machine_calibration(profile: DeviceProfile, store_path: str | Path | None = None) -> PinnedCalibration:
    """This machine's pinned calibration for the profile's runtime settings (measured now if the store has none)."""
    from ltsedge.runners.policy import pinned_calibration
    from ltsedge.store import MeasurementStore

    with MeasurementStore(store_path) as store, Runner(profile) as runner:
        return pinned_calibration(store, runner)


def measure_with_runner(profile: DeviceProfile, jobs: list[tuple[Path, dict[str, list[int]]]],
                        factory=Runner) -> list[Measurement]:
    """Measure each model in a fresh onnxruntime worker (its memory figure is then the tightest), models
    with the same shapes together (cool-down, drift check)."""
    groups: dict[str, list[int]] = {}
    for i, (_, shapes) in enumerate(jobs):
        groups.setdefault(json.dumps(shapes, sort_keys=True), []).append(i)
    out: list[Measurement | None] = [None] * len(jobs)
    with factory(profile, fresh_worker_per_model=True) as runner:  # each model's peak memory on its own
        for indices in groups.values():
            shapes = jobs[indices[0]][1] or None
            for i, m in zip(indices, runner.measure_many([jobs[i][0] for i in indices], shapes=shapes), strict=True):
                out[i] = m
    return out  # type: ignore[return-value]
