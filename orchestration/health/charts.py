"""The Model health page's charts, as inline SVG: every version's realized metric per day with its
interval, holdout, estimate, decayed days and retrainings (:func:`metric_chart`), and the drift PSI
per feature and day as a heat map (:func:`drift_heatmap`); the page (:mod:`orchestration.health.page`)
puts them between its tables."""

from __future__ import annotations

import datetime as dt
import math
from html import escape
from typing import Any

DECAYED, RETRAINED, MUTED = "#d62728", "#555555", "#999999"
WIDTH, LEFT, RIGHT = 1000, 150, 20
CHART_HEIGHT, TOP, BOTTOM = 300, 24, 40
ROW = 14  # height of a heat map row


def fmt(value: Any, digits: int = 3) -> str:
    """A number as the page shows it (``digits`` decimals), a dash where there is none."""
    return "&ndash;" if not isinstance(value, int | float) or not math.isfinite(value) else f"{value:.{digits}f}"


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


def estimate_of(day: dict[str, Any], metric: str) -> float | None:
    """A monitored day's estimate of ``metric`` before its outcomes are in, if a finite one was made."""
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
                        estimate_of(day, metric) if day["status"] == "awaiting_outcomes" else None,
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
            estimate = estimate_of(day, metric)
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
                    f"{escape(feature)} {day['day']}: PSI {fmt(value)}{'' if watching else ' (not monitored)'}"
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
