"""The replay's figures per policy: the served model's realized quality, its retrainings and what
they cost, written to ``<home>/report/replay.json`` and ``replay.md`` with plots: the realized
ROC AUC over the served days (``realized.png``, retrainings marked), the cost of a served day over
the days (``soak.png``) and quality against compute (``quality_vs_compute.png``).

The report is committed as it is (docs/replay/), so it holds no path of the machine that ran it:
its files are named relative to the replay's home, the config relative to the project
(:func:`portable_path`)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

WINDOW_DAYS = 7  # the rolling window of the worst-week figures
PROJECT = Path(__file__).resolve().parents[2]  # where the bundled config is (pipelines/flights/)


class Replay(Protocol):
    """What the report reads of a replay (:class:`orchestration.replay.engine.Replay`, which writes
    it when its days are served)."""

    home: Path
    start: dt.date
    end: dt.date
    policies: tuple[str, ...]
    state: dict[str, Any]

    def policy_lake(self, policy: str) -> Path: ...


def portable_path(path: str | Path, home: Path) -> str:
    """``path`` as the report names it: relative to the replay's ``home`` when inside it, else to
    the project (the bundled config), else its file name alone: never a path of this machine."""
    path = Path(path)
    for root in (Path(home), PROJECT):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return path.name


def served_entries(lake: Any, served: dict[str, str]) -> list[dict[str, Any]]:
    """Each served day's monitoring entry of the version that served it, oldest first (a day
    without one, or without outcomes, is left out)."""
    from jobs.lake.storage import read_json

    found = []
    for day, version in sorted(served.items()):
        record = read_json(lake.monitoring_report(dt.date.fromisoformat(day))) or {}
        entry = next((e for e in record.get("models", []) if str(e.get("model_version")) == str(version)
                      and e.get("role") in ("champion", "replaced")), None)
        if entry is not None and entry.get("status") == "ok":
            found.append({**entry, "day": day})
    return found


def quality(entries: list[dict[str, Any]], metric: str, lower_is_better: bool) -> dict[str, Any]:
    """The mean of the daily realized ``metric`` (weighted by outcome rows) and the worst pooled
    :data:`WINDOW_DAYS`-day window."""
    from jobs.monitoring.decay import pooled

    overall = pooled(entries, metric)
    windows = [pooled(entries[i:i + WINDOW_DAYS], metric) for i in range(max(len(entries) - WINDOW_DAYS + 1, 0))]
    windows = [(w, entries[i]["day"]) for i, w in enumerate(windows) if w is not None]
    worst = (max if lower_is_better else min)(windows, key=lambda pair: pair[0]["value"]) if windows else None
    return {"mean": None if overall is None else round(overall["value"], 4),
            f"worst_{WINDOW_DAYS}_days": None if worst is None else round(worst[0]["value"], 4),
            "worst_from": None if worst is None else worst[1]}


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def policy_figures(replay: Replay, name: str) -> dict[str, Any]:
    from jobs.lake.layout import Lake
    from jobs.metrics import LOWER_IS_BETTER

    state = replay.state["policies"][name]
    entries = served_entries(Lake(str(replay.policy_lake(name))), state["served"])
    later = [t for t in state["trainings"] if t["day"] >= replay.start.isoformat()]  # not the first champion
    outcomes = [t.get("outcome") for t in later]
    windows = {t["run_date"] for t in state["trainings"]}
    return {
        "days_served": len(state["served"]),
        "days_judged": len(entries),
        "roc_auc": quality(entries, "roc_auc", False),
        "log_loss": quality(entries, "log_loss", "log_loss" in LOWER_IS_BETTER),
        "retrainings": {"started": len(later), "promoted": outcomes.count("promoted"),
                        "stopped_at_bar": outcomes.count("stopped_at_bar"), "rejected": outcomes.count("rejected"),
                        "by_trigger": {k: sum(t["trigger"] == k for t in later)
                                       for k in sorted({t["trigger"] for t in later})}},
        "versions": len({str(v) for v in state["served"].values()}),
        # days served by each family: mlp, xgboost, or a baseline's name (one that served in a candidate's place)
        "days_by_family": days_by_family(state),
        "seconds": state["seconds"],
        # the policy's own seconds and the model selection of every window it trained on (shared
        # with the policies that trained on the same window, counted for each)
        "compute_seconds": round(sum(state["seconds"].values()) + sum(
            replay.state["trained"].get(w, {}).get("seconds", 0.0) for w in windows), 1),
        "segments": state.get("segments", []),
        "phases": replay.state.get("phases", {}).get(name, {}),  # inside the stages: drift, model load, ...
        "lake_bytes": _folder_bytes(replay.policy_lake(name)),
        # "rows": the day's labelled rows, its weight in the means (what combine() needs)
        "daily": [{"day": e["day"], "version": str(e["model_version"]), "rows": e.get("rows_with_outcome"),
                   "roc_auc": (e["metrics"].get("roc_auc") or {}).get("value"),
                   "log_loss": (e["metrics"].get("log_loss") or {}).get("value")} for e in entries],
        "trainings": later,
    }


def days_by_family(state: dict[str, Any]) -> dict[str, int]:
    """How many of the policy's served days each family served (a version of unknown family: "?")."""
    family = {str(t.get("version")): t.get("family") or "?" for t in state["trainings"] if t.get("version")}
    counts: dict[str, int] = {}
    for version in state["served"].values():
        name = family.get(str(version), "?")
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def window_table(replay: Replay) -> list[dict[str, Any]]:
    """Per training window of the replay: each family's holdout promotion metric, the family the
    validation days chose among the candidates, and what each policy made of it."""
    rows = []
    for day, found in sorted(replay.state["trained"].items()):
        outcomes = {name: f"{t.get('outcome')} ({t.get('family') or '?'})"
                    for name, policy in replay.state["policies"].items()
                    for t in policy["trainings"] if t.get("run_date") == day}
        rows.append({"window": day, "holdout": found.get("holdout", {}), "chosen": found.get("chosen_family"),
                     "outcomes": outcomes})
    return rows


