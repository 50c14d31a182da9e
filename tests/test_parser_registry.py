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
    return _read_table(package, table)


def _read_table(package: str, table: str) -> dict[str, tuple[str, str]]:
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
        # (or a parser of the whole output, hf's: its output_parser does the work)
        on_base = issubclass(cls, bases) or cls.output_parser is not None
        assert issubclass(cls, protocol) and on_base, (name, cls.__mro__)


def vllm_names() -> list[tuple[str, str]]:
    """(kind, name) for every parser vLLM registers (at collection: without
    vLLM installed there are none, and the tests above fail or skip)."""
    if importlib.util.find_spec("vllm") is None:
        return []
    return [(kind, name) for kind, (_, package, table, *_) in sorted(KINDS.items())
            for name in sorted(_read_table(package, table))]


def compared_with_vllm(kind: str) -> set[str]:
    """The names whose parser the differential tests compare with vLLM's, delta by delta."""
    if kind == "tool":
        from tests.support.more_tool_cases import MORE_CASES
        from tests.test_tool_parsers import CASES

        return {*CASES, *MORE_CASES}
    from tests.test_reasoning_parsers import IN_PROCESS_ONLY

    return {*IN_PROCESS_ONLY, "deepseek_r1", "qwen3", "mistral"}  # (the last: MISTRAL)


# Not ported yet (issue 27): expected to fail, strictly (one that passes must leave the list).
NOT_YET: set[tuple[str, str]] = set()


@pytest.mark.parametrize("kind, name", [
    pytest.param(kind, name, id=f"{kind}-{name}", marks=[pytest.mark.xfail(
        strict=True, reason="not ported yet")] if (kind, name) in NOT_YET else [])
    for kind, name in vllm_names()])
def test_every_parser_vllm_registers_is_here_and_compared_with_vllms(kind, name):
    """Generated from vLLM's registry: a name vLLM registers that this frontend
    lacks, or whose parser no differential test runs, fails here by name."""
    ours, *_, load, _, _ = KINDS[kind]
    if name in registry.HARMONY_ONLY:  # gpt-oss: refused, with the reason
        with pytest.raises(ValueError, match="needs the Harmony encoding"):
            load(name)
        return
    assert name in ours, f"vLLM's {kind} parser {name!r} is not here"
    compared = {ours[n] for n in compared_with_vllm(kind)}  # an alias shares its class's cases
    assert ours[name] in compared, f"no differential cases run {name!r}'s parser"
