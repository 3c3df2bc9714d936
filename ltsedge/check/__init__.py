"""``ltsedge check``: a CI gate on latency and peak-memory budgets (and regressions) for ONNX models.

    report = run_check(["models/a.onnx"], "cpu", budgets={"max_latency_ms": 50, "max_memory_mb": 300})
    report.render(); report.write_junit("report.xml"); sys.exit(report.exit_code)

Exit codes: 0 every check within its limit; 1 a budget exceeded, a regression beyond
``max_regression`` or a model that could not be measured; 2 bad input (``LtsedgeError``).

Modules: ``budgets`` (the budgets TOML and which budget applies), ``verdict`` (one value against one
limit, noise-aware), ``previous`` (``--against`` files, matching, machine fingerprints), ``run``
(measure, re-measure close calls), ``report`` (table, JSON, exit code), ``junit`` (the XML report).
"""

from ltsedge.check.budgets_file import ModelBudgets, load_budgets
from ltsedge.check.result import CheckReport, ModelResult
from ltsedge.check.api import run_check
from ltsedge.check.verdict import Check

__all__ = ["ModelBudgets", "Check", "CheckReport", "ModelResult", "load_budgets", "run_check"]
