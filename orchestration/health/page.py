"""The Model health page: the view (:mod:`orchestration.health.view`) as one HTML document with
inline SVG charts and CSS: no script and nothing fetched from elsewhere (the API server may be
offline), so it renders the same in the Airflow UI's iframe, in a browser and in a headless one.

Per model: the champion and its challengers; every version's daily realized metric with its 95%
interval and its holdout value; the estimate for days whose outcomes are not in; the decay
verdicts; the drift PSI per feature and day as a heat map; the retrainings with what started them,
linked to their Airflow runs and MLflow runs.
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import urlencode

from orchestration.health.charts import drift_heatmap, estimate_of, fmt, metric_chart

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
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
            interval = f"{fmt(realized['value'])} [{fmt(realized['low'])}, {fmt(realized['high'])}]{gap}"
        link = (f"<a href='{escape(version['mlflow_url'])}' target='_blank' rel='noopener'>monitoring run</a>"
                if version["mlflow_url"] else escape(str(version.get("mlflow_run_id") or "")))
        roles = ", ".join(f"{k} {v} d" for k, v in sorted(version["roles"].items()))
        live = _live(version.get("comparison"))
        level = _level(version.get("level"))
        colour = colours[version["model_version"]]
        rows.append(f"<tr class='{role if role != 'retired' else ''}'><td><span style='color:{colour}'>"
                    f"&#9632;</span> v{escape(version['model_version'])}</td><td>{role}</td><td>{escape(roles)}</td>"
                    f"<td>{escape(str(version['first_day']))} .. {escape(str(version['last_day']))}</td>"
                    f"<td>{fmt(holdout)}</td><td>{interval}</td><td>{level}</td><td>{live}</td><td>{link}</td></tr>")
    return (f"<table><tr><th>version</th><th>now</th><th>days scored as</th><th>days</th><th>holdout {escape(metric)}"
            f"</th><th>realized, last {window} days with outcomes</th><th>served level vs realized rate, latest day"
            f"</th><th>live vs champion</th><th>MLflow</th></tr>{''.join(rows)}</table>")


def _level(level: dict[str, Any] | None) -> str:
    """A day's served level against its realized rate (and the shift's part), red when flagged."""
    if not level:
        return "<span class='muted'>no outcomes yet</span>"
    shift = f"; shift {level['shift_part']:+.3f}" if level.get("shift_part") else ""
    text = (f"{fmt(level['predicted_rate'])} vs {fmt(level['realized_rate'])} "
            f"[{fmt(level['low'])}, {fmt(level['high'])}]{shift}")
    return f"<span class='bad'>{text}: miscalibrated</span>" if level.get("flagged") else text


def _miscalibrated(days: list[dict[str, Any]]) -> str:
    """The days whose served level was far from the truth (the monitor's level check), newest first."""
    if not days:
        return ""
    rows = "".join(
        f"<tr><td>{escape(d['day'])}</td><td>v{escape(str(d['model_version']))} ({escape(str(d['role']))})</td>"
        f"<td>{fmt(d['predicted_rate'])}</td><td>{fmt(d['realized_rate'])} [{fmt(d['low'])}, {fmt(d['high'])}]"
        f"</td><td>{fmt(d.get('model_rate'))}</td><td>{fmt(d.get('shift_part'))}</td></tr>"
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


def _estimates(found: dict[str, Any]) -> str:
    from jobs.monitoring.quality import ESTIMATED

    champion = next((v for v in found["versions"] if v["is_champion"]), None)
    if champion is None:
        return ""
    waiting = [d for d in champion["days"] if d["status"] == "awaiting_outcomes"]
    errors = [abs(e) for d in champion["days"] if d["status"] == "ok"
              for e in [((d.get("estimate") or {}).get("error") or {}).get("roc_auc")] if isinstance(e, int | float)]
    rows = "".join(f"<tr><td>{escape(d['day'])}</td><td>{d['rows']}</td>" + "".join(
        f"<td>{fmt(estimate_of(d, m))}</td>" for m in ESTIMATED) + "</tr>" for d in waiting[-14:])
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
