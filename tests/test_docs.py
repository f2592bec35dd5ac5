"""The docs site and the README: the site builds with ``mkdocs build --strict`` (no broken link or
anchor, no page left out of the nav), the layout page lists exactly the modules of the tree, and
the README stays a front door."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYOUT_PAGE = REPO / "docs" / "layout.md"
README_MAX_LINES = 260

# The folders whose every module the layout page lists, and the kinds of file that count as one.
MODULE_ROOTS = ("jobs", "orchestration", "plugins", "dags", "pipelines")
MODULE_SUFFIXES = {".py", ".sh", ".yaml", ".env"}
MODULE_NAMES = {"packages.txt"}  # a pipeline's own packages
# A layout row: a table line whose first cell is one path in backticks.
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def layout_paths(text: str) -> set[str]:
    """The paths in the first column of the layout page's tables (folders end with ``/``)."""
    return {m.group(1) for line in text.splitlines() if (m := ROW.match(line))}


def tree_modules(root: Path) -> set[str]:
    """Every module under the module roots, as the layout page names it: a file by its path, a package
    by its folder with a trailing ``/`` (its ``__init__.py`` gets no row of its own)."""
    found: set[str] = set()
    for top in MODULE_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or (path.suffix not in MODULE_SUFFIXES
                                                                      and path.name not in MODULE_NAMES):
                continue
            rel = path.relative_to(root).as_posix()
            found.add(rel.removesuffix("__init__.py") if path.name == "__init__.py" else rel)
    return found


def layout_differences(root: Path, page_text: str) -> tuple[list[str], list[str]]:
    """(modules of the tree the page lacks, rows of the page whose path is not in the tree)."""
    listed = layout_paths(page_text)
    modules = tree_modules(root)
    missing = sorted(modules - listed)
    in_roots = {p for p in listed if p.split("/", 1)[0] in MODULE_ROOTS}
    stale = sorted(p for p in in_roots - modules if not (p.endswith("/") and (root / p).is_dir()))
    stale += sorted(p for p in listed - in_roots if not (root / p).exists())
    return missing, stale


def test_site_builds_strict(tmp_path: Path) -> None:
    """A broken link or anchor, or a page missing from the nav, is a warning, and --strict fails on it."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_layout_page_lists_the_tree() -> None:
    missing, stale = layout_differences(REPO, LAYOUT_PAGE.read_text(encoding="utf-8"))
    assert not missing and not stale, (
        f"docs/layout.md is out of step with the tree:\n  missing (add a row): {missing}\n"
        f"  stale (no such path): {stale}"
    )


def test_layout_check_finds_missing_and_stale(tmp_path: Path) -> None:
    """The check itself, on a tree of its own: a module without a row and a row without a module."""
    for name in ["jobs/__init__.py", "jobs/config.py", "jobs/lake/__init__.py", "jobs/lake/layout.py",
                 "jobs/runtime/gpu_discovery.sh", "jobs/pipeline.yaml", "dags/a_pipeline.py",
                 "jobs/lake/__pycache__/layout.cpython-311.pyc", "jobs/README.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "scripts").mkdir()
    page = "\n".join([
        "| path | what it holds |", "|---|---|",
        "| `jobs/` | the jobs |", "| `jobs/config.py` | config |", "| `jobs/lake/` | the lake |",
        "| `jobs/lake/layout.py` | layout |", "| `jobs/pipeline.yaml` | tunables |",
        "| `jobs/validate.py` | moved away |", "| `scripts/` | scripts |", "| `Makefile` | gone |",
    ])
    missing, stale = layout_differences(tmp_path, page)
    assert missing == ["dags/a_pipeline.py", "jobs/runtime/gpu_discovery.sh"]
    assert stale == ["jobs/validate.py", "Makefile"]


def test_readme_is_a_front_door() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_readme_links_resolve() -> None:
    """The README is outside the site, so mkdocs does not check its links: every relative link names
    a file of the repository (and an anchor of a docs page that has that heading)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        if not (REPO / path).exists():
            broken.append(target)
        elif anchor and path.endswith(".md") and anchor not in headings(REPO / path):
            broken.append(target)
    assert not broken, f"README.md links to what does not exist: {broken}"


