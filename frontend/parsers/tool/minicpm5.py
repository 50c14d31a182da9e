"""``minicpm5``: MiniCPM5's XML tool calls.

::

    text<function name="get_weather"><param name="city">Paris</param></function>

vLLM's ``MiniCPM5XMLToolParser`` as it is (with the standard library's XML
parser, as vLLM without lxml).  A ``<function ...</function>`` block is
read as XML, else with regular expressions (CDATA unwrapped, values
stripped); it is a call when its name is one of the tools (or one of the
aliases vLLM maps onto a tool), its parameters are named, none repeats and
the tool's required ones are there.  Unknown parameters are dropped; a
``properties``/``arguments`` wrapper object is unpacked.  Values are JSON
or Python literals unless the schema says string.  Blocks that are no call
stay in the content; with calls there is no content; without, the content
is stripped and cut to the text after the last ``</think>``.

Streaming sends the text outside blocks as content, a known tool's name as
soon as its start tag shows, the arguments of its complete parameters as
they close (the ``}`` at ``</function>``); a block that is no call goes out
as content.  Special tokens are kept when tools are given.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import partial_tag_overlap
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    tool_function,
)

START = "<function"
END = "</function>"
_FUNC_NAME_RE = re.compile(r"<function\s+name=['\"]([^'\"]+)['\"][^>]*>")
_PARAM_RE = re.compile(r"<param\s+name=['\"]([^'\"]+)['\"]>([\s\S]*?)</param>", re.DOTALL)
_PARAM_MISSING_NAME_RE = re.compile(r"<param(?![^>]*\bname=)[^>]*>", re.DOTALL)
_FUNC_BLOCK_RE = re.compile(r"<function.*?</function>", re.DOTALL)
# Byte-level decoders' space and newline (Ġ, Ċ), left in by some outputs.
_TOKENIZER_SPACE = "\u0120"
_TOKENIZER_NEWLINE = "\u010a"
_CDATA = ("<![CDATA[", "]]>")


def _normalize(text: str) -> str:
    if (
        _TOKENIZER_SPACE not in text
        and _TOKENIZER_NEWLINE not in text
        and "<functionname=" not in text
        and "<paramname=" not in text
    ):
        return text
    text = text.replace(_TOKENIZER_SPACE, " ").replace(_TOKENIZER_NEWLINE, "\n")
    return text.replace("<functionname=", "<function name=").replace("<paramname=", "<param name=")


def _strip_thinking(text: str) -> str:
    """The text after the last ``</think>`` (the text itself when none is left)."""
    if "</think>" not in text:
        return text
    visible = text.rsplit("</think>", 1)[-1].lstrip()
    return visible if visible else text


def _args_snapshot(args_json: str, is_complete: bool) -> str:
    if is_complete or not args_json.endswith("}"):
        return args_json
    return args_json[:-1]


def _args_diff(prev_args: str, args_json: str, is_complete: bool) -> str | None:
    """The next piece of the arguments, given what was sent."""
    if prev_args == "{}":
        prev_args = ""
    target = _args_snapshot(args_json, is_complete)
    if not prev_args:
        return target or None
    if target == prev_args:
        return None
    if target.startswith(prev_args):
        return target[len(prev_args) :] or None
    if prev_args.endswith("}"):
        prev_open = prev_args[:-1]
        if target.startswith(prev_open):
            return target[len(prev_open) :] or None
    return None


def _parse_arguments(text: str) -> tuple[Any, bool]:
    """(JSON, else a Python literal, True), else (the text, False)."""
    try:
        try:
            return json.loads(text), True
        except json.JSONDecodeError:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                return ast.literal_eval(text), True
    except Exception:
        return text, False


class _Tools:
    """The request's tools by name: their properties and required keys."""

    def __init__(self, tools: list[dict]) -> None:
        self.functions: dict[str, dict] = {}
        self.allowed: dict[str, set[str]] = {}
        self.required: dict[str, set[str]] = {}
        for tool in tools:
            function = tool_function(tool)
            name = function.get("name")
            if not name:
                continue
            self.functions[name] = function
            params = function.get("parameters") or {}
            props = params.get("properties", {}) if isinstance(params, dict) else {}
            self.allowed[name] = set(props.keys())
            required = params.get("required", []) if isinstance(params, dict) else []
            try:
                self.required[name] = set(required)
            except TypeError:
                self.required[name] = set()

    def coerce(self, function_name: str, key: str, value: Any) -> Any:
        function = self.functions.get(function_name)
        arg_type = None
        if function is not None and function.get("parameters") is not None:
            props = function["parameters"].get("properties", {})
            if key in props:
                arg_type = props[key].get("type")
        if arg_type == "string":
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if isinstance(value, str):
            return _parse_arguments(value)[0]
        return value

    def add(self, function_name: str, key: str, text: str, arguments: dict, seen: set[str]) -> bool:
        """Add one argument; False where it breaks the tool's schema."""
        allowed = self.allowed.get(function_name, set())
        # A properties/arguments wrapper object: its known fields.
        if key in {"properties", "arguments"} and allowed and key not in allowed:
            wrapped, ok = _parse_arguments(text)
            if not ok:
                return False
            if not isinstance(wrapped, dict):
                return False
            added = False
            for wrapped_key, wrapped_value in wrapped.items():
                if wrapped_key not in allowed:
                    continue
                if wrapped_key in seen:
                    return False
                seen.add(wrapped_key)
                arguments[wrapped_key] = self.coerce(function_name, wrapped_key, wrapped_value)
                added = True
            return added
        if allowed and key not in allowed:
            return True
        if key in seen:
            return False
        seen.add(key)
        arguments[key] = self.coerce(function_name, key, text)
        return True


