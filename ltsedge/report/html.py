"""The report as one self-contained HTML page: interactive plotly figures (plotly.js embedded, nothing
fetched when it is viewed), the frontier table with links to each model, the machine and settings.

The page follows the reader's light or dark theme (``prefers-color-scheme``): the CSS switches
colours, and a few lines of script give the figures the same text and grid colours.

Every value read from a search's files is escaped (``html.escape``) before it reaches the page; the
figures' data is embedded by plotly's ``to_html``, whose JSON writes ``<``, ``>`` and ``&`` as ``\u003c``
and so on, so no string from a file can close its ``<script>`` block.
"""

from __future__ import annotations

import html
import json

from ltsedge.report.data import DRAWN, LATENCIES, SearchData
from ltsedge.report.png import BASELINE, BUDGET, CANDIDATE, FRONT, INFEASIBLE, SERIES
from ltsedge.validate import is_number

CSS = """
:root { --bg: #ffffff; --fg: #1f1f1f; --muted: #666; --line: #ddd; --accent: #0072B2; }
@media (prefers-color-scheme: dark) { :root { --bg: #16181c; --fg: #e6e6e6; --muted: #9aa; --line: #333;
  --accent: #56B4E9; } }
body { background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, sans-serif; margin: 2em auto;
  max-width: 1100px; padding: 0 1em; }
h1, h2 { font-weight: 600; } a { color: var(--accent); }
table { border-collapse: collapse; width: 100%; margin: 1em 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.muted { color: var(--muted); } .figure { margin: 1.5em 0; } dl { display: grid; grid-template-columns: 14em 1fr; }
dt { color: var(--muted); } dd { margin: 0; }
"""

THEME_SCRIPT = """
function ltsedgeTheme() {
  const dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
  const fg = dark ? '#e6e6e6' : '#1f1f1f', grid = dark ? '#333' : '#ddd';
  document.querySelectorAll('.plotly-graph-div').forEach(div => Plotly.relayout(div, {
    'font.color': fg, 'xaxis.gridcolor': grid, 'yaxis.gridcolor': grid,
    'scene.xaxis.gridcolor': grid, 'scene.yaxis.gridcolor': grid, 'scene.zaxis.gridcolor': grid}));
}
window.addEventListener('load', ltsedgeTheme);
if (window.matchMedia) window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', ltsedgeTheme);
"""


def _figure_html(fig, div_id: str) -> str:
    fig.update_layout(paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(bgcolor="rgba(0,0,0,0)"))
    return f'<div class="figure">{fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id)}</div>'


def slice_figure(data: SearchData, field: str):
    import plotly.graph_objects as go

    label = LATENCIES.get(field, "peak memory (MB)")
    fig = go.Figure()
    for name, points, style in (
            ("candidates", [p for p in data.candidates if p.feasible], dict(color=CANDIDATE, size=6, opacity=0.5)),
            ("over a budget", [p for p in data.candidates if p.ok and not p.feasible],
             dict(color=INFEASIBLE, size=8, symbol="x"))):
        points = [p for p in points if p.figures.get(field) is not None]
        if points:
            fig.add_trace(go.Scatter(x=[p.params for p in points], y=[p.figures[field] for p in points],
                                     mode="markers", name=f"{name} ({len(points)})", marker=style,
                                     text=[p.id for p in points], hovertemplate="%{text}<br>%{x:,} params<br>%{y:.4g}"))
    front = sorted((p for p in data.frontier_points() if p.figures.get(field) is not None), key=lambda p: p.params)
    fig.add_trace(go.Scatter(x=[p.params for p in front], y=[p.figures[field] for p in front], mode="lines+markers",
                             name=f"frontier ({len(front)})", line=dict(color=FRONT), marker=dict(size=9),
                             text=[p.id for p in front], hovertemplate="%{text}<br>%{x:,} params<br>%{y:.4g}"))
    points = data.baseline_points(field)
    if points:
        fig.add_trace(go.Scatter(x=[x for x, _, _ in points], y=[y for _, y, _ in points],
                                 mode="lines+markers+text", name="layer-scaled baseline",
                                 text=[f"{n}L" for *_, n in points],
                                 textposition="top center", line=dict(color=BASELINE, dash="dash")))
    stand_ins = data.baseline_points(field, stand_in=True)
    if stand_ins:
        fig.add_trace(go.Scatter(x=[x for x, _, _ in stand_ins], y=[y for _, y, _ in stand_ins], mode="lines+markers",
                                 name="its stand-ins in the space", text=[f"stand-in of {n}L" for *_, n in stand_ins],
                                 opacity=0.6, line=dict(color=BASELINE, dash="dot"),
                                 marker=dict(symbol="diamond-open"),
                                 hovertemplate="%{text}<br>%{x:,} params<br>%{y:.4g}"))
    limit = {data.objective_field(): data.budgets.get("max_latency_ms"),
             "peak_memory_mb": data.budgets.get("max_memory_mb")}.get(field)
    if limit is not None:
        fig.add_hline(y=limit, line=dict(color=BUDGET, dash="dot"), annotation_text=f"budget {limit:g}")
    fig.update_xaxes(type="log", title="decoder parameters")
    fig.update_yaxes(type="log", title=label)
    fig.update_layout(title=f"{label} vs decoder parameters", height=480)
    return fig


