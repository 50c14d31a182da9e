"""The POST /v1/responses body and vLLM 0.32's checks of it (``responses/protocol.py``).

vLLM's ``ResponsesRequest`` is a pydantic model with ``extra="allow"``:
unknown fields are ignored. Its ``mode="before"`` model validators see the
raw body, the last defined first, and may change it (``tool_choice`` becomes
"none" without tools; input items get ids): :func:`parse` runs them on the
decoded JSON in that order, then decodes the result into
:class:`ResponsesRequest` and checks the fields pydantic constrains.
"""

from __future__ import annotations

from typing import Any

import msgspec

from frontend.errors import field_error, from_msgspec, invalid, schema_error, validation_errors
from frontend.openai import validators as rules
from frontend.openai.common import json_decode_error
from frontend.responses import messages, tools

INCLUDES = (
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
)
LOGPROBS_INCLUDE = "message.output_text.logprobs"
SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority")
TRUNCATIONS = ("auto", "disabled")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
REASONING_FIELDS = ("context", "effort", "generate_summary", "mode", "summary")
FORMAT_FIELDS = {
    "text": ("type",),
    "json_object": ("type",),
    "json_schema": ("name", "schema", "type", "description", "strict"),
}
INT64 = (-(2**63), 2**63 - 1)


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """vLLM's fields (``Any`` where the checks below need the raw value)."""

    background: bool | None = False
    include: Any = None  # list of INCLUDES
    input: Any = msgspec.UNSET  # str | list of input items (required)
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: Any = None  # dict[str, str]
    model: str | None = None
    logit_bias: dict[str, float] | None = None
    parallel_tool_calls: bool | None = True
    previous_response_id: str | None = None
    prompt: Any = None  # refused
    reasoning: Any = None  # {"effort", "summary", ...}
    include_reasoning: bool = True
    service_tier: Any = "auto"
    store: bool | None = True
    stream: bool | None = False
    temperature: float | None = None
    text: Any = None  # {"format": {...}, "verbosity"}
    tool_choice: Any = "auto"
    tools: Any = None  # list of openai tools
    top_logprobs: Any = 0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    truncation: Any = "disabled"
    user: str | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    prompt_cache_key: str | None = None  # accepted and ignored, as in vLLM
    watermarking: Any = None
    request_id: str | None = None  # the response id (default resp_<hex>)
    session_id: Any = None
    media_io_kwargs: Any = None
    mm_processor_kwargs: Any = None
    priority: int = 0
    mm_payload: Any = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: Any = None
    enable_response_messages: bool = False
    previous_input_messages: Any = None  # Harmony only
    structured_outputs: Any = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    vllm_xargs: Any = None
    kv_transfer_params: Any = None
    ec_transfer_params: Any = None
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def wants_logprobs(self) -> bool:
        return isinstance(self.include, list) and LOGPROBS_INCLUDE in self.include


def parse(body: bytes) -> tuple[ResponsesRequest, dict[str, Any]]:
    """The body decoded and checked in vLLM's order; also the raw body as the
    validators left it (what the response echoes of tools and tool_choice)."""
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as e:
        raise json_decode_error(body) or from_msgspec(e) from None
    if not isinstance(raw, dict):
        raise validation_errors([field_error("model_attributes_type", ("body",), raw)])
    # the model validators, last defined first
    tools.check_tool_usage(raw)
    tools.check_custom_tool_format(raw)
    messages.normalize_items(raw)
    if raw.get("prompt") is not None:
        raise invalid("prompt template is not supported", "prompt")
    if raw.get("background") and not raw.get("store", True):
        raise invalid("background can only be used when `store` is true", "background")
    rules.check_cache_salt(raw.get("cache_salt"))
    if raw.get("return_mm_kwargs") is False and "mm_payload" not in raw:
        raw["mm_payload"] = "none"
    if "input" not in raw:
        raise validation_errors([field_error("missing", ("body", "input"), raw)])
    try:
        req = msgspec.convert(raw, ResponsesRequest, strict=False)
    except msgspec.ValidationError as e:
        raise from_msgspec(e) from None
    check_fields(req, raw)
    return req, raw


