"""The result of ``ltsedge check``: per-model checks, the table, the JSON object, the exit code."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ltsedge
from ltsedge.check.budgets_file import Target
from ltsedge.check.previous import FigureKind, PreviousEntry, describe_machine
from ltsedge.check.verdict import (
    ERROR,
    FAIL,
    MARGINAL_FAIL,
    MARGINAL_PASS,
    METRICS,
    PASS,
    TIMED,
    VARIANT_ONLY,
    Check,
    fmt,
    signed,
    uncertainty,
    value_of,
)
from ltsedge.devices import DeviceProfile
from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LtsedgeError
from ltsedge.runners import Measurement

EXIT_PASSED, EXIT_FAILED = 0, 1  # bad input is LtsedgeError's exit code 2
VERDICT_STYLES = {PASS: "green", MARGINAL_PASS: "yellow", FAIL: "bold red", MARGINAL_FAIL: "bold red",
                  ERROR: "bold red"}


@dataclass
class ModelResult:
    target: Target
    sha256: str
    architecture_id: str | None
    shapes: dict[str, list[int]]
    checks: list[Check]
    measurement: Measurement | None = None
    remeasurements: list[Measurement] = field(default_factory=list)  # stricter policy, doubtful verdicts (api.py)
    previous: PreviousEntry | None = None
    matched_by: str | None = None
    notes: list[str] = field(default_factory=list)
    precision: dict | None = None  # {"precision": "int4", "quantized_ops": {...}} as found in the file
    kind: FigureKind | None = None  # variant, precision and figure settings: what --against must match

    @property
    def model(self) -> str:
        return self.target.display

    @property
    def ok(self) -> bool:
        return self.measurement is not None and self.measurement.ok

    @property
    def error(self) -> str | None:
        if self.measurement is None:
            return "not measured"
        return self.measurement.error

    @property
    def passed(self) -> bool:
        return self.ok and all(c.passed for c in self.checks)

    def used(self, metric: str) -> Measurement | None:
        """The measurement the ``metric`` verdicts were decided on (every check of a metric is judged on
        the same one)."""
        index = next((c.decided_on for c in self.checks if c.metric == metric), 0)
        return self.remeasurements[index - 1] if index else self.measurement

    def _figure(self, metric: str) -> float | None:
        m = self.used(metric)
        return value_of(metric, m) if m is not None else None

    def to_dict(self) -> dict[str, Any]:
        lat, mem = self.used("latency"), self.used("memory")
        lat = lat if lat is not None and lat.ok else None
        mem = mem if mem is not None and mem.ok else None
        verdicts, marginal = {}, {}
        for c in self.checks:
            key = c.metric + ("_regression" if c.kind == "regression" else "")
            verdicts[key], marginal[key] = c.verdict, c.marginal
        regression = None
        if self.previous is not None:
            changes = {c.metric: c.change for c in self.checks if c.kind == "regression"}
            regression = {"matched_by": self.matched_by, "previous_model": self.previous.model,
                          "previous_latency_ms": self.previous.latency_ms,
                          "previous_peak_memory_mb": self.previous.peak_memory_mb,
                          "latency_change": changes.get("latency"), "memory_change": changes.get("memory")}
        return {
            "model": self.model, "path": str(self.target.path.resolve()), "sha256": self.sha256,
            "architecture_id": self.architecture_id, "shapes": self.shapes or None,
            "precision": self.precision["precision"] if self.precision else None,
            "variant": self.kind.variant if self.kind else None,
            "settings": self.kind.settings if self.kind else None,
            "quantized_ops": self.precision["quantized_ops"] if self.precision else None,
            "ok": self.ok, "error": None if self.ok else self.error,
            "latency_ms": lat.latency_ms if lat else None, "latency_p90_ms": lat.latency_p90_ms if lat else None,
            "latency_min_ms": lat.latency_min_ms if lat else None, "latency_cv": lat.latency_cv if lat else None,
            "runs": lat.runs if lat else None, "converged": lat.converged if lat else None,
            "peak_memory_mb": mem.peak_memory_mb if mem else None, "weights_mb": mem.weights_mb if mem else None,
            **{METRICS[metric][0]: self._figure(metric) for metric in VARIANT_ONLY},  # prefill, decode
            "kv_cache_mb": mem.kv_cache_mb if mem else None,
            "budgets": self.target.budgets.to_dict(), "budget_sources": dict(self.target.budgets.sources),
            "verdicts": verdicts, "marginal": marginal, "remeasured": bool(self.remeasurements),
            "regression": regression, "checks": [c.to_dict() for c in self.checks],
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "remeasurements": [m.to_dict() for m in self.remeasurements],
            "notes": list(self.notes), "passed": self.passed,
        }


@dataclass
class CheckReport:
    profile: DeviceProfile
    fingerprint: dict
    results: list[ModelResult]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (model, reason)
    against: Path | None = None
    max_regression: float = 0.10
    forced: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    marginal_policy: str | None = None  # how marginal checks count: "pass" | "fail"; None: by their value
    between_run_spread: float = 0.0  # the machine's, from its pinned calibration: widens timed intervals
    calibration: dict | None = None  # the pinned calibration the milliseconds are in

    @property
    def device(self) -> str:
        return self.profile.name

    @property
    def checks(self) -> list[Check]:
        return [c for r in self.results for c in r.checks]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_PASSED if self.passed else EXIT_FAILED

    def counts(self) -> dict[str, int]:
        checks = self.checks
        return {"models": len(self.results), "checks": len(checks),
                "passed": sum(c.passed for c in checks),
                "failed": sum(c.verdict in (FAIL, MARGINAL_FAIL) for c in checks),
                "errors": sum(c.verdict == ERROR for c in checks),
                "marginal": sum(c.marginal for c in checks), "skipped": len(self.skipped)}

    # -- outputs -----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The ``ltsedge check --json`` object (also what ``--against`` reads back)."""
        return {
            "tool": "ltsedge check", "version": ltsedge.__version__, "device": self.device,
            "execution_provider": self.profile.execution_provider, "settings_hash": self.profile.settings_hash(),
            "fingerprint": self.fingerprint, "fingerprint_hash": fingerprint_hash(self.fingerprint),
            "against": str(self.against) if self.against else None, "max_regression": self.max_regression,
            "forced": self.forced, "passed": self.passed, "exit_code": self.exit_code, "summary": self.counts(),
            "marginal_policy": self.marginal_policy, "between_run_spread": self.between_run_spread,
            "calibration": self.calibration,
            "results": [r.to_dict() for r in self.results],
            "skipped": [{"model": m, "reason": why} for m, why in self.skipped],
            "notes": list(self.notes), "seconds": round(self.seconds, 3),
        }

    def benchmark_json(self) -> list[dict[str, Any]]:
        """github-action-benchmark's ``customSmallerIsBetter`` entries: one per model and measured figure,
        its uncertainty as ``range``, so teams chart latency and memory across commits."""
        entries = []
        for r in self.results:
            m = r.measurement
            if m is None or not m.ok:
                continue
            for metric in (*TIMED, "memory"):
                value = value_of(metric, m)
                if value is None:
                    continue
                spread = uncertainty(metric, m, self.profile.tolerance)
                unit = METRICS[metric][1]
                entries.append({"name": f"{r.model} {metric}", "unit": unit, "value": round(value, 6),
                                "range": f"±{spread:.4g}" if spread is not None else None,
                                "extra": f"device {self.device}; {self.profile.execution_provider}; "
                                         f"onnxruntime {self.fingerprint.get('onnxruntime')}; sha256 {r.sha256[:12]}"})
        return entries

    def write_benchmark_json(self, path: str | Path) -> None:
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.benchmark_json(), indent=2) + "\n")
        except OSError as e:
            raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None

    def write_junit(self, path: str | Path) -> None:
        from ltsedge.check.junit import write_junit

        write_junit(self, path)

    def render(self, console: Any = None) -> None:
        """The verdict table and a one-line summary (rich; plain text when not a terminal)."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        if console is None:
            console = Console()
            if not console.is_terminal and "COLUMNS" not in os.environ:
                console = Console(width=140)  # CI logs: do not wrap the table at 80 columns
        fp = self.fingerprint
        table = Table(title=f"ltsedge check on {escape(self.device)}",
                      caption=f"{escape(describe_machine(fp))}, onnxruntime {fp.get('onnxruntime')}")
        for column in ("model", "check", "measured", "limit", "margin", "verdict"):
            table.add_column(column, justify="left" if column in ("model", "check", "verdict") else "right",
                             overflow="fold")  # never "…": a path cut short names no model
        for r in self.results:
            for c in r.checks:
                style = VERDICT_STYLES[c.verdict]
                if c.error is not None:
                    table.add_row(escape(r.model), c.label, escape(c.error), _limit_cell(c), "-",
                                  f"[{style}]{c.verdict}[/]")
                    continue
                extras = [f"{c.change:+.1%}"] if c.change is not None else []
                if c.remeasured and c.first_value is not None:
                    extras.append(f"first {fmt(c.first_value)}")
                measured = f"{fmt(c.value)} {c.unit}" + (f" ({'; '.join(extras)})" if extras else "")
                pct = f" ({c.margin_pct:+.1f}%)" if c.margin_pct is not None else ""
                margin = f"{signed(c.margin)} {c.unit}{pct}"
                table.add_row(escape(r.model), c.label, measured, _limit_cell(c), margin, f"[{style}]{c.verdict}[/]")
        console.print(table)
        for model, why in self.skipped:
            console.print(f"skipped {escape(model)}: {escape(why)}", soft_wrap=True)
        for note in self.notes:
            console.print(f"note: {escape(note)}", soft_wrap=True)
        for r in self.results:
            if r.precision and r.precision["quantized_ops"]:  # fp32 models: nothing to say
                ops = ", ".join(f"{op} x{n}" for op, n in r.precision["quantized_ops"].items())
                console.print(f"{escape(r.model)}: {r.precision['precision']} ({escape(ops)})", soft_wrap=True)
            for note in [*r.notes, *(n for c in r.checks for n in c.notes)]:
                console.print(f"note: {escape(r.model)}: {escape(note)}", soft_wrap=True)
        n = self.counts()
        counted = f", counted as {self.marginal_policy}" if self.marginal_policy else ""
        marginal = f", {n['marginal']} marginal (re-measured{counted})" if n["marginal"] else ""
        if n["marginal"] and self.between_run_spread:
            console.print(f"marginal: the limit lies within the measured interval widened by this machine's "
                          f"between-run spread ({self.between_run_spread:.1%})", soft_wrap=True)
        if self.passed:
            console.print(f"[bold green]PASSED[/]: {n['checks']} check(s) of {n['models']} model(s) within "
                          f"limits{marginal}", soft_wrap=True)
        else:
            parts = [f"{n['failed']} of {n['checks']} check(s) over their limit"] if n["failed"] else []
            broken = sum(not r.ok for r in self.results)
            if broken:
                parts.append(f"{broken} of {n['models']} model(s) could not be measured")
            console.print(f"[bold red]FAILED[/]: {', '.join(parts)}{marginal}", soft_wrap=True)


def _limit_cell(c: Check) -> str:
    if c.kind == "regression":
        return f"{fmt(c.limit)} {c.unit} (prev {fmt(c.previous)} +{c.limit / c.previous - 1:.0%})" if c.previous \
            else f"{fmt(c.limit)} {c.unit}"
    return f"{fmt(c.limit)} {c.unit}"
