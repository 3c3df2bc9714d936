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
from typing import TYPE_CHECKING

from ltsedge.errors import LtsedgeError
from ltsedge.files import write_file
from ltsedge.report.data import SearchData, load

if TYPE_CHECKING:
    from ltsedge.search.outdir import OutputDir

REPORT_DIR = "report"


def write_report(out_dir: str | Path, dest: str | Path | None = None, *, html: bool = True, png: bool = True,
                 open_path: Callable[[str], Path] | None = None, proxy_check: str | Path | None = None) -> list[Path]:
    """Draw the report of the search in ``out_dir`` into ``dest`` (default ``out_dir/report``).

    ``open_path(name)`` gives the path to write each file at (a search records its files in its
    manifest through it); without it the default ``out_dir/report`` is written under the folder's
    manifest rules (``report_folder``). ``proxy_check``: an ``ltsedge proxy-check`` result to show (else
    one kept in ``out_dir``, if any). Returns the files written."""
    if open_path is None and dest is None:
        with report_folder(out_dir) as folder:
            return write_report(out_dir, html=html, png=png, proxy_check=proxy_check,
                                open_path=lambda name: folder.path(f"{REPORT_DIR}/{name}"))
    data = load(out_dir)  # before anything is made: a missing or damaged folder leaves no trace
    check = proxy_check_line(out_dir, proxy_check, data.settings.get("space"))
    dest = Path(dest) if dest is not None else Path(out_dir) / REPORT_DIR
    if open_path is None:
        make_folder(dest)
    path_for = open_path or (lambda name: dest / name)
    written = []
    if png:
        from ltsedge.report import png as pictures

        for field in [*data.latencies(), "peak_memory_mb"]:
            written.append(pictures.slice_png(data, field, path_for(f"{field.removesuffix('_ms').removesuffix('_mb')}.png")))
        if data.summary.get("hypervolume"):
            written.append(pictures.hypervolume_png(data, path_for("hypervolume.png")))
        if pictures.cost_model_panels(data):  # asked for its path only when drawn: a manifest lists no phantom
            written.append(pictures.cost_model_png(data, path_for("cost_model.png")))
    if html:
        from ltsedge.report.html import report_html

        prefix = "../" if Path(dest).resolve().parent == Path(out_dir).resolve() else Path(out_dir).resolve().as_uri() + "/"
        path = path_for("index.html")
        write_file(path, report_html(data, prefix, check).encode())
        written.append(path)
    return written


def proxy_check_line(out_dir: str | Path, given: str | Path | None, space: dict | None) -> str | None:
    """The line of the proxy-check given, or of one kept in the search's folder (a damaged one found there is
    left out: it never costs the search its report; one given is read or refused in one line)."""
    from ltsedge.proxycheck.fitted import check_line, find_check, read_check

    if given is not None:
        return check_line(read_check(given, "--proxy-check"), space)
    found = find_check(out_dir)
    try:
        return check_line(read_check(found), space) if found is not None else None
    except LtsedgeError:
        return None


def report_folder(out_dir: str | Path) -> OutputDir:
    """``out_dir/report`` as ltsedge may write it: only ``report/`` is ltsedge's there (the search's own
    files are only read, so a folder copied without its manifest reports too), and a file under
    ``report/`` that its manifest does not list is someone else's, never overwritten. A missing folder is
    refused before anything is created."""
    from ltsedge.search.outdir import OutputDir

    if not Path(out_dir).is_dir():
        raise LtsedgeError(f"search output directory not found: {out_dir}")
    return OutputDir(out_dir, outputs=(), owned_dirs=(REPORT_DIR,), tool="ltsedge report")


def make_folder(dest: Path) -> None:
    """``--out DEST``: a folder, made if new; a file there is refused in one line."""
    if dest.exists() and not dest.is_dir():
        raise LtsedgeError(f"--out {dest} is a file, not a folder; choose another --out")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LtsedgeError(f"cannot create folder {dest}: {e.strerror or e}") from None


__all__ = ["SearchData", "load", "report_folder", "write_report"]