@contextmanager
def _figure(path: Path, size: tuple[float, float], title: str) -> Iterator[Any]:
    """One of the report's plots: yields its axes, then titles, grids and writes it to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    yield ax
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(figures: dict[str, dict[str, Any]], path: Path, restarts: list[str] | None = None) -> None:
    """The realized ROC AUC of the served model over the days per policy (7-day rolling mean),
    a mark on each day a retraining made a new champion; a dashed line where a combined report's
    next part starts (``restarts``: its first days; a first champion of its own serves from there)."""
    import pandas as pd

    title = "the served model's realized ROC AUC per retraining policy (v: a new champion)"
    with _figure(path, (11, 4.5), title) as ax:
        for name, found in figures.items():
            daily = pd.DataFrame(found["daily"])
            if daily.empty:
                continue
            daily["day"] = pd.to_datetime(daily["day"])
            series = daily.set_index("day")["roc_auc"].astype(float).rolling(WINDOW_DAYS, min_periods=1).mean()
            (line,) = ax.plot(series.index, series.values,
                              label=f"{name} ({found['retrainings']['promoted']} new)")
            promoted = [pd.Timestamp(t["day"]) for t in found["trainings"] if t.get("outcome") == "promoted"]
            marks = series.reindex(promoted, method="nearest") if promoted and len(series) else None
            if marks is not None:
                ax.scatter(marks.index, marks.values, color=line.get_color(), marker="v", zorder=3)
        for day in restarts or []:
            ax.axvline(pd.Timestamp(day), color="grey", linestyle="--", linewidth=1)
            ax.annotate("a part of its own from here", (pd.Timestamp(day), ax.get_ylim()[1]), fontsize=7,
                        textcoords="offset points", xytext=(3, -10), color="grey")
        ax.set_ylabel(f"realized ROC AUC ({WINDOW_DAYS}-day mean)")
        ax.legend(loc="lower left", fontsize=8)


def soak_plot(figures: dict[str, dict[str, Any]], path: Path) -> None:
    """Seconds per served day (the score and monitor jobs of a segment over its days, and the
    day's decisions) over the simulated days, per policy: flat is the goal; a rise is a cost that
    grows with the lake, the registry or the runs."""
    import pandas as pd

    with _figure(path, (11, 4), "soak: the cost of serving a day as the simulated days go by "
                 "(score, monitor, decide)") as ax:
        for name, found in figures.items():
            segments = pd.DataFrame(found["segments"])
            if segments.empty:
                continue
            per_day = (segments["scored_s"] + segments["decided_s"]) / segments["days"]
            ax.plot(pd.to_datetime(segments["last"]), per_day, marker=".", label=name)
        ax.set_ylabel("seconds per served day")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)


def cost_plot(figures: dict[str, dict[str, Any]], path: Path) -> None:
    """Each policy's mean realized ROC AUC against its compute seconds (its own stages and the
    model selection of the windows it trained on)."""
    with _figure(path, (6, 4.5), "quality against compute, per retraining policy") as ax:
        for name, found in figures.items():
            if found["roc_auc"]["mean"] is None:
                continue
            point = (found["compute_seconds"] / 60, found["roc_auc"]["mean"])
            ax.scatter(*point)
            ax.annotate(f"{name} ({found['retrainings']['promoted']} new)", point,
                        textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xlabel("compute (minutes: the policy's jobs and its windows' model selection)")
        ax.set_ylabel("mean realized ROC AUC")


def markdown(report: dict[str, Any]) -> str:
    parts = report.get("parts", [])
    lines = [f"# Replay {report['start']}..{report['end']}", "",
             f"Measured {report['measured']} on {report['machine']}; shared work (landing, validation, "
             f"features, model selection): {report['shared_seconds']:.0f} s.", "",
             *([f"Combined from {len(parts)} replays of consecutive spans, each in a home of its own and from "
                "a first champion of its own (selected on the window that ends the day before its first day): "
                + "; ".join(f"{part['start']}..{part['end']} (measured {part['measured']})" for part in parts)
                + ".", ""] if parts else []),
             "| policy | days | mean ROC AUC | worst 7-day ROC AUC | mean log loss | worst 7-day log loss "
             "| retrainings started | promoted | stopped at bar | seconds | compute s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in report["policies"].items():
        r = f["retrainings"]
        lines.append(f"| {name} | {f['days_served']} | {f['roc_auc']['mean']} | {f['roc_auc']['worst_7_days']} "
                     f"| {f['log_loss']['mean']} | {f['log_loss']['worst_7_days']} | {r['started']} "
                     f"| {r['promoted']} | {r['stopped_at_bar']} | {sum(f['seconds'].values()):.0f} "
                     f"| {f['compute_seconds']:.0f} |")
    lines += ["", "seconds: the policy's own jobs (score, monitor, decide, gate); compute s: those and the model "
              "selection of every window it trained on (a window shared by policies counts for each).", "",
              "Days served by each family: " + "; ".join(
                  f"{name} " + ", ".join(f"{k} {v}" for k, v in f.get("days_by_family", {}).items())
                  for name, f in report["policies"].items())]
    windows = report.get("windows", [])
    families = sorted({k for row in windows for k in row["holdout"]})
    if windows:
        lines += ["", "Holdout ROC AUC (the promotion metric) of each family per training window, the family the "
                  "validation days chose among the candidates, and each policy's outcome (the family it registered):",
                  "", "| window | " + " | ".join(families) + " | chosen | outcome |",
                  "|---|" + "---|" * (len(families) + 2)]
        for row in windows:
            cells = [str(row["holdout"].get(k, "")) for k in families]
            outcome = "; ".join(f"{k}: {v}" for k, v in row["outcomes"].items())
            lines.append(f"| {row['window']} | " + " | ".join(cells) + f" | {row['chosen'] or ''} | {outcome} |")
    return "\n".join(lines) + "\n"


REPORT_FILES = {"json": "replay.json", "markdown": "replay.md", "plot": "realized.png", "soak": "soak.png",
                "cost": "quality_vs_compute.png"}  # in <home>/report/


def write_report(replay: Replay) -> dict[str, Any]:
    """The report of the policies ``replay`` served, written to ``<home>/report/`` (:data:`REPORT_FILES`)."""
    import platform

    out = replay.home / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures = {name: policy_figures(replay, name) for name in replay.policies if name in replay.state["policies"]}
    report = {
        "start": replay.start.isoformat(), "end": replay.end.isoformat(),
        "measured": dt.datetime.now(dt.UTC).isoformat(timespec="minutes"),
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
        "setup": {**replay.state["setup"], "config": portable_path(replay.state["setup"]["config"], replay.home)},
        "shared_seconds": sum(replay.state["seconds"].values()),
        "shared": replay.state["seconds"], "shared_phases": replay.state.get("phases", {}).get("shared", {}),
        "trained_windows": len(replay.state["trained"]),
        "policies": figures,
        "windows": window_table(replay),
        # relative to the replay's home
        "paths": {name: portable_path(out / file, replay.home) for name, file in REPORT_FILES.items()},
    }
    _write(report, out)
    return report


def _write(report: dict[str, Any], out: Path, restarts: list[str] | None = None) -> None:
    """``report`` and its plots in ``out`` (:data:`REPORT_FILES`)."""
    figures = report["policies"]
    (out / REPORT_FILES["json"]).write_text(json.dumps(report, indent=2))
    (out / REPORT_FILES["markdown"]).write_text(markdown(report))
    plot(figures, out / REPORT_FILES["plot"], restarts)
    soak_plot(figures, out / REPORT_FILES["soak"])
    cost_plot(figures, out / REPORT_FILES["cost"])


def _summed(values: list[dict[str, Any]]) -> dict[str, Any]:
    """Key-wise sums of dicts of numbers (nested dicts summed the same way)."""
    out: dict[str, Any] = {}
    for value in values:
        for key, item in value.items():
            if isinstance(item, dict):
                out[key] = _summed([out.get(key, {}), item])
            else:
                out[key] = round(out.get(key, 0) + item, 3)
    return dict(sorted(out.items()))


def daily_quality(daily: list[dict[str, Any]], metric: str, lower_is_better: bool) -> dict[str, Any]:
    """:func:`quality` of a report's ``daily`` entries (each day's value and its labelled rows)."""
    missing = [day["day"] for day in daily if not day.get("rows")]
    if missing:
        raise ValueError(f"{len(missing)} served days carry no labelled-row count (the first {missing[0]}): "
                         "the report predates it; write the part's report again with this code")
    entries = [{"day": day["day"], "rows_with_outcome": day["rows"],
                "metrics": {metric: {"value": day[metric], "low": day[metric], "high": day[metric]}}}
               for day in daily if day.get(metric) is not None]
    return quality(entries, metric, lower_is_better)


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several replays (their ``replay.json``) of consecutive spans, in order: a year
    replayed in parts, each from a first champion of its own. The served days, trainings and
    windows are the parts' one after another; the means and the worst weeks are computed again over
    all the days (a week may span two parts); days, retrainings and seconds are summed."""
    from jobs.metrics import LOWER_IS_BETTER

    if len(parts) < 2:
        raise ValueError("combine needs two reports or more")
    for before, after in zip(parts, parts[1:], strict=False):
        following = dt.date.fromisoformat(before["end"]) + dt.timedelta(days=1)
        if dt.date.fromisoformat(after["start"]) != following:
            raise ValueError(f"the parts are not consecutive: {before['start']}..{before['end']} is followed by "
                             f"{after['start']}..{after['end']} (expected a part from {following})")
    policies = [name for name in parts[0]["policies"] if all(name in part["policies"] for part in parts)]
    if not policies:
        raise ValueError("the parts have no policy in common")
    figures = {}
    for name in policies:
        mine = [part["policies"][name] for part in parts]
        daily = [day for found in mine for day in found["daily"]]
        trainings = [t for found in mine for t in found["trainings"]]
        retrainings = [found["retrainings"] for found in mine]
        figures[name] = {
            "days_served": sum(found["days_served"] for found in mine),
            "days_judged": sum(found["days_judged"] for found in mine),
            "roc_auc": daily_quality(daily, "roc_auc", False),
            "log_loss": daily_quality(daily, "log_loss", "log_loss" in LOWER_IS_BETTER),
            "retrainings": {**{key: sum(r[key] for r in retrainings)
                               for key in ("started", "promoted", "stopped_at_bar", "rejected")},
                            "by_trigger": _summed([r["by_trigger"] for r in retrainings])},
            "versions": sum(found["versions"] for found in mine),
            "days_by_family": _summed([found["days_by_family"] for found in mine]),
            "seconds": _summed([found["seconds"] for found in mine]),
            "compute_seconds": round(sum(found["compute_seconds"] for found in mine), 1),
            "segments": [segment for found in mine for segment in found["segments"]],
            "phases": _summed([found["phases"] for found in mine]),
            "lake_bytes": sum(found["lake_bytes"] for found in mine),
            "daily": daily,
            "trainings": trainings,
        }
    return {
        "start": parts[0]["start"], "end": parts[-1]["end"],
        "measured": max(part["measured"] for part in parts),
        "machine": parts[-1]["machine"],
        "parts": [{key: part[key] for key in ("start", "end", "measured", "machine", "setup", "trained_windows")}
                  for part in parts],
        "setup": parts[0]["setup"],
        "shared_seconds": round(sum(part["shared_seconds"] for part in parts), 3),
        "shared": _summed([part["shared"] for part in parts]),
        "shared_phases": _summed([part["shared_phases"] for part in parts]),
        "trained_windows": sum(part["trained_windows"] for part in parts),
        "policies": figures,
        "windows": [row for part in parts for row in part["windows"]],
    }