def front_3d(data: SearchData):
    import plotly.graph_objects as go

    field = data.objective_field()
    fig = go.Figure()
    for name, points, style in (("candidates", [p for p in data.candidates if p.feasible],
                                 dict(color=CANDIDATE, size=3, opacity=0.4)),
                                ("frontier", data.frontier_points(), dict(color=FRONT, size=6))):
        points = [p for p in points if p.figures.get(field) is not None and p.figures.get("peak_memory_mb") is not None]
        fig.add_trace(go.Scatter3d(x=[p.params for p in points], y=[p.figures[field] for p in points],
                                   z=[p.figures["peak_memory_mb"] for p in points], mode="markers", name=name,
                                   marker=style, text=[p.id for p in points]))
    fig.update_layout(title="the 3-D front: decoder parameters, latency, peak memory", height=560,
                      scene=dict(xaxis=dict(title="decoder params", type="log"),
                                 yaxis=dict(title=LATENCIES[field], type="log"),
                                 zaxis=dict(title="peak memory (MB)", type="log")))
    return fig


def history_figure(data: SearchData):
    import plotly.graph_objects as go

    history = data.summary.get("hypervolume") or []
    gens = [h["generation"] for h in history]
    fig = go.Figure([go.Scatter(x=gens, y=[h["hypervolume"] for h in history], name="hypervolume",
                                line=dict(color=FRONT)),
                     go.Scatter(x=gens, y=[h["front_size"] for h in history], name="front size", yaxis="y2",
                                line=dict(color=BASELINE, dash="dash"))])
    fig.update_layout(title="hypervolume and front size per generation", height=360,
                      xaxis=dict(title="generation"), yaxis=dict(title="hypervolume"),
                      yaxis2=dict(title="front size", overlaying="y", side="right"))
    return fig


def page(title: str, body: list[str]) -> str:
    from plotly.offline import get_plotlyjs

    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<meta name='color-scheme' content='light dark'><style>{CSS}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>{''.join(body)}<script>{THEME_SCRIPT}</script>"
            f"</body></html>")


def report_html(data: SearchData, link_prefix: str = "../", proxy_check: str | None = None) -> str:
    """The page; ``proxy_check``: the line of an ``ltsedge proxy-check`` of the space, shown under the frontier."""
    field = data.objective_field()
    body = [f"<h1>ltsedge search: {html.escape(data.name)}</h1>",
            f"<p class='muted'>{len(data.candidates)} candidates, {len(data.frontier)} on the frontier, objective "
            f"<b>{html.escape(data.objective)}</b>, device {html.escape(data.device)}</p>"]
    for i, f in enumerate([*data.latencies(), "peak_memory_mb"]):
        body.append(_figure_html(slice_figure(data, f), f"slice-{i}"))
    body.append(_figure_html(front_3d(data), "front-3d"))
    body.append(_figure_html(history_figure(data), "history"))
    body.append("<h2>Frontier</h2>" + _frontier_table(data, field, link_prefix))
    if proxy_check:
        body.append(f"<h2>Does the proxy hold on your text?</h2><p>{html.escape(proxy_check)}</p>")
    if data.baseline:
        body.append("<h2>Against the layer-scaled baseline</h2>" + _baseline_table(data))
    failed = [c for c in data.candidates if not c.ok and c.source != "skipped"]  # skipped: outside the budgets
    if failed:
        body.append(f"<h2>Failed candidates ({len(failed)})</h2>" + _failed_table(failed))
    agents = sorted({c.agent for c in data.candidates if c.agent})
    if agents:
        body.append("<h2>Who measured what</h2>" + _agents_table(data, agents))
    body.append("<h2>Machine and settings</h2>" + _settings(data))
    return page(f"ltsedge report: {data.name}", body)


