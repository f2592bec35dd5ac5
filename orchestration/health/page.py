"""The Model health page: the view (:mod:`orchestration.health.view`) as one HTML document with
inline SVG charts and CSS: no script and nothing fetched from elsewhere (the API server may be
offline), so it renders the same in the Airflow UI's iframe, in a browser and in a headless one.

Per model: the champion and its challengers; every version's daily realized metric with its 95%
interval and its holdout value; the estimate for days whose outcomes are not in; the decay
verdicts; the drift PSI per feature and day as a heat map; the retrainings with what started them,
linked to their Airflow runs and MLflow runs.
"""

from __future__ import annotations

import datetime as dt
import math
from html import escape
from typing import Any
from urllib.parse import urlencode

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
DECAYED, RETRAINED, MUTED = "#d62728", "#555555", "#999999"
WIDTH, LEFT, RIGHT = 1000, 150, 20
CHART_HEIGHT, TOP, BOTTOM = 300, 24, 40
ROW = 14  # height of a heat map row
PERIODS = (("30 days", 30), ("90 days", 90), ("a year", 365), ("all", None))

STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 28px 0 6px; border-top: 1px solid #ddd;
padding-top: 12px; } h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 4px 0; } td, th { padding: 3px 8px; border-bottom: 1px solid #eee;
text-align: left; vertical-align: top; } th { background: #f6f6f6; font-weight: 600; }
.muted { color: #777; } .bad { color: #d62728; font-weight: 600; } .good { color: #2ca02c; font-weight: 600; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; background: #eef; margin-right: 4px; }
.champion { background: #dff0d8; } .challenger { background: #fcf8e3; }
.note { color: #555; font-size: 13px; max-width: 1000px; } svg text { font-size: 11px; fill: #333; }
form { margin: 8px 0; } .problems { color: #8a6d3b; background: #fcf8e3; padding: 6px 10px; }
"""


def render(view: dict[str, Any], *, model: str | None = None, days: int | None = None) -> str:
    """The whole page for ``view``; ``model`` and ``days`` are the request's filters (for the form)."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Model health</title>"
             f"<style>{STYLE}</style></head><body>", _header(view, model, days)]
    if view["problems"]:
        items = "".join(f"<li>{escape(p)}</li>" for p in view["problems"][:20])
        parts.append(f"<div class='problems'>Files skipped:<ul>{items}</ul></div>")
    if not view["models"]:
        score = f"{escape(view.get('pipeline') or '<pipeline>')}_score"
        parts.append(f"<p>No monitored days yet. The monitor job writes a day's record once {score} "
                     f"has scored it and its outcomes are in the lake; trigger {score} for a day with "
                     "features (or wait for the next ingest) and look again.</p>")
    for found in view["models"]:
        parts.append(_model(found, view["metric"], view["window_days"]))
    parts.append("</body></html>")
    return "".join(parts)


def _header(view: dict[str, Any], model: str | None, days: int | None) -> str:
    span = view["range"]
    where = (f"{span['monitored_days']} monitored day(s), {span['first']} to {span['last']}" if span["first"]
             else "no monitored days")
    options = "".join(f"<option value='{'' if n is None else n}'{' selected' if n == days else ''}>{label}</option>"
                      for label, n in PERIODS)
    names = sorted({m["model_name"] for m in view["models"]} | ({model} if model else set()))
    models = "<option value=''>every model</option>" + "".join(
        f"<option{' selected' if name == model else ''}>{escape(name)}</option>" for name in names)
    pipeline = view.get("pipeline")
    pipelines = "".join(f"<option{' selected' if name == pipeline else ''}>{escape(name)}</option>"
                        for name in view.get("pipelines") or [])
    picker = f"Pipeline <select name='pipeline'>{pipelines}</select> " if pipelines else ""
    query = urlencode({k: v for k, v in {"pipeline": pipeline, "model": model, "days": days}.items() if v})
    return (f"<h1>Model health</h1><div class='muted'>{where}; headline metric {escape(view['metric'])}; "
            f"read in {view['read_ms']} ms. <a href='api/health{'?' + query if query else ''}'>JSON</a></div>"
            f"<form method='get'>{picker}Model <select name='model'>{models}</select> Days <select name='days'>"
            f"{options}</select> <button type='submit'>Show</button></form>")


def _fmt(value: Any, digits: int = 3) -> str:
    return "&ndash;" if not isinstance(value, int | float) or not math.isfinite(value) else f"{value:.{digits}f}"


def _colours(found: dict[str, Any]) -> dict[str, str]:
    """A colour per version that stays the same whichever version is champion."""
    numbers = sorted((v["model_version"] for v in found["versions"]), key=lambda v: (not v.isdigit(), v.zfill(9)))
    return {version: PALETTE[i % len(PALETTE)] for i, version in enumerate(numbers)}


def _model(found: dict[str, Any], metric: str, window: int) -> str:
    colours = _colours(found)
    decay = found["decay"]
    latest = decay[-1] if decay else None
    if latest is None:
        verdict = "<span class='muted'>no decay verdict yet</span>"
    elif latest["decayed"]:
        verdict = f"<span class='bad'>decayed on {escape(latest['day'])}</span>"
    else:
        verdict = f"<span class='good'>not decayed</span> <span class='muted'>({escape(str(latest['status']))})</span>"
    challengers = ", ".join(f"v{escape(c)}" for c in found["challengers"]) or "none"
    champion = f"v{escape(found['champion'])}" if found["champion"] else "none"
    return "".join([
        f"<h2>{escape(found['model_name'])}</h2>",
        f"<div><span class='pill champion'>champion {champion}</span><span class='pill challenger'>challengers "
        f"{challengers}</span> latest monitored day {escape(str(found['latest_day']))}; decay: {verdict}</div>",
        _versions(found, metric, window, colours),
        f"<h3>Realized {escape(metric)} per day, 95% interval, holdout (dashed)</h3>",
        metric_chart(found, metric, colours),
        "<div class='note'>Solid line and band: a version's realized value and 95% interval on the day's "
        "outcomes; dashed: its holdout value; hollow circles: the estimate for days whose outcomes are not "
        "in yet; red triangles: decayed days; grey verticals: retrainings; &times;: a day without outcomes.</div>",
        _estimates(found),
        "<h3>Drift: PSI per feature and day</h3>",
        drift_heatmap(found["drift"]),
        _decay_table(decay),
        _miscalibrated(found.get("miscalibrated") or []),
        _retrainings(found["retrainings"]),
    ])


def _versions(found: dict[str, Any], metric: str, window: int, colours: dict[str, str]) -> str:
    rows = []
    for version in found["versions"]:
        role = "champion" if version["is_champion"] else "challenger" if version["is_challenger"] else "retired"
        realized = version["realized"]
        holdout = version["holdout"].get(metric)
        gap = ""
        if realized and isinstance(holdout, int | float):
            gap = f" ({realized['value'] - holdout:+.3f} vs holdout)"
        interval = "<span class='muted'>no outcomes yet</span>"
        if realized:
            interval = f"{_fmt(realized['value'])} [{_fmt(realized['low'])}, {_fmt(realized['high'])}]{gap}"
        link = (f"<a href='{escape(version['mlflow_url'])}' target='_blank' rel='noopener'>monitoring run</a>"
                if version["mlflow_url"] else escape(str(version.get("mlflow_run_id") or "")))
        roles = ", ".join(f"{k} {v} d" for k, v in sorted(version["roles"].items()))
        live = _live(version.get("comparison"))
        level = _level(version.get("level"))
        colour = colours[version["model_version"]]
        rows.append(f"<tr class='{role if role != 'retired' else ''}'><td><span style='color:{colour}'>"
                    f"&#9632;</span> v{escape(version['model_version'])}</td><td>{role}</td><td>{escape(roles)}</td>"
                    f"<td>{escape(str(version['first_day']))} .. {escape(str(version['last_day']))}</td>"
                    f"<td>{_fmt(holdout)}</td><td>{interval}</td><td>{level}</td><td>{live}</td><td>{link}</td></tr>")
    return (f"<table><tr><th>version</th><th>now</th><th>days scored as</th><th>days</th><th>holdout {escape(metric)}"
            f"</th><th>realized, last {window} days with outcomes</th><th>served level vs realized rate, latest day"
            f"</th><th>live vs champion</th><th>MLflow</th></tr>{''.join(rows)}</table>")


def _level(level: dict[str, Any] | None) -> str:
    """A day's served level against its realized rate (and the shift's part), red when flagged."""
    if not level:
        return "<span class='muted'>no outcomes yet</span>"
    shift = f"; shift {level['shift_part']:+.3f}" if level.get("shift_part") else ""
    text = (f"{_fmt(level['predicted_rate'])} vs {_fmt(level['realized_rate'])} "
            f"[{_fmt(level['low'])}, {_fmt(level['high'])}]{shift}")
    return f"<span class='bad'>{text}: miscalibrated</span>" if level.get("flagged") else text


def _miscalibrated(days: list[dict[str, Any]]) -> str:
    """The days whose served level was far from the truth (the monitor's level check), newest first."""
    if not days:
        return ""
    rows = "".join(
        f"<tr><td>{escape(d['day'])}</td><td>v{escape(str(d['model_version']))} ({escape(str(d['role']))})</td>"
        f"<td>{_fmt(d['predicted_rate'])}</td><td>{_fmt(d['realized_rate'])} [{_fmt(d['low'])}, {_fmt(d['high'])}]"
        f"</td><td>{_fmt(d.get('model_rate'))}</td><td>{_fmt(d.get('shift_part'))}</td></tr>"
        for d in sorted(days, key=lambda d: d["day"], reverse=True)[:20])
    return ("<h3>Served level far from the truth</h3><table><tr><th>day</th><th>version</th><th>served mean</th>"
            "<th>realized rate [95%]</th><th>the model's own mean</th><th>the shift's part</th></tr>"
            f"{rows}</table>")


def _live(comparison: dict[str, Any] | None) -> str:
    """A challenger's latest live comparison with the champion, pooled over its compared days:
    the difference (challenger minus champion) with its interval, and whether it beats it."""
    pooled = (comparison or {}).get("pooled") or {}
    difference = pooled.get("difference")
    if not comparison or not difference:
        return "<span class='muted'>&ndash;</span>"
    verdict = ("<span class='good'>beats it</span>" if pooled.get("beats") else
               "<span class='muted'>not (yet) better</span>")
    champion = escape(str(comparison.get("champion_version")))
    return (f"{escape(str(comparison.get('metric', '')))} {difference['value']:+.3f} [{difference['low']:+.3f}, "
            f"{difference['high']:+.3f}] over {pooled.get('days')} d vs v{champion}: {verdict}")


class _Scale:
    """Days to x and values to y of a chart's plot area."""

    def __init__(self, first: dt.date, last: dt.date, low: float, high: float, height: int) -> None:
        self.first, self.span = first, max((last - first).days, 1)
        self.low, self.high, self.height = low, high, height

    def x(self, day: str) -> float:
        return LEFT + (dt.date.fromisoformat(day) - self.first).days / self.span * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        share = (value - self.low) / (self.high - self.low) if self.high > self.low else 0.5
        return TOP + (1 - share) * (self.height - TOP - BOTTOM)


def _runs(days: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive days (no gap) in runs: a line is not drawn across a missing day."""
    runs: list[list[dict[str, Any]]] = []
    previous = None
    for day in days:
        current = dt.date.fromisoformat(day["day"])
        if previous is None or (current - previous).days > 1:
            runs.append([])
        runs[-1].append(day)
        previous = current
    return runs


def _value(day: dict[str, Any], metric: str) -> dict[str, float] | None:
    found = day["metrics"].get(metric) if day["status"] == "ok" else None
    if not found or not all(isinstance(found.get(k), int | float) for k in ("value", "low", "high")):
        return None
    return found


def _estimate(day: dict[str, Any], metric: str) -> float | None:
    value = (day.get("estimate") or {}).get(metric)
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def _axes(scale: _Scale, first: dt.date, last: dt.date) -> list[str]:
    out = []
    for i in range(6):
        value = scale.low + (scale.high - scale.low) * i / 5
        y = scale.y(value)
        out.append(f"<line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y:.1f}' y2='{y:.1f}' stroke='#eee'/>"
                   f"<text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end'>{value:.3f}</text>")
    out.append(_day_ticks(scale, first, last, scale.height - BOTTOM))
    return out


def _day_ticks(scale: _Scale, first: dt.date, last: dt.date, y: float) -> str:
    span = max((last - first).days, 1)
    step = max(1, math.ceil(span / 8))
    ticks = []
    for offset in range(0, span + 1, step):
        day = (first + dt.timedelta(days=offset)).isoformat()
        x = scale.x(day)
        ticks.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y:.1f}' y2='{y + 4:.1f}' stroke='#999'/>"
                     f"<text x='{x:.1f}' y='{y + 16:.1f}' text-anchor='middle'>{day}</text>")
    return "".join(ticks)


def metric_chart(found: dict[str, Any], metric: str, colours: dict[str, str]) -> str:
    """The realized ``metric`` of every version per day (line), its 95% interval (band), its holdout
    value (dashed), the estimate on days without outcomes (hollow circles), decayed days, retrainings
    and days without outcomes, as one SVG."""
    days = [d["day"] for d in found["timeline"]]
    if not days:
        return "<p class='muted'>No monitored days.</p>"
    values = [v for version in found["versions"] for day in version["days"]
              for v in ((_value(day, metric) or {}).get("low"), (_value(day, metric) or {}).get("high"),
                        _estimate(day, metric) if day["status"] == "awaiting_outcomes" else None,
                        version["holdout"].get(metric)) if isinstance(v, int | float)]
    if not values:
        return f"<p class='muted'>No {escape(metric)} values on these days yet.</p>"
    low, high = min(values), max(values)
    pad = max((high - low) * 0.08, 0.005)
    first, last = dt.date.fromisoformat(days[0]), dt.date.fromisoformat(days[-1])
    scale = _Scale(first, last, low - pad, high + pad, CHART_HEIGHT)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{CHART_HEIGHT}' "
           f"viewBox='0 0 {WIDTH} {CHART_HEIGHT}' role='img' aria-label='realized {escape(metric)}'>",
           *_axes(scale, first, last)]
    bottom = CHART_HEIGHT - BOTTOM
    for event in found["retrainings"]:
        if days[0] <= event["day"] <= days[-1]:
            x = scale.x(event["day"])
            out.append(f"<g><title>{escape(event['day'])}: retrained v{escape(event['model_version'])} "
                       f"({escape(event['trigger'])}): {escape(event['started_by'])}</title>"
                       f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{TOP}' y2='{bottom}' stroke='{RETRAINED}' "
                       f"stroke-dasharray='2,3'/><text x='{x + 3:.1f}' y='{TOP - 6}'>v{escape(event['model_version'])}"
                       f" ({escape(event['trigger'])})</text></g>")
    for version in found["versions"]:
        colour, name = colours[version["model_version"]], version["model_version"]
        width = 2.2 if version["is_champion"] else 1.3
        holdout = version["holdout"].get(metric)
        if isinstance(holdout, int | float) and version["first_day"]:
            y = scale.y(holdout)
            out.append(f"<line x1='{scale.x(version['first_day']):.1f}' x2='{scale.x(version['last_day']):.1f}' "
                       f"y1='{y:.1f}' y2='{y:.1f}' stroke='{colour}' stroke-dasharray='6,4'><title>v{escape(name)} "
                       f"holdout {metric} {holdout:.3f}</title></line>")
        for run in _runs([d for d in version["days"] if _value(d, metric)]):
            points = [(scale.x(d["day"]), _value(d, metric)) for d in run]
            upper = " ".join(f"{x:.1f},{scale.y(v['high']):.1f}" for x, v in points)
            lower = " ".join(f"{x:.1f},{scale.y(v['low']):.1f}" for x, v in reversed(points))
            line = " ".join(f"{x:.1f},{scale.y(v['value']):.1f}" for x, v in points)
            out.append(f"<polygon points='{upper} {lower}' fill='{colour}' fill-opacity='0.15' stroke='none'/>"
                       f"<polyline points='{line}' fill='none' stroke='{colour}' stroke-width='{width}'/>")
            out.extend(f"<circle cx='{x:.1f}' cy='{scale.y(v['value']):.1f}' r='2' fill='{colour}'><title>"
                       f"{d['day']} v{escape(name)} ({d['role']}): {metric} {v['value']:.3f} [{v['low']:.3f}, "
                       f"{v['high']:.3f}], {d['rows_with_outcome']} rows with outcomes</title></circle>"
                       for (x, v), d in zip(points, run, strict=True))
        for day in version["days"]:
            estimate = _estimate(day, metric)
            if day["status"] == "awaiting_outcomes" and estimate is not None:
                out.append(f"<circle cx='{scale.x(day['day']):.1f}' cy='{scale.y(estimate):.1f}' r='4' fill='white' "
                           f"stroke='{colour}' stroke-width='1.5'><title>{day['day']} v{escape(name)}: estimated "
                           f"{metric} {estimate:.3f} (outcomes not in yet)</title></circle>")
            if day["status"] == "no_outcomes" and version["is_champion"] or (
                    day["status"] == "no_outcomes" and day["role"] == "champion"):
                x = scale.x(day["day"])
                out.append(f"<text x='{x:.1f}' y='{bottom - 4}' text-anchor='middle' fill='{MUTED}'>&#215;<title>"
                           f"{day['day']}: no outcomes (no scored row has one)</title></text>")
    for verdict in found["decay"]:
        if verdict["decayed"] and days[0] <= verdict["day"] <= days[-1]:
            x = scale.x(verdict["day"])
            why = "; ".join(verdict["reasons"] or [])
            started = " (retraining started)" if verdict["triggered"] else ""
            out.append(f"<path d='M{x - 5:.1f},{bottom + 1} L{x + 5:.1f},{bottom + 1} L{x:.1f},{bottom - 8} Z' "
                       f"fill='{DECAYED}'><title>{escape(verdict['day'])}: v{escape(str(verdict['model_version']))} "
                       f"decayed{started}: {escape(why)}</title></path>")
    out.append("</svg>")
    return "".join(out)


def psi_colour(value: float | None, threshold: float) -> str:
    """White at 0, orange towards the threshold, red above it, dark red at twice it and more."""
    if value is None or not math.isfinite(value):
        return "#ffffff"
    stops = ((0.0, (247, 247, 247)), (threshold / 2, (253, 212, 158)), (threshold, (239, 101, 72)),
             (threshold * 2.5, (127, 0, 0)))
    for (a, ca), (b, cb) in zip(stops, stops[1:], strict=False):
        if value <= b:
            share = (value - a) / (b - a) if b > a else 1.0
            return "#" + "".join(f"{round(x + (y - x) * max(share, 0.0)):02x}" for x, y in zip(ca, cb, strict=True))
    return "#7f0000"


def drift_heatmap(drift: dict[str, Any]) -> str:
    """PSI per feature (rows) and day (columns), the day's drift verdict above them, as one SVG.
    The monitored features come first in colour; the ones the drift check does not monitor
    (``score.drift.ignore``: a day has one day of the week, so their PSI is high by construction)
    below them, apart, in a block labelled "not monitored" and in shades of grey, so that their
    high PSI does not hide the monitored features' real drift."""
    days, features = drift["days"], drift["features"]
    if not days:
        return "<p class='muted'>No drift reports on these days.</p>"
    threshold = drift["threshold"] or 0.2
    watched = [f for f in features if drift["monitored"].get(f, True)]
    ignored = [f for f in features if not drift["monitored"].get(f, True)]
    apart = 2 if ignored else 0  # a blank row and the block's heading above the features not monitored
    first, last = dt.date.fromisoformat(days[0]["day"]), dt.date.fromisoformat(days[-1]["day"])
    height = TOP + ROW * (len(features) + 2 + apart) + BOTTOM
    scale = _Scale(first, last + dt.timedelta(days=1), 0, 1, height)  # a day is a cell from x(day) to x(day + 1)
    cell = (WIDTH - LEFT - RIGHT) / scale.span
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
           f"viewBox='0 0 {WIDTH} {height}' role='img' aria-label='drift heat map'>"]
    row_y = {feature: TOP + ROW * (i + 2) for i, feature in enumerate(watched)}
    below = TOP + ROW * (len(watched) + 2 + apart)
    row_y |= {feature: below + ROW * i for i, feature in enumerate(ignored)}
    out.append(f"<text x='{LEFT - 6}' y='{TOP + ROW - 3}' text-anchor='end'>day drifted</text>")
    for feature in watched:
        out.append(f"<text x='{LEFT - 6}' y='{row_y[feature] + ROW - 3}' text-anchor='end'>{escape(feature)}</text>")
    width = f"{cell + 0.3:.2f}"  # a hair wider: no seams between cells
    cells: dict[bool, list[str]] = {True: [], False: []}
    for day in days:
        x = f"{scale.x(day['day']):.1f}"
        status = day["status"] or ""
        fill = DECAYED if day["drifted"] else "#dddddd" if status == "too_few_rows" else "#e8f5e9"
        reasons = "; ".join(day["reasons"])
        out.append(f"<rect x='{x}' y='{TOP + ROW - ROW}' width='{width}' height='{ROW - 2}' fill='{fill}'><title>"
                   f"{day['day']}: {escape(status)}{': ' + escape(reasons) if reasons else ''}</title></rect>")
        for feature, value in day["psi"].items():
            if feature in row_y:
                watching = feature not in ignored
                colour = psi_colour(value, threshold) if watching else psi_grey(value, threshold)
                cells[watching].append(
                    f"<rect x='{x}' y='{row_y[feature]}' width='{width}' height='{ROW}' fill='{colour}'><title>"
                    f"{escape(feature)} {day['day']}: PSI {_fmt(value)}{'' if watching else ' (not monitored)'}"
                    "</title></rect>")
    out.append(f"<g class='monitored'>{''.join(cells[True])}</g>")
    if ignored:
        line_y = below - ROW - ROW / 2
        out.append(f"<g class='not-monitored'><line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{line_y:.1f}' "
                   f"y2='{line_y:.1f}' stroke='#ccc'/><text x='{LEFT}' y='{below - 4}' fill='{MUTED}'>not monitored "
                   f"(score.drift.ignore): PSI reported, never alerted on</text>")
        for feature in ignored:
            out.append(f"<text x='{LEFT - 6}' y='{row_y[feature] + ROW - 3}' text-anchor='end' "
                       f"fill='{MUTED}'>{escape(feature)}</text>")
        out.append(f"{''.join(cells[False])}</g>")
    out.append(_day_ticks(scale, first, last, height - BOTTOM + 4))
    legend_x = LEFT
    for value in (0.0, threshold / 2, threshold, threshold * 2.5):
        out.append(f"<rect x='{legend_x}' y='{height - 12}' width='12' height='10' "
                   f"fill='{psi_colour(value, threshold)}' stroke='#ccc'/>"
                   f"<text x='{legend_x + 16}' y='{height - 3}'>{value:.2f}</text>")
        legend_x += 70
    grey = "; grey: not monitored" if ignored else ""
    out.append(f"<text x='{legend_x}' y='{height - 3}'>PSI (threshold {threshold}){grey}</text></svg>")
    return "".join(out)


def psi_grey(value: float | None, threshold: float) -> str:
    """The PSI of a feature not monitored, in greys only: near white at 0, mid grey from 2.5 times
    the threshold on (what :func:`psi_colour` draws dark red), never a colour that reads as an alert."""
    if value is None or not math.isfinite(value):
        return "#ffffff"
    share = min(max(value / (threshold * 2.5), 0.0), 1.0)
    level = round(247 + (160 - 247) * share)
    return f"#{level:02x}{level:02x}{level:02x}"


def _estimates(found: dict[str, Any]) -> str:
    from jobs.monitoring.quality import ESTIMATED

    champion = next((v for v in found["versions"] if v["is_champion"]), None)
    if champion is None:
        return ""
    waiting = [d for d in champion["days"] if d["status"] == "awaiting_outcomes"]
    errors = [abs(e) for d in champion["days"] if d["status"] == "ok"
              for e in [((d.get("estimate") or {}).get("error") or {}).get("roc_auc")] if isinstance(e, int | float)]
    rows = "".join(f"<tr><td>{escape(d['day'])}</td><td>{d['rows']}</td>" + "".join(
        f"<td>{_fmt(_estimate(d, m))}</td>" for m in ESTIMATED) + "</tr>" for d in waiting[-14:])
    accuracy = (f"<div class='note'>On the champion's {len(errors)} day(s) with outcomes the ROC AUC estimate "
                f"was off by {sum(errors) / len(errors):.3f} on average (at most {max(errors):.3f}).</div>"
                if errors else "")
    if not waiting:
        return ("<h3>Estimate before the outcomes arrive</h3><p class='muted'>Every day's outcomes are in.</p>"
                f"{accuracy}")
    head = "".join(f"<th>estimated {m}</th>" for m in ESTIMATED)
    return (f"<h3>Estimate before the outcomes arrive (champion v{escape(champion['model_version'])})</h3>"
            f"<table><tr><th>day</th><th>rows</th>{head}</tr>{rows}</table>{accuracy}")


def _decay_table(decay: list[dict[str, Any]]) -> str:
    shown = [d for d in decay if d["decayed"]][-20:]
    if decay and decay[-1] not in shown:
        shown.append(decay[-1])
    if not shown:
        return "<h3>Decay verdicts</h3><p class='muted'>No decay verdicts on these days.</p>"
    rows = []
    for verdict in shown:
        state = ("<span class='bad'>decayed, retraining started</span>" if verdict["triggered"] else
                 "<span class='bad'>decayed</span>" if verdict["decayed"] else "<span class='good'>not decayed</span>")
        why = "<br>".join(escape(r) for r in verdict["reasons"] or []) or escape(str(verdict["status"] or ""))
        rows.append(f"<tr><td>{escape(verdict['day'])}</td><td>v{escape(str(verdict['model_version']))}</td>"
                    f"<td>{state}</td><td>{why}</td></tr>")
    return ("<h3>Decay verdicts (decayed days, and the latest)</h3><table><tr><th>day</th><th>champion</th>"
            f"<th>verdict</th><th>why</th></tr>{''.join(rows)}</table>")


def _retrainings(events: list[dict[str, Any]]) -> str:
    if not events:
        return "<h3>Retrainings</h3><p class='muted'>No retraining on these days.</p>"
    rows = []
    for event in reversed(events):
        airflow = (f"<a href='../{escape(event['airflow_path'])}' target='_top'>"
                   f"{'Airflow run' if event['airflow_run_id'] else 'training runs'}</a>")
        mlflow = (f"<a href='{escape(event['mlflow_url'])}' target='_blank' rel='noopener'>MLflow run</a>"
                  if event["mlflow_url"] else escape(str(event["mlflow_run_id"] or "")))
        rows.append(f"<tr><td>{escape(event['day'])}</td><td>v{escape(event['model_version'])}</td>"
                    f"<td>{escape(event['trigger'])}</td><td>{escape(event['started_by'])}</td>"
                    f"<td>{escape(str(event['gate_decision'] or ''))}</td><td>{airflow}</td><td>{mlflow}</td></tr>")
    return ("<h3>Retrainings</h3><table><tr><th>window up to</th><th>version</th><th>trigger</th><th>started by</th>"
            f"<th>champion gate</th><th>Airflow</th><th>MLflow</th></tr>{''.join(rows)}</table>")
