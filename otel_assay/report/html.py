"""The gate's HTML report: one self-contained file (inline CSS and SVG; no script, no font,
no network), readable offline and attachable to a CI run.

Plots: pass rates with their intervals per scenario and version; SPRT paths of the
candidate's trials; coverage radar; fingerprint PCA scatter of baseline and candidate;
Hotelling T² against its critical value.
"""

from __future__ import annotations

import html
import math
import unicodedata
from pathlib import Path

from .output import family_text, feature_shift

BASE, CAND = "#4C78A8", "#E45756"
VERDICT_COLOR = {"PASS": "#2e7d32", "FAIL": "#c62828", "INCONCLUSIVE": "#b26a00", "SKIPPED": "#777"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6}td.name,td.why,h3,li,.plot figcaption{overflow-wrap:anywhere}td.name{min-width:8em}td.num{text-align:right;font-variant-numeric:tabular-nums}
.v{font-weight:600}.muted{color:#666}.decision{font-size:20px;font-weight:700;padding:10px 14px;border-radius:6px;
display:inline-block;margin:8px 0}
.deploy{background:#e8f5e9;color:#1b5e20}.block{background:#ffebee;color:#b71c1c}.manual{background:#fff8e1;color:#8d5a00}
.plots{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.plot{border:1px solid #eee;border-radius:6px;padding:8px;margin:0}
.plot figcaption{font-size:12px;color:#555;max-width:520px}
svg text{font:11px system-ui,sans-serif;fill:#333}
code{background:#f4f4f4;padding:0 3px;border-radius:3px}
"""


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _fmt(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if math.isinf(x):
            return "∞"
        return f"{x:.{digits}g}"
    return str(x)


def _verdict(v: str, gating: bool = True) -> str:
    label = v if gating else f"({v})"
    return f'<span class="v" style="color:{VERDICT_COLOR.get(v, "#333")}">{_e(label)}</span>'


def _text_width(s: str) -> float:
    """Rough width in pixels of ``s`` in the plots' 11px sans-serif: wide (CJK, emoji)
    characters count double. SVG text does not wrap, so labels are fitted by this."""
    return sum(11.0 if unicodedata.east_asian_width(ch) in "WF" else 7.0 for ch in str(s))


def _fit(s, px: float) -> str:
    """``s`` escaped for SVG text, cut with an ellipsis to about ``px`` pixels; a cut label
    carries the whole name as its tooltip."""
    s = str(s)
    if _text_width(s) <= px:
        return _e(s)
    out, w = "", _text_width("…")
    for ch in s:
        w += _text_width(ch)
        if w > px:
            break
        out += ch
    return f"<title>{_e(s)}</title>{_e(out)}…"


def _svg(width: int, height: int, body: str, label: str, plot_id: str) -> str:
    return (f'<svg id="{_e(plot_id)}" class="plot-svg" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}">{body}</svg>')


def _figure(svg: str, caption: str) -> str:
    return f'<figure class="plot">{svg}<figcaption>{caption}</figcaption></figure>'


# ------------------------------------------------------------------ plots
def pass_rate_plot(result) -> str:
    rows = []
    for r in result.scenarios:
        for name, arm, color in (("baseline", r.baseline, BASE), ("candidate", r.candidate, CAND)):
            if arm is not None and arm.rate is not None:
                rows.append((r.scenario, name, arm, color))
    right, row_h, max_label = 30, 18, 300
    left = max(120, min(max_label, max((_text_width(f"{s} · {n}") for s, n, _, _ in rows), default=0) + 12))
    width, height = left + 370, 40 + row_h * max(len(rows), 1) + 20
    x = lambda v: left + v * (width - left - right)  # noqa: E731
    parts = []
    for t in range(0, 11, 2):
        v = t / 10
        parts.append(f'<line x1="{x(v):.1f}" y1="20" x2="{x(v):.1f}" y2="{height - 20}" stroke="#eee"/>'
                     f'<text x="{x(v):.1f}" y="{height - 6}" text-anchor="middle">{v:.1f}</text>')
    thresholds = {r.settings.threshold for r in result.scenarios}
    per_scenario = len(thresholds) > 1 and thresholds != {None}
    if len(thresholds) == 1 and None not in thresholds:
        th = next(iter(thresholds))  # one θ for every scenario: one line across the plot
        parts.append(f'<line x1="{x(th):.1f}" y1="20" x2="{x(th):.1f}" y2="{height - 20}" stroke="#888" '
                     f'stroke-dasharray="4 3"/><text x="{x(th):.1f}" y="14" text-anchor="middle">θ={th}</text>')
    elif per_scenario:
        # θ differs between scenarios: each scenario's own θ, on its own rows only
        for scenario in dict.fromkeys(s for s, _, _, _ in rows):
            th = next(r.settings.threshold for r in result.scenarios if r.scenario == scenario)
            ys = [30 + i * row_h for i, row in enumerate(rows) if row[0] == scenario]
            if th is not None:
                parts.append(f'<line x1="{x(th):.1f}" y1="{ys[0] - 8}" x2="{x(th):.1f}" y2="{ys[-1] + 8}" '
                             f'stroke="#888" stroke-dasharray="4 3"><title>{_e(scenario)}: θ={th}</title></line>')
    for i, (scenario, name, arm, color) in enumerate(rows):
        y = 30 + i * row_h
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">'
                     f'{_fit(scenario, left - 12 - _text_width(f" · {name}"))} · {name}</text>'
                     f'<line x1="{x(arm.ci_low):.1f}" y1="{y}" x2="{x(arm.ci_high):.1f}" y2="{y}" stroke="{color}" '
                     f'stroke-width="3"/><circle cx="{x(arm.rate):.1f}" cy="{y}" r="4.5" fill="{color}">'
                     f'<title>{_e(scenario)} {name}: {arm.passes}/{arm.with_outcome} = {arm.rate:.3f} '
                     f'[{arm.ci_low:.3f}, {arm.ci_high:.3f}]</title></circle>')
    if not rows:
        parts.append(f'<text x="{width / 2}" y="40" text-anchor="middle">no trial has an outcome</text>')
    conf = f"{1 - result.config.alpha:.0%}"
    return _figure(_svg(width, height, "".join(parts), "pass rates", "plot-pass-rates"),
                   f"Pass rate per scenario and version with its {conf} Wilson interval "
                   f"(<span style='color:{BASE}'>baseline</span>, <span style='color:{CAND}'>candidate</span>)."
                   + (" Dashed: each scenario's own threshold θ." if per_scenario else ""))


def sprt_plot(result) -> str:
    paths = result.plots.get("sprt", {})
    width, height, left, right, top, bottom = 520, 260, 44, 16, 16, 28
    if not paths:
        body = f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no sequential data (no outcomes)</text>'
        return _figure(_svg(width, 80, body.replace(str(height / 2), "40"), "SPRT paths", "plot-sprt"),
                       "SPRT paths: none.")
    # the legend goes under the plot, one line per scenario: over the plot it covers the
    # paths, and with many scenarios it ran past the bottom of the picture
    legend_top = height
    height += 14 * len(paths) + 4
    n_max = max(max(len(p["path"]), 1) for p in paths.values())
    lo = min(min([p["lower"]] + p["path"]) for p in paths.values())
    hi = max(max([p["upper"]] + p["path"]) for p in paths.values())
    pad = 0.1 * (hi - lo or 1)
    lo, hi = lo - pad, hi + pad
    x = lambda i: left + i / n_max * (width - left - right)  # noqa: E731
    y = lambda v: top + (hi - v) / (hi - lo) * (legend_top - top - bottom)  # noqa: E731
    mid = (top + legend_top - bottom) / 2
    parts = [f'<line x1="{left}" y1="{top}" x2="{left}" y2="{legend_top - bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" stroke="#ddd"/>',
             f'<text x="{width / 2}" y="{legend_top - 6}" text-anchor="middle">trials (candidate, in run order)</text>',
             f'<text x="12" y="{mid}" transform="rotate(-90 12 {mid})" text-anchor="middle">LLR</text>']
    palette = ["#E45756", "#4C78A8", "#54A24B", "#B279A2", "#F58518", "#72B7B2", "#9D755D", "#FF9DA6"]
    # past eight scenarios the colours come round again: the line style tells those apart
    # (24 distinct lines; the legend names each one)
    styles = ["", ' stroke-dasharray="7 3"', ' stroke-dasharray="2 2"']
    for i, (scenario, p) in enumerate(sorted(paths.items())):
        color = palette[i % len(palette)]
        style = styles[i // len(palette) % len(styles)]
        for bound, label in ((p["upper"], "FAIL"), (p["lower"], "PASS")):
            parts.append(f'<line x1="{left}" y1="{y(bound):.1f}" x2="{width - right}" y2="{y(bound):.1f}" '
                         f'stroke="{color}" stroke-dasharray="5 4" opacity="0.6"/>')
            if i == 0:
                parts.append(f'<text x="{width - right - 2}" y="{y(bound) - 3:.1f}" text-anchor="end">{label}</text>')
        pts = " ".join(f"{x(j + 1):.1f},{y(v):.1f}" for j, v in enumerate(p["path"]))
        outcome = f": {p['decision']} after {len(p['path'])} trials"
        parts.append(f'<polyline points="{x(0):.1f},{y(0):.1f} {pts}" fill="none" stroke="{color}"{style} stroke-width="1.8">'
                     f'<title>{_e(scenario)}: {p["decision"]} after {len(p["path"])} trials '
                     f'(θ={p["theta"]:.3f}{" = baseline rate" if p.get("theta_from_baseline") else ""})</title>'
                     f'</polyline><line x1="{left}" y1="{legend_top + 14 * i + 6}" x2="{left + 16}" '
                     f'y2="{legend_top + 14 * i + 6}" stroke="{color}"{style} stroke-width="2"/>'
                     f'<text x="{left + 22}" y="{legend_top + 14 * i + 10}" fill="{color}" style="fill:{color}">'
                     f'{_fit(scenario, width - right - left - 22 - _text_width(outcome))}{outcome}</text>')
    return _figure(_svg(width, height, "".join(parts), "SPRT paths", "plot-sprt"),
                   "Wald SPRT log-likelihood ratio of the candidate's trials (H0: p = θ vs H1: p = θ − δ; "
                   "θ is the threshold, or the baseline's pass rate when none is set). Crossing the upper "
                   "line favours a drop, the lower one no drop. Drawn for reading: the SPRT is not one of "
                   "the gate's checks, its decisions are not the verdicts above.")


def coverage_radar(result) -> str:
    cov = result.coverage
    size, r0 = 300, 105
    cx = cy = size / 2
    if not cov:
        return ""
    dims = cov["dimensions"]
    k = len(dims)
    angle = lambda i: -math.pi / 2 + 2 * math.pi * i / k  # noqa: E731
    parts = []
    for ring in (0.25, 0.5, 0.75, 1.0):
        pts = " ".join(f"{cx + r0 * ring * math.cos(angle(i)):.1f},{cy + r0 * ring * math.sin(angle(i)):.1f}"
                       for i in range(k))
        parts.append(f'<polygon points="{pts}" fill="none" stroke="#ddd"/>')
    for i, d in enumerate(dims):
        ax, ay = cx + r0 * math.cos(angle(i)), cy + r0 * math.sin(angle(i))
        lx, ly = cx + (r0 + 22) * math.cos(angle(i)), cy + (r0 + 22) * math.sin(angle(i))
        value = "n/a" if d["value"] is None else f"{d['value']:.2f}"
        parts.append(f'<line x1="{cx}" y1="{cy}" x2="{ax:.1f}" y2="{ay:.1f}" stroke="#ccc"/>'
                     f'<text x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="middle">{_e(d["name"])} {value}</text>')
    pts = []
    for i, d in enumerate(dims):
        v = d["value"] or 0.0
        pts.append(f"{cx + r0 * v * math.cos(angle(i)):.1f},{cy + r0 * v * math.sin(angle(i)):.1f}")
    parts.append(f'<polygon points="{" ".join(pts)}" fill="{CAND}" fill-opacity="0.25" stroke="{CAND}" '
                 f'stroke-width="2"/>')
    for i, d in enumerate(dims):
        if d["value"] is None:
            continue
        px, py = cx + r0 * d["value"] * math.cos(angle(i)), cy + r0 * d["value"] * math.sin(angle(i))
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{CAND}"/>')
    overall = "n/a" if cov["overall"] is None else f"{cov['overall']:.2f}"
    return _figure(_svg(size, size, "".join(parts), "coverage radar", "plot-coverage"),
                   f"Coverage of the candidate's trials by dimension (overall {overall}; "
                   "n/a dimensions are drawn at 0 and left out of the overall score).")


def pca_plot(scenario: str, data: dict, index: int) -> str:
    size, pad = 260, 24
    pts_b, pts_c = data["baseline"], data["candidate"]
    allp = pts_b + pts_c
    if not allp:
        return ""
    xs, ys = [p[0] for p in allp], [p[1] for p in allp]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    sx = (size - 2 * pad) / ((x1 - x0) or 1)
    sy = (size - 2 * pad) / ((y1 - y0) or 1)
    parts = [f'<rect x="{pad}" y="{pad}" width="{size - 2 * pad}" height="{size - 2 * pad}" fill="none" '
             f'stroke="#eee"/>']
    for pts, color in ((pts_b, BASE), (pts_c, CAND)):
        parts.append("".join(f'<circle cx="{pad + (a - x0) * sx:.1f}" cy="{size - pad - (b - y0) * sy:.1f}" r="2.6" '
                             f'fill="{color}" fill-opacity="0.55"/>' for a, b in pts))
    ex = data.get("explained", [0, 0])
    parts.append(f'<text x="{size / 2}" y="{size - 6}" text-anchor="middle">PC1 ({ex[0]:.0%})</text>'
                 f'<text x="10" y="{size / 2}" transform="rotate(-90 10 {size / 2})" text-anchor="middle">'
                 f'PC2 ({ex[1]:.0%})</text><text x="{pad}" y="16">{_fit(scenario, size - pad - 4)}</text>')
    return _figure(_svg(size, size, "".join(parts), f"fingerprint PCA {scenario}", f"plot-pca-{index}"),
                   f"{_e(scenario)}: fingerprints on their first two principal components "
                   f"(<span style='color:{BASE}'>baseline</span>, <span style='color:{CAND}'>candidate</span>).")


def t2_plot(result) -> str:
    data = result.plots.get("t2", {})
    if not data:
        return ""
    items = sorted(data.items())
    right, row_h = 60, 22
    left = max(100, min(300, max(_text_width(s) for s, _ in items) + 12))
    width, height = left + 390, 30 + row_h * len(items) + 24
    vals = [v for _, d in items for v in (d["t2"], d["critical"]) if v is not None and v > 0]
    hi = math.log10(max(vals) * 1.5) if vals else 1.0
    # down to a power of ten below the smallest value, so that its bar has a length
    lo = min(0.0, math.floor(math.log10(min(vals)) - 1e-9)) if vals else 0.0
    x = lambda v: left + (math.log10(max(v, 10 ** lo)) - lo) / ((hi - lo) or 1) * (width - left - right)  # noqa: E731
    parts = []
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        if lo <= e <= hi:
            parts.append(f'<line x1="{x(10 ** e):.1f}" y1="20" x2="{x(10 ** e):.1f}" y2="{height - 22}" stroke="#eee"/>'
                         f'<text x="{x(10 ** e):.1f}" y="{height - 8}" text-anchor="middle">{10 ** e:g}</text>')
    for i, (scenario, d) in enumerate(items):
        y = 28 + i * row_h
        t2 = d["t2"]
        color = VERDICT_COLOR.get(d["verdict"], "#555")
        bar = x(t2) if t2 is not None else width - right
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{_fit(scenario, left - 12)}</text>'
                     f'<rect x="{left}" y="{y - 6}" width="{max(bar - left, 1):.1f}" height="12" fill="{color}" '
                     f'fill-opacity="0.7"><title>T²={_fmt(t2)} critical={_fmt(d["critical"])}</title></rect>'
                     f'<text x="{bar + 4:.1f}" y="{y + 4}">{_fmt(t2, 3) if t2 is not None else "∞"}</text>')
        if d["critical"]:
            xc = x(d["critical"])
            parts.append(f'<line x1="{xc:.1f}" y1="{y - 9}" x2="{xc:.1f}" y2="{y + 9}" stroke="#111" '
                         f'stroke-width="2"/>')
    return _figure(_svg(width, height, "".join(parts), "Hotelling T2", "plot-t2"),
                   "Hotelling T² per scenario on its first 50 pairs of trials (bar, log scale; its colour is "
                   "the fingerprint verdict) against its critical value (black tick, from the F reference) at "
                   "half the level the multiple-testing correction holds the suite's strictest FAIL test to "
                   "(α over the family of every gating check of every scenario, for Holm; the other half is "
                   "the anytime shift test's, over every pair): once 50 pairs exist, a bar past the tick "
                   "FAILs unless the shift is only for the better. The verdict uses the corrected p-value of "
                   "both tests (on few trials a permutation p-value), so a bar short of the tick can still "
                   "FAIL.")


# ------------------------------------------------------------------ tables
def _scenario_table(result) -> str:
    head = ("<tr><th>scenario</th><th>baseline</th><th>candidate</th><th>checks</th><th>verdict</th></tr>")
    rows = []
    for r in result.scenarios:
        def arm(a):
            if a is None:
                return "—"
            if a.rate is None:
                return f"{a.trials} trials, no outcomes"
            return (f"{a.passes}/{a.with_outcome} = <b>{a.rate:.3f}</b><br>"
                    f"<span class='muted'>[{a.ci_low:.3f}, {a.ci_high:.3f}], {a.trials} trials</span>")
        checks = "<br>".join(f"{_e(c.name)}: {_verdict(c.verdict, c.gating)}" for c in r.checks)
        verdict = _verdict(r.verdict)
        if r.verdict == "SKIPPED":
            verdict += "<br><span class='muted'>no check gates it: not part of the decision</span>"
        rows.append(f"<tr><td class='name'>{_e(r.scenario)}</td><td>{arm(r.baseline)}</td><td>{arm(r.candidate)}</td>"
                    f"<td>{checks}</td><td>{verdict}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _checks_table(r) -> str:
    rows = []
    for c in r.checks:
        stats = ", ".join(f"{_e(k)}={_e(_fmt(v))}" for k, v in c.stats.items()
                          if not isinstance(v, (list, dict)))
        extra = ""
        if c.name == "fingerprint" and c.stats.get("top_features"):
            extra = "<br>moved most: " + ", ".join(
                f"{_e(f['name'])} ({_e(feature_shift(f, ' SD'))})"
                for f in c.stats["top_features"])
        rows.append(f"<tr><td>{_e(c.name)}</td><td>{_verdict(c.verdict, c.gating)}</td><td class='why'>{_e(c.reason)}{extra}"
                    f"<br><span class='muted'>{stats}</span></td></tr>")
    return f"<table><tr><th>check</th><th>verdict</th><th>why</th></tr>{''.join(rows)}</table>"


def html_report(result) -> str:
    cfg = result.config
    c, b = result.candidate, result.baseline
    # which instrumentation recorded each arm, when they differ (a note says what that means)
    differ = b is not None and b.get("conventions") != c.get("conventions")

    def by(arm):
        return f", recorded by {_e(', '.join(arm['conventions']) or 'none')}" if differ else ""

    sel = f"candidate <code>{_e(c['selection'])}</code> ({c['trials']} trials, {_e(c['lake'])}{by(c)})"
    if b:
        sel += f" vs baseline <code>{_e(b['selection'])}</code> ({b['trials']} trials, {_e(b['lake'])}{by(b)})"
    reasons = "".join(f"<li>{_e(x)}</li>" for x in result.reasons)
    notes = "".join(f"<li>{_e(x)}</li>" for x in result.notes)
    pcas = "".join(pca_plot(s, d, i) for i, (s, d) in enumerate(sorted(result.plots.get("pca", {}).items())))
    cov_rows = ""
    if result.coverage:
        cov_rows = "<table><tr><th>dimension</th><th>value</th><th>observed</th><th>denominator</th><th>note</th></tr>" + "".join(
            f"<tr><td>{_e(d['name'])}</td><td class='num'>{_fmt(d['value'])}</td><td class='num'>{d['observed']}</td>"
            f"<td class='num'>{_fmt(d['denominator'])}</td><td>{_e(d.get('note', ''))}</td></tr>"
            for d in result.coverage["dimensions"]) + "</table>" + f"<p>{_e(result.coverage['reason'])}</p>"
    details = "".join(f"<h3>{_e(r.scenario)}</h3>{_checks_table(r)}" for r in result.scenarios)
    threshold = "off" if cfg.threshold is None else cfg.threshold
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>otel-assay {result.mode}: {result.decision}</title><style>{CSS}</style></head>
<body>
<h1>otel-assay {result.mode}</h1>
<p>{sel}</p>
<p class="muted">α={cfg.alpha} β={cfg.beta} δ={cfg.delta} θ={threshold} {_e(family_text(result))} config={_e(cfg.source)}</p>
<div id="decision" class="decision {result.decision}">{result.decision.upper()} (exit {result.exit_code})</div>
<ul>{reasons}</ul>
<h2>Scenarios</h2>
{_scenario_table(result)}
<h2>Plots</h2>
<div class="plots">{pass_rate_plot(result)}{sprt_plot(result)}{t2_plot(result)}{coverage_radar(result)}</div>
{'<h2>Fingerprints</h2><div class="plots">' + pcas + '</div>' if pcas else ''}
<h2>Checks</h2>
{details}
{'<h2>Coverage</h2>' + cov_rows if cov_rows else ''}
{'<h2>Notes</h2><ul>' + notes + '</ul>' if notes else ''}
</body></html>
"""


def write_html(result, path: str | Path) -> None:
    Path(path).write_text(html_report(result), encoding="utf-8")
