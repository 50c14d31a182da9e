"""``olmo3``: Olmo 3's newline-separated pythonic calls in ``<function_calls>``.

::

    <function_calls>get_weather(city="Paris")
    search(query="rain")</function_calls>

vLLM's ``Olmo3PythonicToolParser``: each non-blank line is a call, the lines
joined into a pythonic list (:mod:`frontend.parsers.tool.pythonic`); values
may be ``null``/``true``/``false``.  Streaming starts at a leading ``<``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.tool.pythonic import PythonicToolParser, _calls, looks_like_call_list
from frontend.parsers.types import ExtractedToolCalls, ParsedDelta

START = "<function_calls>"
END = "</function_calls>"
_BLOCK_RE = re.compile(r"<function_calls>(.*?)</function_calls>", re.DOTALL)


def _as_list(text: str) -> str:
    return "[" + ", ".join(line.strip() for line in text.splitlines() if line.strip()) + "]"


class Olmo3PythonicToolParser(PythonicToolParser):
    call_closer = ")"

    def _call_list(self, valid_text: str) -> str:
        return _as_list(valid_text)

    def extract(self, text: str) -> ExtractedToolCalls:
        m = _BLOCK_RE.search(text)
        calls_text = _as_list(m.group(1).strip() if m else text)
        if not looks_like_call_list(calls_text):
            return ExtractedToolCalls(False, [], text)
        try:
            return ExtractedToolCalls(True, _calls(calls_text), None)
        except Exception:  # not valid Python, or not calls: plain content
            return ExtractedToolCalls(False, [], text)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if not current_text.startswith("<"):
            return ParsedDelta(content=delta_text)
        if current_text.startswith(START):
            current_text = current_text[len(START) :]
        if current_text.endswith(END):
            current_text = current_text[: -len(END)]
        try:
            return self._stream_step(current_text)
        except Exception:
            return None