def headings(page: Path) -> set[str]:
    """The anchors MkDocs gives a page's headings (its default slugs: lower case, words joined by -)."""
    anchors = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*)", line)):
            slug = re.sub(r"[^\w\s-]", "", m.group(1).strip().lower())
            anchors.add(re.sub(r"[-\s]+", "-", slug).strip("-"))
    return anchors


def test_committed_reports_hold_no_path_of_the_machine_that_made_them() -> None:
    """A JSON report under docs/ (a benchmark's, a replay's) names files relative to its run, never
    by an absolute path of the machine it ran on: such a path means nothing to a reader."""
    machine = re.compile(r'"(/(?:work|tmp|root|home|var|opt)/[^"]*)"')
    found = {str(path.relative_to(REPO)): hits for path in sorted((REPO / "docs").rglob("*.json"))
             if (hits := machine.findall(path.read_text()))}
    assert found == {}, found


def test_the_configuration_page_holds_every_key_and_option_as_generated() -> None:
    """docs/configuration.md's tables are what scripts/config_reference.py makes from the schema and
    the jobs' parsers: a key or option added, renamed or explained anew fails this until the page is
    made again (``python scripts/config_reference.py``)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import config_reference

    page = config_reference.PAGE.read_text()
    assert config_reference.render(page) == page, "run: python scripts/config_reference.py"
    assert "| `train.max_train_days` |" in page and "| train | `--overrides JSON` |" in page


MEASURED = re.compile(r"\d+\.\d{2,}|\d+(\.\d+)?\s?%|\b\d+(\.\d+)?\s?(s|ms|min|MB|MiB|GB|x)\b")


def test_the_shipped_config_files_carry_no_measured_figures_in_comments() -> None:
    """A config comment says what a setting does in a line; the studies behind a choice are linked,
    not quoted (their figures go stale in a comment)."""
    files = [*(REPO / "pipelines").rglob("*.yaml"), *(REPO / "jobs" / "config" / "profiles").glob("*.yaml")]
    assert files
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            comment = line.partition("#")[2]
            assert not MEASURED.search(comment), f"{path.relative_to(REPO)}:{number}: {comment.strip()}"


# A measured figure in prose: a metric's value, a timing with decimals, a speed-up.
FIGURE = re.compile(r"(?<![\w.])(0\.\d{3,}\b|\d+\.\d+\s?(s|ms)\b|\d+(-\d+)?% faster"
                    r"|\d+(\.\d+)?\s?times\b|\d+(\.\d+)?x faster)")
# (file, figure) -> why it is not a measurement
FIGURE_EXCEPTIONS = {
    ("jobs/scoring/shift.py", "0.005"): "half the logit bins' width: an error bound, derived",
    ("jobs/runtime/session.py", "4 times"): "quotes Spark's own message (a task failed 4 times)",
    ("orchestration/health/charts.py", "2.5 times"): "the drift heat map's colour scale, a design choice",
}


def prose(path: Path) -> list[tuple[int, str]]:
    """A module's docstrings, comments and ``help=`` texts, with their line."""
    import ast
    import io
    import tokenize

    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            found.append((body[0].value.lineno, body[0].value.value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            found += [(part.lineno, part.value) for part in ast.walk(node.value)
                      if isinstance(part, ast.Constant) and isinstance(part.value, str)]
    found += [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
              if token.type == tokenize.COMMENT]
    return found


def test_code_prose_carries_no_measured_figures() -> None:
    """Docstrings, comments and --help say what code does; a measurement behind a choice is linked
    (a study, a benchmark report), not quoted: it goes stale where nobody re-measures it."""
    files = sorted(p for folder in ("jobs", "orchestration", "dags", "plugins") for p in (REPO / folder).rglob("*.py"))
    assert len(files) > 50
    found = [f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}"
             for path in files for line, text in prose(path) for match in FIGURE.finditer(text)
             if (str(path.relative_to(REPO)), match.group(0)) not in FIGURE_EXCEPTIONS]
    assert not found, "measured figures in code prose (link the study instead):\n" + "\n".join(found)


def test_the_figure_scan_finds_a_metric_a_timing_and_a_speed_up(tmp_path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Holdout ROC AUC 0.6821."""\n# 7.7 s against 0.76 s\nparser.add_argument("--x", '
                      'help="about 25x faster")\n')
    texts = [text for _, text in prose(module)]
    assert [m.group(0) for text in texts for m in FIGURE.finditer(text)] == ["0.6821", "25x faster", "7.7 s", "0.76 s"]

