"""Checking structured-output constraints in the frontend, without xgrammar.

vLLM's frontend validates every constraint with the grammar library of the
backend it picks, and its ``auto`` mode picks xgrammar unless xgrammar refuses
the constraint, then guidance. xgrammar imports torch, so here:

* guidance's verdicts are exact: ``guidance_error`` runs the same llguidance
  calls as vLLM's guidance validation and returns vLLM's message;
* xgrammar's verdicts are predicted (``xgrammar_error``): the rules vLLM itself
  applies before calling xgrammar, what this xgrammar version is known to lack
  (found by comparing the two libraries on many constraints, see
  tests/test_structured_outputs.py), and llguidance for the rest of the syntax.

Both return ``None`` for a valid constraint, else the message vLLM sends. Each
call is cached: clients tend to send one schema many times.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import llguidance

# vllm/sampling_params.py: nesting limits of JSON schemas and structural tags.
MAX_JSON_NESTING = 64
STRUCTURAL_TAG_EXTRA_NESTING = 16
# The string formats xgrammar's JSON-schema converter knows (others: unsupported).
XGRAMMAR_STRING_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
    "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"})
# llguidance errors about JSON-schema features that xgrammar simply ignores.
_XGRAMMAR_IGNORES = ("Unimplemented keys", "Unknown format", "look-around",
                     "min/maxProperties only supported", "incompatible types",
                     "is not present in a registry", "Expected positive integer")
_CACHE_SIZE = 256


class NestingError(ValueError):
    """A JSON schema or structural tag nested deeper than vLLM allows."""


# ------------------------------------------------------------------ shared rules

def check_json_nesting(spec: str | dict | None, *, structural_tag: bool = False) -> None:
    """vLLM's ``check_json_nesting``: raise :class:`NestingError` past 64 levels
    of objects and arrays (80 for a structural tag). Unparsable JSON passes:
    the grammar check reports it."""
    limit = MAX_JSON_NESTING + (STRUCTURAL_TAG_EXTRA_NESTING if structural_tag else 0)
    if spec and _nested_deeper_than(spec, limit):
        raise NestingError("The JSON schema is nested too deeply: objects and arrays may "
                           f"nest at most {MAX_JSON_NESTING} levels")


def _nested_deeper_than(spec: str | dict, limit: int) -> bool:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except RecursionError:
            return True
        except ValueError:
            return False
    level = [spec]
    for _ in range(limit):
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
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


# ------------------------------------------------------------------ guidance (exact)

def guidance_error(kind: str, spec: Any) -> str | None:
    """vLLM's ``validate_guidance_grammar``: ``kind`` is the constraint's field."""
    return _guidance_error(kind, spec_text(spec))


class _TagError(Exception):
    """A structural tag vLLM's guidance backend refuses in words of its own."""


@lru_cache(maxsize=_CACHE_SIZE)
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
        return _guidance_json(text)
    if kind == "json_object":
        return _guidance_json('{"type": "object"}')
    if kind == "structural_tag":
        tag = json.loads(text)
        triggers = tag["triggers"]
        tags = []
        for item in tag["structures"]:
            begin = item["begin"]
            trigger = next((t for t in triggers if begin.startswith(t)), None)
            if trigger is None:
                raise _TagError(f"Trigger {begin} not found in triggers {triggers}")
            tags.append(llguidance.StructTag(trigger=trigger, begin=begin,
                                             grammar=_guidance_json(item["schema"]),
                                             end=item["end"]))
        if not tags:
            raise _TagError("No structural tags found in the grammar spec.")
        return llguidance.StructTag.to_grammar(tags)
    return llguidance.grammar_from(kind, text)  # regex, grammar (Lark or GBNF), choice


def _guidance_json(schema: str | dict) -> str:
    return llguidance.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": True})


def guidance_unsupported_json_features(schema: Any) -> bool:
    """vLLM's rule: llguidance lacks ``patternProperties`` (auto then uses outlines)."""
    return _any_object(schema, lambda obj: "patternProperties" in obj)


# ------------------------------------------------------------------ xgrammar (predicted)

