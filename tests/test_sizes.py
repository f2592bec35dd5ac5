"""No module of ``jobs/`` or ``orchestration/`` over :data:`MAX_LINES` lines and no function over
:data:`MAX_FUNCTION_LINES` (issue 63): a reader takes in a module or a function whole. The few
exceptions are named below, each with its reason; one that no longer exceeds the limit must leave
the list. Read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "orchestration")
MAX_LINES = 450
MAX_FUNCTION_LINES = 80

# Modules allowed over MAX_LINES: path -> why.
LONG_MODULES = {
}
# Functions allowed over MAX_FUNCTION_LINES: "path:qualified name" -> why.
LONG_FUNCTIONS = {
}


def sources(root: Path = REPO) -> list[Path]:
    """Every Python file under :data:`PACKAGES`."""
    return sorted(path for package in PACKAGES for path in (root / package).rglob("*.py"))


def long_modules(paths: list[Path], root: Path = REPO, limit: int = MAX_LINES) -> dict[str, int]:
    """The files of ``paths`` over ``limit`` lines, by path relative to ``root``, with their lengths."""
    lengths = {path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in paths}
    return {name: n for name, n in lengths.items() if n > limit}


def long_functions(paths: list[Path], root: Path = REPO, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """The functions and methods of ``paths`` over ``limit`` lines (decorators left out, the
    docstring counted), as ``path:Class.name``, with their lengths."""
    found = {}

    def visit(node: ast.AST, prefix: str, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualified = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        found[f"{name}:{qualified}"] = length
                visit(child, f"{qualified}.", name)
            else:
                visit(child, prefix, name)

    for path in paths:
        visit(ast.parse(path.read_text(encoding="utf-8")), "", path.relative_to(root).as_posix())
    return found


def test_no_module_is_over_the_limit_but_the_named_exceptions():
    over = {name: n for name, n in long_modules(sources()).items() if name not in LONG_MODULES}
    assert not over, f"modules over {MAX_LINES} lines (split them by what they do): {over}"


def test_no_function_is_over_the_limit_but_the_named_exceptions():
    over = {name: n for name, n in long_functions(sources()).items() if name not in LONG_FUNCTIONS}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (cut them into named steps): {over}"


def test_every_exception_is_still_over_its_limit():
    """An exception that is no longer needed leaves the list, so the list says what is left to do."""
    stale = sorted({*LONG_MODULES} - {*long_modules(sources())} | {*LONG_FUNCTIONS} - {*long_functions(sources())})
    assert not stale, f"no longer over the limit: remove from tests/test_sizes.py: {stale}"


def test_the_size_check_finds_a_long_module_and_a_long_method(tmp_path: Path):
    package = tmp_path / "jobs"
    package.mkdir()
    lines = [f"x{i} = {i}" for i in range(5)]
    (package / "short.py").write_text("def f():\n" + "".join(f"    {line}\n" for line in lines))
    (package / "long.py").write_text("class A:\n    @staticmethod\n    def g():\n"
                                     + "".join(f"        {line}\n" for line in lines))
    paths = sorted(package.rglob("*.py"))
    assert long_modules(paths, tmp_path, limit=6) == {"jobs/long.py": 8}
    assert long_functions(paths, tmp_path, limit=5) == {"jobs/long.py:A.g": 6, "jobs/short.py:f": 6}
