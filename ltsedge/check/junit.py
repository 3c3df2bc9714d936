"""The JUnit XML report of ``ltsedge check --junit``, as GitHub Actions, GitLab and Jenkins read it.

    <testsuites name="ltsedge" tests= failures= errors= skipped= time=>
      <testsuite name="ltsedge check" tests= failures= errors= skipped= time= timestamp= hostname=>
        <properties> device, fingerprint, onnxruntime ... </properties>
        <testcase classname="ltsedge.check.cpu" name="models/a.onnx latency" time=>
          <failure message="latency 53.1 ms > budget 50 ms" type="BudgetExceeded">details</failure>
          <system-out>the measurement</system-out>
        </testcase>

One test case per model and check (budget: "<model> latency", "<model> memory"; regression:
"<model> latency regression"), so a CI dashboard tracks each one across runs. Failure types:
BudgetExceeded, Regression; a model that could not be measured is an <error type="MeasurementFailed">;
a model of the budgets file without budgets for this device is <skipped>. Marginal verdicts say so in
the message and in system-out (the test name stays the same across runs).
"""

from __future__ import annotations

import datetime
import platform
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import ltsedge
from ltsedge.check.previous import describe_machine
from ltsedge.check.verdict import Check, fmt, signed
from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LtsedgeError

if TYPE_CHECKING:
    from ltsedge.check.report import CheckReport, ModelResult

SUITE_NAME = "ltsedge check"
FAILURE_TYPES = {"budget": "BudgetExceeded", "regression": "Regression"}


def junit_tree(report: CheckReport) -> ET.ElementTree:
    counts = report.counts()
    totals = {"tests": str(counts["checks"] + counts["skipped"]), "failures": str(counts["failed"]),
              "errors": str(counts["errors"]), "skipped": str(counts["skipped"]), "time": f"{report.seconds:.3f}"}
    root = ET.Element("testsuites", {"name": "ltsedge", **totals})
    suite = ET.SubElement(root, "testsuite", {
        "name": SUITE_NAME, **totals,
        "timestamp": datetime.datetime.now().replace(microsecond=0).isoformat(),
        "hostname": platform.node() or "localhost",
    })
    props = ET.SubElement(suite, "properties")
    fp = report.fingerprint
    for name, value in (("device", report.device), ("execution_provider", report.profile.execution_provider),
                        ("machine", describe_machine(fp)), ("fingerprint", fingerprint_hash(fp)),
                        ("onnxruntime", fp.get("onnxruntime")), ("ltsedge", ltsedge.__version__),
                        ("against", str(report.against) if report.against else None),
                        ("max_regression", f"{report.max_regression:g}" if report.against else None)):
        if value is not None:
            ET.SubElement(props, "property", {"name": name, "value": str(value)})
    classname = f"ltsedge.check.{report.device}"
    for result in report.results:
        seconds = _seconds(result) / max(1, len(result.checks))
        for check in result.checks:
            case = ET.SubElement(suite, "testcase", {"classname": classname, "name": check.name,
                                                     "time": f"{seconds:.3f}"})
            if check.error is not None:
                ET.SubElement(case, "error", {"message": check.message(), "type": "MeasurementFailed"}).text = \
                    check.error
            elif not check.passed:
                ET.SubElement(case, "failure", {"message": check.message(), "type": FAILURE_TYPES[check.kind]}).text = \
                    _details(result, check)
            ET.SubElement(case, "system-out").text = _details(result, check)
    for model, why in report.skipped:
        case = ET.SubElement(suite, "testcase", {"classname": classname, "name": model, "time": "0"})
        ET.SubElement(case, "skipped", {"message": why})
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(report: CheckReport, path: str | Path) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        junit_tree(report).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as e:
        raise LtsedgeError(f"cannot write the JUnit report {path}: {e.strerror or e}") from None


def _seconds(result: ModelResult) -> float:
    return sum(m.load_seconds + m.inference_seconds for m in (result.measurement, result.remeasurement) if m)


def _details(result: ModelResult, check: Check) -> str:
    lines = [check.message()]
    m = result.used(check.metric)
    if m is not None and m.ok:
        lines.append(f"latency: median {fmt(m.latency_ms)} ms, p90 {fmt(m.latency_p90_ms)} ms, "
                     f"min {fmt(m.latency_min_ms)} ms, cv {100 * (m.latency_cv or 0):.1f}% over {m.runs} runs"
                     + ("" if m.converged else " (not converged)"))
        lines.append(f"peak memory: {fmt(m.peak_memory_mb)} MB; weights {fmt(m.weights_mb)} MB")
    if check.margin is not None:
        pct = f" ({check.margin_pct:+.1f}%)" if check.margin_pct is not None else ""
        lines.append(f"limit {fmt(check.limit)} {check.unit} ({check.source}); "
                     f"margin {signed(check.margin)} {check.unit}{pct}")
    if check.marginal:
        decided = (f"first {fmt(check.first_value)} {check.unit}, decided on the re-measurement with a stricter "
                   f"repeat policy" if check.remeasured else "decided on the first measurement")
        lines.append(f"marginal: the limit is within the measurement's uncertainty (+-{fmt(check.uncertainty)} "
                     f"{check.unit}); {decided}")
    if result.matched_by and check.kind == "regression":
        lines.append(f"previous: {result.previous.model} (matched by {result.matched_by})")
    lines.extend(check.notes)
    lines.append(f"model: {result.model} sha256 {result.sha256}")
    return "\n".join(line for line in lines if line)
