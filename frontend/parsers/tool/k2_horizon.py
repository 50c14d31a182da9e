"""``k2_horizon``: K2 Horizon's IFM tool-call group, in the chat template
kwarg ``tool_call_format``'s format (``xml`` by default, ``xml_typed``, ``json``)::

    <ifm|tool_calls><ifm|tool_call>get_weather
    <ifm|arg_key>city</ifm|arg_key><ifm|arg_value>Paris</ifm|arg_value>
    </ifm|tool_call></ifm|tool_calls>

(``xml_typed`` adds ``<ifm|arg_type>string</ifm|arg_type>`` before each value;
``json`` calls are ``{"name": ..., "arguments": {...}}``.)

vLLM's ``K2HorizonToolParser`` as it is.  The group counts only when it
closes and holds nothing but well-formed calls of the request's tools (a
named ``tool_choice``: of that tool); else the whole output is content.
Values are converted to the tool schema's types (an ``xml_typed`` type
choosing among the schema's).  Content that is only whitespace is None,
and a stream holds it back until something else comes.  Streaming sends the
content before the group as it comes (a tail that may begin
``<ifm|tool_calls>`` held back), then every call whole when the group closes.
vLLM marks it ``engine_based_streaming``: tool_choice "none" and outputs
without calls get their content from the parser, as for grammar parsers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from frontend.parsers.arguments import coerce_to_types, find_tool_properties, schema_types
from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import partial_tag_overlap
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
    named_tool,
    tool_function,
)

FORMATS = frozenset({"json", "xml", "xml_typed"})
TOOL_CALLS_START, TOOL_CALLS_END = "<ifm|tool_calls>", "</ifm|tool_calls>"
TOOL_CALL_START, TOOL_CALL_END = "<ifm|tool_call>", "</ifm|tool_call>"
ARG_KEY_START, ARG_KEY_END = "<ifm|arg_key>", "</ifm|arg_key>"
ARG_TYPE_START, ARG_TYPE_END = "<ifm|arg_type>", "</ifm|arg_type>"
ARG_VALUE_START, ARG_VALUE_END = "<ifm|arg_value>", "</ifm|arg_value>"
_TOOL_CALL_RE = re.compile(
    re.escape(TOOL_CALL_START) + r"(.*?)" + re.escape(TOOL_CALL_END), re.DOTALL
)
_ARG_RE = re.compile(
    re.escape(ARG_KEY_START)
    + r"(.*?)"
    + re.escape(ARG_KEY_END)
    + r"\s*(?:"
    + re.escape(ARG_TYPE_START)
    + r"(.*?)"
    + re.escape(ARG_TYPE_END)
    + r"\s*)?"
    + re.escape(ARG_VALUE_START)
    + r"(.*?)"
    + re.escape(ARG_VALUE_END),
    re.DOTALL,
)
_ARG_MARKERS = (
    ARG_KEY_START,
    ARG_KEY_END,
    ARG_TYPE_START,
    ARG_TYPE_END,
    ARG_VALUE_START,
    ARG_VALUE_END,
)


def tool_call_format(chat_template_kwargs: dict | None) -> str:
    tool_format = (chat_template_kwargs or {}).get("tool_call_format", "xml")
    if not isinstance(tool_format, str) or tool_format not in FORMATS:
        raise ValueError(
            f"Unsupported tool_call_format {tool_format!r}. "
            f"Supported values: {', '.join(sorted(FORMATS))}."
        )
    return tool_format


def _content_or_none(content: str) -> str | None:
    return content if content.strip() else None


def _base_arg_type(arg_type: str | None) -> str | None:
    if not arg_type:
        return None
    return arg_type.split("[", 1)[0].strip().lower()


def _coerce_json_value(value: Any, schema: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    raw = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
    )
    return coerce_to_types(raw, schema_types(schema))


def _coerce_xml_value(value: str, schema: Any, explicit_type: str | None) -> Any:
    explicit_base = _base_arg_type(explicit_type)
    target_types = schema_types(schema)
    if isinstance(schema, dict):
        if explicit_base in target_types and len(set(target_types)) > 1:
            target_types = [explicit_base]
    elif explicit_base == "any":
        return value
    elif explicit_base:
        target_types = [explicit_base]
    raw = value if "string" in target_types else value.strip()
    return coerce_to_types(raw, target_types)


class K2HorizonToolParser(TextSoFarToolParser):
    supports_required_and_named = False
    grammar_based = True  # vLLM's engine_based_streaming, for the composite's rules

    def __init__(self, *args, chat_template_kwargs: dict | None = None, **kwargs) -> None:
        super().__init__(*args, chat_template_kwargs=chat_template_kwargs, **kwargs)
        self.tool_format = tool_call_format(chat_template_kwargs)
        self._stream_text = ""
        self._stream_cursor = 0
        self._stream_group_start: int | None = None
        self._stream_resolved = False
        self._pending_content = ""
        self._content_seen = False

    @classmethod
    def check_request(cls, chat_template_kwargs: dict | None) -> None:
        tool_call_format(chat_template_kwargs)

    # -- one call ----------------------------------------------------------------

    def _validate_tool_name(self, name: Any) -> str:
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError("IFM tool call has an invalid function name.")
        if self.tools and not any(tool_function(t).get("name") == name for t in self.tools):
            raise ValueError(f"Unknown IFM tool name: {name}.")
        named = named_tool(self.tool_choice)
        if named is not None and name != named:
            raise ValueError(f"Unexpected IFM tool name: {name}.")
        return name

    def _parse_json_call(self, body: str) -> tuple[str, dict[str, Any]]:
        raw_call = json.loads(body.strip())
        if not isinstance(raw_call, dict):
            raise ValueError("IFM JSON tool call must be an object.")
        name = self._validate_tool_name(raw_call.get("name"))
        arguments = raw_call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ValueError("IFM JSON tool-call arguments must be an object.")
        properties = find_tool_properties(self.tools, name)
        return name, {k: _coerce_json_value(v, properties.get(k)) for k, v in arguments.items()}

    def _parse_xml_call(self, body: str) -> tuple[str, dict[str, Any]]:
        first_arg = body.find(ARG_KEY_START)
        if first_arg == -1:
            if any(marker in body for marker in _ARG_MARKERS):
                raise ValueError("Malformed IFM XML argument tags.")
            return self._validate_tool_name(body.strip()), {}
        name = self._validate_tool_name(body[:first_arg].strip())
        properties = find_tool_properties(self.tools, name)
        arguments: dict[str, Any] = {}
        position = first_arg
        for match in _ARG_RE.finditer(body, first_arg):
            if body[position : match.start()].strip():
                raise ValueError("Malformed IFM XML argument tags.")
            arg_name = match.group(1).strip()
            if not arg_name:
                raise ValueError("IFM XML argument is missing a name.")
            if arg_name in arguments:
                raise ValueError(f"Duplicate IFM XML argument: {arg_name}.")
            explicit_type = match.group(2)
            if explicit_type is not None:
                explicit_type = explicit_type.strip()
            if self.tool_format == "xml" and explicit_type is not None:
                raise ValueError("Unexpected type tag in IFM XML tool call.")
            if self.tool_format == "xml_typed" and not explicit_type:
                raise ValueError("IFM typed XML argument is missing a type.")
            arguments[arg_name] = _coerce_xml_value(
                match.group(3), properties.get(arg_name), explicit_type
            )
            position = match.end()
        if position == first_arg or body[position:].strip():
            raise ValueError("Malformed IFM XML argument tags.")
        return name, arguments

    def _parse_call(self, body: str) -> ToolCall:
        if self.tool_format == "json":
            name, arguments = self._parse_json_call(body)
        else:
            name, arguments = self._parse_xml_call(body)
        return ToolCall(name, json.dumps(arguments, ensure_ascii=False, allow_nan=False))

    # -- whole ---------------------------------------------------------------------

    def extract(self, text: str) -> ExtractedToolCalls:
        no_calls = ExtractedToolCalls(False, [], _content_or_none(text))
        if self.tool_choice == "none":
            return no_calls
        group_start = text.find(TOOL_CALLS_START)
        if group_start == -1:
            return no_calls
        body_start = group_start + len(TOOL_CALLS_START)
        group_end = text.find(TOOL_CALLS_END, body_start)
        if group_end == -1:
            return no_calls
        group_body = text[body_start:group_end]
        matches = list(_TOOL_CALL_RE.finditer(group_body))
        if not matches or _TOOL_CALL_RE.sub("", group_body).strip():
            return no_calls
        try:
            calls = [self._parse_call(match.group(1)) for match in matches]
        except (TypeError, ValueError):  # json.JSONDecodeError is a ValueError
            return no_calls
        content = text[:group_start] + text[group_end + len(TOOL_CALLS_END) :]
        return ExtractedToolCalls(True, calls, _content_or_none(content))

    # -- streaming -------------------------------------------------------------------

    def _emit_content(self, addition: str, *, final: bool = False) -> str | None:
        """Content to send; leading whitespace-only content waits for more."""
        if addition:
            if self._content_seen:
                return addition
            self._pending_content += addition
            if self._pending_content.strip():
                self._content_seen = True
                content, self._pending_content = self._pending_content, ""
                return content
        if final:
            self._pending_content = ""
        return None

    def _stream_calls(self, calls: list[ToolCall]) -> list[DeltaToolCall]:
        pieces = []
        for index, call in enumerate(calls):
            self.prev_tool_call_arr.append(
                {"name": call.name, "arguments": json.loads(call.arguments)}
            )
            self.streamed_args_for_tool.append(call.arguments)
            pieces.append(
                DeltaToolCall(
                    index,
                    id=make_tool_call_id(),
                    type="function",
                    name=call.name,
                    arguments=call.arguments,
                )
            )
        return pieces

    @staticmethod
    def _content_delta(content: str | None) -> ParsedDelta | None:
        return ParsedDelta(content=content) if content is not None else None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if self.tool_choice == "none":
            return self._content_delta(self._emit_content(delta_text))
        self._stream_text += delta_text
        if self._stream_resolved:
            return self._content_delta(self._emit_content(delta_text))
        text = self._stream_text
        content: str | None = None
        if self._stream_group_start is None:
            group_start = text.find(TOOL_CALLS_START, self._stream_cursor)
            if group_start == -1:
                overlap = partial_tag_overlap(text[self._stream_cursor :], TOOL_CALLS_START)
                sendable_end = len(text) - overlap
                content = self._emit_content(text[self._stream_cursor : sendable_end])
                self._stream_cursor = sendable_end
                return self._content_delta(content)
            self._stream_group_start = group_start
            content = self._emit_content(text[self._stream_cursor : group_start])
            self._stream_cursor = group_start
        group_start = self._stream_group_start
        group_end = text.find(TOOL_CALLS_END, group_start + len(TOOL_CALLS_START))
        if group_end == -1:
            return self._content_delta(content)
        group_end += len(TOOL_CALLS_END)
        parsed = self.extract(text[group_start:group_end])
        self._stream_resolved = True
        if not parsed.tools_called:
            failed = self._emit_content(text[self._stream_cursor :])
            self._stream_cursor = len(text)
            combined = (content or "") + (failed or "")
            return ParsedDelta(content=combined) if combined else None
        pieces = self._stream_calls(parsed.tool_calls)
        suffix = self._emit_content(text[group_end:])
        self._stream_cursor = len(text)
        combined = (content or "") + (suffix or "")
        return ParsedDelta(content=combined or None, tool_calls=pieces)

    def finish(self) -> ParsedDelta | None:
        if not self._stream_resolved:
            content = self._emit_content(self._stream_text[self._stream_cursor :], final=True)
            self._stream_cursor = len(self._stream_text)
            self._stream_resolved = True
        else:
            content = self._emit_content("", final=True)
        return self._content_delta(content)
