"""How the house is laid out, read from the source with ``ast`` (nothing is imported):

- the worker library (``kb``), the Airflow adapters (``kb_airflow``), the DAGs and the OCR
  engine never import the workbench (``kb_dev``: the local stack, the CLI, benchmarks);
- the OCR engine imports neither Airflow nor the pipeline (it deploys alone on GPU nodes);
- no module of ``include/``, ``plugins/`` or ``ocr_engine/`` takes part in an import circle,
  lazy imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"kb": REPO / "include" / "kb", "kb_dev": REPO / "include" / "kb_dev",
            "kb_airflow": REPO / "plugins" / "kb_airflow", "ocr_engine": REPO / "ocr_engine"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in (REPO / "dags").glob("*.py"):
        found[f"dags.{path.stem}"] = path
    return found


def _imported(path: Path) -> set[str]:
    """Every module name ``path`` imports anywhere in it (absolute imports: the house's only kind)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: a relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imported(path) if m in modules and m != name} for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _outside_workbench(name: str) -> bool:
    return not (name == "kb_dev" or name.startswith("kb_dev."))


def test_nothing_a_worker_runs_imports_the_workbench():
    graph = _graph()
    assert any(m.startswith("kb_dev.stack.") for m in graph), "the walk found no workbench module"
    leaks = {name: sorted(m for m in imports if not _outside_workbench(m))
             for name, imports in graph.items() if _outside_workbench(name)}
    assert {name: found for name, found in leaks.items() if found} == {}


def test_the_ocr_engine_imports_neither_airflow_nor_the_pipeline():
    modules = _modules()
    for name, path in modules.items():
        if name.startswith("ocr_engine"):
            foreign = {m for m in _imported(path) if m.split(".")[0] in ("airflow", "kb", "kb_airflow", "kb_dev")}
            assert not foreign, (name, sorted(foreign))


def test_no_import_circles():
    assert _circles(_graph()) == []


def test_the_walk_finds_a_circle_where_there_is_one():
    # the check itself must be able to fail
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


BACKEND_NAMES = {"textlayer", "ppocr", "unlimited"}


def _compares_backend_names(node: ast.Compare) -> bool:
    for side in (node.left, *node.comparators):
        for part in ast.walk(side):
            if isinstance(part, ast.Constant) and part.value in BACKEND_NAMES:
                return True
            if isinstance(part, ast.Name) and part.id in ("AUTO", "BackendName"):
                return True
    return False


def test_ocr_engine_compares_backend_names_only_where_it_chooses_a_backend():
    chooser = REPO / "ocr_engine" / "backends" / "registry.py"
    found = []
    for path in sorted((REPO / "ocr_engine").rglob("*.py")):
        if path == chooser or path.name.startswith("bench"):  # benchmarks name what they measure
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and _compares_backend_names(node):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
    assert any(isinstance(n, ast.Compare) and _compares_backend_names(n)
               for n in ast.walk(ast.parse(chooser.read_text()))), "the walk finds the chooser's own comparisons"
