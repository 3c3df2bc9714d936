"""Hostile or damaged search folders given to `ltsedge report` / `ltsedge compare` (issue 23): nothing read
from a file reaches the HTML page unescaped, a field of the wrong type is one line naming the file and
the field (exit 2), a missing folder or a file given as --out is one line and creates nothing, and a
folder copied without its manifest still reports (its report/ written under the manifest rules)."""

from __future__ import annotations

import json
import re

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.report import write_report
from ltsedge.report.compare import dominance
from ltsedge.report.data import load
from ltsedge.search.outdir import MANIFEST
from tests.helpers import one_line_exit_2, run_ltsedge

EVIL = "<img src=x onerror=alert(1)>"
CLOSE = "</script><script>alert(2)</script>"


def summary() -> dict:
    return {"settings": {"objective": "forward", "population": 4, "generations": 2, "space": {"n_layer": [1, 2]},
                         "budgets": {"max_latency_ms": 5.0, "max_memory_mb": None}},
            "device": {"name": "laptop", "sequence": 64}, "wall_seconds": 30.0,
            "fingerprint": {"cpu_model": "cpu", "arch": "x86_64", "logical_cores": 2, "onnxruntime": "1.20"},
            "hypervolume": [{"generation": 0, "hypervolume": 0.2, "front_size": 1},
                            {"generation": 1, "hypervolume": 0.4, "front_size": 2}],
            "baseline_comparison": [{"n_layer": 2, "decoder_params": 3000, "latency_ms": 2.0, "peak_memory_mb": 9.0,
                                     "ok": True, "frontier_latency_ms": 1.5, "speedup": 1.3, "memory_ratio": 1.1}]}


def model(i: int, **changes) -> dict:
    m = {"id": f"m{i}", "decoder_params": 1000 * (i + 1), "latency_ms": 1.0 + i, "peak_memory_mb": 5.0 + i,
         "architecture": {"n_layer": i + 1, "d_model": 64}, "onnx": f"models/m{i}.onnx",
         "measurement": {"latency_ms": 1.0 + i, "calibration_ms": 2.0}}
    return {**m, **changes}


def frontier(models=None) -> dict:
    return {"device": "laptop", "objective": "forward", "models": models or [model(0), model(1)]}


def candidate(i: int, **changes) -> dict:
    r = {"id": f"c{i}", "decoder_params": 500 * (i + 1), "ok": True, "feasible": True, "source": "measured",
         "generation": 0, "measurement": {"latency_ms": 1.0 + i, "peak_memory_mb": 4.0 + i}}
    return {**r, **changes}


