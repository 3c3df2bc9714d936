"""Which models to check and their budgets: the budgets TOML, the command line, the device profile.

The budgets file names models (paths relative to the file) and their budgets per device profile::

    [[model]]
    path = "models/small.onnx"
    shapes = { input_ids = "1x128" }   # optional input shapes (or [1, 128])

    [model.budgets.cpu]                # the device profile's name
    max_latency_ms = 50
    max_memory_mb = 300

    [model.budgets.arm64]
    max_latency_ms = 400

The keys: ``max_memory_mb`` and each workload's budget key (``ltsedge.workloads``: ``max_latency_ms``,
``max_prefill_ms``, ``max_decode_ms``). Each budget is looked up, per metric, in this order: the model's
table for this device in the file, then the command line (``--max-latency-ms``, ...), then the device
profile's ``[budgets]``. With a budgets file, a model given on the command line must be in the file
unless a budget flag is given (a model missing from the file is most likely a forgotten entry).
Without models on the command line, every model of the file with budgets for this device is checked;
the others are skipped.

Validation is strict, like the device profiles: an unknown key or a value of the wrong type is an
error naming the file and the key, never ignored.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ltsedge.devices import DeviceProfile
from ltsedge.errors import LtsedgeError
from ltsedge.files import read_toml
from ltsedge.validate import is_number, parse_dims, reject_unknown, toml_repr
from ltsedge.workloads import WORKLOADS

MEMORY_KEY = "max_memory_mb"
# Every model has a latency (the forward workload's figure; a generate model's decode) and a peak memory:
# their budgets come first (the order checks are listed in) and are always reported, the others when set.
ALWAYS = (WORKLOADS["forward"].budget, MEMORY_KEY)
_METRIC_OF = {**{w.budget: w.metric for w in WORKLOADS.values()}, MEMORY_KEY: "memory"}
BUDGET_KEYS = {key: _METRIC_OF[key] for key in (*ALWAYS, *_METRIC_OF)}  # budget key -> the metric it bounds
CLI_FLAGS = {key: "--" + key.replace("_", "-") for key in BUDGET_KEYS}
MODEL_KEYS = ("path", "shapes", "budgets")


@dataclass(frozen=True)
class ModelBudgets:
    """One model's budgets on one device, and where each came from."""

    limits: dict[str, float] = field(default_factory=dict)  # budget key (BUDGET_KEYS) -> limit, the set ones
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # key -> "budgets.toml" etc.

    def get(self, key: str) -> float | None:
        return self.limits.get(key)

    def any(self) -> bool:
        return any(self.get(key) is not None for key in BUDGET_KEYS)

    def to_dict(self) -> dict[str, float | None]:
        """Latency and memory always (null when unset); the generate workloads' budgets when set."""
        return {key: self.get(key) for key in BUDGET_KEYS if key in ALWAYS or self.get(key) is not None}


@dataclass(frozen=True)
class ModelEntry:
    """One ``[[model]]`` of a budgets file."""

    path: Path  # absolute, resolved against the file's directory
    given: str  # as written in the file
    shapes: dict[str, list[int]]
    budgets: dict[str, dict[str, float]]  # device name -> {budget key: value}


@dataclass(frozen=True)
class BudgetsFile:
    path: Path
    models: list[ModelEntry]

    def find(self, model: Path) -> ModelEntry | None:
        key = _identity(model)
        for entry in self.models:
            if _identity(entry.path) == key:
                return entry
        return None

    def devices(self) -> list[str]:
        return sorted({d for e in self.models for d in e.budgets})


@dataclass(frozen=True)
class Target:
    """One model to check: where it is, how to show it, its own input shapes, its budgets."""

    path: Path
    display: str
    shapes: dict[str, list[int]]
    budgets: ModelBudgets
    in_file: bool = False


def _identity(path: Path) -> str:
    return os.path.normcase(str(Path(path).expanduser().resolve()))


def display_path(path: Path) -> str:
    """Relative to the working directory when the file is under it, else absolute (posix slashes)."""
    absolute = Path(path).expanduser().resolve()
    try:
        return absolute.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return absolute.as_posix()


# ---------------------------------------------------------------------------------------------
# The budgets file
# ---------------------------------------------------------------------------------------------
def load_budgets(path: str | Path) -> BudgetsFile:
    path = Path(path)
    where = f"budgets file {path}"
    data = read_toml(path, "budgets file")
    reject_unknown("key", data, ["model"], where=where, place="at the top level", allowed="[[model]] tables")
    models = data.get("model", [])
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise LtsedgeError(f"{where}: 'model' must be an array of tables, written [[model]]")
    if not models:
        raise LtsedgeError(f"{where}: no [[model]] entries")
    base = path.parent
    entries: list[ModelEntry] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(models, 1):
        entry = _model_entry(raw, f"{where}: [[model]] #{i}", base)
        key = _identity(entry.path)
        if key in seen:
            raise LtsedgeError(f"{where}: [[model]] #{i} repeats path {entry.given!r} (already [[model]] #{seen[key]})")
        seen[key] = i
        entries.append(entry)
    return BudgetsFile(path, entries)


