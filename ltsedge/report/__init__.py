"""Reports of a search: PNG slices (matplotlib) and one self-contained HTML page (plotly); and the
comparison of several searches.

    write_report("ltsedge-out")                  # -> ltsedge-out/report/*.png, index.html
    compare_searches(["pi-out", "laptop-out"], "compared")

``data.py`` reads an output directory back, ``png.py`` and ``html.py`` draw it, ``compare.py`` puts
several searches side by side. torch and pymoo are never imported: a report is drawn anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ltsedge.report.data import SearchData, load

REPORT_DIR = "report"


def write_report(out_dir: str | Path, dest: str | Path | None = None, *, html: bool = True, png: bool = True,
                 open_path: Callable[[str], Path] | None = None) -> list[Path]:
    """Draw the report of the search in ``out_dir`` into ``dest`` (default ``out_dir/report``).

    ``open_path(name)`` gives the path to write each file at (a search records its files in its
    manifest through it); returns the files written."""
    data = load(out_dir)
    dest = Path(dest) if dest is not None else Path(out_dir) / REPORT_DIR
    path_for = open_path or (lambda name: dest / name)
    written = []
    if png:
        from ltsedge.report import png as pictures

        for field in [*data.latencies(), "peak_memory_mb"]:
            written.append(pictures.slice_png(data, field, path_for(f"{field.removesuffix('_ms').removesuffix('_mb')}.png")))
        if data.summary.get("hypervolume"):
            written.append(pictures.hypervolume_png(data, path_for("hypervolume.png")))
        drawn = pictures.cost_model_png(data, path_for("cost_model.png"))
        if drawn is not None:
            written.append(drawn)
    if html:
        from ltsedge.report.html import report_html

        prefix = "../" if Path(dest).resolve().parent == Path(out_dir).resolve() else Path(out_dir).resolve().as_uri() + "/"
        path = path_for("index.html")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_html(data, prefix))
        written.append(path)
    return written


__all__ = ["SearchData", "load", "write_report"]
