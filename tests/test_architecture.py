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
     "frontend.chat_template", "frontend.chat_content_format", "frontend.engine_rejections",
     "frontend.engine_handshake", "frontend.engine_ranks", "frontend.engine_addresses",
     "frontend.engine_client",
     "frontend.routing", "frontend.choices", "frontend.fanout", "frontend.render",
     "frontend.multimodal",
     "frontend.parsers", "frontend.structured",
     "frontend.lora", "frontend.request_log"),
    ("frontend.state",),
    ("frontend.openai",),
    ("frontend.pooling", "frontend.anthropic", "frontend.responses"),
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


def _importers(target: str, graph: dict[str, set[str]]) -> set[str]:
    return {name for name, deps in graph.items()
            if any(d == target or d.startswith(target + ".") for d in deps)}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("package", ["frontend.parsers", "frontend.structured"])
def test_the_chat_feature_wing_never_imports_the_routes_or_the_state(package):
    """Output parsing and grammar constraints are libraries the routes use:
    they never name a route, the application state or the server."""
    graph = import_graph()
    offending = sorted(
        (name, dep) for name, deps in graph.items() if _inside(name, package)
        for dep in deps
        if any(_inside(dep, p) for p in ("frontend.openai", "frontend.state", "frontend.server",
                                         "frontend.ops", "frontend.fanout"))
    )
    assert not offending, offending


def test_parsers_do_not_import_structured_outputs():
    """One direction between the two: the constraints read the parsers' names
    and traits (vLLM's adjust_request, the config's reasoning parser); the
    parsers know nothing of grammars."""
    graph = import_graph()
    offending = sorted(name for name in _importers("frontend.structured", graph)
                       if _inside(name, "frontend.parsers"))
    assert not offending, offending


def test_tooling_is_the_routes_only_bridge_to_the_parsers():
    """Among the routes, only frontend.openai.tooling imports the parsers, and
    the chat route reaches structured outputs through it too."""
    graph = import_graph()
    routes = {name for name in graph if _inside(name, "frontend.openai")}
    assert sorted(routes & _importers("frontend.parsers", graph)) == ["frontend.openai.tooling"]
    assert "frontend.openai.chat" not in _importers("frontend.structured", graph)


PARSER_PACKAGES = ("frontend.parsers.tool", "frontend.parsers.reasoning")
# What every parser builds on: the protocol, its two bases and the shared parts.
PARSER_FLOOR = {"frontend.parsers.tool.base", "frontend.parsers.reasoning.base",
                "frontend.parsers.tool.grammar_based", "frontend.parsers.reasoning.grammar_based"}


def concrete_parsers(graph: dict[str, set[str]]) -> set[str]:
    """The modules that hold one parser each (``parsers/tool/hermes.py``, ...)."""
    return {name for name in graph if name.rpartition(".")[0] in PARSER_PACKAGES
            and name not in PARSER_FLOOR}


def test_no_module_names_a_parser_but_another_parser():
    """A parser is reached through its registry line only (imported by name on
    first use): the composite, the constraints and the routes never import one,
    so adding a parser edits nothing but its module and that line. A parser may
    build on another (a variant of a format)."""
    graph = import_graph()
    parsers = concrete_parsers(graph)
    assert "frontend.parsers.tool.hermes" in parsers  # not vacuous
    offending = sorted((name, dep) for name, deps in graph.items() for dep in deps & parsers
                       if name not in parsers)
    assert not offending, offending


def test_the_parser_protocol_and_the_grammars_sit_below_the_parsers():
    """The two bases of the protocol need only the delta types and the
    tokenizer facts; the grammar package (a model's format as data) knows no
    parser class, no adapter and no composite."""
    graph = import_graph()
    for base in ("frontend.parsers.tool.base", "frontend.parsers.reasoning.base"):
        assert graph[base] <= {"frontend.parsers.types", "frontend.parsers.tokenizer"}, base
    above = (*PARSER_PACKAGES, "frontend.parsers.composite", "frontend.parsers.registry",
             "frontend.parsers.text_so_far", "frontend.parsers.forced",
             "frontend.parsers.message")
    grammar = sorted(name for name in graph if _inside(name, "frontend.parsers.grammar"))
    assert grammar
    offending = sorted((name, dep) for name in grammar for dep in graph[name]
                       if any(_inside(dep, p) for p in above))
    assert not offending, offending


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