def xgrammar_error(kind: str, spec: Any) -> str | None:
    """vLLM's ``validate_xgrammar_grammar`` as far as it can be told without
    xgrammar; the messages are vLLM's (with llguidance's detail where vLLM
    shows xgrammar's)."""
    if kind in ("choice", "json_object"):
        return None  # a choice list always makes a valid EBNF grammar
    return _xgrammar_error(kind, spec_text(spec))


@lru_cache(maxsize=_CACHE_SIZE)
def _xgrammar_error(kind: str, text: str) -> str | None:
    if kind == "regex":
        problem = _xgrammar_regex_gap(text, in_json=False) or _llguidance_error(
            llguidance.LLMatcher.grammar_from_regex(text))
        return f"Failed to transform regex into a grammar: {problem}" if problem else None
    if kind == "json":
        return _xgrammar_json_error(text)
    if kind == "grammar":
        return "Invalid grammar specification." if _xgrammar_grammar_gap(text) else None
    if kind == "structural_tag":
        try:
            check_structural_tag(json.loads(text))
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
        return ("Failed to transform json schema into a grammar: The schema should be a "
                "string or a Pydantic model.")
    problem = _xgrammar_json_gap(schema)
    if problem is None:
        try:
            problem = _llguidance_error(_guidance_json(schema))
        except (ValueError, TypeError) as e:
            problem = str(e)
        if problem and any(marker in problem for marker in _XGRAMMAR_IGNORES):
            problem = None
    return f"Failed to transform json schema into a grammar: {problem}" if problem else None


def _llguidance_error(grammar: str) -> str | None:
    return llguidance.LLMatcher.validate_grammar(grammar, None) or None


def xgrammar_unsupported_json_features(schema: Any) -> bool:
    """vLLM's ``has_xgrammar_unsupported_json_features``: keywords this xgrammar
    version ignores or gets wrong, so vLLM refuses them (auto: uses guidance)."""
    return _any_object(schema, _xgrammar_unsupported_here)


def _xgrammar_unsupported_here(obj: dict) -> bool:
    types = _schema_types(obj)
    if types & {"integer", "number"} and "multipleOf" in obj:
        return True
    if "array" in types and any(k in obj for k in ("uniqueItems", "contains", "minContains",
                                                   "maxContains")):
        return True
    if "string" in types and "format" in obj and obj["format"] not in XGRAMMAR_STRING_FORMATS:
        return True
    if "string" in types and _pattern_with_length(obj):
        return True
    if "object" in types and "propertyNames" in obj:
        names = obj["propertyNames"]
        if (isinstance(names, dict) and _pattern_with_length(names)) \
                or "patternProperties" in obj or "properties" in obj \
                or obj.get("unevaluatedProperties", True) is not True:
            return True
    if "object" in types and isinstance(obj.get("patternProperties"), dict) \
            and ("properties" in obj or len(obj["patternProperties"]) > 1):
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


def _any_object(schema: Any, test) -> bool:
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
            if _is_number(node.get(low)) and _is_number(node.get(high)) \
                    and node[low] > node[high]:
                return f"{low} {node[low]} is greater than {high} {node[high]}"
        properties = node.get("properties")
        minimum, known = node.get("minProperties"), len(properties) \
            if isinstance(properties, dict) else 0
        closed = node.get("additionalProperties", False) is False \
            and "patternProperties" not in node
        if isinstance(minimum, int) and closed and minimum > known:
            return ("minProperties is greater than the number of properties, but additional "
                    f"properties aren't allowed: {minimum} > {known}")
        pending.extend(node.values())
    return None


