"""The project's files speak of the product and its users, never of the work on it.

A line that says who ran what, when, on which passing machine, or what a review found, tells a reader
nothing about ltsedge and stops being true the day it is written.
Benchmarks say which machine and commit gave a figure instead (docs/benchmarks.md). onnxruntime's
sessions (`InferenceSession`, "session options", "the onnxruntime session") are product terms and pass.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


NARRATION = re.compile("|".join([
    r"\bthis (?:session|stop|sitting)\b",
    r"\b(?:last|earlier|later|previous|next) (?:session|stop)s?\b",
    r"\bthis (?:[\w-]+ )?vms?\b",                               # "on this VM", "this 2-vCPU VM"
    r"\b(?:that|one|a|the same) sitting\b",
    r"\btoday\b",
    r"\b(?:i|we) (?:ran|tried|found|measured|saw|changed|fixed|noticed|checked)\b",
    r"\bthe review (?:found|showed|said|asked|noted)\b",
    r"\breview mends?\b",
    r"\b(?:this|other|another|two|three|four|several) engineers?\b",
]), re.IGNORECASE)

TEXT_SUFFIXES = {".py", ".md", ".sh", ".mjs", ".js", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini"}
SKIPPED_DIRS = {"__pycache__", "node_modules", ".pytest_cache"}


def project_files() -> list[Path]:
    """README.md, docs, the package, benchmarks, examples, tests, CI: every text file of the project."""
    files = [ROOT / "README.md", ROOT / ".ci" / "run"]
    for folder, suffixes in (("docs", {".md"}), ("ltsedge", {".py", ".toml"}), ("benchmarks", TEXT_SUFFIXES),
                             ("examples", TEXT_SUFFIXES), ("tests", {".py"}), ("ci", TEXT_SUFFIXES | {""})):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in suffixes and not SKIPPED_DIRS & set(path.parts):
                files.append(path)
    this = Path(__file__).resolve()
    return [p for p in files if p.is_file() and p.resolve() != this]


def narration_in(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that narrates the work."""
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if NARRATION.search(line)]


@pytest.mark.parametrize("line", [
    "2026-11-24 (a later session), on the shared VM with other jobs running",
    "median 2.30% (4.22% in the same benchmark last stop, with all pairs)",
    "### The study's search on this session's VM (2026-11-25, decode)",
    "Before, on this VM under load: decode ratios 18.5% median",
    "2026-11-24, this 2-vCPU VM with four other engineers' test suites beside it",
    "Again after this stop's changes (two-pass publishing)",
    "topology matters more; the forward objective was not run here this session.",
    "The earlier sessions' records do not say which CPU they ran on.",
    "We ran it twice and the review found a leak.",
    "measured today on the dev box",
])
def test_the_patterns_catch_narration(line):
    assert narration_in(line), line


@pytest.mark.parametrize("line", [
    'session = ort.InferenceSession("bundle/model.onnx", providers=["CPUExecutionProvider"])',
    "the worker builds its onnxruntime session in session.py, with the profile's session options",
    "create the onnxruntime session, and one inference; a second session of the same file",
    "The stop rule looks at the interval only on a schedule; Ctrl-C stops cleanly",
    "this machine's pinned calibration, measured on an AMD EPYC (Zen 4) VM with 2 vCPUs",
    "| architecture | params | file | export | write | session load |",
])
def test_the_patterns_spare_the_product_s_own_words(line):
    assert not narration_in(line), line


def test_the_scan_covers_the_project_s_files():
    scanned = {p.relative_to(ROOT).as_posix() for p in project_files()}
    for expected in ("docs/benchmarks.md", "ltsedge/cli/__init__.py", "benchmarks/cuda_check.sh", ".ci/run",
                     "tests/helpers.py"):
        assert expected in scanned, expected
    assert "tests/test_project_language.py" not in scanned


def test_no_project_file_narrates_how_the_work_was_done():
    hits = [f"{path.relative_to(ROOT).as_posix()}:{number}: {line}"
            for path in project_files()
            for number, line in narration_in(path.read_text(encoding="utf-8", errors="replace"))]
    assert not hits, ("lines that narrate the work instead of describing the product "
                      "(say which machine and commit instead):\n" + "\n".join(hits))
