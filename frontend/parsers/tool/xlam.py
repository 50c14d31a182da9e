"""``xlam``: Salesforce xLAM's JSON array of calls, bare or wrapped.

::

    [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    ```json\n[...]\n```   [TOOL_CALLS][...]   <tool_call>[...]</tool_call>   ...</think>[...]

vLLM's ``xLAMToolParser`` as it is, quirks included:

* non-streaming: the first wrapper whose body is valid JSON wins (content is
  the text with every such wrapper removed), else a whole output starting
  with ``[``; a call whose name is not a string, or whose arguments are not
  an object or a string, fails the whole parse (vLLM's ``FunctionCall``
  refuses it) and the output is content;
* streaming sends at most one piece per step, found by regular expressions
  on the text so far: a call's name, then ``{``, then the rest of its
  arguments (only an arguments object nesting one level deep is matched);
  it never records what it streamed in ``streamed_args_for_tool``, so the
  final delta appends the last call's whole arguments again when it carries a
  tool call piece;
* once the text looks like a call block, content is no longer streamed;
  an error while streaming sends the step's text as content.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import DeltaToolCall, ExtractedToolCalls, ParsedDelta, ToolCall

# Wrappers tried in this order, on the text after </think> first.
_WRAPPERS = [
    re.compile(r"```(?:json)?\s*([\s\S]*?)```"),
    re.compile(r"\[TOOL_CALLS\]([\s\S]*?)(?=\n|$)"),
    re.compile(r"<tool_call>([\s\S]*?)</tool_call>"),
]
_AFTER_THINK = re.compile(r"</think>([\s\S]*)")
_OPEN_FENCE = re.compile(r"```(?:json)?\s*([\s\S]*?)(?:```|$)")
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
_EMPTY_ARGS = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:\s*\{\s*\}')
_ARGS = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:\s*(\{(?:[^{}]|(?:\{[^{}]*\}))*\})')


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _first_json_body(pattern: re.Pattern[str], text: str) -> str | None:
    return next((body for body in pattern.findall(text) if _is_json(body)), None)


def preprocess(text: str) -> tuple[str | None, str | None]:
    """(content, the JSON text that may hold the calls), as vLLM's
    ``preprocess_model_output``."""
    think = _AFTER_THINK.search(text)
    if think:
        content = text[: think.start() + len("</think>")].strip()
        after = think.group(1).strip()
        if _is_json(after):
            return content, after
        for pattern in _WRAPPERS:
            body = _first_json_body(pattern, after)
            if body is not None:
                return content, body
    for pattern in _WRAPPERS:
        body = _first_json_body(pattern, text)
        if body is not None:
            return pattern.sub("", text).strip(), body
    if text.strip().startswith("["):
        # A complete array, or one that looks like calls in progress.
        if _is_json(text) or ("{" in text and "name" in text and "arguments" in text):
            return None, text
    return text, None


def _call_id(index: int) -> str:
    return f"call_{index}_{uuid.uuid4().hex}"


class _Sent:
    """What streaming has sent of one call."""

    __slots__ = ("name", "prefix", "arguments")

    def __init__(self) -> None:
        self.name = False
        self.prefix = False  # the arguments' opening "{" (or "{}")
        self.arguments = ""


class xLAMToolParser(TextSoFarToolParser):  # noqa: N801 (vLLM's class name)
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current_index = -1
        self.sent: list[_Sent] = []

    def extract(self, text: str) -> ExtractedToolCalls:
        content, body = preprocess(text)
        if not body:
            return ExtractedToolCalls(False, [], content)
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            return ExtractedToolCalls(False, [], text)
        if not isinstance(data, list):
            return ExtractedToolCalls(False, [], content or text)
        calls = []
        for index, call in enumerate(data):
            if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
                continue
            args = call["arguments"]
            if isinstance(args, dict):
                args = json.dumps(args, ensure_ascii=False)
            if not isinstance(call["name"], str) or not isinstance(args, str):
                return ExtractedToolCalls(False, [], text)  # vLLM's FunctionCall refuses it
            calls.append(ToolCall(call["name"], args, _call_id(index)))
        return ExtractedToolCalls(bool(calls), calls, content)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        _, body = preprocess(current_text)
        has_block = any(
            marker in current_text
            for marker in ("```json", "```\n[", "[TOOL_CALLS]", "<tool_call>")
        )
        stripped = current_text.strip()
        is_block = (
            stripped.startswith(("[", "<tool_call>"))
            or "</think>[" in current_text
            or body is not None
            or (has_block and '"name"' in current_text and '"arguments"' in current_text)
        )
        if not is_block:
            return ParsedDelta(content=delta_text)
        try:
            return self._stream(current_text, body, has_block)
        except Exception:  # vLLM sends the step's text as content on any error
            return ParsedDelta(content=delta_text)

    def _stream(self, current_text: str, body: str | None, has_block: bool) -> ParsedDelta | None:
        try:
            parsed = json.loads(body or current_text)
            if isinstance(parsed, list):
                self.prev_tool_call_arr = parsed  # read back at the end of the stream
        except json.JSONDecodeError:
            pass

        search = body or current_text
        if not body and has_block:
            fence = _OPEN_FENCE.search(current_text)
            if fence:
                inner = fence.group(1).strip()
                if inner.startswith("[") and '"name"' in inner and '"arguments"' in inner:
                    search = inner

        names = list(_NAME.finditer(search))
        count = len(names)
        if count == 0:
            return None
        while len(self.sent) < count:
            self.sent.append(_Sent())

        index = self.current_index
        if index == -1 or index < count - 1:
            following = index + 1
            if not self.sent[following].name:
                self.current_index = following
                self.sent[following].name = True
                return ParsedDelta(
                    tool_calls=[
                        DeltaToolCall(
                            following,
                            id=_call_id(following),
                            type="function",
                            name=names[following].group(1),
                        )
                    ]
                )
        if not 0 <= index < count:
            return None
        sent = self.sent[index]

        # Any call with empty arguments (not at the very start) sends "{}"
        # for the current one, whichever call it is.
        empty = _EMPTY_ARGS.search(search)
        if empty and empty.start() > 0 and not sent.prefix:
            sent.prefix = True
            sent.arguments = "{}"
            if index < count - 1:
                self.current_index += 1
            return _arguments(index, "{}")

        matches = list(_ARGS.finditer(search))
        if index >= len(matches):
            return None
        args = matches[index].group(1)
        if count > 1:
            try:
                calls = json.loads(search)
            except json.JSONDecodeError:
                calls = None
            if isinstance(calls, list) and index < len(calls):
                value: Any = calls[index].get("arguments", "{}")  # a non-object raises
                args = (
                    json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else str(value)
                )

        if not sent.prefix and args.startswith("{"):
            sent.prefix = True
            sent.arguments = "{"
            return _arguments(index, "{")
        if args.startswith(sent.arguments):
            diff = args[len(sent.arguments) :]
            if diff:
                sent.arguments = args
                return _arguments(index, diff)
        if args.endswith("}") and args == sent.arguments and index < count - 1:
            self.current_index += 1
        return None


def _arguments(index: int, piece: str) -> ParsedDelta:
    return ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