def _first(arguments: dict, *keys: str) -> Any:
    """vLLM's ``a.get(k1) or a.get(k2) ...``."""
    value = None
    for key in keys:
        value = arguments.get(key)
        if value:
            return value
    return value


def _alias(name: str, arguments: dict, tool_names: set[str]) -> tuple[str, dict]:
    """vLLM's map of tool names MiniCPM5 makes up onto the request's tools."""
    if name in tool_names:
        return name, arguments
    if name == "get_details_by_phone" and "get_customer_by_phone" in tool_names:
        phone = _first(arguments, "phone_number", "phone")
        if phone is not None:
            return "get_customer_by_phone", {"phone_number": phone}
    if name == "get_details_by_name" and "get_customer_by_name" in tool_names:
        full_name = _first(arguments, "full_name", "name")
        dob = _first(arguments, "date_of_birth", "dob")
        mapped = {}
        if full_name is not None:
            mapped["full_name"] = full_name
        if dob is not None:
            mapped["date_of_birth"] = dob
            mapped["dob"] = dob
        if mapped:
            return "get_customer_by_name", mapped
    if (
        name in {"get_line_details", "get_line_status", "get_roaming_status"}
        and "get_details_by_id" in tool_names
    ):
        detail_id = _first(arguments, "line_id", "id")
        if detail_id is not None:
            return "get_details_by_id", {"id": detail_id}
    if name == "get_plan_details" and "get_details_by_id" in tool_names:
        plan_id = _first(arguments, "plan_id", "id")
        if plan_id is not None:
            return "get_details_by_id", {"id": plan_id}
    if name in ("enable_roaming", "disable_roaming") and "toggle_roaming" in tool_names:
        line_id = _first(arguments, "line_id", "id")
        if line_id is not None:
            return "toggle_roaming", {"line_id": line_id, "enabled": name == "enable_roaming"}
    if name in {"add_refueled_data", "add_data_to_line"} and "refuel_data" in tool_names:
        line_id = _first(arguments, "line_id", "id")
        amount = _first(arguments, "amount_gb", "gb", "gb_amount", "amount")
        mapped = {}
        if "customer_id" in arguments:
            mapped["customer_id"] = arguments["customer_id"]
        if line_id is not None:
            mapped["line_id"] = line_id
        if amount is not None:
            mapped["amount_gb"] = amount
        if mapped:
            return "refuel_data", mapped
    return name, arguments


