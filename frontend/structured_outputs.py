"""``response_format`` and ``structured_outputs`` -> the engine's StructuredOutputsParams.

vLLM 0.32's semantics, for /v1/completions and /v1/chat/completions alike;
each step is where vLLM runs it, so errors come in vLLM's order and words:

1. request validation (vLLM's ``mode="before"`` model validators, run in
   pydantic's order with the route's other ones): :func:`check_response_format`
   and :func:`check_structured_outputs_count`;
2. field validation (pydantic's; schema errors): :func:`parse`;
3. building SamplingParams (after the model-dependent sampling checks):
   :func:`resolve` merges ``response_format`` over ``structured_outputs``,
   validates the constraint and picks the grammar backend, like vLLM's
   ``SamplingParams._validate_structured_outputs``.

``resolve`` can take a few milliseconds for a large schema (cached after the
first time); the llguidance calls drop the GIL, so a handler may run it in a
worker thread.

The backend (``--structured-outputs-config.backend``, vLLM's flag and default
``auto``) is what this frontend writes into each request's ``_backend``. The
engine builds one backend from the first constrained request it sees and uses
it for every later one, whatever their ``_backend`` says; vLLM's own server
sends the same values, so a shared engine behaves the same behind either.
Whitespace options take effect in the engine: give them to the engine's
``vllm serve --headless --structured-outputs-config ...`` as well. So does the
reasoning parser (``reasoning_parser``, or ``--reasoning-parser``): the engine
uses its own to hold a grammar back until the reasoning has ended.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from typing import Any

from frontend import grammars
from frontend.errors import ApiError, from_validation
from frontend.parsers.registry import REASONING_PARSERS
from protocol.errors import ValidationError
from protocol.structured import StructuredOutputsParams, check_content

FLAG = "--structured-outputs-config"
BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")
# outlines and lm-format-enforcer validate with their own libraries (outlines
# with torch); this frontend cannot check grammars for them.
SUPPORTED_BACKENDS = ("auto", "xgrammar", "guidance")
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


# ---------------------------------------------------------------------------- config

@dataclass(frozen=True)
class StructuredOutputsConfig:
    """vLLM's ``StructuredOutputsConfig`` (names, defaults and rules)."""

    backend: str = "auto"
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    reasoning_parser: str = ""
    reasoning_parser_plugin: str = ""
    enable_in_reasoning: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"{FLAG}: backend must be one of {', '.join(BACKENDS)}, "
                             f"got {self.backend!r}")
        if self.backend not in SUPPORTED_BACKENDS:
            raise ValueError(f"{FLAG}: the {self.backend!r} backend is not supported by this "
                             f"frontend (it validates grammars with llguidance); use one of "
                             f"{', '.join(SUPPORTED_BACKENDS)}")
        if self.disable_any_whitespace and self.backend not in ("xgrammar", "guidance"):
            raise ValueError("disable_any_whitespace is only supported for xgrammar and "
                             "guidance backends.")
        if self.disable_additional_properties and self.backend != "guidance":
            raise ValueError("disable_additional_properties is only supported for the "
                             "guidance backend.")
        if self.reasoning_parser and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"unknown reasoning parser {self.reasoning_parser!r}; available: "
                             f"{', '.join(sorted(REASONING_PARSERS))}")
        if self.reasoning_parser_plugin:
            raise ValueError(f"{FLAG}: reasoning parser plugins are not supported by this "
                             "frontend (its parsers are its own code)")