def check_fields(req: ResponsesRequest, raw: dict[str, Any]) -> None:
    """Field validation, in field order (pydantic's errors, as vLLM renders them)."""
    include = req.include
    if include is not None:
        if not isinstance(include, list):
            raise validation_errors([field_error("list_type", ("body", "include"), include)])
        for i, value in enumerate(include):
            _literal(value, INCLUDES, ("body", "include", i))
    messages.check_items(req.input)
    metadata = req.metadata
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise validation_errors([field_error("dict_type", ("body", "metadata"), metadata)])
        for key, value in metadata.items():
            if not isinstance(value, str):
                raise validation_errors(
                    [field_error("string_type", ("body", "metadata", key), value)]
                )
    req.reasoning = _reasoning(req.reasoning)
    _literal(req.service_tier, SERVICE_TIERS, ("body", "service_tier"))
    req.text = _text(req.text)
    req.tool_choice = tools.echo_tool_choice(req.tool_choice)
    req.tools = tools.echo_tools(req.tools)
    if req.top_logprobs is None:  # null means omitted
        req.top_logprobs = 0
    req.top_logprobs = rules.lax_int(req.top_logprobs, "top_logprobs")
    if not rules.is_int(req.top_logprobs):
        raise validation_errors(
            [field_error("int_type", ("body", "top_logprobs"), req.top_logprobs)]
        )
    if req.truncation is not None:
        _literal(req.truncation, TRUNCATIONS, ("body", "truncation"))
    for name in ("presence_penalty", "frequency_penalty"):
        _bounded(raw.get(name), name, -2.0, 2.0)
    req.watermarking = rules.check_lax_bool(req.watermarking, "watermarking")
    req.session_id = rules.check_str(req.session_id, "session_id")
    _bounded(raw.get("priority"), "priority", *INT64)
    rules.check_one_of(req.mm_payload, ("tensors", "none"), "mm_payload")
    if isinstance(req.cache_salt, str) and len(req.cache_salt) > 1024:
        raise schema_error("String should have at most 1024 characters", "body.cache_salt")
    rules.check_stop(req.stop)
    req.vllm_xargs = rules.check_vllm_xargs(req.vllm_xargs)
    req.kv_transfer_params = rules.check_object(req.kv_transfer_params, "kv_transfer_params")
    req.ec_transfer_params = rules.check_object(req.ec_transfer_params, "ec_transfer_params")


def _literal(value: Any, allowed: tuple[str, ...], loc: tuple) -> None:
    if not isinstance(value, str) or value not in allowed:
        quoted = [f"'{a}'" for a in allowed]
        expected = f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        raise validation_errors([field_error("literal_error", loc, value, {"expected": expected})])


def _bounded(value: Any, name: str, low: float, high: float) -> None:
    """pydantic's ge/le errors (bounds written as pydantic writes them: 2.0 is "2")."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return  # (None, or not a number: msgspec's conversion reported it)
    for kind, bound, key, word, broken in (
        ("greater_than_equal", low, "ge", "greater", value < low),
        ("less_than_equal", high, "le", "less", value > high),
    ):
        if broken:
            shown = int(bound) if float(bound).is_integer() else bound
            raise validation_errors(
                [
                    {
                        "type": kind,
                        "loc": ("body", name),
                        "msg": f"Input should be {word} than or equal to {shown}",
                        "input": value,
                        "ctx": {key: bound},
                    }
                ]
            )


def _reasoning(value: Any) -> dict[str, Any] | None:
    """openai's ``Reasoning``, dumped with every field."""
    if value is None:
        return None
    loc = ("body", "reasoning")
    if not isinstance(value, dict):
        raise validation_errors([field_error("model_attributes_type", loc, value)])
    if value.get("effort") is not None:
        _literal(value["effort"], EFFORTS, (*loc, "effort"))
    return {name: value.get(name) for name in REASONING_FIELDS}


def _text(value: Any) -> dict[str, Any] | None:
    """openai's ``ResponseTextConfig``, dumped with every field of its format."""
    if value is None:
        return None
    loc = ("body", "text")
    if not isinstance(value, dict):
        raise validation_errors([field_error("model_attributes_type", loc, value)])
    fmt = value.get("format")
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise validation_errors([field_error("model_attributes_type", (*loc, "format"), fmt)])
        kind = fmt.get("type")
        if kind not in FORMAT_FIELDS:
            raise validation_errors(
                [
                    field_error(
                        "literal_error" if "type" in fmt else "missing",
                        (*loc, "format", "type"),
                        kind if "type" in fmt else fmt,
                        {"expected": "'text', 'json_schema' or 'json_object'"}
                        if "type" in fmt
                        else None,
                    )
                ]
            )
        missing = [n for n in ("name", "schema") if kind == "json_schema" and n not in fmt]
        if missing:  # pydantic tries each member of the format union
            at = (*loc, "format")
            raise validation_errors(
                [
                    field_error(
                        "literal_error",
                        (*at, "ResponseFormatText", "type"),
                        kind,
                        {"expected": "'text'"},
                    ),
                    *(
                        field_error("missing", (*at, "ResponseFormatTextJSONSchemaConfig", n), fmt)
                        for n in missing
                    ),
                    field_error(
                        "literal_error",
                        (*at, "ResponseFormatJSONObject", "type"),
                        kind,
                        {"expected": "'json_object'"},
                    ),
                ]
            )
        fmt = {name: fmt.get(name) for name in FORMAT_FIELDS[kind]}
    verbosity = value.get("verbosity")
    if verbosity is not None:
        _literal(verbosity, ("low", "medium", "high"), (*loc, "verbosity"))
    return {"format": fmt, "verbosity": verbosity}