FAILED_ROWS = 30  # the rest are in candidates.csv


def _failed_table(failed) -> str:
    rows = "".join(f"<tr><td>{html.escape(c.id)}</td><td>{c.generation}</td><td>{html.escape(c.error)}</td></tr>"
                   for c in failed[:FAILED_ROWS])
    more = f"<p class='muted'>and {len(failed) - FAILED_ROWS} more in candidates.csv</p>" if len(failed) > FAILED_ROWS else ""
    return f"<table><tr><th>model</th><th>generation</th><th>why</th></tr>{rows}</table>{more}"


def _agents_table(data: SearchData, agents: list[str]) -> str:
    """A fleet's search: how many candidates (and frontier models) each board measured."""
    front = {m["id"] for m in data.frontier}
    rows = "".join(f"<tr><td>{html.escape(a)}</td><td>{sum(c.agent == a for c in data.candidates)}</td>"
                   f"<td>{sum(c.agent == a and c.id in front for c in data.candidates)}</td></tr>" for a in agents)
    local = sum(not c.agent and c.source == "measured" for c in data.candidates)
    if local:
        rows += f"<tr><td>this machine</td><td>{local}</td><td>–</td></tr>"
    return f"<table><tr><th>agent</th><th>candidates measured</th><th>on the frontier</th></tr>{rows}</table>"


def compare_html(searches: list[SearchData], dominance: list[dict]) -> str:
    import plotly.graph_objects as go

    body = ["<h1>ltsedge: frontiers compared</h1>"]
    fields = [f for f in (*DRAWN, "peak_memory_mb")
              if all(f == "peak_memory_mb" or f in d.latencies() for d in searches)]
    for i, field in enumerate(fields):
        fig = go.Figure()
        for j, data in enumerate(searches):
            front = sorted((p for p in data.frontier_points() if p.figures.get(field) is not None), key=lambda p: p.params)
            fig.add_trace(go.Scatter(x=[p.params for p in front], y=[p.figures[field] for p in front],
                                     mode="lines+markers", name=data.name, line=dict(color=SERIES[j % len(SERIES)]),
                                     text=[p.id for p in front]))
        fig.update_xaxes(type="log", title="decoder parameters")
        fig.update_yaxes(type="log", title=LATENCIES.get(field, "peak memory (MB)"))
        body.append(_figure_html(fig, f"compare-{i}"))
    rows = "".join(f"<tr><td>{html.escape(r['search'])}</td><td>{r['models']}</td><td>{r['dominating']}</td>"
                   f"<td>{html.escape(', '.join(r['examples']))}</td></tr>" for r in dominance)
    fitted = any(r.get("quality") == "predicted_loss" for r in dominance)
    basis = ("the predicted held-out loss of the fitted proxy every search drew its front with" if fitted
             else "decoder parameters")
    body.append(f"<h2>Who dominates whom</h2><p>Quality ranked by {basis}; latency and peak memory as "
                "measured.</p><table><tr><th>search</th><th>frontier models</th>"
                f"<th>dominating a model of another search</th><th>for example</th></tr>{rows}</table>")
    return page("ltsedge: frontiers compared", body)


