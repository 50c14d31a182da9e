"""The guidance backend's verdicts on a constraint: exact.

``guidance_error`` runs the same llguidance calls as vLLM's
``validate_guidance_grammar`` and returns vLLM's message (None: valid). The
calls are cached: clients tend to send one schema many times. llguidance is
also what the xgrammar compatibility layer checks syntax with
(:func:`json_grammar`, :func:`grammar_error`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, cast

import llguidance

from frontend.structured.rules import any_object, spec_text

CACHE_SIZE = 256


def guidance_error(kind: str, spec: Any) -> str | None:
    """vLLM's ``validate_guidance_grammar``: ``kind`` is the constraint's field."""
    return _guidance_error(kind, spec_text(spec))


class _TagError(Exception):
    """A structural tag vLLM's guidance backend refuses in words of its own."""


@lru_cache(maxsize=CACHE_SIZE)
def _guidance_error(kind: str, text: str) -> str | None:
    try:
        grammar = _guidance_grammar(kind, text)
    except _TagError as e:
        return str(e)
    except (ValueError, KeyError, TypeError) as e:
        return f"Invalid grammar specification: {e}"
    error = llguidance.LLMatcher.validate_grammar(grammar, None)
    return f"Grammar error: {error}" if error else None


def _guidance_grammar(kind: str, text: str) -> str:
    """The llguidance grammar vLLM's guidance backend builds (whitespace-flexible JSON)."""
    if kind == "json":
        return json_grammar(text)
    if kind == "json_object":
        return json_grammar('{"type": "object"}')
    if kind == "structural_tag":
        tag = json.loads(text)
        triggers = tag["triggers"]
        tags = []
        for item in tag["structures"]:
            begin = item["begin"]
            trigger = next((t for t in triggers if begin.startswith(t)), None)
            if trigger is None:
                raise _TagError(f"Trigger {begin} not found in triggers {triggers}")
            tags.append(
                llguidance.StructTag(
                    trigger=trigger,
                    begin=begin,
                    grammar=json_grammar(item["schema"]),
                    end=item["end"],
                )
            )
        if not tags:
            raise _TagError("No structural tags found in the grammar spec.")
        return llguidance.StructTag.to_grammar(tags)
    # regex, grammar (Lark or GBNF), choice: llguidance refuses a kind it lacks
    return llguidance.grammar_from(cast("llguidance.GrammarFormat", kind), text)


def json_grammar(schema: str | dict) -> str:
    """The llguidance grammar of a JSON schema, as vLLM's guidance backend makes it."""
    return llguidance.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": True}
    )


def grammar_error(grammar: str) -> str | None:
    """llguidance's complaint about a grammar it built, None if it has none."""
    return llguidance.LLMatcher.validate_grammar(grammar, None) or None


def guidance_unsupported_json_features(schema: Any) -> bool:
    """vLLM's rule: llguidance lacks ``patternProperties`` (auto then uses outlines)."""
    return any_object(schema, lambda obj: "patternProperties" in obj)