def _unwrap(text: str) -> str:
    if text.startswith(_CDATA[0]) and text.endswith(_CDATA[1]):
        return text[len(_CDATA[0]) : -len(_CDATA[1])]
    return text.strip()


def _parse_block(block: str, tools: _Tools) -> tuple[str, dict] | None:
    """(name, arguments) of a ``<function>`` block that is a valid call."""
    name: str | None = None
    arguments: dict[str, Any] = {}
    parsed_ok = False
    invalid = False
    try:
        root = ET.fromstring(block)
        node = root if root.tag == "function" else root.find("function")
        if node is not None:
            name = (node.attrib.get("name") or "").strip()
            params = list(node.findall("param"))
            args_node = node.find("arguments")
            if args_node is not None and not params:
                params = list(args_node.findall("param"))
            seen: set[str] = set()
            for param in params:
                key = param.attrib.get("name")
                if not key or not tools.add(name, key, param.text or "", arguments, seen):
                    arguments.clear()
                    invalid = True
                    break
        parsed_ok = bool(name)
    except Exception:
        parsed_ok = False
    if not parsed_ok:
        try:
            match = _FUNC_NAME_RE.search(block)
            if match:
                name = (match.group(1) or "").strip()
            bad = bool(_PARAM_MISSING_NAME_RE.search(block))
            seen = set()
            for pm in _PARAM_RE.finditer(block):
                key = pm.group(1).strip()
                text = _unwrap(pm.group(2) or "")
                if not tools.add(name or "", key, text, arguments, seen):
                    bad = True
                    break
            if bad:
                arguments.clear()
                invalid = True
            parsed_ok = bool(name)
        except Exception:
            parsed_ok = False
    if not name or invalid:
        return None
    name, arguments = _alias(name, arguments, set(tools.functions))
    if name not in tools.functions:
        return None
    required = tools.required.get(name, set())
    if required and not required.issubset(arguments.keys()):
        return None
    if not parsed_ok:
        return None
    return name, arguments


def _partial_arguments(block: str, name: str, tools: _Tools) -> dict[str, Any]:
    """The closed parameters of an unfinished block."""
    arguments: dict[str, Any] = {}
    seen: set[str] = set()
    for pm in _PARAM_RE.finditer(block):
        key = pm.group(1).strip()
        if not key or key in seen:
            continue
        tools.add(name, key, _unwrap(pm.group(2) or ""), arguments, seen)
    return arguments