def _frontier_table(data: SearchData, field: str, prefix: str) -> str:
    by_agent = any((m.get("measurement") or {}).get("agent") for m in data.frontier)
    head = ("<table><tr><th>model</th><th>decoder params</th><th>" + html.escape(LATENCIES[field]) +
            "</th><th>peak MB</th><th>layers × d_model</th>" + ("<th>measured by</th>" if by_agent else "") + "</tr>")
    rows = []
    for m in data.frontier:
        agent = f"<td>{html.escape(str((m.get('measurement') or {}).get('agent') or ''))}</td>" if by_agent else ""
        target = m.get("bundle") or m.get("onnx") or ""
        link = f"<a href='{html.escape(prefix + target)}'>{html.escape(m['id'])}</a>" if target else html.escape(m["id"])
        arch = m.get("architecture") or {}
        value = m.get(field)
        rows.append(f"<tr><td>{link}</td><td>{m['decoder_params']:,}</td><td>{_num(value)}</td>"
                    f"<td>{_num(m.get('peak_memory_mb'))}</td>"
                    f"<td>{_text(arch.get('n_layer'))} × {_text(arch.get('d_model'))}</td>"
                    f"{agent}</tr>")
    return head + "".join(rows) + "</table>"


def _baseline_table(data: SearchData) -> str:
    """Each point's baseline model against the fastest frontier model with at least its decoder parameters;
    where any lies outside the space, its stand-in in the space against its own match too."""
    outside = any(r.get("stand_in") for r in data.baseline)
    columns = ["baseline layers", "decoder params", "latency", "frontier latency", "speedup", "memory ratio"]
    if outside:
        columns += ["stand-in in the space", "its decoder params", "its latency", "its frontier latency",
                    "its speedup", "its memory ratio"]
    rows = []
    for r in data.baseline:
        cells = [_text(r["n_layer"]), _count(r.get("decoder_params")), _num(r.get("latency_ms")),
                 _num(r.get("frontier_latency_ms")), _ratio(r.get("speedup")), _ratio(r.get("memory_ratio"))]
        if outside:
            same = "the same block" if r.get("stand_in_id") not in (None, "") else "–"
            cells += [_text(r.get("stand_in") or same), _count(r.get("stand_in_decoder_params")),
                      _num(r.get("stand_in_latency_ms")), _num(r.get("stand_in_frontier_latency_ms")),
                      _ratio(r.get("stand_in_speedup")), _ratio(r.get("stand_in_memory_ratio"))]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    note = ("<p class='muted'>A baseline model the space does not hold is measured as it is, and so is its "
            "nearest shape in the space (its stand-in; the column says what changed), both beside the front: each "
            "against the fastest frontier model with at least its own decoder parameters.</p>" if outside else "")
    return ("<table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>" + "".join(rows) + "</table>"
            + note)


def _settings(data: SearchData) -> str:
    fp = data.fingerprint
    items = {"machine": f"{fp.get('cpu_model')} ({fp.get('arch')}, {fp.get('logical_cores')} cores)",
             "board": fp.get("board"), "onnxruntime": fp.get("onnxruntime"), "device profile": data.device,
             "objective": data.objective, "quality objective": _quality(data.settings.get("proxy")),
             "space": json.dumps(data.settings.get("space")),
             "population × generations": f"{data.settings.get('population')} × {data.settings.get('generations')}",
             "budgets": json.dumps({k: v for k, v in data.budgets.items() if v is not None}) or "none",
             "wall time": f"{(data.summary.get('wall_seconds') or 0) / 60:.1f} min"}
    return "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items.items()
                            if v is not None) + "</dl>"


def _quality(proxy) -> str:
    """What NSGA-II ranked quality by: decoder parameters, or the proxy a proxy-check fitted."""
    if not isinstance(proxy, dict):
        return "decoder parameters"
    a, b, c = (proxy.get(k) for k in "abc")
    if not all(is_number(v) for v in (a, b, c)):
        return "a proxy fitted by ltsedge proxy-check"
    return f"held-out loss fitted by ltsedge proxy-check: {a:.3f} {b:+.4f} ln(decoder parameters) {c:+.4f} n_layer"


def _text(value) -> str:
    """Any value read from a file, as HTML text: escaped whatever its type."""
    return html.escape(str(value))


def _count(value) -> str:
    return "–" if value in (None, "") else f"{int(value):,}"


def _num(value) -> str:
    return "–" if value in (None, "") else f"{float(value):.4g}"


def _ratio(value) -> str:
    return "–" if value in (None, "") else f"{float(value):.2f}×"
