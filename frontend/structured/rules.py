"""vLLM's own rules for constraints, the same whatever grammar backend runs.

Nesting limits (``check_json_nesting``), how a grammar's dialect is told
(Lark or EBNF), the EBNF vLLM sends for a ``choice`` list, and how a
constraint is keyed as text.
"""

from __future__ import annotations

import json
import re
from typing import Any

# vllm/sampling_params.py: nesting limits of JSON schemas and structural tags.
MAX_JSON_NESTING = 64
STRUCTURAL_TAG_EXTRA_NESTING = 16


class NestingError(ValueError):
    """A JSON schema or structural tag nested deeper than vLLM allows."""


def check_json_nesting(spec: str | dict | None, *, structural_tag: bool = False) -> None:
    """vLLM's ``check_json_nesting``: raise :class:`NestingError` past 64 levels
    of objects and arrays (80 for a structural tag). Unparsable JSON passes:
    the grammar check reports it."""
    limit = MAX_JSON_NESTING + (STRUCTURAL_TAG_EXTRA_NESTING if structural_tag else 0)
    if spec and _nested_deeper_than(spec, limit):
        raise NestingError(
            "The JSON schema is nested too deeply: objects and arrays may "
            f"nest at most {MAX_JSON_NESTING} levels"
        )


def _nested_deeper_than(spec: str | dict, limit: int) -> bool:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except RecursionError:
            return True
        except ValueError:
            return False
    level: list[Any] = [spec]
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


def grammar_is_likely_lark(grammar: str) -> bool:
    """vLLM's test: a grammar with a ``::=`` rule (outside comments) is EBNF."""
    for line in grammar.split("\n"):
        if "::=" in re.sub(r"(#|//).*$", "", line):
            return False
    return True


def choice_as_grammar(choices: list[str]) -> str:
    """The EBNF grammar vLLM sends instead of ``choice`` to an xgrammar engine
    (which cannot compile a choice list): ``root ::= "a" | "b"``, escaped."""

    def escape(text: str) -> str:
        out = []
        for ch in text:
            if ch in _EBNF_ESCAPES:
                out.append(_EBNF_ESCAPES[ch])
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out)

    return "root ::= " + " | ".join(f'"{escape(c)}"' for c in choices)


_EBNF_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def parse_json_spec(spec: str | dict) -> Any:
    """The schema of a ``json`` constraint; ValueError if the string is not JSON."""
    return json.loads(spec) if isinstance(spec, str) else spec


def spec_text(spec: Any) -> str:
    """How vLLM keys a constraint (``get_structured_output_key``): JSON as text."""
    return spec if isinstance(spec, str) else json.dumps(spec)


def any_object(schema: Any, test) -> bool:
    """Whether ``test`` holds for ``schema`` or any dict nested in it (through
    dict values and lists), as vLLM's feature checks walk schemas."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if test(node):
                return True
            pending.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            pending.extend(v for v in node if isinstance(v, dict))
    return False
