"""The commit message rule (scripts/check_commits.py): the rule itself, the commit-msg hook's mode
on message files, and the range check .ci/run runs, over a throw-away repository."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts/check_commits.py"
HOOK = REPO / "scripts/hooks/commit-msg"
spec = importlib.util.spec_from_file_location("check_commits", SCRIPT)
check_commits = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_commits)

GOOD = "Add a commit-msg hook\n\nWhy: subjects a person can scan.\n"
LONG = "A" * 73


def test_rule() -> None:
    assert check_commits.problems(GOOD) == []
    assert check_commits.problems("B" * 72) == []
    assert check_commits.problems("# git's help\nFix the lake's path\n\n# more help\n") == []
    [long] = check_commits.problems(LONG + "\n\nbody\n")
    assert "73 characters" in long and "72" in long
    [period] = check_commits.problems("Fix the lake's path.\n")
    assert "period" in period
    [second] = check_commits.problems("Fix the lake's path\nand more\n")
    assert "second line" in second
    [empty] = check_commits.problems("\n# only comments\n")
    assert "empty" in empty
    # what a verbose commit appends after the scissors line is not the message
    assert check_commits.problems(f"Fix it\n\n{check_commits.SCISSORS}\ndiff --git a b\n.\n") == []


def test_message_file_and_hook(tmp_path: Path) -> None:
    for command in ([sys.executable, str(SCRIPT), "--message-file"], [str(HOOK)]):
        good, bad = tmp_path / "good", tmp_path / "bad"
        good.write_text(GOOD)
        bad.write_text(LONG + "\n")
        assert subprocess.run([*command, str(good)], capture_output=True).returncode == 0
        result = subprocess.run([*command, str(bad)], capture_output=True, text=True)
        assert result.returncode == 1
        assert "73 characters, the limit is 72" in result.stderr


def git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_range_names_the_bad_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "Start before the rule, with a long subject " * 3)
    base = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "Add a good one\n\nBecause.")
    good = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", LONG)
    bad = git(tmp_path, "rev-parse", "HEAD")

    result = subprocess.run([sys.executable, str(SCRIPT), "--base", base], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert f"{bad[:10]}   73  {LONG}" in result.stdout
    assert good[:10] not in result.stdout and base[:10] not in result.stdout
    assert "1 of 2 commits" in result.stderr

    result = subprocess.run([sys.executable, str(SCRIPT), "--base", bad], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    missing = "0" * 40
    result = subprocess.run([sys.executable, str(SCRIPT), "--base", missing], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "not in this clone" in result.stderr
