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
