"""The xgrammar compatibility layer: xgrammar's verdicts, predicted without xgrammar.

vLLM's frontend validates every constraint with the grammar library of the
backend it picks, and its ``auto`` mode picks xgrammar unless xgrammar refuses
the constraint. xgrammar imports torch, so this frontend predicts its verdict
(:func:`xgrammar_error`): the rules vLLM itself applies before calling
xgrammar, what this xgrammar version is known to lack (found by comparing the
two libraries on many constraints, see tests/test_structured_outputs.py), and
llguidance for the rest of the syntax. A structural tag is checked against
xgrammar's structural-tag rules (:mod:`frontend.structured.structural_tag`),
its contents with these predictions.

``xgrammar_error`` returns ``None`` for a valid constraint, else the message
vLLM sends. Each call is cached.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import llguidance

from frontend.structured.guidance import CACHE_SIZE, grammar_error, json_grammar
from frontend.structured.rules import any_object, grammar_is_likely_lark, spec_text
from frontend.structured.structural_tag import check_structural_tag

# The string formats xgrammar's JSON-schema converter knows (others: unsupported).
XGRAMMAR_STRING_FORMATS = frozenset(
    {
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    }
)
# llguidance errors about JSON-schema features that xgrammar simply ignores.
_XGRAMMAR_IGNORES = (
    "Unimplemented keys",
    "Unknown format",
    "look-around",
    "min/maxProperties only supported",
    "incompatible types",
    "is not present in a registry",
    "Expected positive integer",
)


def xgrammar_error(kind: str, spec: Any) -> str | None:
    """vLLM's ``validate_xgrammar_grammar`` as far as it can be told without
    xgrammar; the messages are vLLM's (with llguidance's detail where vLLM
    shows xgrammar's)."""
    if kind in ("choice", "json_object"):
        return None  # a choice list always makes a valid EBNF grammar
    return _xgrammar_error(kind, spec_text(spec))


def xgrammar_accepts(kind: str, spec: Any) -> bool:
    return xgrammar_error(kind, spec) is None


@lru_cache(maxsize=CACHE_SIZE)
def _xgrammar_error(kind: str, text: str) -> str | None:
    if kind == "regex":
        problem = _xgrammar_regex_gap(text, in_json=False) or grammar_error(
            llguidance.LLMatcher.grammar_from_regex(text)
        )
        return f"Failed to transform regex into a grammar: {problem}" if problem else None
    if kind == "json":
        return _xgrammar_json_error(text)
    if kind == "grammar":
        return "Invalid grammar specification." if _xgrammar_grammar_gap(text) else None
    if kind == "structural_tag":
        try:
            check_structural_tag(json.loads(text), xgrammar_accepts)
        except (ValueError, TypeError, KeyError, AttributeError):
            return "Invalid structural tag specification."
        return None
    raise ValueError(f"not a constraint kind: {kind}")


def _xgrammar_json_error(text: str) -> str | None:
    try:
        schema = json.loads(text)
    except ValueError:
        return "Invalid JSON grammar specification."
    if xgrammar_unsupported_json_features(schema):
        return "The provided JSON schema contains features not supported by xgrammar."
    if not isinstance(schema, dict):
        return (
            "Failed to transform json schema into a grammar: The schema should be a "
            "string or a Pydantic model."
        )
    problem = _xgrammar_json_gap(schema)
    if problem is None:
        try:
            problem = grammar_error(json_grammar(schema))
        except (ValueError, TypeError) as e:
            problem = str(e)
        if problem and any(marker in problem for marker in _XGRAMMAR_IGNORES):
            problem = None
    return f"Failed to transform json schema into a grammar: {problem}" if problem else None


def xgrammar_unsupported_json_features(schema: Any) -> bool:
    """vLLM's ``has_xgrammar_unsupported_json_features``: keywords this xgrammar
    version ignores or gets wrong, so vLLM refuses them (auto: uses guidance)."""
    return any_object(schema, _xgrammar_unsupported_here)


def _xgrammar_unsupported_here(obj: dict) -> bool:
    types = _schema_types(obj)
    if types & {"integer", "number"} and "multipleOf" in obj:
        return True
    if "array" in types and any(
        k in obj for k in ("uniqueItems", "contains", "minContains", "maxContains")
    ):
        return True
    if "string" in types and "format" in obj and obj["format"] not in XGRAMMAR_STRING_FORMATS:
        return True
    if "string" in types and _pattern_with_length(obj):
        return True
    if "object" in types and "propertyNames" in obj:
        names = obj["propertyNames"]
        if (
            (isinstance(names, dict) and _pattern_with_length(names))
            or "patternProperties" in obj
            or "properties" in obj
            or obj.get("unevaluatedProperties", True) is not True
        ):
            return True
    if (
        "object" in types
        and isinstance(obj.get("patternProperties"), dict)
        and ("properties" in obj or len(obj["patternProperties"]) > 1)
    ):
        return True
    all_of = obj.get("allOf")
    return isinstance(all_of, list) and len(all_of) >= 2