def write_combined(paths: list[Path], out: Path) -> dict[str, Any]:
    """:func:`combine` of the reports at ``paths``, written to ``out`` as the replay writes its own
    (:data:`REPORT_FILES`, the realized ROC AUC with a line where each later part starts)."""
    report = combine([json.loads(Path(path).read_text()) for path in paths])
    out.mkdir(parents=True, exist_ok=True)
    report["paths"] = dict(REPORT_FILES)  # beside replay.json
    _write(report, out, [part["start"] for part in report["parts"][1:]])
    return report


def main(argv: list[str] | None = None) -> None:
    """``python -m orchestration.replay.report --combine A/replay.json B/replay.json --out DIR``."""
    import argparse

    parser = argparse.ArgumentParser(description="one report of replays of consecutive spans")
    parser.add_argument("--combine", nargs="+", type=Path, required=True,
                        help="the parts' replay.json, oldest span first")
    parser.add_argument("--out", type=Path, required=True, help="the folder the combined report goes to")
    args = parser.parse_args(argv)
    try:
        report = write_combined(args.combine, args.out)
    except (ValueError, OSError) as error:
        raise SystemExit(f"replay report: {error}") from None
    except KeyError as error:
        raise SystemExit(f"replay report: a part has no {error}: give the replay.json files of replays") from None
    print(json.dumps({name: str(args.out / path) for name, path in report["paths"].items()}, indent=2))


if __name__ == "__main__":
    main()
