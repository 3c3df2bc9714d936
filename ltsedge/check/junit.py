"""The JUnit XML report of ``ltsedge check --junit``, as GitHub Actions, GitLab and Jenkins read it.

    <testsuites name="ltsedge check" tests= failures= errors= time=>
      <testsuite name="models/a.onnx" tests= failures= errors= skipped= time= timestamp= hostname=>
        <properties> device, machine, fingerprint, onnxruntime; the model's sha256 and measured figures </properties>
        <testcase classname="ltsedge.check.cpu" name="models/a.onnx latency" time=>
          <failure message="latency 53.1 ms > budget 50 ms" type="BudgetExceeded">details</failure>
          <system-out>the measurement</system-out>
        </testcase>

It validates against Jenkins xUnit's junit-10.xsd (the strictest schema CI tools share; the tests
check it): that schema allows <properties> in a test suite but not in a test case, so each model is
a suite of its own whose properties carry its measured figures. One test case per check (budget:
"<model> latency", "<model> memory"; regression: "<model> latency regression"), so a dashboard
tracks each one across runs. Failure types: BudgetExceeded, Regression; a model that could not be
measured is an <error type="MeasurementFailed">; a model of the budgets file without budgets for
this device is a suite with one <skipped> case. Marginal verdicts say so in the message and in
system-out (the test name stays the same across runs); a marginal check counted as a pass
(``--marginal pass``) has no <failure>, one counted as a failure has one of type Marginal. The suite's
properties name the policy and the machine's between-run spread. Characters XML 1.0 cannot hold (a control
character in a file name, a worker's error text) are written escaped, as ``\\x1b``, so the file parses.
"""

from __future__ import annotations

import datetime
import platform
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import ltsedge
from ltsedge.check.previous import describe_machine
from ltsedge.check.verdict import Check, fmt, signed
from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LtsedgeError

if TYPE_CHECKING:
    from ltsedge.check.result import CheckReport, ModelResult

SUITE_NAME = "ltsedge check"
FAILURE_TYPES = {"budget": "BudgetExceeded", "regression": "Regression"}
MARGINAL_TYPE = "Marginal"  # counted as failed by --marginal fail, whatever side of the limit it fell on
XML_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")  # not even as &#NN;
MEASURED = ("latency_ms", "latency_p90_ms", "latency_min_ms", "latency_cv", "runs", "converged", "peak_memory_mb",
            "weights_mb")


def junit_tree(report: CheckReport) -> ET.ElementTree:
    counts = report.counts()
    root = ET.Element("testsuites", {"name": SUITE_NAME, "tests": str(counts["checks"] + counts["skipped"]),
                                     "failures": str(counts["failed"]), "errors": str(counts["errors"]),
                                     "time": f"{report.seconds:.3f}"})
    stamp = {"timestamp": datetime.datetime.now().replace(microsecond=0).isoformat(),
             "hostname": platform.node() or "localhost"}
    classname = f"ltsedge.check.{report.device}"
    for result in report.results:
        seconds = _seconds(result)
        suite = _suite(root, result.model, len(result.checks), sum(not c.passed and c.error is None
                                                                    for c in result.checks),
                       sum(c.error is not None for c in result.checks), 0, seconds, stamp)
        _properties(suite, report, _measured(result))
        for check in result.checks:
            case = ET.SubElement(suite, "testcase", {"classname": classname, "name": check.name,
                                                     "time": f"{seconds / max(1, len(result.checks)):.3f}"})
            if check.error is not None:
                ET.SubElement(case, "error", {"message": check.message(), "type": "MeasurementFailed"}).text = \
                    check.error
            elif not check.passed:
                kind = MARGINAL_TYPE if check.marginal and check.marginal_policy else FAILURE_TYPES[check.kind]
                ET.SubElement(case, "failure", {"message": check.message(), "type": kind}).text = \
                    _details(result, check)
            ET.SubElement(case, "system-out").text = _details(result, check)
    for model, why in report.skipped:
        suite = _suite(root, model, 1, 0, 0, 1, 0.0, stamp)
        _properties(suite, report, {})
        case = ET.SubElement(suite, "testcase", {"classname": classname, "name": model, "time": "0"})
        ET.SubElement(case, "skipped", {"message": why})
    ET.indent(root)
    for element in root.iter():
        element.text = _xml_safe(element.text)
        element.attrib.update({k: _xml_safe(v) for k, v in element.attrib.items()})
    return ET.ElementTree(root)


