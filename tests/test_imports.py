"""No import circles between the modules of ``jobs/`` and ``orchestration/``: every import counts,
at the top of a module or inside a function (a function-level import hides a circle from Python,
not from the reader), except those under ``if TYPE_CHECKING:``. Read from the source with ``ast``:
nothing is imported, no Spark."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "orchestration")


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of :data:`PACKAGES` by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its body (a name imported
    from a package counts as its submodule when it is one), ``if TYPE_CHECKING:`` blocks left out."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit_node(other)
            else:
                visit_node(child)

    def visit_node(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..y import z
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names)
        visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found = set()
    for target in targets:
        while target and target not in known:  # jobs.runtime.session.get_spark -> jobs.runtime.session
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(name, path, known) for name, path in known.items()}


def test_no_module_of_jobs_or_orchestration_imports_itself_through_others():
    graph = import_graph()
    assert "jobs.errors" in graph and "orchestration.replay.report" in graph
    found = circles(graph)
    said = ["; ".join(f"{a} imports {sorted(graph[a] & set(component))}" for a in component) for component in found]
    assert not found, "import circles: " + " | ".join(said)


def test_the_walk_counts_imports_inside_functions_and_leaves_out_type_checking(tmp_path):
    """The check itself: a circle closed by an import inside a function is one; a circle closed
    only under ``if TYPE_CHECKING:`` is not."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "orchestration").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "orchestration" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "a.py").write_text("from jobs.b import g\n")
    (tmp_path / "jobs" / "b.py").write_text("def g():\n    from jobs import a\n")
    (tmp_path / "orchestration" / "c.py").write_text("from . import d\n")
    (tmp_path / "orchestration" / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from orchestration.c import X\n")
    assert circles(import_graph(tmp_path)) == [["jobs.a", "jobs.b"]]


# The shared layer below the stages: what every stage may import and which imports none of them.
LOWER = ("jobs.config", "jobs.lake", "jobs.runtime", "jobs.metrics", "jobs.errors", "jobs.timings", "jobs.tracking",
         "jobs.registry", "jobs.runner", "jobs.plots")


def within(name: str, packages: tuple[str, ...]) -> bool:
    """Whether module ``name`` is one of ``packages`` or inside one of them."""
    return any(name == package or name.startswith(f"{package}.") for package in packages)


def test_the_config_package_imports_no_stage():
    """jobs.config (the schema, its files, the command line) and the lake's names import nothing
    of the stages they configure: the stages import their settings from the config, never the
    other way round."""
    graph = import_graph()
    config = sorted(name for name in graph if name == "jobs.config" or name.startswith("jobs.config."))
    assert "jobs.config.pipeline" in config
    above = {name: sorted(target for target in graph[name] if not target.startswith(LOWER))
             for name in config}
    assert all(not targets for targets in above.values()), f"the config imports stages: {above}"


def test_the_metric_catalogue_is_the_one_list_of_metrics_and_imports_no_stage():
    """jobs.metrics (every metric's name, direction and computation) is below every stage that
    judges a model: it imports nothing of jobs but the lake's names, and no other module of jobs
    keeps a list of which metrics are lower-is-better."""
    graph = import_graph()
    assert sorted(t for t in graph["jobs.metrics"] if not t.startswith(LOWER)) == []
    redefined = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "jobs").rglob("*.py"))
                 if path != REPO / "jobs" / "metrics.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if line.startswith(("LOWER_IS_BETTER =", "METRICS =")) or line.startswith("def roc_auc(")]
    assert redefined == []


def test_the_lake_and_the_spark_runtime_import_no_stage():
    """jobs.lake (the lake's names, files and reports) and jobs.runtime (the Spark session, its GPUs,
    the Connect server, the class archive) are below every stage: they import nothing of jobs but
    the shared layer, and the runtime not even the lake (the lake reads through a session, a session
    knows nothing of the lake)."""
    graph = import_graph()
    lower = sorted(name for name in graph if within(name, ("jobs.lake", "jobs.runtime")))
    assert {"jobs.lake.files", "jobs.lake.reports", "jobs.runtime.session", "jobs.runtime.connect_server"} <= {*lower}
    above = {name: targets for name in lower
             if (targets := sorted(target for target in graph[name] if not within(target, LOWER)))}
    assert above == {}, f"the lake or the runtime imports stages: {above}"
    on_the_lake = {name: targets for name in lower if within(name, ("jobs.runtime",))
                   if (targets := sorted(target for target in graph[name] if within(target, ("jobs.lake",))))}
    assert on_the_lake == {}, f"the runtime imports the lake: {on_the_lake}"


def test_the_shared_modules_import_no_stage():
    """The MLflow side every stage shares (jobs.tracking: the server, the champion to score with;
    jobs.registry: a version's files, the alias), a job's runner and the plots import nothing of
    the stages: the champion alias is looked up in the registry, not through the gate."""
    graph = import_graph()
    shared = ("jobs.tracking", "jobs.registry", "jobs.runner", "jobs.plots", "jobs.errors", "jobs.timings")
    above = {name: targets for name in shared
             if (targets := sorted(t for t in graph[name] if t.startswith("jobs.") and not within(t, LOWER)))}
    assert above == {}, f"shared modules import stages: {above}"


def test_no_shared_module_and_no_orchestration_needs_the_demo_s_summary():
    """jobs.summary is the printout ``make demo`` ends with, a leaf: what reads a job's report of a
    day (the DAGs' tasks, the replay) reads it from the lake (jobs.lake.reports), not from the demo."""
    graph = import_graph()
    readers = sorted(name for name, targets in graph.items()
                     if "jobs.summary" in targets and within(name, ("orchestration", *LOWER)))
    assert readers == []
