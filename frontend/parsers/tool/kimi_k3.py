"""``kimi_k3``: Kimi K3's XTML channels, built from the special tokens
``<|open|>``, ``<|close|>`` and ``<|sep|>``::

    <|open|>response<|sep|>Sure.<|close|>response<|sep|>
    <|open|>tools<|sep|><|open|>call tool="search" index="1"<|sep|>
    <|open|>argument key="query" type="string"<|sep|>rain<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|>

vLLM's ``KimiK3ToolParser`` as it is.  A ``type="string"`` argument is its
raw text, any other JSON (its text when that fails); attribute values have
``&quot;``/``&amp;`` undone; a call without ``tool=`` is dropped.  Content is
the ``response`` channel's body, else the text before the tools channel
without response/message markers (the response opener is often the
prompt's).  Streaming sends the response body as it comes (holding back a
tail that may begin a marker) and each call whole once its
``<|close|>call<|sep|>`` has arrived.  Special tokens are always kept;
"required"/named calls are forced by the XTML structural tag (``kimi_k3`` in
:mod:`frontend.structured.tool_tags`) and parsed as "auto".  vLLM pairs it
with its own composite (``vllm_composite``; see
:class:`~frontend.parsers.composite.OutputParser`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import partial_tag_overlap
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

MARKERS = ("<|open|>", "<|close|>", "<|sep|>")
TOOLS_OPEN, RESPONSE_OPEN = "<|open|>tools<|sep|>", "<|open|>response<|sep|>"
RESPONSE_CLOSE = "<|close|>response<|sep|>"
_O, _C, _S = r"<\|open\|>", r"<\|close\|>", r"<\|sep\|>"
_TEXT_UNTIL_SEP = r"(?:(?!" + _S + r").)*?"
# `\s*` inside a marker: vLLM's defence against spaced special tokens.
_TOOLS_OPEN_RE = re.compile(_O + r"\s*tools\s*" + _S)
_TOOLS_CLOSE_RE = re.compile(_C + r"\s*tools\s*" + _S)
_RESPONSE_OPEN_RE = re.compile(_O + r"\s*response\s*" + _S)
_RESPONSE_CLOSE_RE = re.compile(_C + r"\s*response\s*" + _S)
_MESSAGE_CLOSE_RE = re.compile(_C + r"\s*message\s*" + _S)
_CALL_RE = re.compile(
    _O
    + r"\s*call\s+(?P<attrs>"
    + _TEXT_UNTIL_SEP
    + r")"
    + _S
    + r"(?P<body>.*?)"
    + _C
    + r"\s*call\s*"
    + _S,
    re.DOTALL,
)
_ARG_RE = re.compile(
    _O
    + r"\s*argument\s+(?P<attrs>"
    + _TEXT_UNTIL_SEP
    + r")"
    + _S
    + r"(?P<val>.*?)"
    + _C
    + r"\s*argument\s*"
    + _S,
    re.DOTALL,
)
_ATTR_RE = re.compile(r'(?P<k>\w+)="(?P<v>[^"]*)"')
_RESPONSE_RE = re.compile(
    _O + r"\s*response\s*" + _S + r"(?P<c>.*?)" + _C + r"\s*response\s*" + _S, re.DOTALL
)


def _attrs(text: str) -> dict[str, str]:
    return {
        m["k"]: m["v"].replace("&quot;", '"').replace("&amp;", "&") for m in _ATTR_RE.finditer(text)
    }


def _decode_call(attrs: str, body: str) -> ToolCall | None:
    tool_name = _attrs(attrs).get("tool", "")
    arguments: dict = {}
    for match in _ARG_RE.finditer(body):
        arg_attrs = _attrs(match["attrs"])
        key = arg_attrs.get("key", "")
        raw = match["val"]
        if arg_attrs.get("type", "string") == "string":
            arguments[key] = raw
        else:
            try:
                arguments[key] = json.loads(raw)
            except ValueError:
                arguments[key] = raw
    if not tool_name:
        return None
    return ToolCall(tool_name, json.dumps(arguments, ensure_ascii=False))


def strip_response(text: str) -> str | None:
    """The response body of ``text`` (the opener may have been the prompt's)."""
    m_open = _RESPONSE_OPEN_RE.search(text)
    if m_open is not None:
        m_close = _RESPONSE_CLOSE_RE.search(text, m_open.end())
        text = text[m_open.end() : m_close.start()] if m_close is not None else text[m_open.end() :]
    else:
        text = _RESPONSE_CLOSE_RE.sub("", text)
    text = _MESSAGE_CLOSE_RE.sub("", text)
    return text or None


def _content(text: str, before: str) -> str | None:
    m = _RESPONSE_RE.search(text)
    if m is not None:
        return m["c"] or None
    return strip_response(before)


def _calls(section: str) -> list[ToolCall]:
    return [c for m in _CALL_RE.finditer(section) if (c := _decode_call(m["attrs"], m["body"]))]


class KimiK3ToolParser(TextSoFarToolParser):
    supports_required_and_named = False
    structural_tag_model = "kimi_k3"
    keeps_special_tokens = "always"
    joins_special_tokens = True
    vllm_composite = "kimi_k3"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._sent_content_idx = 0
        self._sent_tool_call_count = 0

    def extract(self, text: str) -> ExtractedToolCalls:
        m_open = _TOOLS_OPEN_RE.search(text)
        if m_open is None:
            return ExtractedToolCalls(False, [], _content(text, text))
        try:
            before = text[: m_open.start()]
            m_close = _TOOLS_CLOSE_RE.search(text, m_open.end())
            section = text[m_open.end() : m_close.start() if m_close else len(text)]
            calls = _calls(section)
            return ExtractedToolCalls(bool(calls), calls, _content(text, before))
        except Exception:
            return ExtractedToolCalls(False, [], text)

    def _response_delta(self, text: str) -> str | None:
        """The response body's new part that is safe to send."""
        m_open = _RESPONSE_OPEN_RE.search(text)
        body_start = m_open.end() if m_open is not None else 0
        m_tools = _TOOLS_OPEN_RE.search(text, body_start)
        m_close = _RESPONSE_CLOSE_RE.search(text, body_start)
        ends = [m.start() for m in (m_tools, m_close) if m is not None]
        if ends:
            sendable = min(ends)
        else:
            overlap = max(
                partial_tag_overlap(text, tag)
                for tag in (RESPONSE_OPEN, RESPONSE_CLOSE, TOOLS_OPEN)
            )
            sendable = len(text) - overlap
        if sendable <= body_start:
            return None
        self._sent_content_idx = max(self._sent_content_idx, body_start)
        if sendable <= self._sent_content_idx:
            return None
        content = text[self._sent_content_idx : sendable]
        self._sent_content_idx = sendable
        return content or None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        content = self._response_delta(current_text)
        m_tools = _TOOLS_OPEN_RE.search(current_text)
        calls = _calls(current_text[m_tools.end() :]) if m_tools is not None else []
        if len(calls) <= self._sent_tool_call_count:
            return ParsedDelta(content=content) if content else None
        pieces = [
            DeltaToolCall(
                index,
                id=make_tool_call_id(),
                type="function",
                name=call.name,
                arguments=call.arguments,
            )
            for index, call in enumerate(
                calls[self._sent_tool_call_count :], self._sent_tool_call_count
            )
        ]
        self._sent_tool_call_count = len(calls)
        return ParsedDelta(content=content, tool_calls=pieces)