class MiniCPM5ToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tools = _Tools(self.tools)
        self._reset()

    def _reset(self) -> None:
        self._processed = 0
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.prev_tool_call_arr = []
        self.streamed_args_for_tool = []

    # -- whole -------------------------------------------------------------------

    def extract(self, text: str) -> ExtractedToolCalls:
        text = _normalize(text)
        if START not in text:
            return ExtractedToolCalls(False, [], _strip_thinking(text))
        calls: list[ToolCall] = []
        rest: list[str] = []
        last_end = 0
        for match in _FUNC_BLOCK_RE.finditer(text):
            if match.start() > last_end:
                rest.append(text[last_end : match.start()])
            parsed = _parse_block(match.group(0), self._tools)
            if parsed is None:
                rest.append(match.group(0))
            else:
                name, arguments = parsed
                arguments_json = json.dumps(arguments, ensure_ascii=False)
                calls.append(ToolCall(name, arguments_json, f"call_{uuid.uuid4().hex}"))
            last_end = match.end()
        if last_end < len(text):
            rest.append(text[last_end:])
        content = _strip_thinking("".join(rest).strip())
        return ExtractedToolCalls(bool(calls), calls, None if calls else content)

    # -- streamed ----------------------------------------------------------------

    def _grow(self, index: int) -> None:
        while len(self.streamed_args_for_tool) <= index:
            self.streamed_args_for_tool.append("")
        while len(self.prev_tool_call_arr) <= index:
            self.prev_tool_call_arr.append({})

    def _args_delta(self, index: int, args_json: str, is_complete: bool) -> ParsedDelta | None:
        sent = (
            self.streamed_args_for_tool[index] if index < len(self.streamed_args_for_tool) else ""
        )
        diff = _args_diff(sent, args_json, is_complete)
        if not diff:
            return None
        while len(self.streamed_args_for_tool) <= index:
            self.streamed_args_for_tool.append("")
        self.streamed_args_for_tool[index] = sent + diff
        return ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=diff)])

    def _start_call(self, name: str) -> ParsedDelta:
        self.current_tool_id += 1
        self.current_tool_name_sent = True
        self._grow(self.current_tool_id)
        self.prev_tool_call_arr[self.current_tool_id] = {"name": name}
        return ParsedDelta.new_call(self.current_tool_id, name)

    def _complete_block(self, block: str) -> ParsedDelta:
        parsed = _parse_block(block, self._tools)
        if parsed is None:
            return ParsedDelta(content=block)
        name, arguments = parsed
        args_json = json.dumps(arguments, ensure_ascii=False)
        if not self.current_tool_name_sent:
            self.current_tool_id += 1
            index = self.current_tool_id
            self._grow(index)
            self.streamed_args_for_tool[index] = args_json
            self.prev_tool_call_arr[index] = {"name": name, "arguments": arguments}
            first = ParsedDelta.new_call(index, name)
            first.tool_calls[0].arguments = args_json
            return first
        index = self.current_tool_id
        self.prev_tool_call_arr[index]["arguments"] = arguments
        delta = self._args_delta(index, args_json, is_complete=True)
        self.current_tool_name_sent = False
        return delta if delta is not None else ParsedDelta(content="")

    def _partial_block(self, block: str) -> ParsedDelta | None:
        if _PARAM_MISSING_NAME_RE.search(block):
            return None
        match = _FUNC_NAME_RE.search(block)
        if not match:
            return None
        name = (match.group(1) or "").strip()
        if name not in self._tools.functions:
            return None
        if not self.current_tool_name_sent:
            return self._start_call(name)
        arguments = _partial_arguments(block, name, self._tools)
        if not arguments:
            return None
        self.prev_tool_call_arr[self.current_tool_id]["arguments"] = arguments
        return self._args_delta(
            self.current_tool_id, json.dumps(arguments, ensure_ascii=False), is_complete=False
        )

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        try:
            return self._stream(previous_text, _normalize(current_text), delta_text)
        except Exception:
            return None  # vLLM logs it and sends nothing for the step

    def _stream(self, previous_text: str, text: str, delta_text: str) -> ParsedDelta | None:
        if not previous_text:
            self._reset()
        if START not in text:
            if self._processed < len(text):
                content = text[self._processed :]
                self._processed = len(text)
                return ParsedDelta(content=content) if content else None
            return None
        for match in _FUNC_BLOCK_RE.finditer(text):
            if match.end() <= self._processed:
                continue
            if match.start() > self._processed:
                gap = text[self._processed : match.start()]
                self._processed = match.start()
                return ParsedDelta(content=gap) if gap else None
            delta = self._complete_block(match.group(0))
            self._processed = match.end()
            return delta
        remainder = text[self._processed :]
        if not remainder:
            if not delta_text and self.current_tool_id >= 0 and not self.current_tool_name_sent:
                return ParsedDelta(content="")
            return None
        at = remainder.find(START)
        if at > 0:
            self._processed += at
            return ParsedDelta(content=remainder[:at])
        if at == -1:
            if partial_tag_overlap(remainder, START):
                return None
            self._processed = len(text)
            return ParsedDelta(content=remainder)
        block = remainder[at:]
        if END in block:
            end = block.rfind(END) + len(END)
            delta = self._complete_block(block[:end])
            self._processed += at + end
            return delta
        return self._partial_block(block)
