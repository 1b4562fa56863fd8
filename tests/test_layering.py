"""How the house is laid out, read from the source with ``ast`` (nothing is imported):

- the worker library (``kb``), the Airflow adapters (``kb_airflow``), the DAGs and the OCR
  engine never import the workbench (``kb_dev``: the local stack, the CLI, benchmarks);
- the OCR engine imports neither Airflow nor the pipeline (it deploys alone on GPU nodes);
- no module of ``include/``, ``plugins/`` or ``ocr_engine/`` takes part in an import circle,
  lazy imports inside functions included;
- no module outside the workbench is a benchmark or a test helper (they ship in the images).
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


# Libraries only benchmarks and tests use: plots, dashboards as code, the test runner and its helpers.
WORKBENCH_LIBRARIES = {"matplotlib", "grafanalib", "pytest", "tests"}


def _benchmarks_and_test_helpers(imports: dict[str, set[str]]) -> dict[str, str]:
    """Each module of ``imports`` (a name and every module it imports) that is a benchmark or a test
    helper, and why: it lives in ``kb_dev.bench``, its name says so, it imports a library only those
    use, or only such modules import it."""
    found = {}
    for name, names in imports.items():
        stem = name.rsplit(".", 1)[-1]
        libraries = sorted(m for m in names if m.split(".")[0] in WORKBENCH_LIBRARIES)
        if name.startswith("kb_dev.bench."):
            found[name] = "a benchmark"
        elif stem.startswith(("bench", "test")) or stem == "conftest":
            found[name] = f"named {stem}"
        elif libraries:
            found[name] = f"imports {', '.join(libraries)}"
    importers = {name: {other for other, names in imports.items() if name in names} for name in imports}
    grew = True
    while grew:
        grew = False
        for name in sorted(imports.keys() - found.keys()):
            if importers[name] and importers[name] <= found.keys():
                found[name] = f"imported only by {', '.join(sorted(importers[name]))}"
                grew = True
    return found


def test_no_benchmark_or_test_helper_ships_outside_the_workbench():
    # the OCR engine's benchmarks are kb_dev.bench.ocr*, the dashboards kb_dev.observe, the tiny
    # random Unlimited OCR tests/tiny_unlimited.py
    found = _benchmarks_and_test_helpers({name: _imported(path) for name, path in _modules().items()})
    assert "kb_dev.bench.ocr_decoder" in found, "the walk finds the benchmarks"
    assert {name: why for name, why in found.items() if _outside_workbench(name)} == {}


def test_the_walk_finds_a_benchmark_or_a_test_helper_where_there_is_one():
    # the check itself must be able to fail: as ocr_engine and kb were before issue 37
    found = _benchmarks_and_test_helpers({
        "ocr_engine.bench": {"ocr_engine.accuracy", "ocr_engine.unlimited.cache", "matplotlib.pyplot"},
        "ocr_engine.accuracy": {"ocr_engine.metrics", "pymupdf"},
        "ocr_engine.unlimited.testing": {"torch", "ocr_engine.unlimited.manifest"},
        "ocr_engine.unlimited.cache": {"torch"}, "ocr_engine.unlimited.manifest": set(), "ocr_engine.metrics": set(),
        "ocr_engine.engine": {"ocr_engine.metrics", "ocr_engine.unlimited.cache", "ocr_engine.unlimited.manifest"},
        "kb.observe.dashboards": {"grafanalib.core"},
        "kb.pipeline.extract": {"tests.tiny_unlimited"},
    })
    assert found == {"ocr_engine.bench": "named bench", "ocr_engine.accuracy": "imported only by ocr_engine.bench",
                     "ocr_engine.unlimited.testing": "named testing", "kb.observe.dashboards": "imports grafanalib.core",
                     "kb.pipeline.extract": "imports tests.tiny_unlimited"}


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
        if path == chooser:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and _compares_backend_names(node):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
    assert any(isinstance(n, ast.Compare) and _compares_backend_names(n)
               for n in ast.walk(ast.parse(chooser.read_text()))), "the walk finds the chooser's own comparisons"


# --- the seam between the engine and the pipeline (issue 37) ------------------------------

WIRE = "ocr_engine.api"  # the engine's one public face
ADAPTER = "ocr_engine.engine"  # the one way to run the engine in process (local mode)
OUTSIDE_THE_ENGINE = ("kb", "kb_airflow", "dags")


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _engine_imports_past_the_wire(imports: dict[str, set[str]]) -> dict[str, list[str]]:
    """For each module, what of ``ocr_engine`` it imports that is neither the wire nor the adapter."""
    found = {name: sorted(m for m in names if _within(m, "ocr_engine") and m != "ocr_engine"
                          and not _within(m, WIRE) and not _within(m, ADAPTER))
             for name, names in imports.items()}
    return {name: past for name, past in found.items() if past}


def test_the_pipeline_reaches_the_engine_only_through_its_wire_and_one_adapter():
    modules = {name: _imported(path) for name, path in _modules().items()
               if any(_within(name, p) for p in OUTSIDE_THE_ENGINE)}
    assert any(_within(m, ADAPTER) for names in modules.values() for m in names), "the walk finds the adapter"
    assert _engine_imports_past_the_wire(modules) == {}


def test_the_wire_is_the_bottom_floor_of_the_engine():
    wire = {name: _imported(path) for name, path in _modules().items() if _within(name, WIRE)}
    assert len(wire) > 5, "the walk finds the wire's modules"
    below = {name: sorted(m for m in names if _within(m, "ocr_engine") and not _within(m, WIRE))
             for name, names in wire.items()}
    assert {name: found for name, found in below.items() if found} == {}


def test_the_walk_finds_an_engine_import_past_the_wire_where_there_is_one():
    # the check itself must be able to fail: kb as it was before issue 37
    assert _engine_imports_past_the_wire({
        "kb.pipeline.index": {"ocr_engine.schema", "ocr_engine.schema.FAILED", "kb.reading"},
        "kb.pipeline.extract": {"ocr_engine.api.pages", "ocr_engine.engine", "ocr_engine.engine.OcrEngine"},
        "kb.search.errors": {"ocr_engine.service.errors"},
        "kb.chunking": {"ocr_engine.api", "ocr_engine.api.tables"},
    }) == {"kb.pipeline.index": ["ocr_engine.schema", "ocr_engine.schema.FAILED"],
           "kb.search.errors": ["ocr_engine.service.errors"]}


# What the pipeline's OCR settings and a request's ``backend`` are made of: ``kb.settings.OcrMode``
# and ``ocr_engine.api.names`` say them; nothing outside the engine spells them as strings.
MODE_NAMES = {"auto", "service", "local"}


def _compares_names_as_strings(node: ast.Compare) -> bool:
    return any(isinstance(part, ast.Constant) and part.value in BACKEND_NAMES | MODE_NAMES
               for side in (node.left, *node.comparators) for part in ast.walk(side))


def _string_comparisons_of_names(source: str) -> list[int]:
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Compare) and _compares_names_as_strings(node))


def test_nothing_outside_the_engine_compares_a_backend_or_a_mode_as_a_string():
    found = [f"{path.relative_to(REPO)}:{line}" for name, path in sorted(_modules().items())
             if any(_within(name, p) for p in OUTSIDE_THE_ENGINE)
             for line in _string_comparisons_of_names(path.read_text())]
    assert found == []


def test_the_walk_finds_a_backend_or_a_mode_compared_as_a_string():
    # the check itself must be able to fail: as extract.py and hooks.py did before issue 37
    assert _string_comparisons_of_names(
        'ok = p.get("backend") == "textlayer" and p.get("status") == "ok"\n'
        'if settings.ocr_mode == "service":\n    pass\n'
        'kinds = classify() if backend == "auto" else []\n'
        'if mode is OcrMode.SERVICE or backend == AUTO or status in ("ok", "empty"):\n    pass\n') == [1, 2, 4]
