"""Parser names (vLLM 0.32's ``--tool-call-parser`` / ``--reasoning-parser``).

Each name maps to ``module:Class``; a parser's module is imported when the
name is first used. A new parser is its module and one line here (see the
package docstring).
"""

from __future__ import annotations

import importlib

from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tool.base import ToolParser

_TOOL = "frontend.parsers.tool."
_REASONING = "frontend.parsers.reasoning."

TOOL_PARSERS: dict[str, str] = {
    "hermes": _TOOL + "hermes:HermesToolParser",
    "qwen3_json": _TOOL + "hermes:HermesToolParser",  # an alias in vLLM 0.32 too
    "llama3_json": _TOOL + "llama3_json:Llama3JsonToolParser",
    "llama4_json": _TOOL + "llama3_json:Llama3JsonToolParser",
    "mistral": _TOOL + "mistral:MistralToolParser",
    "pythonic": _TOOL + "pythonic:PythonicToolParser",
    "qwen3_coder": _TOOL + "qwen3_coder:Qwen3CoderToolParser",
    "qwen3_xml": _TOOL + "qwen3_coder:Qwen3CoderToolParser",
}

REASONING_PARSERS: dict[str, str] = {
    "deepseek_r1": _REASONING + "deepseek_r1:DeepSeekR1ReasoningParser",
    "mistral": _REASONING + "mistral:MistralReasoningParser",
    "qwen3": _REASONING + "qwen3:Qwen3ReasoningParser",
}


def _load(table: dict[str, str], name: str, kind: str) -> type:
    target = table.get(name)
    if target is None:
        raise ValueError(f"unknown {kind} {name!r}; available: {', '.join(sorted(table))}")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def tool_parser_class(name: str) -> type[ToolParser]:
    return _load(TOOL_PARSERS, name, "tool call parser")


def reasoning_parser_class(name: str) -> type[ReasoningParser]:
    return _load(REASONING_PARSERS, name, "reasoning parser")
