"""Usage comes from argparse, not typed by hand (issue 63): no module docstring carries a ``Usage::``
block, which goes stale as options come and go; every program of ``jobs/`` and ``orchestration/``
answers ``--help`` with exit 0, listing every option its parser has, each with a help text."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.test_docs import REPO, prose

# Where a typed usage block is looked for, and where the programs' --help is run.
USAGE_ROOTS = ("jobs", "orchestration", "scripts", "benchmarks", "studies")
PROGRAM_ROOTS = ("jobs", "orchestration")
USAGE_BLOCK = re.compile(r"^\s*Usage\b[^\n]*::\s*$", re.MULTILINE)  # "Usage::", "Usage (by hand)::"
# Programs with no argparse parser of their own: module -> why.
NOT_ARGPARSE = {
    "jobs.training.torchrun_wrapper": "hands every argument to torchrun, whose own --help answers",
}
MARK = "@@parsers@@"
# Runs a program as ``python -m`` does with --help, and reports each parser that printed its help:
# its options (a positional by its metavar) and their help texts.
SPY = f"""
import argparse, json, runpy, sys
shown = []
print_help = argparse.ArgumentParser.print_help
def spy(self, file=None):
    shown.append([[a.option_strings or [a.metavar or a.dest], a.help] for a in self._actions
                  if a.help != argparse.SUPPRESS])
    print_help(self, file)
argparse.ArgumentParser.print_help = spy
module = sys.argv[1]
sys.argv = [module, "--help"]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
finally:
    sys.stdout.flush()
    sys.stderr.write("\\n{MARK}" + json.dumps(shown) + "\\n")
"""


def usage_blocks(root: Path = REPO, folders: tuple[str, ...] = USAGE_ROOTS) -> list[str]:
    """``path:line`` of every docstring under ``folders`` with a typed ``Usage::`` block."""
    return [f"{path.relative_to(root)}:{line}" for folder in folders for path in sorted((root / folder).rglob("*.py"))
            for line, text in prose(path) if USAGE_BLOCK.search(text)]


def _main_guarded(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
               and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__" for node in tree.body)


def programs(root: Path = REPO, folders: tuple[str, ...] = PROGRAM_ROOTS) -> dict[str, Path]:
    """The modules ``python -m`` runs under ``folders`` (an ``if __name__ == "__main__"`` module, or a
    package by its ``__main__.py``), by module name."""
    found = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if _main_guarded(ast.parse(path.read_text(encoding="utf-8"))) or path.name == "__main__.py":
                name = ".".join(path.relative_to(root).with_suffix("").parts)
                found[name.removesuffix(".__main__")] = path
    return found


def unreachable_mains(root: Path = REPO, folders: tuple[str, ...] = PROGRAM_ROOTS) -> list[str]:
    """Modules that define a top-level ``main`` yet no program runs it: neither guarded themselves
    nor the source of a ``__main__.py``'s ``main``."""
    run = {node.module for path in programs(root, folders).values() if path.name == "__main__.py"
           for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
           if isinstance(node, ast.ImportFrom) and any(alias.name == "main" for alias in node.names)}
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body) \
                    and not _main_guarded(tree) and name not in run:
                found.append(name)
    return found


def help_of(module: str) -> tuple[subprocess.CompletedProcess, list]:
    """``python -m <module> --help`` in a fresh process, and the parsers that printed their help."""
    done = subprocess.run([sys.executable, "-c", SPY, module], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    _, _, shown = done.stderr.rpartition(MARK)
    return done, json.loads(shown.splitlines()[0]) if shown else []


def test_no_docstring_types_a_usage_block() -> None:
    found = usage_blocks()
    assert not found, ("typed usage blocks (say `python -m <module> --help` lists its options, and give each option "
                       "a help= text instead):\n" + "\n".join(found))


def test_the_usage_scan_finds_a_block(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.py").write_text('"""A job.\n\nUsage::\n\n    python -m jobs.job [--x X]\n"""\n')
    (tmp_path / "jobs" / "other.py").write_text('"""Usage: ``python -m jobs.other --help``."""\n')
    (tmp_path / "jobs" / "tool.py").write_text('"""A tool.\n\nUsage (by hand)::\n\n    python -m jobs.tool X\n"""\n')
    assert usage_blocks(tmp_path, ("jobs",)) == ["jobs/job.py:1", "jobs/tool.py:1"]


def test_every_main_is_a_program() -> None:
    assert unreachable_mains() == []


def test_every_program_lists_its_options_in_its_help() -> None:
    """Each program's --help exits 0 and names every option its parser takes, each with a help text.
    One process per program: a second or two each (pyspark's and MLflow's imports)."""
    found = programs()
    assert "orchestration.replay" in found and "jobs.scoring.job" in found
    assert set(NOT_ARGPARSE) <= set(found), "a program named in NOT_ARGPARSE is gone: take it off"
    problems = []
    for module in sorted(set(found) - set(NOT_ARGPARSE)):
        done, parsers = help_of(module)
        if done.returncode != 0 or not parsers:
            problems.append(f"{module}: --help exit {done.returncode}, parsers shown: {len(parsers)}\n"
                            f"{done.stderr[-2000:]}")
            continue
        for names, text in parsers[0]:
            missing = [name for name in names if name not in done.stdout]
            if missing:
                problems.append(f"{module}: --help does not print {missing}")
            if not (text or "").strip():
                problems.append(f"{module}: {names[-1]} has no help text")
    assert not problems, "\n".join(problems)
