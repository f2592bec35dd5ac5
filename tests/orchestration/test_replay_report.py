"""The replay's report is committed (docs/replay/): it names no path of the machine that wrote it."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestration.replay.report import PROJECT, portable_path, write_report


@dataclass
class FakeReplay:
    """What the report reads of a replay, one policy that served two days without outcomes."""

    home: Path
    state: dict[str, Any] = field(default_factory=dict)
    start: dt.date = dt.date(2013, 2, 1)
    end: dt.date = dt.date(2013, 2, 2)
    policies: tuple[str, ...] = ("weekly",)

    def policy_lake(self, policy: str) -> Path:
        return self.home / "policies" / policy / "lake"


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (str(key), *_strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


def test_the_report_names_its_files_relative_to_the_home_and_no_absolute_path(tmp_path):
    home = tmp_path / "replay"
    config = tmp_path / "elsewhere" / "pipeline.yaml"
    replay = FakeReplay(home, {
        "setup": {"start": "2013-02-01", "end": "2013-02-02", "config": str(config), "sweep_size": 1},
        "seconds": {"land": 1.0}, "trained": {}, "phases": {},
        "policies": {"weekly": {"served": {"2013-02-01": "1", "2013-02-02": "1"}, "seconds": {"score": 2.0},
                                "segments": [], "trainings": [
                                    {"day": "2013-01-31", "run_date": "2013-01-31", "trigger": "person",
                                     "outcome": "promoted", "version": "1"}]}},
    })
    (replay.policy_lake("weekly") / "predictions").mkdir(parents=True)

    report = write_report(replay)

    written = json.loads((home / "report" / "replay.json").read_text())
    assert written["paths"] == report["paths"] == {
        "json": "report/replay.json", "markdown": "report/replay.md", "plot": "report/realized.png",
        "soak": "report/soak.png", "cost": "report/quality_vs_compute.png"}
    assert all((home / path).is_file() for path in written["paths"].values())
    assert written["setup"]["config"] == "pipeline.yaml"  # outside the home and the project: its name
    for text in [*_strings(written), (home / "report" / "replay.md").read_text()]:
        assert not text.startswith("/") and str(tmp_path) not in text and str(PROJECT) not in text, text


def test_a_path_is_shown_relative_to_the_home_then_to_the_project(tmp_path):
    assert portable_path(tmp_path / "report" / "replay.json", tmp_path) == "report/replay.json"
    assert portable_path(PROJECT / "jobs" / "pipeline.yaml", tmp_path) == "jobs/pipeline.yaml"
    assert portable_path("/somewhere/else/my.yaml", tmp_path) == "my.yaml"


def _part(start: str, end: str, daily: list[tuple[str, int, float, float]], trainings: int) -> dict[str, Any]:
    """A replay.json of one policy (``default``) that served ``daily``: (day, rows, ROC AUC, log loss)."""
    return {
        "start": start, "end": end, "measured": f"{end}T00:00+00:00", "machine": "x86_64, 2 cores",
        "setup": {"start": start, "end": end, "config": "jobs/pipeline.yaml"}, "trained_windows": trainings + 1,
        "shared_seconds": 10.0, "shared": {"baselines": 6.0, "candidates": 4.0}, "shared_phases": {"x": 1.0},
        "policies": {"default": {
            "days_served": len(daily), "days_judged": len(daily), "roc_auc": {}, "log_loss": {},
            "retrainings": {"started": trainings, "promoted": trainings, "stopped_at_bar": 0, "rejected": 0,
                            "by_trigger": {"decay": trainings}},
            "versions": trainings + 1, "days_by_family": {"mlp": len(daily)}, "seconds": {"score": 2.0},
            "compute_seconds": 12.0, "segments": [{"first": start, "last": end, "days": len(daily),
                                                   "scored_s": 2.0, "decided_s": 0.1}],
            "phases": {"score/drift": 1.5}, "lake_bytes": 100,
            "daily": [{"day": day, "version": "1", "rows": rows, "roc_auc": roc, "log_loss": loss}
                      for day, rows, roc, loss in daily],
            "trainings": [{"day": end, "outcome": "promoted", "trigger": "decay", "family": "mlp"}] * trainings}},
        "windows": [{"window": start, "holdout": {"mlp": 0.7}, "chosen": "mlp", "outcomes": {}}],
    }


def _days(first: dt.date, count: int) -> list[str]:
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(count)]


def test_replays_of_consecutive_spans_combine_into_one_report_computed_again_over_all_days(tmp_path):
    """A year replayed in parts: one report whose means weigh every day by its labelled rows and
    whose worst week may span two parts; what is counted is summed; the parts are named."""
    from orchestration.replay.report import write_combined

    first = [(day, 100, 0.70, 0.40) for day in _days(dt.date(2013, 2, 1), 10)]
    # the last 4 days of the first part and the first 3 of the second: the worst 7 days, across the parts
    first[-4:] = [(day, 100, 0.55, 0.90) for day, *_ in first[-4:]]
    second = [(day, 300, 0.60, 0.50) for day in _days(dt.date(2013, 2, 11), 10)]
    second[:3] = [(day, 100, 0.55, 0.90) for day, *_ in second[:3]]
    parts = [_part("2013-02-01", "2013-02-10", first, 2), _part("2013-02-11", "2013-02-20", second, 3)]
    paths = []
    for index, part in enumerate(parts):
        (tmp_path / str(index)).mkdir()
        paths.append(tmp_path / str(index) / "replay.json")
        paths[-1].write_text(json.dumps(part))

    report = write_combined(paths, tmp_path / "year")

    found = report["policies"]["default"]
    rows = [r for _, r, _, _ in first + second]
    roc = sum(r * v for (_, r, v, _) in first + second) / sum(rows)
    assert found["roc_auc"]["mean"] == round(roc, 4)
    assert found["roc_auc"]["worst_7_days"] == 0.55 and found["roc_auc"]["worst_from"] == "2013-02-07"
    assert found["log_loss"]["worst_7_days"] == 0.9 and found["log_loss"]["worst_from"] == "2013-02-07"
    assert found["days_served"] == 20 and [d["day"] for d in found["daily"]] == _days(dt.date(2013, 2, 1), 20)
    assert found["retrainings"]["promoted"] == 5 and found["retrainings"]["by_trigger"] == {"decay": 5}
    assert found["days_by_family"] == {"mlp": 20} and found["seconds"] == {"score": 4.0}
    assert report["shared"] == {"baselines": 12.0, "candidates": 8.0} and report["trained_windows"] == 7
    assert [w["window"] for w in report["windows"]] == ["2013-02-01", "2013-02-11"]
    assert (report["start"], report["end"]) == ("2013-02-01", "2013-02-20")
    assert [p["start"] for p in report["parts"]] == ["2013-02-01", "2013-02-11"]
    written = tmp_path / "year"
    assert json.loads((written / "replay.json").read_text()) == report
    assert all((written / name).is_file() for name in report["paths"].values())
    text = (written / "replay.md").read_text()
    assert "Combined from 2 replays" in text and "2013-02-11..2013-02-20" in text
    assert str(tmp_path) not in json.dumps(report)


def test_combining_refuses_parts_with_a_gap_or_without_the_days_weights(tmp_path):
    import pytest

    from orchestration.replay.report import combine

    day = [("2013-02-01", 100, 0.7, 0.4)]
    with pytest.raises(ValueError, match="not consecutive.*expected a part from 2013-02-02"):
        combine([_part("2013-02-01", "2013-02-01", day, 0), _part("2013-02-03", "2013-02-03", day, 0)])
    older = _part("2013-02-02", "2013-02-02", [("2013-02-02", 100, 0.7, 0.4)], 0)
    del older["policies"]["default"]["daily"][0]["rows"]  # a report written before the rows were kept
    with pytest.raises(ValueError, match="no labelled-row count.*2013-02-02.*write the part's report again"):
        combine([_part("2013-02-01", "2013-02-01", day, 0), older])
    with pytest.raises(ValueError, match="two reports or more"):
        combine([_part("2013-02-01", "2013-02-01", day, 0)])
