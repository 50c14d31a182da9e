"""The layering stays as the README draws it: no import cycles, one composition root.

Static checks over the source (no project module is imported): every import
statement of ``frontend/``, ``protocol/``, ``engine_core/`` and ``harness/``,
including those under ``if TYPE_CHECKING:`` and inside functions, is an edge of
the module graph. Around the product: ``harness/`` sits below both ``tests/``
and ``tools/`` and may import only the product; the product imports none of
the three; the tools never import the tests.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PRODUCT = ("frontend", "protocol", "engine_core")
PACKAGES = (*PRODUCT, "harness")

# Bottom to top; a module may import only from its own layer or those below.
LAYERS = [
    ("protocol",),
    ("frontend.bytelevel", "frontend.hub", "frontend.tokenizers", "frontend.model",
     "frontend.text", "frontend.errors",
     "frontend.chat_template", "frontend.engine_handshake", "frontend.engine_ranks",
     "frontend.engine_client",
     "frontend.routing", "frontend.fanout", "frontend.render",
     "frontend.grammars", "frontend.structured_outputs", "frontend.parsers",
     "frontend.lora"),
    ("frontend.state",),
    ("frontend.openai",),
    ("frontend.pooling",),
    ("frontend.ops",),
    ("frontend.supervisor", "frontend.server"),
    ("frontend.cli",),
]


def module_name(path: pathlib.Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def project_modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imported_modules(path: pathlib.Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (a ``from package import x`` names
    the submodule ``package.x`` if there is one, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
                break
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imported_modules(path, name, known) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in layer):
            return i
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_finder_sees_type_checking_imports(tmp_path):
    """Not vacuous: an import under TYPE_CHECKING closes a cycle too."""
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    known = {"a", "b"}
    graph = {name: imported_modules(tmp_path / f"{name}.py", name, known) for name in known}
    assert graph == {"a": {"b"}, "b": {"a"}}
    assert find_cycle(graph) == ["a", "b", "a"]


def test_only_the_cli_imports_the_server():
    importers = sorted(name for name, deps in import_graph().items() if "frontend.server" in deps)
    assert importers == ["frontend.cli"], importers


@pytest.mark.parametrize("module", sorted(m for m in project_modules()
                                          if layer_of(m) is not None))
def test_imports_go_down_the_layers(module):
    """A lower layer never names a higher one: handlers (frontend.openai) see the
    application state, not the server or the operator's pieces; the fan-out
    table, text and engine link know nothing of HTTP routes."""
    own = layer_of(module)
    upward = sorted(dep for dep in import_graph()[module]
                    if (layer := layer_of(dep)) is not None and layer > own)
    assert not upward, f"{module} imports from higher layers: {upward}"


def test_protocol_and_frontend_never_import_the_engine_side():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith(("protocol", "frontend")):
            assert not any(d.startswith("engine_core") for d in deps), (name, deps)


def top_level_imports(path: pathlib.Path) -> set[str]:
    """The top-level packages every absolute import of ``path`` names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def sources(*folders: str) -> list[pathlib.Path]:
    return [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]


@pytest.mark.parametrize("folders, forbidden", [
    (PRODUCT, {"harness", "tools", "tests"}),
    (("harness",), {"tools", "tests"}),
    (("tools",), {"tests"}),
], ids=["product", "harness", "tools"])
def test_imports_around_the_product(folders, forbidden):
    """The product stands alone; the harness serves both the tests and the tools."""
    wrong = {str(p.relative_to(ROOT)): sorted(top_level_imports(p) & forbidden)
             for p in sources(*folders)}
    assert not {path: names for path, names in wrong.items() if names}


def test_top_level_imports_sees_every_form(tmp_path):
    """Not vacuous: plain, dotted, from- and function-local imports all count."""
    path = tmp_path / "m.py"
    path.write_text("import tests.support\nfrom harness.procs import x\n"
                    "def f():\n    import tools\nfrom . import sibling\n")
    assert top_level_imports(path) == {"tests", "harness", "tools"}


def test_the_harness_is_not_installed():
    """The wheel holds the product only (pyproject's package list)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(include) == sorted(f"{name}*" for name in PRODUCT)


def edits_sys_path(path: pathlib.Path) -> bool:
    """A call of ``sys.path.<method>``, or an import waived as not at the top."""
    text = path.read_text()
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if (isinstance(node, ast.Call) and isinstance(func := node.func, ast.Attribute)
                and isinstance(owner := func.value, ast.Attribute) and owner.attr == "path"
                and isinstance(owner.value, ast.Name) and owner.value.id == "sys"):
            return True
    return re.search(r"#\s*noqa:\s*E402", text) is not None


@pytest.mark.parametrize("folder", ["tools", "tests", "harness"])
def test_run_as_modules_without_path_edits(folder):
    """Entry points run with ``python -m`` from the checkout: nothing edits sys.path."""
    assert not [str(p.relative_to(ROOT)) for p in sources(folder) if edits_sys_path(p)]


def test_path_edits_are_seen(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import sys\nsys.path.insert(0, '.')\n")
    assert edits_sys_path(path)
    path.write_text("import os\nimport sys  # noqa: " + "E402\n")
    assert edits_sys_path(path)
    path.write_text("import sys\nprint(sys.path)\n")
    assert not edits_sys_path(path)