_CONFIG_FIELDS = {f.name: f.type for f in fields(StructuredOutputsConfig)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--structured-outputs-config JSON`` and vLLM's dotted form of each key
    (``--structured-outputs-config.backend guidance``); a dotted value is read
    as JSON if it parses, else as a string, as vLLM reads it."""
    group = parser.add_argument_group("structured outputs (vLLM's StructuredOutputsConfig)")
    group.add_argument(FLAG, dest="structured_outputs_config", type=_json_object,
                       default={}, metavar="JSON",
                       help='e.g. \'{"backend": "guidance"}\'; backend: auto (default: '
                            'xgrammar, else guidance, as vLLM), xgrammar or guidance')
    for name in _CONFIG_FIELDS:
        group.add_argument(f"{FLAG}.{name}", f"--structured_outputs_config.{name}",
                           dest=f"structured_outputs_config.{name}", type=_cli_value,
                           default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace) -> StructuredOutputsConfig:
    """The config from parsed arguments; the dotted keys override the JSON ones.
    Raises ValueError with a message for the command line."""
    values = dict(args.structured_outputs_config)
    for name in _CONFIG_FIELDS:
        dotted = getattr(args, f"structured_outputs_config.{name}", None)
        if dotted is not None:
            values[name] = dotted
    return make_config(values)


def make_config(values: dict[str, Any]) -> StructuredOutputsConfig:
    unknown = set(values) - set(_CONFIG_FIELDS)
    if unknown:
        raise ValueError(f"{FLAG}: unknown key(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(_CONFIG_FIELDS)}")
    converted = {}
    for name, value in values.items():
        if _CONFIG_FIELDS[name] == "bool":
            value = _lax_bool(value)
            if value is None:
                raise ValueError(f"{FLAG}: {name} must be a boolean, got "
                                 f"{values[name]!r}")
        elif not isinstance(value, str):
            raise ValueError(f"{FLAG}: {name} must be a string, got {value!r}")
        converted[name] = value
    return StructuredOutputsConfig(**converted)


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _cli_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _lax_bool(value: Any) -> bool | None:
    """pydantic's lax bool: True/False, 0/1 and the usual words; else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "t", "yes", "y", "on"):
            return True
        if word in ("0", "false", "f", "no", "n", "off"):
            return False
    return None


# ---------------------------------------------------------------------------- 1. model validators

def check_response_format(response_format: Any) -> None:
    """vLLM's ``validate_response_format`` model validator (both routes)."""
    if not isinstance(response_format, dict):
        return  # not a model: the field validation (parse) reports it
    kind = response_format.get("type")
    if kind == "json_schema" and response_format.get("json_schema") is None:
        raise _invalid("When response_format type is 'json_schema', the 'json_schema' "
                       "field must be provided.", "response_format")
    if kind == "structural_tag":
        payload = _structural_tag_payload(response_format)
        if payload is None:
            raise _invalid_tag("response_format")
        _check_structural_tag_payload(payload, "response_format")


def check_structured_outputs_count(structured_outputs: Any, *, chat: bool,
                                   tool_choice: Any = "none") -> None:
    """vLLM's ``check_structured_outputs_count`` model validator; ``tool_choice``
    is the chat request's value after vLLM's ``check_tool_usage`` (which runs
    first), ``"none"`` when absent."""
    if not isinstance(structured_outputs, dict):
        # vLLM answers 500 ("'str' object has no attribute 'get'"); parse() gives a 400.
        return
    count = sum(structured_outputs.get(k) is not None for k in ("json", "regex", "choice"))
    if count > 1:
        message = ("You can only use one kind of constraints for structured outputs "
                   "('json', 'regex' or 'choice').")
        raise (from_validation(ValidationError(message)) if chat
               else _invalid(message, "structured_outputs"))
    if chat and count > 0 and tool_choice not in ("none", "auto", "required"):
        raise from_validation(ValidationError(
            "You can only either use constraints for structured outputs or tools, not both."))
    if structured_outputs.get("structural_tag") is not None:
        _check_structural_tag_payload(structured_outputs["structural_tag"],
                                      "structured_outputs")


def _structural_tag_payload(response_format: dict) -> str | None:
    """The JSON text vLLM makes of a structural-tag response_format (its model's
    dump: declared fields, then extra ones), or None where its model refuses it."""
    extra = {k: v for k, v in response_format.items() if k not in ("type", "format",
                                                                   "structures", "triggers")}
    if "format" in response_format:
        return json.dumps({"type": "structural_tag", "format": response_format["format"],
                           **extra})
    structures, triggers = response_format.get("structures"), response_format.get("triggers")
    if not (isinstance(structures, list) and isinstance(triggers, list)
            and all(isinstance(t, str) for t in triggers)):
        return None
    dumped = []
    for item in structures:
        if not (isinstance(item, dict) and isinstance(item.get("begin"), str)
                and isinstance(item.get("end"), str)
                and isinstance(item.get("schema"), (dict, type(None)))):
            return None
        rest = {k: v for k, v in item.items() if k not in ("begin", "schema", "end")}
        dumped.append({"begin": item["begin"], "schema": item.get("schema"),
                       "end": item["end"], **rest})
    return json.dumps({"type": "structural_tag", "structures": dumped,
                       "triggers": triggers, **extra})


def _check_structural_tag_payload(payload: Any, parameter: str) -> None:
    """vLLM validates every structural tag with xgrammar when the request is read,
    whatever the backend."""
    if isinstance(payload, str) and not payload:
        raise _invalid_tag(parameter)
    if isinstance(payload, str):
        _check_nesting(payload, structural_tag=True)
    if not isinstance(payload, str) \
            or grammars.xgrammar_error("structural_tag", payload) is not None:
        raise _invalid_tag(parameter)


def _invalid_tag(parameter: str) -> ApiError:
    return _invalid(f"Invalid {parameter} structural_tag specification.", parameter)


# ---------------------------------------------------------------------------- 2. fields

@dataclass(frozen=True)
class Constraints:
    """A request's constraint fields after field validation (see :func:`parse`)."""

    structured_outputs: dict[str, Any] | None  # the StructuredOutputsParams fields set
    override: dict[str, Any] | None  # what response_format puts over them


def parse(response_format: Any, structured_outputs: Any) -> Constraints:
    """Field validation of both fields (pydantic's errors, vLLM's rendering), then
    StructuredOutputsParams' own check of ``structured_outputs`` (one constraint)."""
    override = _parse_response_format(response_format)
    so_fields = None
    if structured_outputs is not None:
        so_fields = _parse_structured_outputs(structured_outputs)
        _make_params(so_fields)
    return Constraints(so_fields, override)


def _parse_response_format(rf: Any) -> dict[str, Any] | None:
    if rf is None:
        return None
    loc = ("body", "response_format")
    if not isinstance(rf, dict):
        raise _schema_errors([_error("model_attributes_type", loc, rf)] * 3)
    kind = rf.get("type")
    if kind in RESPONSE_FORMAT_TYPES:
        errors = _json_schema_errors(rf.get("json_schema"), loc + ("json_schema",))
        if not errors:
            if kind == "text":
                return None
            if kind == "json_object":
                return {"json_object": True}
            return {"json": rf["json_schema"].get("schema")}
    else:
        errors = [_literal_error(loc + ("type",), rf, RESPONSE_FORMAT_TYPES)]
    if kind == "structural_tag" and ("format" in rf or _structural_tag_payload(rf)):
        # check_response_format accepted it; this is the text vLLM sends
        return {"structural_tag": _structural_tag_payload(rf)}
    # No member of vLLM's response_format union fits: pydantic lists every member's errors.
    tag_type = [] if kind == "structural_tag" else [
        _literal_error(loc + ("type",), rf, ("structural_tag",))]
    errors += tag_type + ([] if "format" in rf else [_error("missing", loc + ("format",), rf)])
    errors += tag_type + [_error("missing", loc + (key,), rf)
                          for key in ("structures", "triggers") if key not in rf]
    raise _schema_errors(errors)


def _json_schema_errors(value: Any, loc: tuple) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [_error("model_attributes_type", loc, value)]
    errors = []
    if "name" not in value:
        errors.append(_error("missing", loc + ("name",), value))
    elif not isinstance(value["name"], str):
        errors.append(_error("string_type", loc + ("name",), value["name"]))
    if value.get("description") is not None and not isinstance(value["description"], str):
        errors.append(_error("string_type", loc + ("description",), value["description"]))
    if value.get("schema") is not None and not isinstance(value["schema"], dict):
        errors.append(_error("dict_type", loc + ("schema",), value["schema"]))
    if value.get("strict") is not None and _lax_bool(value["strict"]) is None:
        errors.append(_bool_error(loc + ("strict",), value["strict"]))
    return errors


# StructuredOutputsParams' fields as pydantic reads them (unknown keys are ignored).
_SO_TYPES = {"json": "json", "regex": "str", "choice": "list[str]", "grammar": "str",
             "json_object": "bool", "disable_any_whitespace": "bool!",
             "disable_additional_properties": "bool!", "whitespace_pattern": "str",
             "structural_tag": "str"}


def _parse_structured_outputs(so: Any) -> dict[str, Any]:
    loc = ("body", "structured_outputs")
    if not isinstance(so, dict):
        raise _schema_errors([{"type": "dataclass_type", "loc": loc,
                               "msg": "Input should be a dictionary or an instance of "
                                      "StructuredOutputsParams", "input": so,
                               "ctx": {"class_name": "StructuredOutputsParams"}}])
    parsed: dict[str, Any] = {}
    errors: list[dict] = []
    for name, kind in _SO_TYPES.items():
        if name not in so:
            continue
        value, where = so[name], loc + (name,)
        if value is None and not kind.endswith("!"):
            parsed[name] = None
        elif kind == "json":
            if isinstance(value, (str, dict)):
                parsed[name] = value
            else:
                errors += [_error("string_type", where, value), _error("dict_type", where, value)]
        elif kind == "str":
            if isinstance(value, str):
                parsed[name] = value
            else:
                errors.append(_error("string_type", where, value))
        elif kind == "list[str]":
            if not isinstance(value, list):
                errors.append(_error("list_type", where, value))
            elif bad := [i for i, v in enumerate(value) if not isinstance(v, str)]:
                errors += [_error("string_type", where + (i,), value[i]) for i in bad]
            else:
                parsed[name] = list(value)
        elif (flag := _lax_bool(value)) is None:
            errors.append(_bool_error(where, value))
        else:
            parsed[name] = flag
    if errors:
        raise _schema_errors(errors)
    return parsed


# ---------------------------------------------------------------------------- 3. resolve

def resolve(constraints: Constraints, config: StructuredOutputsConfig
            ) -> StructuredOutputsParams | None:
    """The request's StructuredOutputsParams for the engine, validated, with its
    backend; ``None`` without a constraint. Raises ApiError (400) as vLLM does."""
    if constraints.override is None:
        if constraints.structured_outputs is None:
            return None
        values = dict(constraints.structured_outputs)
    else:
        values = {**(constraints.structured_outputs or {}), **constraints.override}
    params = _make_params(values)
    try:
        _validate(params, config.backend)
    except ValidationError as e:
        raise from_validation(e) from None
    return params


def _make_params(values: dict[str, Any]) -> StructuredOutputsParams:
    try:
        return StructuredOutputsParams(**values)
    except ValidationError as e:  # none or several constraints
        raise from_validation(e) from None


def _validate(p: StructuredOutputsParams, backend: str) -> None:
    """vLLM's ``_validate_structured_outputs``: plain checks, then the grammar
    check of the configured backend; ``auto`` takes xgrammar if it would accept
    the constraint, else guidance (outlines for a schema guidance cannot do)."""
    check_content(p)
    _check_nesting(p.json)
    _check_nesting(p.structural_tag, structural_tag=True)
    kind, spec = p.kind, getattr(p, p.kind)
    if backend == "guidance":
        _raise_if(grammars.guidance_error(kind, spec))
        p.backend = "guidance"
        return
    # vLLM skips the xgrammar check of an empty (falsy) constraint: {} or "".
    problem = grammars.xgrammar_error(kind, spec) if spec else None
    p.backend_was_auto = backend == "auto"
    if backend == "xgrammar" or problem is None:
        _raise_if(problem)
        p.backend = "xgrammar"
        if p.choice:  # the xgrammar backend compiles no choice list: vLLM sends EBNF
            p.grammar, p.choice = grammars.choice_as_grammar(p.choice), None
    elif kind == "json" and _guidance_cannot(spec):
        # vLLM validates with outlines here (not mirrored: this frontend has no
        # outlines); an engine already on xgrammar compiles it with that.
        p.backend = "outlines"
    else:
        _raise_if(grammars.guidance_error(kind, spec))
        p.backend = "guidance"


def _guidance_cannot(spec: str | dict) -> bool:
    try:
        schema = grammars.parse_json_spec(spec)
    except ValueError:
        raise ValidationError("Invalid JSON grammar specification.") from None
    return grammars.guidance_unsupported_json_features(schema)


def _raise_if(message: str | None) -> None:
    if message is not None:
        raise ValidationError(message)


def _check_nesting(spec: Any, *, structural_tag: bool = False) -> None:
    try:
        grammars.check_json_nesting(spec, structural_tag=structural_tag)
    except grammars.NestingError as e:
        raise from_validation(ValidationError(str(e))) from None


# ---------------------------------------------------------------------------- errors

def _invalid(message: str, parameter: str) -> ApiError:
    return from_validation(ValidationError(message, parameter=parameter))


_MESSAGES = {
    "missing": "Field required",
    "model_attributes_type": "Input should be a valid dictionary or object to extract "
                             "fields from",
    "string_type": "Input should be a valid string",
    "dict_type": "Input should be a valid dictionary",
    "list_type": "Input should be a valid list",
    "bool_type": "Input should be a valid boolean",
    "bool_parsing": "Input should be a valid boolean, unable to interpret input",
}


def _error(kind: str, loc: tuple, value: Any) -> dict:
    return {"type": kind, "loc": loc, "msg": _MESSAGES[kind], "input": value}


def _bool_error(loc: tuple, value: Any) -> dict:
    return _error("bool_parsing" if isinstance(value, str) else "bool_type", loc, value)


def _literal_error(loc: tuple, parent: dict, allowed: tuple[str, ...]) -> dict:
    if "type" not in parent:
        return _error("missing", loc, parent)
    quoted = [f"'{a}'" for a in allowed]
    expected = quoted[0] if len(quoted) == 1 else \
        f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return {"type": "literal_error", "loc": loc, "msg": f"Input should be {expected}",
            "input": parent["type"], "ctx": {"expected": expected}}


_MAX_REPORTED = 10  # vLLM's validation-error rendering
_MAX_INPUT_CHARS = 200


def _schema_errors(errors: list[dict]) -> ApiError:
    """FastAPI's request-validation 400 as vLLM renders it: "N validation errors:"
    and one line per error (inputs summarised), ``param`` the first error's path."""
    lines = []
    for err in errors[:_MAX_REPORTED]:
        shown = dict(err, loc=".".join(str(p) for p in err["loc"]),
                     input=_summarize(err["input"]))
        lines.append(f"  {shown}")
    label = "error" if len(errors) == 1 else "errors"
    message = "\n".join([f"{len(errors)} validation {label}:", *lines])
    if len(errors) > _MAX_REPORTED:
        message += f"\n  ...and {len(errors) - _MAX_REPORTED} more {label}"
    return ApiError(message, 400, "Bad Request", ".".join(str(p) for p in errors[0]["loc"]))


def _summarize(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text[:_MAX_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_INPUT_CHARS else text

