"""The report of a real tiny search: PNGs, one self-contained HTML page rendered by a real headless
browser (its screenshot inspected for drawn plots), compare of two searches, bad input."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import matplotlib.image
import numpy as np
import pytest

from ltsedge.report.data import load
from tests.helpers import run_ltsedge as run
from tests.test_safety_report import search_folder, summary


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    outs = []
    for seed in (1, 2):
        out = tmp / f"search-{seed}"
        proc = run("search", "--preset", "smoke", "--out", out, "--store", tmp / "s.sqlite", "--quiet", "--seed", seed)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    return outs


@pytest.mark.slow
def test_a_search_writes_its_report(searches):
    report = searches[0] / "report"
    names = sorted(p.name for p in report.iterdir())
    assert names == ["decode_latency.png", "hypervolume.png", "index.html", "peak_memory.png", "prefill_latency.png"]
    for png in report.glob("*.png"):
        pixels = matplotlib.image.imread(png)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 500 and pixels.std() > 0.05  # a picture, not a blank
    manifest = json.loads((searches[0] / ".ltsedge-manifest.json").read_text())["files"]
    assert "report/index.html" in manifest  # written through the search's record of its files


@pytest.mark.slow
def test_the_html_is_self_contained_and_links_the_models(searches):
    page = (searches[0] / "report" / "index.html").read_text()
    assert not re.search(r"<script[^>]+src=[\"']https?://", page) and "<link" not in page
    assert "prefers-color-scheme" in page and page.count("plotly-graph-div") >= 4
    frontier = json.loads((searches[0] / "frontier.json").read_text())["models"]
    for m in frontier:
        assert f"href='../{m['bundle']}'" in page


def chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.slow
def test_the_html_draws_its_plots_in_a_real_browser(searches, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium binary (apt-get install chromium) to render the report")
    shot = tmp_path / "shot.png"
    page = (searches[0] / "report" / "index.html").resolve()
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=8000", f"--screenshot={shot}", "--window-size=1200,1400",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file(), proc.stderr
    pixels = matplotlib.image.imread(shot)[..., :3]
    plot_area = pixels[250:1350, 50:1150]  # below the heading: the first two slices
    assert plot_area.std() > 0.05  # markers, lines and axes drawn, not an empty page
    # Points in the frontier's colour (#0072B2): the plotly traces were rendered, not just the text.
    blue = np.abs(plot_area - np.array([0x00, 0x72, 0xB2]) / 255).sum(axis=-1) < 0.15
    assert blue.sum() > 200


@pytest.mark.slow
def test_compare_two_real_searches(searches, tmp_path):
    proc = run("compare", *searches, "--out", tmp_path / "cmp")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [r["search"] for r in data["dominance"]] == ["search-1", "search-2"]
    assert (tmp_path / "cmp" / "compare.html").is_file() and list((tmp_path / "cmp").glob("compare-*.png"))


@pytest.mark.slow
def test_compare_refuses_searches_measured_differently(searches, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(searches[1], other)
    summary = json.loads((other / "search.json").read_text())
    summary["device"]["sequence"] = 999
    (other / "search.json").write_text(json.dumps(summary))
    proc = run("compare", searches[0], other, "--out", tmp_path / "cmp")
    assert proc.returncode == 2 and "other device settings (sequence)" in proc.stderr
    assert run("compare", searches[0], other, "--out", tmp_path / "cmp", "--force").returncode == 0


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "search output directory not found"),
    (lambda d: d.mkdir(), "search summary not found"),
    (lambda d: (d.mkdir(), (d / "search.json").write_text("{"), (d / "frontier.json").write_text("{}")),
     "malformed JSON"),
])
def test_report_of_a_missing_or_broken_directory(tmp_path, make, message):
    target = tmp_path / "nope"
    make(target)
    proc = run("report", target, "--out", tmp_path / "r")
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def baseline_row(n_layer: int, stand_in: str = "", **figures) -> dict:
    """A row of baseline.csv (search.json's baseline_comparison) as a search writes it now."""
    row = {"baseline_id": f"b{n_layer}", "n_layer": n_layer, "decoder_params": 3000 * n_layer, "ok": True,
           "latency_ms": 2.0 * n_layer, "peak_memory_mb": 9.0, "frontier_id": "m1", "frontier_latency_ms": 2.5,
           "speedup": 0.8 * n_layer, "memory_ratio": 1.5, "stand_in": stand_in, "stand_in_id": f"s{n_layer}",
           "stand_in_decoder_params": 4000 * n_layer, "stand_in_ok": True, "stand_in_latency_ms": 3.0 * n_layer,
           "stand_in_peak_memory_mb": 9.5, "stand_in_frontier_id": "m1", "stand_in_frontier_latency_ms": 2.5,
           "stand_in_speedup": 1.2 * n_layer, "stand_in_memory_ratio": 1.6}
    return {**row, **figures}


def report_page(tmp_path, rows: list[dict], name: str = "out") -> str:
    search = summary()
    search["baseline_comparison"] = rows
    out = search_folder(tmp_path / name, search)
    proc = run("report", out, "--out", tmp_path / f"{name}-report")
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / f"{name}-report" / "index.html").read_text()


def test_the_report_shows_a_baseline_point_outside_the_space_and_its_stand_in(tmp_path):
    page = report_page(tmp_path, [baseline_row(1, "n_layer 1->2; n_head 16->8"), baseline_row(2, "n_head 16->8")])
    assert "its stand-ins in the space" in page and "<th>stand-in in the space</th>" in page
    assert "n_layer 1-&gt;2; n_head 16-&gt;8" in page
    assert all(f"{x:.2f}×" in page for x in (0.8, 1.6, 1.2, 2.4))  # both speedups of both points
    data = load(tmp_path / "out")
    assert data.baseline_points("latency_ms") == [(3000, 2.0, 1), (6000, 4.0, 2)]
    assert data.baseline_points("latency_ms", stand_in=True) == [(4000, 3.0, 1), (8000, 6.0, 2)]


def test_older_search_folders_still_report_their_baseline_as_it_was_measured(tmp_path):
    """A search written before the baseline model was measured beside its stand-in reports as it did: its
    rows are the baseline's. One written when a point outside the space was measured only as its stand-in
    holds that stand-in's figures unprefixed: they are shown as the stand-in's, never as the baseline's."""
    before = {"baseline_id": "b1", "n_layer": 1, "decoder_params": 3000, "d_embed": 64, "div_val": 1,
              "latency_ms": 2.0, "peak_memory_mb": 9.0, "ok": True, "frontier_id": "m1",
              "frontier_decoder_params": 3100, "frontier_latency_ms": 2.5, "frontier_peak_memory_mb": 6.0,
              "speedup": 0.8, "memory_ratio": 1.5}
    page = report_page(tmp_path, [before], "before")
    assert "0.80×" in page and "stand-in" not in page
    assert load(tmp_path / "before").baseline_points("latency_ms") == [(3000, 2.0, 1)]

    stand_in_only = {**before, "stand_in": "n_head 16->8"}
    page = report_page(tmp_path, [stand_in_only], "stand-in-only")
    (row,) = load(tmp_path / "stand-in-only").baseline
    assert row["decoder_params"] is None and row["latency_ms"] is None and row["speedup"] is None
    assert (row["stand_in_id"], row["stand_in_decoder_params"], row["stand_in_speedup"]) == ("b1", 3000, 0.8)
    assert load(tmp_path / "stand-in-only").baseline_points("latency_ms") == []
    assert "<th>stand-in in the space</th>" in page and "n_head 16-&gt;8" in page and "0.80×" in page