# Bounds xgrammar checks everywhere; llguidance only where they make the
# whole schema unsatisfiable (not in an optional property, say).
_BOUNDS = (("minLength", "maxLength"), ("minItems", "maxItems"), ("minimum", "maximum"),
           ("minProperties", "maxProperties"))


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
            if pattern[i + 1:i + 2] in ("p", "P"):
                return "Unicode character class escape sequence is not supported yet."
            i += 2
        elif ch == "[":
            end = i + 1
            if pattern[end:end + 1] == "^":
                end += 1
                if pattern[end:end + 1] == "]":  # "[^]...]": a class with "]" in it
                    end += 1
            elif pattern[end:end + 1] == "]":
                return "Empty character class is not allowed in regex."
            while end < n and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            i = end + 1
        elif ch == "(" and pattern[i + 1:i + 2] == "?" and not in_json:
            rest = pattern[i + 2:]
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
        return _llguidance_error(llguidance.LLMatcher.grammar_from_lark(grammar)) is not None
    code = _outside_strings(grammar)
    if re.search(r"\|\s*(\)|$)|\(\s*\|", code, re.M) or _duplicate_ebnf_rules(code):
        return True  # empty alternatives and redefined rules: xgrammar refuses them
    try:
        lark = llguidance.grammar_from("grammar", _unescape_ebnf(grammar))
    except ValueError:
        return True
    return _llguidance_error(lark) is not None


def _outside_strings(text: str) -> str:
    """``text`` with quoted strings, character classes and comments blanked."""
    return re.sub(r'"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]|/(\\.|[^/\\\n])+/|(#|//)[^\n]*', '""',
                  text)


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


# ------------------------------------------------------------------ structural tags

def check_structural_tag(tag: Any) -> None:
    """Raise ValueError/TypeError where xgrammar's ``Grammar.from_structural_tag``
    would refuse ``tag`` (the parsed JSON of a ``structural_tag``): the legacy
    ``structures``/``triggers`` form or the ``format`` tree, whose contents
    (schemas, regexes, EBNF grammars) get the checks above."""
    if not isinstance(tag, dict):
        raise TypeError("a structural tag is a JSON object")
    if "structures" in tag:
        triggers = _str_list(tag.get("triggers"))
        tags = []
        for item in _list(tag["structures"]):
            _require(isinstance(item, dict), "a structure is an object")
            _require(isinstance(item.get("schema"), (dict, bool)), "schema is a JSON schema")
            _check_schema(item["schema"])
            tags.append({"begin": _str(item.get("begin")), "end": _str(item.get("end"))})
        _check_triggered(triggers, tags)
        return
    _require(tag.get("type", "structural_tag") == "structural_tag", "type is structural_tag")
    _check_format(tag.get("format"))


def _check_format(fmt: Any) -> None:
    _require(isinstance(fmt, dict), "a format is an object")
    kind = fmt.get("type") or _implied_type(fmt)
    check = _FORMAT_CHECKS.get(kind)
    _require(check is not None, f"Format type not recognized: {kind}")
    check(fmt)


def _implied_type(fmt: dict) -> str | None:
    """A format without ``type`` is the first kind whose required fields it has."""
    return next((kind for kind, fields in _REQUIRED_FIELDS
                 if all(f in fmt for f in fields)), None)


def _check_tag(fmt: dict) -> None:
    _require(fmt.get("type", "tag") == "tag", "a tag")
    begin, end = fmt.get("begin"), fmt.get("end")
    if isinstance(begin, dict):
        _check_token(begin)
    else:
        _str(begin)
    if isinstance(end, dict):
        _check_token(end)
        ends = ["<token>"]
    else:
        ends = [end] if isinstance(end, str) else _str_list(end)
    _check_format(fmt.get("content"))
    unlimited = isinstance(fmt["content"], dict) and fmt["content"].get("type") == "any_text"
    _require(not unlimited or any(ends),
             "When the content is unlimited, at least one end string must be non-empty")


def _check_token(fmt: dict) -> None:
    # Without a tokenizer (vLLM validates without one) only token ids resolve.
    _require(fmt.get("type", "token") == "token" and _is_int(fmt.get("token")),
             "Token string resolution requires tokenizer_info")


def _check_triggered(triggers: list[str], tags: list[dict]) -> None:
    _require(bool(triggers), "triggers must be non-empty")
    _require(bool(tags), "tags must be non-empty")
    for tag in tags:
        begin = tag.get("begin")
        matches = sum(isinstance(begin, str) and begin.startswith(t) for t in triggers)
        _require(matches == 1, "each tag must match exactly one trigger")


