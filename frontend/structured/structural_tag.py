"""Structural tags: xgrammar's constraint language of tags around constrained contents.

Three jobs around one format, each as vLLM 0.32 does it:

* validation (:func:`check_structural_tag`): where xgrammar's
  ``Grammar.from_structural_tag`` would refuse a tag (the legacy
  ``structures``/``triggers`` form or the ``format`` tree); the contents'
  schemas, regexes and grammars are judged by the caller's ``accepts``
  (the xgrammar compatibility layer's predictions);
* a ``response_format`` of type ``structural_tag`` as the JSON text vLLM
  sends (:func:`response_format_payload`);
* the tags that constrain tool calls to a parser's own syntax
  (:func:`structural_tag_json`, :func:`tools_or_output`): for parsers with
  a structural tag model vLLM does not force "required"/named tool choice
  with a plain JSON schema but with a tag that allows exactly the parser's
  call syntax (and, for "auto", text with calls triggered by the call
  prefix). The builders (:mod:`frontend.structured.tool_tags`) give the
  same JSON as vLLM (``json.dumps(tag.model_dump())``); a new format is one
  builder function and one ``BUILDERS`` entry there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeGuard

from frontend.structured.rules import grammar_is_likely_lark
from frontend.structured.tool_tags import BUILDERS, single_call

# accepts(kind, spec): whether a constraint of that kind ("json", "regex",
# "grammar") is one the grammar library takes.
Accepts = Callable[[str, Any], bool]

# ---------------------------------------------------------------------------- validation


def check_structural_tag(tag: Any, accepts: Accepts) -> None:
    """Raise ValueError/TypeError where xgrammar's ``Grammar.from_structural_tag``
    would refuse ``tag`` (the parsed JSON of a ``structural_tag``)."""
    _Checker(accepts).tag(tag)


class _Checker:
    def __init__(self, accepts: Accepts) -> None:
        self.accepts = accepts
        self.formats: dict[str, Callable[[Any], object]] = {
            "const_string": lambda f: _str(f.get("value")),
            "json_schema": self.json_schema,
            "qwen_xml_parameter": lambda f: self.schema(f.get("json_schema")),
            "any_text": _check_any_text,
            "token": _check_token,
            "exclude_token": lambda f: _check_tokens(_list(f.get("exclude_tokens", []))),
            "any_tokens": lambda f: _check_tokens(_list(f.get("exclude_tokens", []))),
            "grammar": lambda f: _require(
                not grammar_is_likely_lark(_str(f.get("grammar")))
                and accepts("grammar", f["grammar"]),
                "invalid EBNF grammar",
            ),
            "regex": lambda f: _require(accepts("regex", _str(f.get("pattern"))), "invalid regex"),
            "sequence": self.elements,
            "or": self.elements,
            "tag": self.tag_format,
            "triggered_tags": lambda f: _check_triggered(
                _str_list(f.get("triggers")), self.tags(f)
            ),
            "token_triggered_tags": self.token_triggered_tags,
            "tags_with_separator": lambda f: (self.tags(f), _str(f.get("separator"))),
            "optional": lambda f: self.format(f.get("content")),
            "plus": lambda f: self.format(f.get("content")),
            "star": lambda f: self.format(f.get("content")),
            "repeat": self.repeat,
            "dispatch": lambda f: self.dispatch(f, tokens=False),
            "token_dispatch": lambda f: self.dispatch(f, tokens=True),
        }

    def tag(self, tag: Any) -> None:
        if not isinstance(tag, dict):
            raise TypeError("a structural tag is a JSON object")
        if "structures" in tag:
            triggers = _str_list(tag.get("triggers"))
            tags = []
            for item in _list(tag["structures"]):
                _require(isinstance(item, dict), "a structure is an object")
                _require(isinstance(item.get("schema"), (dict, bool)), "schema is a JSON schema")
                self.schema(item["schema"])
                tags.append({"begin": _str(item.get("begin")), "end": _str(item.get("end"))})
            _check_triggered(triggers, tags)
            return
        _require(tag.get("type", "structural_tag") == "structural_tag", "type is structural_tag")
        self.format(tag.get("format"))

    def format(self, fmt: Any) -> None:
        _require(isinstance(fmt, dict), "a format is an object")
        kind = fmt.get("type") or _implied_type(fmt)
        check = self.formats.get(kind) if kind is not None else None
        if check is None:
            raise ValueError(f"Format type not recognized: {kind}")
        check(fmt)

    def json_schema(self, fmt: dict) -> None:
        self.schema(fmt.get("json_schema"))
        _require(fmt.get("style", "json") in _JSON_STYLES, "style")

    def elements(self, fmt: dict) -> None:
        for element in _non_empty(fmt.get("elements")):
            self.format(element)

    def token_triggered_tags(self, fmt: dict) -> None:
        _check_tokens(_non_empty(fmt.get("trigger_tokens")))
        self.tags(fmt)

    def schema(self, schema: Any) -> None:
        if isinstance(schema, dict):
            _require(self.accepts("json", schema), "invalid JSON schema")
        else:
            _require(schema is True, "Schema 'false' cannot accept any value")

    def tag_format(self, fmt: dict) -> None:
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
        self.format(fmt.get("content"))
        unlimited = isinstance(fmt["content"], dict) and fmt["content"].get("type") == "any_text"
        _require(
            not unlimited or any(ends),
            "When the content is unlimited, at least one end string must be non-empty",
        )

    def tags(self, fmt: dict) -> list[dict]:
        tags = _list(fmt.get("tags"))
        _require(bool(tags), "tags must be non-empty")
        for tag in tags:
            _require(isinstance(tag, dict), "a tag is an object")
            self.tag_format(tag)
        return tags

    def repeat(self, fmt: dict) -> None:
        low, high = fmt.get("min"), fmt.get("max")
        _require(_is_int(low) and _is_int(high) and low <= high, "Repeat min must be <= max")
        self.format(fmt.get("content"))

    def dispatch(self, fmt: dict, *, tokens: bool) -> None:
        for rule in _list(fmt.get("rules")):
            _require(isinstance(rule, list) and len(rule) == 2, "a rule is [key, format]")
            if tokens:
                _check_token({"token": rule[0]})
            else:
                _str(rule[0])
            self.format(rule[1])


def _implied_type(fmt: dict) -> str | None:
    """A format without ``type`` is the first kind whose required fields it has."""
    return next((kind for kind, fields in _REQUIRED_FIELDS if all(f in fmt for f in fields)), None)


def _check_token(fmt: dict) -> None:
    # Without a tokenizer (vLLM validates without one) only token ids resolve.
    _require(
        fmt.get("type", "token") == "token" and _is_int(fmt.get("token")),
        "Token string resolution requires tokenizer_info",
    )


def _check_tokens(tokens: list) -> None:
    for token in tokens:
        _check_token({"token": token})


def _check_triggered(triggers: list[str], tags: list[dict]) -> None:
    _require(bool(triggers), "triggers must be non-empty")
    _require(bool(tags), "tags must be non-empty")
    for tag in tags:
        begin = tag.get("begin")
        matches = sum(isinstance(begin, str) and begin.startswith(t) for t in triggers)
        _require(matches == 1, "each tag must match exactly one trigger")


def _check_any_text(fmt: dict) -> None:
    _str_list(fmt.get("excludes", []))
    for limit in ("max_tokens", "max_chars"):
        value = fmt.get(limit)
        _require(value is None or (_is_int(value) and 0 <= value < 2**31), f"{limit}")


# (kind, required fields) in the order xgrammar's format union tries them.
_REQUIRED_FIELDS = [
    ("const_string", ("value",)),
    ("json_schema", ("json_schema",)),
    ("any_text", ()),
]
_JSON_STYLES = frozenset(
    {
        "json",
        "qwen_xml",
        "minimax_xml",
        "minimax_m3_xml",
        "deepseek_xml",
        "glm_xml",
        "cohere_xml",
        "kimi_k3_xml",
        "deepseek_v4_1_xml",
    }
)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_int(value: Any) -> TypeGuard[int]:
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


# ---------------------------------------------------------------------------- response_format


def response_format_payload(response_format: dict) -> str | None:
    """The JSON text vLLM makes of a structural-tag response_format (its model's
    dump: declared fields, then extra ones), or None where its model refuses it."""
    extra = {
        k: v
        for k, v in response_format.items()
        if k not in ("type", "format", "structures", "triggers")
    }
    if "format" in response_format:
        return json.dumps({"type": "structural_tag", "format": response_format["format"], **extra})
    structures, triggers = response_format.get("structures"), response_format.get("triggers")
    if not (
        isinstance(structures, list)
        and isinstance(triggers, list)
        and all(isinstance(t, str) for t in triggers)
    ):
        return None
    dumped = []
    for item in structures:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("begin"), str)
            and isinstance(item.get("end"), str)
            and isinstance(item.get("schema"), (dict, type(None)))
        ):
            return None
        rest = {k: v for k, v in item.items() if k not in ("begin", "schema", "end")}
        dumped.append(
            {"begin": item["begin"], "schema": item.get("schema"), "end": item["end"], **rest}
        )
    return json.dumps(
        {"type": "structural_tag", "structures": dumped, "triggers": triggers, **extra}
    )


def structural_tag(
    model: str,
    tools: list[dict],
    tool_choice: Any,
    parallel_tool_calls: bool | None = True,
    token_suffix: str = "",
) -> dict:
    """The structural tag vLLM sends for these tools and tool choice
    (``token_suffix``: the markers' suffix, for the builders that take one)."""
    name = None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
    if name is not None:
        tools, choice = [t for t in tools if t["function"]["name"] == name], "forced"
        if len(tools) != 1:
            raise ValueError("Forced tool choice must resolve to exactly one tool.")
    else:
        choice = "required" if tool_choice == "required" else "auto"
    builder = BUILDERS[model]
    tag = builder(tools, choice, token_suffix) if token_suffix else builder(tools, choice)
    if parallel_tool_calls is False:
        single_call(tag)
    return {"type": "structural_tag", "format": tag}


def structural_tag_json(
    model: str,
    tools: list[dict],
    tool_choice: Any,
    parallel_tool_calls: bool | None = True,
    token_suffix: str = "",
) -> str:
    """As vLLM puts it in ``structured_outputs.structural_tag``."""
    return json.dumps(structural_tag(model, tools, tool_choice, parallel_tool_calls, token_suffix))


def output_format(kind: str, spec: Any) -> dict | None:
    """A request's own constraint as an xgrammar format (vLLM's
    ``structured_outputs_to_format``; ``grammar`` is EBNF); None for a
    structural tag, which this frontend does not rebuild."""
    if kind == "json_object":
        return _json_format({"type": "object"})
    if kind == "json":
        return _json_format(json.loads(spec) if isinstance(spec, str) else spec)
    if kind == "regex":
        return {"type": "regex", "pattern": spec}
    if kind == "choice":
        return {
            "type": "or",
            "elements": [{"type": "const_string", "value": value} for value in spec],
        }
    if kind == "grammar":
        return {"type": "grammar", "grammar": spec}
    return None


def _json_format(schema: Any) -> dict:
    return {
        "type": "json_schema",
        "json_schema": schema,
        "style": "json",
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }


def tools_or_output(
    model: str,
    tools: list[dict],
    parallel_tool_calls: bool | None,
    output: dict,
    token_suffix: str = "",
) -> str:
    """tool_choice="auto" with strict tools and the request's own constraint:
    vLLM allows either a tool call (its "required" tag) or the constrained
    output, as ``structured_outputs.structural_tag`` text."""
    calls = structural_tag(model, tools, "required", parallel_tool_calls, token_suffix)["format"]
    return json.dumps(
        {"type": "structural_tag", "format": {"type": "or", "elements": [calls, output]}}
    )