def _xml_safe(text: str | None) -> str | None:
    """``text`` with the characters XML 1.0 forbids written as Python writes them (``\\x1b``)."""
    return XML_ILLEGAL.sub(lambda m: ascii(m.group())[1:-1], text) if text else text


def _suite(root: ET.Element, name: str, tests: int, failures: int, errors: int, skipped: int, seconds: float,
           stamp: dict) -> ET.Element:
    return ET.SubElement(root, "testsuite", {"name": name, "tests": str(tests), "failures": str(failures),
                                             "errors": str(errors), "skipped": str(skipped),
                                             "time": f"{seconds:.3f}", **stamp})


def _properties(suite: ET.Element, report: CheckReport, measured: dict) -> None:
    props = ET.SubElement(suite, "properties")
    fp = report.fingerprint
    machine = {"device": report.device, "execution_provider": report.profile.execution_provider,
               "machine": describe_machine(fp), "fingerprint": fingerprint_hash(fp),
               "onnxruntime": fp.get("onnxruntime"), "ltsedge": ltsedge.__version__,
               "against": str(report.against) if report.against else None,
               "max_regression": f"{report.max_regression:g}" if report.against else None,
               "marginal_policy": report.marginal_policy,
               "between_run_spread": f"{report.between_run_spread:.4f}" if report.between_run_spread else None,
               "calibration_ms": (report.calibration or {}).get("reference_ms")}
    for name, value in {**machine, **measured}.items():
        if value is not None:
            ET.SubElement(props, "property", {"name": name, "value": str(value)})


def _measured(result: ModelResult) -> dict:
    """The model's figures, as properties: what a dashboard charts (the last re-measurement's, when there was one)."""
    out = {"sha256": result.sha256, "architecture_id": result.architecture_id}
    last = result.remeasurements[-1] if result.remeasurements else None
    for prefix, m in (("", result.measurement), ("remeasured_", last)):
        if m is not None and m.ok:
            out.update({f"{prefix}{k}": getattr(m, k) for k in MEASURED})
    return out


def write_junit(report: CheckReport, path: str | Path) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        junit_tree(report).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as e:
        raise LtsedgeError(f"cannot write the JUnit report {path}: {e.strerror or e}") from None


def _seconds(result: ModelResult) -> float:
    return sum(m.load_seconds + m.inference_seconds for m in (result.measurement, *result.remeasurements) if m)


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
        decided = (f"first {fmt(check.first_value)} {check.unit}, decided on re-measurement {check.decided_on} "
                   f"(a stricter repeat policy) of {check.measurements - 1}" if check.decided_on
                   else "decided on the first measurement")
        band = f", this machine's between-run spread of {check.band:.1%} included" if check.band else ""
        counted = f"; counted as {check.marginal_policy} (--marginal {check.marginal_policy})" \
            if check.marginal_policy else ""
        lines.append(f"marginal: the limit is within the measurement's uncertainty (+-{fmt(check.uncertainty)} "
                     f"{check.unit}{band}); {decided}{counted}")
    if result.matched_by and check.kind == "regression":
        lines.append(f"previous: {result.previous.model} (matched by {result.matched_by})")
    lines.extend(check.notes)
    lines.append(f"model: {result.model} sha256 {result.sha256}")
    return "\n".join(line for line in lines if line)
