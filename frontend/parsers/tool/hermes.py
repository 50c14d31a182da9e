"""``hermes`` (also ``qwen3_json``): JSON calls in ``<tool_call>`` tags.

::

    Some text<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Content is the text before the first ``<tool_call>`` (text after the calls
is dropped).  A body that is not a JSON object with a string ``name`` makes
the whole output plain content.  Streaming re-reads the text so far on every
step: arguments stream as the raw JSON text the model writes (a truncated
call's arguments end where the output ended).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import ClassVar

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import is_complete_json, partial_tag_overlap
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

START = "<tool_call>"
END = "</tool_call>"
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]+)"')
_ARGS_RE = re.compile(r'"arguments"\s*:\s*')


class HermesToolParser(TextSoFarToolParser):
    structural_tag_model: ClassVar[str | None] = "hermes"
    start_tag: ClassVar[str] = START
    end_tag: ClassVar[str] = END
    supports_required_and_named = False
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._sent_content_end = 0

    def extract(self, text: str) -> ExtractedToolCalls:
        start = self.start_tag
        if start not in text:
            return ExtractedToolCalls(False, [], text)
        try:
            calls = []
            for body in _bodies(text, start, self.end_tag):
                obj = json.loads(body)
                name = obj["name"]
                if not isinstance(name, str):
                    raise TypeError("tool name must be a string")
                calls.append(
                    ToolCall(
                        name, json.dumps(obj["arguments"], ensure_ascii=False), make_tool_call_id()
                    )
                )
        except Exception:  # any malformed call: the output is plain content
            return ExtractedToolCalls(False, [], text)
        content = text[: text.find(start)]
        return ExtractedToolCalls(True, calls, content or None)

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
            return self._stream_step(current_text)
        except Exception:
            return None

    def _stream_step(self, text: str) -> ParsedDelta | None:
        content = self._new_content(text)
        deltas: list[DeltaToolCall] = []
        for i, (body, complete) in enumerate(_partial_bodies(text, self.start_tag, self.end_tag)):
            if i >= len(self.prev_tool_call_arr):
                self.prev_tool_call_arr.append({})
                self.streamed_args_for_tool.append("")
            call = self.prev_tool_call_arr[i]
            if "name" not in call:
                m = _NAME_RE.search(body)
                if not m:
                    break  # calls go out in order: wait for this name
                call["name"] = m.group(1)
                deltas.append(
                    DeltaToolCall(i, id=make_tool_call_id(), type="function", name=m.group(1))
                )
            args = _raw_arguments(body, complete)
            if args is not None and len(args) > len(self.streamed_args_for_tool[i]):
                piece = args[len(self.streamed_args_for_tool[i]) :]
                self.streamed_args_for_tool[i] = args
                call["arguments"] = args
                if piece:
                    deltas.append(DeltaToolCall(i, arguments=piece))
        if content or deltas:
            return ParsedDelta(content=content, tool_calls=deltas)
        return None

    def _new_content(self, text: str) -> str | None:
        """Unsent text before the first tag, minus a tail that may start one."""
        start = text.find(self.start_tag)
        end = start if start >= 0 else len(text) - partial_tag_overlap(text, self.start_tag)
        if end > self._sent_content_end:
            content = text[self._sent_content_end : end]
            self._sent_content_end = end
            return content
        return None


def _bodies(text: str, open_tag: str, close_tag: str) -> list[str]:
    """Each call's text: up to its end tag, or to the end of the output."""
    bodies = []
    pos = 0
    while (start := text.find(open_tag, pos)) >= 0:
        body_start = start + len(open_tag)
        end = text.find(close_tag, body_start)
        if end < 0:
            bodies.append(text[body_start:])
            break
        bodies.append(text[body_start:end])
        pos = end + len(close_tag)
    return bodies


def _partial_bodies(text: str, open_tag: str, close_tag: str) -> list[tuple[str, bool]]:
    """(stripped JSON text, complete) for each call so far."""
    results = []
    pos = 0
    while (start := text.find(open_tag, pos)) >= 0:
        body_start = start + len(open_tag)
        end = text.find(close_tag, body_start)
        if end >= 0:
            results.append((text[body_start:end].strip(), True))
            pos = end + len(close_tag)
            continue
        raw = text[body_start:]
        overlap = partial_tag_overlap(raw, close_tag)
        if overlap:
            raw = raw[:-overlap]
        body = raw.strip()
        # A body that already parses is complete; its end tag is on the way.
        results.append((body, is_complete_json(body) if body else False))
        break
    return results


def _raw_arguments(body: str, complete: bool) -> str | None:
    """The arguments' JSON text as written (without the object's closing brace)."""
    m = _ARGS_RE.search(body)
    if not m:
        return None
    raw = body[m.end() :]
    if complete:
        raw = raw.rstrip()
        if raw.endswith("}"):
            raw = raw[:-1].rstrip()
    return raw
