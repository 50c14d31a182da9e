"""What a request may say in ``response_format`` and ``structured_outputs``.

vLLM 0.32's checks, for /v1/completions and /v1/chat/completions alike; each
runs where vLLM runs it, so errors come in vLLM's order and words:

1. request validation (vLLM's ``mode="before"`` model validators, run in
   pydantic's order with the route's other ones): :func:`check_response_format`
   and :func:`check_structured_outputs_count`;
2. field validation (pydantic's; schema errors): :func:`parse`, which gives
   the request's :class:`Constraints` for :mod:`frontend.structured.resolve`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from frontend.errors import (
    ApiError,
    bool_error,
    field_error,
    from_validation,
    invalid,
    lax_bool,
    literal_error,
    validation_errors,
)
from frontend.structured.rules import NestingError, check_json_nesting
from frontend.structured.structural_tag import response_format_payload
from frontend.structured.xgrammar_compat import xgrammar_error
from protocol.errors import ValidationError
from protocol.structured import StructuredOutputsParams

RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


# ---------------------------------------------------------------------------- model validators


def check_response_format(response_format: Any) -> None:
    """vLLM's ``validate_response_format`` model validator (both routes)."""
    if not isinstance(response_format, dict):
        return  # not a model: the field validation (parse) reports it
    kind = response_format.get("type")
    if kind == "json_schema" and response_format.get("json_schema") is None:
        raise invalid(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        )
    if kind == "structural_tag":
        payload = response_format_payload(response_format)
        if payload is None:
            raise _invalid_tag("response_format")
        _check_structural_tag(payload, "response_format")


def check_structured_outputs_count(
    structured_outputs: Any, *, chat: bool, tool_choice: Any = "none"
) -> None:
    """vLLM's ``check_structured_outputs_count`` model validator; ``tool_choice``
    is the chat request's value after vLLM's ``check_tool_usage`` (which runs
    first), ``"none"`` when absent."""
    if not isinstance(structured_outputs, dict):
        # vLLM answers 500 ("'str' object has no attribute 'get'"); parse() gives a 400.
        return
    count = sum(structured_outputs.get(k) is not None for k in ("json", "regex", "choice"))
    if count > 1:
        message = (
            "You can only use one kind of constraints for structured outputs "
            "('json', 'regex' or 'choice')."
        )
        raise invalid(message, None if chat else "structured_outputs")
    if chat and count > 0 and tool_choice not in ("none", "auto", "required"):
        raise invalid(
            "You can only either use constraints for structured outputs or tools, not both."
        )
    if structured_outputs.get("structural_tag") is not None:
        _check_structural_tag(structured_outputs["structural_tag"], "structured_outputs")


def _check_structural_tag(payload: Any, parameter: str) -> None:
    """vLLM validates every structural tag with xgrammar when the request is read,
    whatever the backend."""
    if isinstance(payload, str) and not payload:
        raise _invalid_tag(parameter)
    if isinstance(payload, str):
        check_nesting(payload, structural_tag=True)
    if not isinstance(payload, str) or xgrammar_error("structural_tag", payload) is not None:
        raise _invalid_tag(parameter)


def _invalid_tag(parameter: str) -> ApiError:
    return invalid(f"Invalid {parameter} structural_tag specification.", parameter)


# ---------------------------------------------------------------------------- fields


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
        make_params(so_fields)
    return Constraints(so_fields, override)


def _parse_response_format(rf: Any) -> dict[str, Any] | None:
    if rf is None:
        return None
    loc = ("body", "response_format")
    if not isinstance(rf, dict):
        raise validation_errors([field_error("model_attributes_type", loc, rf)] * 3)
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
        errors = [literal_error(loc + ("type",), rf, RESPONSE_FORMAT_TYPES)]
    if kind == "structural_tag" and ("format" in rf or response_format_payload(rf)):
        # check_response_format accepted it; this is the text vLLM sends
        return {"structural_tag": response_format_payload(rf)}
    # No member of vLLM's response_format union fits: pydantic lists every member's errors.
    tag_type = (
        []
        if kind == "structural_tag"
        else [literal_error(loc + ("type",), rf, ("structural_tag",))]
    )
    errors += tag_type + ([] if "format" in rf else [field_error("missing", loc + ("format",), rf)])
    errors += tag_type + [
        field_error("missing", loc + (key,), rf)
        for key in ("structures", "triggers")
        if key not in rf
    ]
    raise validation_errors(errors)


def _json_schema_errors(value: Any, loc: tuple) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [field_error("model_attributes_type", loc, value)]
    errors = []
    if "name" not in value:
        errors.append(field_error("missing", loc + ("name",), value))
    elif not isinstance(value["name"], str):
        errors.append(field_error("string_type", loc + ("name",), value["name"]))
    if value.get("description") is not None and not isinstance(value["description"], str):
        errors.append(field_error("string_type", loc + ("description",), value["description"]))
    if value.get("schema") is not None and not isinstance(value["schema"], dict):
        errors.append(field_error("dict_type", loc + ("schema",), value["schema"]))
    if value.get("strict") is not None and lax_bool(value["strict"]) is None:
        errors.append(bool_error(loc + ("strict",), value["strict"]))
    return errors


# StructuredOutputsParams' fields as pydantic reads them (unknown keys are ignored).
_SO_TYPES = {
    "json": "json",
    "regex": "str",
    "choice": "list[str]",
    "grammar": "str",
    "json_object": "bool",
    "disable_any_whitespace": "bool!",
    "disable_additional_properties": "bool!",
    "whitespace_pattern": "str",
    "structural_tag": "str",
}


def _parse_structured_outputs(so: Any) -> dict[str, Any]:
    loc = ("body", "structured_outputs")
    if not isinstance(so, dict):
        raise validation_errors(
            [field_error("dataclass_type", loc, so, {"class_name": "StructuredOutputsParams"})]
        )
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
                errors += [
                    field_error("string_type", where, value),
                    field_error("dict_type", where, value),
                ]
        elif kind == "str":
            if isinstance(value, str):
                parsed[name] = value
            else:
                errors.append(field_error("string_type", where, value))
        elif kind == "list[str]":
            if not isinstance(value, list):
                errors.append(field_error("list_type", where, value))
            elif bad := [i for i, v in enumerate(value) if not isinstance(v, str)]:
                errors += [field_error("string_type", where + (i,), value[i]) for i in bad]
            else:
                parsed[name] = list(value)
        elif (flag := lax_bool(value)) is None:
            errors.append(bool_error(where, value))
        else:
            parsed[name] = flag
    if errors:
        raise validation_errors(errors)
    return parsed


def make_params(values: dict[str, Any]) -> StructuredOutputsParams:
    try:
        return StructuredOutputsParams(**values)
    except ValidationError as e:  # none or several constraints
        raise from_validation(e) from None


def check_nesting(spec: Any, *, structural_tag: bool = False) -> None:
    try:
        check_json_nesting(spec, structural_tag=structural_tag)
    except NestingError as e:
        raise from_validation(ValidationError(str(e))) from None