def _check_tags(fmt: dict, *, key: str = "tags") -> list[dict]:
    tags = _list(fmt.get(key))
    _require(bool(tags), "tags must be non-empty")
    for tag in tags:
        _require(isinstance(tag, dict), "a tag is an object")
        _check_tag(tag)
    return tags


def _check_schema(schema: Any) -> None:
    if isinstance(schema, dict):
        _require(xgrammar_error("json", schema) is None, "invalid JSON schema")
    else:
        _require(schema is True, "Schema 'false' cannot accept any value")


def _check_any_text(fmt: dict) -> None:
    _str_list(fmt.get("excludes", []))
    for limit in ("max_tokens", "max_chars"):
        value = fmt.get(limit)
        _require(value is None or (_is_int(value) and 0 <= value < 2**31), f"{limit}")


def _check_repeat(fmt: dict) -> None:
    low, high = fmt.get("min"), fmt.get("max")
    _require(_is_int(low) and _is_int(high) and low <= high, "Repeat min must be <= max")
    _check_format(fmt.get("content"))


def _check_dispatch(fmt: dict, *, tokens: bool) -> None:
    for rule in _list(fmt.get("rules")):
        _require(isinstance(rule, list) and len(rule) == 2, "a rule is [key, format]")
        if tokens:
            _check_token({"token": rule[0]})
        else:
            _str(rule[0])
        _check_format(rule[1])


_FORMAT_CHECKS = {
    "const_string": lambda f: _str(f.get("value")),
    "json_schema": lambda f: (_check_schema(f.get("json_schema")),
                              _require(f.get("style", "json") in _JSON_STYLES, "style")),
    "qwen_xml_parameter": lambda f: _check_schema(f.get("json_schema")),
    "any_text": _check_any_text,
    "token": _check_token,
    "exclude_token": lambda f: [_check_token({"token": t}) for t in
                                _list(f.get("exclude_tokens", []))],
    "any_tokens": lambda f: [_check_token({"token": t}) for t in
                             _list(f.get("exclude_tokens", []))],
    "grammar": lambda f: _require(
        not grammar_is_likely_lark(_str(f.get("grammar")))
        and xgrammar_error("grammar", f["grammar"]) is None, "invalid EBNF grammar"),
    "regex": lambda f: _require(xgrammar_error("regex", _str(f.get("pattern"))) is None,
                                "invalid regex"),
    "sequence": lambda f: [_check_format(e) for e in _non_empty(f.get("elements"))],
    "or": lambda f: [_check_format(e) for e in _non_empty(f.get("elements"))],
    "tag": _check_tag,
    "triggered_tags": lambda f: _check_triggered(_str_list(f.get("triggers")),
                                                 _check_tags(f)),
    "token_triggered_tags": lambda f: ([_check_token({"token": t})
                                        for t in _non_empty(f.get("trigger_tokens"))],
                                       _check_tags(f)),
    "tags_with_separator": lambda f: (_check_tags(f), _str(f.get("separator"))),
    "optional": lambda f: _check_format(f.get("content")),
    "plus": lambda f: _check_format(f.get("content")),
    "star": lambda f: _check_format(f.get("content")),
    "repeat": _check_repeat,
    "dispatch": lambda f: _check_dispatch(f, tokens=False),
    "token_dispatch": lambda f: _check_dispatch(f, tokens=True),
}
# (kind, required fields) in the order xgrammar's format union tries them.
_REQUIRED_FIELDS = [
    ("const_string", ("value",)), ("json_schema", ("json_schema",)), ("any_text", ()),
]
_JSON_STYLES = frozenset({"json", "qwen_xml", "minimax_xml", "minimax_m3_xml", "deepseek_xml",
                          "glm_xml", "cohere_xml", "kimi_k3_xml", "deepseek_v4_1_xml"})


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _str(value: Any) -> str:
    _require(isinstance(value, str), "expected a string")
    return value


def _list(value: Any) -> list:
    _require(isinstance(value, list), "expected a list")
    return value


def _non_empty(value: Any) -> list:
    _require(bool(_list(value)), "must have at least one element")
    return value


def _str_list(value: Any) -> list[str]:
    return [_str(v) for v in _list(value)]