def _schema_types(obj: dict) -> set[str]:
    t = obj.get("type")
    if isinstance(t, str):
        return {t}
    return {x for x in t if isinstance(x, str)} if isinstance(t, list) else set()


def _pattern_with_length(obj: dict) -> bool:
    return ("pattern" in obj or "format" in obj) and ("minLength" in obj or "maxLength" in obj)


def _xgrammar_json_gap(schema: dict) -> str | None:
    """What xgrammar's JSON-schema converter refuses although llguidance accepts it."""
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        if isinstance(pattern, str) and (problem := _xgrammar_regex_gap(pattern, in_json=True)):
            return problem
        for low, high in _BOUNDS:
            if _is_number(node.get(low)) and _is_number(node.get(high)) and node[low] > node[high]:
                return f"{low} {node[low]} is greater than {high} {node[high]}"
        properties = node.get("properties")
        minimum, known = (
            node.get("minProperties"),
            len(properties) if isinstance(properties, dict) else 0,
        )
        closed = (
            node.get("additionalProperties", False) is False and "patternProperties" not in node
        )
        if isinstance(minimum, int) and closed and minimum > known:
            return (
                "minProperties is greater than the number of properties, but additional "
                f"properties aren't allowed: {minimum} > {known}"
            )
        pending.extend(node.values())
    return None


# Bounds xgrammar checks everywhere; llguidance only where they make the
# whole schema unsatisfiable (not in an optional property, say).
_BOUNDS = (
    ("minLength", "maxLength"),
    ("minItems", "maxItems"),
    ("minimum", "maximum"),
    ("minProperties", "maxProperties"),
)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# xgrammar's regex converter (this version) has no Unicode classes, no inline
# flags or named (?P<..>) groups, no empty leading class and no stacked
# quantifiers; llguidance accepts all of these. In a JSON-schema "pattern"
# xgrammar is laxer: only the first and the third matter there.
_QUANTIFIERS = "*+?"


def _xgrammar_regex_gap(pattern: str, *, in_json: bool) -> str | None:
    i, n = 0, len(pattern)
    previous_quantifier = False
    while i < n:
        ch = pattern[i]
        quantifier = False
        if ch == "\\":
            if pattern[i + 1 : i + 2] in ("p", "P"):
                return "Unicode character class escape sequence is not supported yet."
            i += 2
        elif ch == "[":
            end = i + 1
            if pattern[end : end + 1] == "^":
                end += 1
                if pattern[end : end + 1] == "]":  # "[^]...]": a class with "]" in it
                    end += 1
            elif pattern[end : end + 1] == "]":
                return "Empty character class is not allowed in regex."
            while end < n and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            i = end + 1
        elif ch == "(" and pattern[i + 1 : i + 2] == "?" and not in_json:
            rest = pattern[i + 2 :]
            if not (rest.startswith((":", "=", "!", "<=", "<!")) or re.match(r"<\w+>", rest)):
                return "Group modifier flag is not supported yet."
            i += 2
        else:
            quantifier = ch in _QUANTIFIERS or (ch == "}" and i > 0)
            if quantifier and previous_quantifier and ch != "?" and not in_json:
                return "Two consecutive repetition modifiers are not allowed."
            i += 1
        # "a*?" is lazy, not stacked: a "?" ends the quantifier.
        previous_quantifier = quantifier and ch != "?"
    return None


def _xgrammar_grammar_gap(grammar: str) -> bool:
    """Whether xgrammar would refuse the Lark or EBNF ``grammar``."""
    if grammar_is_likely_lark(grammar):
        if re.search(r'<\|[^|>"]*\|>|<\[\d+\]>', _outside_strings(grammar)):
            return True  # special-token terminals: llguidance only
        return grammar_error(llguidance.LLMatcher.grammar_from_lark(grammar)) is not None
    code = _outside_strings(grammar)
    if re.search(r"\|\s*(\)|$)|\(\s*\|", code, re.M) or _duplicate_ebnf_rules(code):
        return True  # empty alternatives and redefined rules: xgrammar refuses them
    try:
        lark = llguidance.grammar_from("grammar", _unescape_ebnf(grammar))
    except ValueError:
        return True
    return grammar_error(lark) is not None


def _outside_strings(text: str) -> str:
    """``text`` with quoted strings, character classes and comments blanked."""
    return re.sub(r'"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]|/(\\.|[^/\\\n])+/|(#|//)[^\n]*', '""', text)


def _duplicate_ebnf_rules(code: str) -> bool:
    names = re.findall(r"^\s*([\w-]+)\s*::=", code, re.M)
    return len(names) != len(set(names))


def _unescape_ebnf(grammar: str) -> str:
    r"""llguidance's GBNF converter does not read ``\uXXXX``/``\xXX`` escapes;
    xgrammar does. Spell plain characters out for the check only."""

    def plain(match: re.Match) -> str:
        ch = chr(int(match.group(1) or match.group(2), 16))
        return ch if ch.isprintable() and ch not in '"\\]-^' else match.group(0)

    return re.sub(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})", plain, grammar)
