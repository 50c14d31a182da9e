"""``llama4_pythonic``: Llama 4's pythonic calls, maybe inside
``<|python_start|>...<|python_end|>``.

::

    <|python_start|>[get_weather(city='Paris')]<|python_end|>

vLLM's ``Llama4PythonicToolParser``: :mod:`frontend.parsers.tool.pythonic`
after dropping a leading ``<|python_start|>`` (and then every
``<|python_end|>``; streaming: a trailing one).
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.tool.pythonic import PythonicToolParser
from frontend.parsers.types import ExtractedToolCalls, ParsedDelta

START = "<|python_start|>"
END = "<|python_end|>"


class Llama4PythonicToolParser(PythonicToolParser):
    def extract(self, text: str) -> ExtractedToolCalls:
        if text.startswith(START):
            text = text[len(START) :].replace(END, "")
        return super().extract(text)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if not current_text.startswith("[") and not current_text.startswith(START):
            return ParsedDelta(content=delta_text)
        if current_text.startswith(START):
            current_text = current_text[len(START) :]
        if current_text.endswith(END):
            current_text = current_text[: current_text.rfind(END)]
        try:
            return self._stream_step(current_text)
        except Exception:
            return None
