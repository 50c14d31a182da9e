"""A parser is one module and one registry line, under vLLM 0.32's own name.

vLLM's tables (``_TOOL_PARSERS_TO_REGISTER`` and
``_REASONING_PARSERS_TO_REGISTER``: name -> (module, class)) are read from its
installed source, so an alias here is an alias there.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
from collections import defaultdict

import pytest

from frontend.parsers import registry
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser
from frontend.parsers.text_so_far import TextSoFarReasoningParser, TextSoFarToolParser
from frontend.parsers.tool.base import ToolParser
from frontend.parsers.tool.grammar_based import GrammarToolParser
from tests.support.requirements import require_vllm

PARSERS = pathlib.Path(registry.__file__).parent
KINDS = {
    # ours, vLLM's package and table, our modules' folder, the loader, the bases
    "tool": (registry.TOOL_PARSERS, "vllm.tool_parsers", "_TOOL_PARSERS_TO_REGISTER",
             "tool", registry.tool_parser_class, ToolParser,
             (TextSoFarToolParser, GrammarToolParser)),
    "reasoning": (registry.REASONING_PARSERS, "vllm.reasoning",
                  "_REASONING_PARSERS_TO_REGISTER", "reasoning", registry.reasoning_parser_class,
                  ReasoningParser, (TextSoFarReasoningParser, GrammarReasoningParser)),
}


def vllm_table(package: str, table: str) -> dict[str, tuple[str, str]]:
    """vLLM's name -> (module, class) table, from its source (vLLM is not imported)."""
    require_vllm()
    vllm = importlib.util.find_spec("vllm")  # finds the package without importing it
    assert vllm is not None and vllm.origin
    source = pathlib.Path(vllm.origin).parent.joinpath(
        *package.split(".")[1:], "__init__.py")
    tree = ast.parse(source.read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == table):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{table} not found in {source}")


def groups(table: dict[str, object]) -> set[frozenset[str]]:
    """The names that share one parser class."""
    by_target: dict[object, set[str]] = defaultdict(set)
    for name, target in table.items():
        by_target[target].add(name)
    return {frozenset(names) for names in by_target.values()}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_name_is_vllms_and_aliases_are_vllms_aliases(kind):
    ours, package, table, *_ = KINDS[kind]
    theirs = vllm_table(package, table)
    assert set(ours) <= set(theirs), sorted(set(ours) - set(theirs))
    theirs_here = {name: theirs[name] for name in ours}
    assert groups(ours) == groups(theirs_here)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_entry_is_one_module_with_its_class_on_one_base(kind):
    ours, _, _, folder, load, protocol, bases = KINDS[kind]
    for name, (module, cls_name) in ours.items():
        path = PARSERS / folder / f"{module}.py"
        assert path.is_file(), (name, path)
        cls = load(name)
        assert cls.__name__ == cls_name and cls.__module__.endswith(f".{folder}.{module}")
        assert issubclass(cls, protocol) and issubclass(cls, bases), (name, cls.__mro__)