def _model_entry(raw: dict[str, Any], where: str, base: Path) -> ModelEntry:
    reject_unknown("key", raw, MODEL_KEYS, sort_known=False, where=where)
    given = raw.get("path")
    if not isinstance(given, str) or not given.strip():
        raise LtsedgeError(f"{where}: path = {toml_repr(given)}: expected the model file's path as a string"
                           if "path" in raw else f"{where}: missing path = \"...\" (the model file)")
    where = f"{where} ({given})"
    shapes = _shapes(raw.get("shapes", {}), f"{where}: shapes")
    budgets_raw = raw.get("budgets", {})
    if not isinstance(budgets_raw, dict):
        raise LtsedgeError(f"{where}: budgets must be tables per device, e.g. [model.budgets.cpu]")
    budgets: dict[str, dict[str, float]] = {}
    for device, table in budgets_raw.items():
        if not isinstance(table, dict):
            raise LtsedgeError(f"{where}: budgets.{device} = {toml_repr(table)} must be a table "
                               f"[model.budgets.{device}] with {' and/or '.join(BUDGET_KEYS)}")
        budgets[device] = {}
        reject_unknown("key", table, BUDGET_KEYS, sort_known=False, where=where, place=f"in [model.budgets.{device}]")
        for key, value in table.items():
            budgets[device][key] = positive(value, f"{where}: budgets.{device}.{key}")
    path = Path(given).expanduser()
    return ModelEntry(path=(base / path).resolve(), given=given, shapes=shapes, budgets=budgets)


def _shapes(raw: Any, where: str) -> dict[str, list[int]]:
    if not isinstance(raw, dict):
        raise LtsedgeError(f"{where} must be a table of input name = \"1x128\" (or [1, 128])")
    shapes = {}
    for name, dims in raw.items():
        try:
            shapes[str(name)] = parse_dims(dims)
        except ValueError:
            raise LtsedgeError(f"{where}.{name} = {toml_repr(dims)}: expected positive dimensions, "
                               f"as \"1x128\" or [1, 128]") from None
    return shapes


def positive(value: Any, what: str) -> float:
    """A finite positive number (a budget), or a one-line error naming it."""
    if not is_number(value):
        raise LtsedgeError(f"{what} = {toml_repr(value)} has the wrong type: expected a number")
    if not (math.isfinite(value) and value > 0):
        raise LtsedgeError(f"{what} = {toml_repr(value)} is out of range: must be a positive number")
    return float(value)


# ---------------------------------------------------------------------------------------------
# Models x budgets
# ---------------------------------------------------------------------------------------------
def resolve_targets(models: list[str | Path], profile: DeviceProfile, *, budgets: Mapping[str, float | None] | None,
                    budgets_file: BudgetsFile | None) -> tuple[list[Target], list[tuple[str, str]]]:
    """The models to check with their budgets, and the (model, reason) pairs skipped. ``budgets``: the
    command line's, budget key -> limit (None or absent: not given).

    Raises ``LtsedgeError`` for an unknown budget key, a missing model file, a model missing from the
    budgets file and a model with no budget at all on this device.
    """
    given = dict(budgets or {})
    reject_unknown("budget", given, BUDGET_KEYS, sort_known=False)
    cli = {key: positive(given[key], CLI_FLAGS[key]) if given.get(key) is not None else None for key in BUDGET_KEYS}
    device = profile.name
    skipped: list[tuple[str, str]] = []
    chosen: list[tuple[Path, str, ModelEntry | None]] = []  # path, display, entry
    if models:
        seen = set()
        for model in models:
            path = Path(model)
            key = _identity(path)
            if key in seen:
                continue
            seen.add(key)
            entry = budgets_file.find(path) if budgets_file else None
            chosen.append((path, Path(model).as_posix() if not path.is_absolute() else display_path(path), entry))
    elif budgets_file is not None:
        for entry in budgets_file.models:
            if device in entry.budgets or any(v is not None for v in cli.values()):
                chosen.append((entry.path, display_path(entry.path), entry))
            else:
                skipped.append((display_path(entry.path), f"no budgets for device {device!r} in {budgets_file.path}"))
        if not chosen:
            devices = ", ".join(budgets_file.devices()) or "none"
            raise LtsedgeError(f"{budgets_file.path} has no model with budgets for device {device!r} "
                               f"(devices in the file: {devices})")
    else:
        raise LtsedgeError("no model to check: give MODEL.onnx paths, or --budgets with a budgets file")

    targets = []
    for path, display, entry in chosen:
        if not path.is_file():
            where = f" (listed in {budgets_file.path})" if entry is not None and not models else ""
            if path.is_dir():
                raise LtsedgeError(f"model {display}{where} is a directory, not a model file")
            raise LtsedgeError(f"model file not found: {display}{where}")
        if budgets_file is not None and entry is None and not any(v is not None for v in cli.values()):
            raise LtsedgeError(f"{display} is not in the budgets file {budgets_file.path}: add a [[model]] entry "
                               f"for it, or give --max-latency-ms / --max-memory-mb")
        budgets = _budgets_for(entry, device, cli, profile, budgets_file)
        if not budgets.any():
            raise LtsedgeError(
                f"no budget for {display} on device {device!r}: give --max-latency-ms / --max-memory-mb, "
                + (f"add [model.budgets.{device}] to its entry in {budgets_file.path}" if budgets_file
                   else "use --budgets with a budgets file")
                + ", or set [budgets] in the device profile")
        targets.append(Target(path=path, display=display, shapes=dict(entry.shapes) if entry else {},
                              budgets=budgets, in_file=entry is not None))
    return targets, skipped


def _budgets_for(entry: ModelEntry | None, device: str, cli: dict[str, float | None], profile: DeviceProfile,
                 budgets_file: BudgetsFile | None) -> ModelBudgets:
    values, sources = {}, {}
    for key in BUDGET_KEYS:
        from_file = entry.budgets.get(device, {}).get(key) if entry else None
        if from_file is not None and budgets_file is not None:
            values[key], sources[key] = from_file, str(budgets_file.path)
        elif cli[key] is not None:
            values[key], sources[key] = cli[key], CLI_FLAGS[key]
        elif getattr(profile, key) is not None:
            values[key], sources[key] = getattr(profile, key), f"device profile {profile.name}"
    return ModelBudgets(values, sources=sources)
