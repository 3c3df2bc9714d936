"""The report's pictures as PNG files, with matplotlib's Agg backend (no display needed).

Each picture carries its own light background and dark text, so it reads the same in a light or a
dark page (a transparent plot with black text disappears on a dark theme); colours are the
colour-blind-safe Okabe-Ito set.
"""

from __future__ import annotations

from pathlib import Path

from ltsedge.files import write_file
from ltsedge.report.data import LATENCIES, SearchData
from ltsedge.workloads import WORKLOADS

CANDIDATE, FRONT, BASELINE, BUDGET, INFEASIBLE = "#9a9a9a", "#0072B2", "#D55E00", "#CC79A7", "#E69F00"
BACKGROUND, TEXT = "#ffffff", "#1f1f1f"
SERIES = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]  # compare: one per search


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.facecolor": BACKGROUND, "axes.facecolor": BACKGROUND, "savefig.facecolor": BACKGROUND,
                         "text.color": TEXT, "axes.labelcolor": TEXT, "xtick.color": TEXT, "ytick.color": TEXT,
                         "axes.edgecolor": TEXT, "font.size": 10,
                         "text.parse_math": False})  # a name from a file ("$\\x$") is text, never a formula
    return plt


def slice_png(data: SearchData, field: str, path: Path) -> Path:
    """Decoder parameters against one figure: candidates faint, the frontier, the baseline, budgets."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=100)
    label = LATENCIES.get(field, "peak memory (MB)")
    ok = [p for p in data.candidates if p.figures.get(field) is not None]
    predicted = [p for p in ok if p.predicted]
    feasible = [p for p in ok if p.feasible and not p.predicted]
    infeasible = [p for p in ok if not p.feasible and not p.predicted]
    failed = sum(1 for p in data.candidates if not p.ok and p.source != "skipped")
    ax.scatter([p.params for p in feasible], [p.figures[field] for p in feasible], s=14, c=CANDIDATE, alpha=0.45,
               label=f"measured candidates ({len(feasible)})")
    if predicted:
        ax.scatter([p.params for p in predicted], [p.figures[field] for p in predicted], s=14, facecolors="none",
                   edgecolors=CANDIDATE, alpha=0.45, label=f"predicted, not measured ({len(predicted)})")
    if infeasible:
        ax.scatter([p.params for p in infeasible], [p.figures[field] for p in infeasible], s=22, c=INFEASIBLE,
                   marker="x", label=f"over a budget ({len(infeasible)})")
    front = sorted((p for p in data.frontier_points() if p.figures.get(field) is not None), key=lambda p: p.params)
    ax.plot([p.params for p in front], [p.figures[field] for p in front], "o-", c=FRONT, ms=6, lw=1.4,
            label=f"frontier ({len(front)})")
    _baseline(ax, data, field)
    _budgets(ax, data, field)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("decoder parameters (the perplexity proxy)")
    ax.set_ylabel(label)
    title = f"{data.name}: {label} on {data.device}, {data.precision}"
    ax.set_title(title + (f"  ({failed} failed, not shown)" if failed else ""), fontsize=10)
    ax.grid(True, which="major", alpha=0.25)
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    return _save(fig, path)


def _baseline(ax, data: SearchData, field: str) -> None:
    """The layer-scaled baseline, and where the space does not hold it, its stand-ins in the space."""
    points = data.baseline_points(field)
    if points:
        ax.plot([x for x, _, _ in points], [y for _, y, _ in points], "s--", c=BASELINE, ms=4, lw=1.1,
                label="layer-scaled baseline")
        for x, y, n in points:
            ax.annotate(f"{n}L", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=BASELINE)
    stand_ins = data.baseline_points(field, stand_in=True)
    if stand_ins:
        ax.plot([x for x, _, _ in stand_ins], [y for _, y, _ in stand_ins], "D:", c=BASELINE, ms=4, lw=1.0,
                alpha=0.55, mfc="none", label="its stand-ins in the space")


def _budgets(ax, data: SearchData, field: str) -> None:
    limits = {data.objective_field(): data.budgets.get("max_latency_ms"),
              "peak_memory_mb": data.budgets.get("max_memory_mb")}
    if limits.get(field) is not None:
        ax.axhline(limits[field], c=BUDGET, ls=":", lw=1.4, label=f"budget {limits[field]:g}")
    for key, ls in (("min_params", "-."), ("max_params", "-.")):
        if data.budgets.get(key) is not None:
            ax.axvline(data.budgets[key], c=BUDGET, ls=ls, lw=1.0, alpha=0.7)


def hypervolume_png(data: SearchData, path: Path) -> Path:
    plt = _pyplot()
    history = data.summary.get("hypervolume") or []
    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=100)
    gens = [h["generation"] for h in history]
    ax.plot(gens, [h["hypervolume"] for h in history], "o-", c=FRONT, label="hypervolume")
    ax.set_xlabel("generation")
    ax.set_ylabel("hypervolume (normalised)", color=FRONT)
    other = ax.twinx()
    other.plot(gens, [h["front_size"] for h in history], "s--", c=BASELINE, label="front size")
    other.set_ylabel("front size", color=BASELINE)
    ax.set_title(f"{data.name}: the search's progress", fontsize=10)
    ax.grid(True, alpha=0.25)
    return _save(fig, path)


def cost_model_panels(data: SearchData) -> list[tuple[str, str, list]]:
    """(target, label, checked predictions) of the objective's latency ratio and the peak memory, where the
    cost model predicted a candidate measured later (empty: no cost-model picture)."""
    from ltsedge.report.data import checked_predictions

    workload = data.objective if data.objective in WORKLOADS else "forward"
    panels = [(t, label, checked_predictions(data, t)) for t, label in
              ((workload, f"{workload} latency ratio"), ("memory_mb", "peak memory (MB)"))]
    return [p for p in panels if p[2]]


def cost_model_png(data: SearchData, path: Path) -> Path | None:
    """The cost model's predictions against the measurements that followed them, with their intervals.
    None when nothing was predicted then measured."""
    panels = cost_model_panels(data)
    if not panels:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.0), dpi=100, squeeze=False)
    for ax, (_, label, pairs) in zip(axes[0], panels):
        guess = [p[0] for p in pairs]
        actual = [p[3] for p in pairs]
        inside = sum(low <= a <= high for _, low, high, a in pairs)
        ax.errorbar(actual, guess, yerr=[[g - low for g, low, _, _ in pairs], [high - g for g, _, high, _ in pairs]],
                    fmt="o", ms=4, c=FRONT, ecolor=CANDIDATE, elinewidth=0.8, alpha=0.8)
        lo, hi = min(guess + actual), max(guess + actual)
        ax.plot([lo, hi], [lo, hi], "--", c=TEXT, lw=0.8)
        errors = sorted(abs(a / g - 1) for g, a in zip(guess, actual) if g)
        median = f"median error {errors[len(errors) // 2]:.1%}, " if errors else ""
        ax.set_title(f"{label}\n{median}{inside} of {len(pairs)} in the interval", fontsize=9)
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted before measuring")
        ax.grid(True, alpha=0.25)
    fig.suptitle(f"{data.name}: the cost model on candidates measured after it predicted them", fontsize=10)
    return _save(fig, path)


def compare_png(searches: list[SearchData], field: str, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=100)
    for i, data in enumerate(searches):
        front = sorted((p for p in data.frontier_points() if p.figures.get(field) is not None), key=lambda p: p.params)
        ax.plot([p.params for p in front], [p.figures[field] for p in front], "o-", c=SERIES[i % len(SERIES)],
                label=f"{data.name} ({len(front)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("decoder parameters")
    ax.set_ylabel(LATENCIES.get(field, "peak memory (MB)"))
    ax.set_title("frontiers compared", fontsize=10)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _plain_numbers(ax) -> None:
    """Log axes labelled 2, 3, 5 rather than 2 x 10^0."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.4g}"))
            axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _save(fig, path: Path) -> Path:
    """Written with ``write_file``: never through a link left in a copied folder."""
    import io

    import matplotlib.pyplot as plt

    for ax in fig.axes:
        _plain_numbers(ax)
    fig.tight_layout()
    picture = io.BytesIO()
    fig.savefig(picture, format="png")
    plt.close(fig)
    write_file(path, picture.getvalue())
    return path

