"""``apertus``: Swiss AI Apertus' JSON array of one-key objects in special tokens.

::

    text<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, ...]<|tools_suffix|>

vLLM's ``ApertusToolParser`` as it is, quirks included:

* non-streaming: the array is read up to the suffix or the end (an unfinished
  one as partial JSON); content is the text before the block, then text
  after the array inside it, then text after it, joined by newlines; a block
  is "tools called" even when it holds no call;
* streaming holds back a step's text that ends in part of either marker;
  inside the block it sends each call's name (with ``arguments: ""``) and the
  growing JSON of its arguments, the closing characters (``}"], ``) withheld
  until the block ends; text next to the block is sent only in a step that
  also sends a call piece (vLLM's ``DeltaMessage(tool_calls=None)`` fails
  validation, and the error is swallowed);
* special tokens are kept when tools are given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from frontend.parsers.json_partial import common_prefix, loads_partial
from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

PREFIX = "<|tools_prefix|>"
SUFFIX = "<|tools_suffix|>"
_BLOCK_RE = re.compile(rf"{re.escape(PREFIX)}(.*?)(?:{re.escape(SUFFIX)}|$)", re.DOTALL)
_DECODER = json.JSONDecoder()
# Withheld from the end of a call's arguments until its block ends.
_CLOSING = ("}", '"', "]", " ", ",")


def _as_list(value: Any) -> list:
    if isinstance(value, list):
        return value
    return [value] if value else []


class ApertusToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.held = ""  # text held back: it ends in part of a marker
        self.current_tool_id = -1
        self.current_tool_name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        match = _BLOCK_RE.search(text)
        if not match:
            return ExtractedToolCalls(False, [], text)
        try:
            body = match.group(1)
            stripped = body.lstrip()
            try:
                parsed, end = _DECODER.raw_decode(stripped)
                trailing = stripped[end:]
            except json.JSONDecodeError:
                parsed, _ = loads_partial(body, True)  # cut off by max_tokens
                trailing = ""
            calls = []
            for obj in _as_list(parsed):
                if isinstance(obj, dict) and obj:
                    name, args = next(iter(obj.items()))
                    calls.append(
                        ToolCall(name, json.dumps(args, ensure_ascii=False), make_tool_call_id())
                    )
        except Exception:  # vLLM: the output is content
            return ExtractedToolCalls(False, [], text)
        content = text[: match.start()].strip()
        for extra in (trailing, text[match.end() :]):
            extra = extra.replace(SUFFIX, "").strip()
            if extra:
                content = (content + "\n" + extra).strip()
        return ExtractedToolCalls(True, calls, content or None)

    def _release(self, delta_text: str) -> str:
        """This step's text, less an ending that may be the start of a marker."""
        text = self.held + delta_text
        self.held = ""
        for tag in (PREFIX, SUFFIX):
            if text.endswith(tag):
                return text
            for k in range(len(tag) - 1, 0, -1):
                if text.endswith(tag[:k]):
                    self.held = text[-k:]
                    return text[:-k]
        return text

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        delta_text = self._release(delta_text)
        if not delta_text:
            return None
        if PREFIX not in current_text:
            return ParsedDelta(content=delta_text)
        try:
            return self._stream(current_text, delta_text)
        except Exception:  # vLLM logs it and sends nothing
            return None

    def _stream(self, current_text: str, delta_text: str) -> ParsedDelta | None:
        prefix_at = current_text.rfind(PREFIX)
        suffix_at = current_text.rfind(SUFFIX)
        inside = prefix_at > suffix_at
        json_start = prefix_at + len(PREFIX)

        # A complete array ends the block without the suffix.
        completed = False
        json_end: int | None = None
        if inside:
            rest = current_text[json_start:].lstrip()
            try:
                _, end = _DECODER.raw_decode(rest)
            except json.JSONDecodeError:
                pass
            else:
                json_end = len(current_text) - len(rest) + end
                completed, inside = True, False
        just_finished = SUFFIX in delta_text or completed

        if not inside and not just_finished:
            text = delta_text.replace(PREFIX, "").replace(SUFFIX, "")
            return ParsedDelta(content=text) if text else None

        content = ""
        if PREFIX in delta_text:
            content += delta_text.split(PREFIX)[0].replace(SUFFIX, "")
        if just_finished:
            if completed and json_end is not None:
                # Only what follows the array within this step's text.
                start = max(json_end, len(current_text) - len(delta_text))
                content += current_text[start:].replace(SUFFIX, "")
            else:
                content += delta_text.split(SUFFIX)[-1]

        end_at = suffix_at if suffix_at > prefix_at else json_end
        calls = self._diff(current_text[json_start:end_at], final=not inside)
        if not calls:
            # Content alone here is vLLM's DeltaMessage(tool_calls=None),
            # which fails validation: nothing is sent.
            return None
        return ParsedDelta(content=content or None, tool_calls=calls)

    def _diff(self, json_text: str, final: bool) -> list[DeltaToolCall]:
        """The call pieces the array so far adds to what was sent."""
        try:
            parsed = _as_list(loads_partial(json_text, True)[0])
        except Exception:
            return []
        if not parsed:
            return []
        pieces: list[DeltaToolCall] = []
        # Finish the calls a large step went past, then the current one.
        while self.current_tool_id < len(parsed) - 1:
            if self.current_tool_id >= 0:
                self._piece(parsed, self.current_tool_id, True, pieces)
            self.current_tool_id += 1
            self.current_tool_name_sent = False
            while len(self.streamed_args_for_tool) <= self.current_tool_id:
                self.streamed_args_for_tool.append("")
        if self.current_tool_id >= 0:
            self._piece(parsed, self.current_tool_id, final, pieces)
        return pieces

    def _piece(self, parsed: list, index: int, final: bool, pieces: list[DeltaToolCall]) -> None:
        obj = parsed[index]
        if not isinstance(obj, dict) or not obj:
            return
        name, args = next(iter(obj.items()))
        if not self.current_tool_name_sent:
            self.current_tool_name_sent = True
            pieces.append(
                DeltaToolCall(
                    index, id=make_tool_call_id(), type="function", name=name, arguments=""
                )
            )
        if args is None:
            return
        args_json = json.dumps(args, ensure_ascii=False)
        if not final:
            args_json = args_json.rstrip("".join(_CLOSING))
        sent = self.streamed_args_for_tool[index]
        if args_json == sent:
            return
        shared = common_prefix(sent, args_json)
        if len(shared) < len(sent):
            # The partial parse took back what was sent: resync, send nothing.
            self.streamed_args_for_tool[index] = shared
            return
        self.streamed_args_for_tool[index] = args_json
        pieces.append(DeltaToolCall(index, arguments=args_json[len(sent) :]))
