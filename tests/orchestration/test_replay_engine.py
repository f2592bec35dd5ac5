"""How the replay ends when its options give no first champion: an expected stop, told in one line
with what to change and its own exit status (documented), not a Python traceback. The model
selection and the gate are stood in for: the stop is the engine's, whatever stopped the model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestration.replay.engine import STOPPED_EXIT

REPO = Path(__file__).resolve().parents[2]

STOPPED_REPLAY = """
import os
import sys
from orchestration.replay import engine

engine.Replay.prepare = lambda self: None  # no lake to prepare: the first model is stood in for
engine.Replay.promote = lambda self, policy, plan: {
    "outcome": "rejected", "version": "1", "reason": "below the bar:\\n0.61 holdout ROC AUC < 0.65"}
try:
    engine.main(["--home", sys.argv[1], "--policy", "never", "--start", "2013-02-01", "--end", "2013-02-03"])
finally:
    print("console progress:", os.environ.get("PIPELINE_CONSOLE_PROGRESS"))
"""


def test_a_first_model_stopped_at_the_bar_ends_the_replay_in_one_line_with_its_own_exit_status(tmp_path):
    done = subprocess.run([sys.executable, "-c", STOPPED_REPLAY, str(tmp_path / "home")], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env={**os.environ, "PIPELINE_LOG_LEVEL": "INFO"})
    assert done.returncode == STOPPED_EXIT == 78, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "replay stopped (exit 78): the replay's first model (window up to 2013-01-31) "
        "did not become champion: rejected: below the bar: 0.61 holdout ROC AUC < 0.65. Give the model selection "
        "more (--sweep-size, the config's sweep), replay with the bar open (--baselines 0) or start on another "
        f"day (--start), in another --home (this one keeps its options: {tmp_path / 'home'})"), last
    assert '"report"' not in done.stdout  # no report
    # the replay's console shows its own progress lines, not the Spark sessions' progress bars
    assert "console progress: 0" in done.stdout


def test_the_stops_exit_status_is_documented():
    from orchestration.replay import engine

    assert f"``{STOPPED_EXIT}``" in (engine.__doc__ or "")
    assert f"`{STOPPED_EXIT}`" in (REPO / "docs" / "replay.md").read_text()