def search_folder(path, search=None, front=None, lines=None):
    """A search's output folder as ltsedge writes it (without its manifest: as copied with `cp *`)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "search.json").write_text(json.dumps(search or summary()))
    (path / "frontier.json").write_text(json.dumps(front or frontier()))
    log = [json.dumps({"format": 1})] + [json.dumps(r) if isinstance(r, dict) else r
                                         for r in (lines or [candidate(0), candidate(1)])]
    (path / "candidates.jsonl").write_text("\n".join(log) + "\n")
    return path


# --- 1. nothing from a file reaches the page unescaped ----------------------------------------------------
def test_strings_from_the_files_are_escaped_in_the_page_and_its_script_data(tmp_path):
    lines = [candidate(0, id=CLOSE), candidate(1, ok=False, measurement={"error": EVIL}),
             candidate(2, measurement="not a measurement"), candidate(3, id=5),  # damaged lines: skipped
             candidate(4, measurement={"latency_ms": 2.0, "latency_ratio": 1.5},  # an interval that is none
                       prediction={"forward": {"value": 1.0, "low": 2.0, "high": 3.0}}),
             '{"id": "cut short by a kil']
    front = frontier([model(0, id=CLOSE, bundle=EVIL), model(1, measurement={"agent": EVIL})])
    front["device"] = EVIL + r"$\undefinedcommand$"  # also in the PNG titles: text, not a formula
    out = search_folder(tmp_path / "out", front=front, lines=lines)
    written = write_report(out, tmp_path / "r")
    page = (tmp_path / "r" / "index.html").read_text()
    assert "<img" not in page and "alert(2)</script>" not in page and "<script>alert" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # shown as text: the device, the agent, the error
    assert "\\u003c\\u002fscript\\u003e\\u003cscript\\u003ealert(2)" in page  # the id in the figures' JSON
    assert {p.name for p in written} >= {"latency.png", "peak_memory.png", "hypervolume.png", "index.html"}


def test_values_that_bypass_reading_are_still_escaped(tmp_path):
    from ltsedge.report.html import report_html

    data = load(search_folder(tmp_path / "out"))
    data.objective = EVIL  # as SearchData built by hand, or a type check missed
    data.frontier[0]["architecture"] = {"n_layer": EVIL, "d_model": CLOSE}
    data.baseline[0]["n_layer"] = EVIL
    page = report_html(data)
    assert "<img" not in page and "</script><script>alert" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") == 4  # objective (twice), layers, baseline layers


@pytest.mark.parametrize("where, value, message", [
    ("objective", EVIL, "frontier.json: objective must be one of forward, prefill, decode"),
    ("n_layer", EVIL, "frontier.json: models[0].architecture.n_layer must be an integer, not '<img"),
    ("d_model", CLOSE, "frontier.json: models[0].architecture.d_model must be an integer"),
    ("baseline", EVIL, "search.json: baseline_comparison[0].n_layer must be an integer"),
])
def test_injected_markup_in_typed_fields_is_refused_in_one_line(tmp_path, where, value, message):
    search, front = summary(), frontier()
    if where == "objective":
        front["objective"] = value
    elif where == "baseline":
        search["baseline_comparison"][0]["n_layer"] = value
    else:
        front["models"][0]["architecture"][where] = value
    out = search_folder(tmp_path / "out", search, front)
    one_line_exit_2(run_ltsedge("report", out, "--out", tmp_path / "r"), message)
    assert not (tmp_path / "r").exists()


# --- 2. damaged fields: one line naming the file and the field ----------------------------------------------
@pytest.mark.parametrize("damage, message", [
    (lambda s, f: f["models"][0].pop("decoder_params"), "frontier.json: models[0].decoder_params is missing"),
    (lambda s, f: f["models"].__setitem__(0, "m0"), "frontier.json: models[0] must be an object, not str"),
    (lambda s, f: f["models"][1].update(peak_memory_mb="lots"),
     "frontier.json: models[1].peak_memory_mb must be a finite number, not 'lots'"),
    (lambda s, f: f["models"][0].update(id=7), "frontier.json: models[0].id must be a string"),
    (lambda s, f: f["models"][0].update(measurement="x"), "frontier.json: models[0].measurement must be an object"),
    (lambda s, f: s.update(hypervolume=[{"generation": 0}]),
     "search.json: hypervolume[0].hypervolume is missing"),
    (lambda s, f: s.update(hypervolume="rising"), "search.json: hypervolume must be a list"),
    (lambda s, f: s["hypervolume"].append(3), "search.json: hypervolume[2] must be an object"),
    (lambda s, f: s.update(fingerprint="abc"), "search.json: fingerprint must be an object, not 'abc'"),
    (lambda s, f: s.update(device="laptop"), "search.json: device must be an object"),
    (lambda s, f: s["settings"]["budgets"].update(max_latency_ms="5"),
     "search.json: settings.budgets.max_latency_ms must be a finite number"),
    (lambda s, f: s.update(wall_seconds="long"), "search.json: wall_seconds must be a finite number"),
    (lambda s, f: s["baseline_comparison"][0].update(stand_in_speedup="fast"),
     "search.json: baseline_comparison[0].stand_in_speedup must be a finite number, not 'fast'"),
    (lambda s, f: s["baseline_comparison"][0].update(stand_in_decoder_params=2.5),
     "search.json: baseline_comparison[0].stand_in_decoder_params must be an integer"),
    (lambda s, f: s["baseline_comparison"][0].update(stand_in=["n_head"]),
     "search.json: baseline_comparison[0].stand_in must be a string"),
])
def test_a_damaged_field_is_one_error_naming_file_and_field(tmp_path, damage, message):
    search, front = summary(), frontier()
    damage(search, front)
    out = search_folder(tmp_path / "out", search, front)
    with pytest.raises(LtsedgeError, match=re.escape(message)):
        load(out)


def test_report_and_compare_of_a_damaged_folder_exit_2_in_one_line(tmp_path):
    front = frontier()
    front["models"][1]["peak_memory_mb"] = "lots"
    bad = search_folder(tmp_path / "bad", front=front)
    one_line_exit_2(run_ltsedge("report", bad, "--out", tmp_path / "r"), "frontier.json: models[1].peak_memory_mb")
    search = summary()
    search["fingerprint"] = "abc"
    other = search_folder(tmp_path / "other", search)
    good = search_folder(tmp_path / "good")
    one_line_exit_2(run_ltsedge("compare", good, other, "--out", tmp_path / "cmp"), "search.json: fingerprint")
    assert not (tmp_path / "r").exists() and not (tmp_path / "cmp").exists()


def test_compare_ranks_only_models_measured_on_every_axis(tmp_path):
    a = load(search_folder(tmp_path / "a", front=frontier([model(0, peak_memory_mb=None), model(1)])))
    b = load(search_folder(tmp_path / "b", front=frontier([model(0, latency_ms=9.0, peak_memory_mb=99.0)])))
    rows = dominance([a, b])
    assert rows[0]["dominating"] == 1 and rows[0]["examples"] == ["m1 > b:m0"]


def test_searches_drawn_with_one_fitted_proxy_compare_by_its_predicted_loss(tmp_path):
    """A deeper model with more decoder parameters and the same figures dominates by decoder parameters;
    where both searches drew their fronts with the same fit, its predicted loss decides instead."""
    fit = {"kind": "fitted", "a": 9.0, "b": -0.3, "c": 0.2, "backbone": "gpt2", "sha256": "f" * 64, "ranks": "front"}
    fitted = summary()
    fitted["settings"]["proxy"] = fit
    shallow, deep = model(0, decoder_params=1000, predicted_loss=6.0), model(0, decoder_params=1200, predicted_loss=6.3)
    a = load(search_folder(tmp_path / "a", fitted, front=frontier([{**shallow, "id": "s"}])))
    b = load(search_folder(tmp_path / "b", fitted, front=frontier([{**deep, "id": "d"}])))
    assert [r["examples"] for r in dominance([a, b])] == [["s > b:d"], []]
    plain_a = load(search_folder(tmp_path / "pa", front=frontier([{**shallow, "id": "s"}])))
    plain_b = load(search_folder(tmp_path / "pb", front=frontier([{**deep, "id": "d"}])))
    assert [r["examples"] for r in dominance([plain_a, plain_b])] == [[], ["d > pa:s"]]
    other = summary()
    other["settings"]["proxy"] = {**fit, "sha256": "0" * 64}  # another fit: its losses are not comparable
    c = load(search_folder(tmp_path / "c", other, front=frontier([{**deep, "id": "d"}])))
    assert [r["examples"] for r in dominance([a, c])] == [[], ["d > a:s"]]
    assert {r["quality"] for r in dominance([a, b])} == {"predicted_loss"}
    assert {r["quality"] for r in dominance([a, c])} == {"decoder_params"}


# --- 3. a missing folder, a file as --out -----------------------------------------------------------------
def test_report_of_a_missing_folder_creates_nothing(tmp_path):
    with pytest.raises(LtsedgeError, match="search output directory not found"):
        write_report(tmp_path / "typo-dir")
    assert list(tmp_path.iterdir()) == []


def test_report_and_compare_into_an_existing_file_are_one_line(tmp_path):
    out, other = search_folder(tmp_path / "out"), search_folder(tmp_path / "other")
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    one_line_exit_2(run_ltsedge("report", out, "--out", taken), "is a file, not a folder")
    one_line_exit_2(run_ltsedge("compare", out, other, "--out", taken), "is a file, not a folder")
    assert taken.read_text() == "mine"


def test_a_report_is_never_written_through_a_link(tmp_path):
    out, victim = search_folder(tmp_path / "out"), tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "index.html").symlink_to(victim)
    with pytest.raises(LtsedgeError, match="symbolic link"):
        write_report(out, tmp_path / "r", png=False)
    assert victim.read_text() == "precious"


# --- 4. a folder copied without its manifest still reports ------------------------------------------------
def test_a_folder_copied_without_its_manifest_reports_into_a_fresh_report_folder(tmp_path):
    out = search_folder(tmp_path / "copy")
    written = write_report(out)
    assert (out / "report" / "index.html").is_file() and all(p.parent == out / "report" for p in written)
    manifest = json.loads((out / MANIFEST).read_text())
    # Only the report is recorded as ltsedge's: the copied search files were not written here by it.
    assert manifest["files"] == sorted(f"report/{p.name}" for p in written)
    assert manifest["written_by"] == "ltsedge report"
    again = write_report(out)  # its own report is replaced
    assert sorted(again) == sorted(written)


def test_a_copied_report_folder_without_its_manifest_is_not_overwritten(tmp_path):
    out = search_folder(tmp_path / "copy")
    (out / "report").mkdir()
    (out / "report" / "index.html").write_text("someone's")
    with pytest.raises(LtsedgeError, match="index.html was not written by ltsedge report"):
        write_report(out)
    assert (out / "report" / "index.html").read_text() == "someone's"


def test_a_crafted_manifest_is_still_refused_when_reporting(tmp_path):
    out = search_folder(tmp_path / "out")
    (out / MANIFEST).write_text(json.dumps({"format": 1, "files": ["report/../../victim.txt"]}))
    with pytest.raises(LtsedgeError, match="a path outside"):
        write_report(out)
    assert not (out / "report").exists()


def test_the_report_command_of_a_typo_or_a_copied_folder(tmp_path):
    one_line_exit_2(run_ltsedge("report", tmp_path / "typo-dir"), "not found")
    assert not (tmp_path / "typo-dir").exists()
    out = search_folder(tmp_path / "copy")  # no manifest: as copied by hand
    proc = run_ltsedge("report", out, "--html")
    assert proc.returncode == 0, proc.stderr
    assert (out / "report" / "index.html").is_file()
