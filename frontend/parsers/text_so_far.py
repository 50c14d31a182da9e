"""The adapter that puts text-so-far parsers behind the per-delta protocol.

vLLM's classic parsers are called on every step with the whole output so
far: ``extract_streaming(previous_text, current_text, delta_text,
previous_ids, current_ids, delta_ids)``, where ``previous + delta ==
current``.  These base classes keep that text (from the parser's first
``feed``: a tool parser sees only the text after reasoning) and make the
call, so such a parser is written exactly as in vLLM and the composite
feeds it deltas like any other.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tool.base import ToolParser
from frontend.parsers.types import ParsedDelta


class _TextSoFar:
    """The text and token ids fed so far."""

    __slots__ = ("text", "ids")

    def __init__(self) -> None:
        self.text = ""
        self.ids: list[int] = []

    def advance(
        self, delta_text: str, delta_ids: list[int]
    ) -> tuple[str, str, list[int], list[int]]:
        """(previous text, current text, previous ids, current ids), and
        current becomes previous for the next step."""
        previous_text, previous_ids = self.text, self.ids
        self.text, self.ids = previous_text + delta_text, previous_ids + delta_ids
        return previous_text, self.text, previous_ids, self.ids


class TextSoFarToolParser(ToolParser):
    """A tool parser that reads the text so far on every step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._so_far = _TextSoFar()

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        previous_text, current_text, previous_ids, current_ids = self._so_far.advance(
            delta_text, delta_ids
        )
        return self.extract_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids
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
        raise NotImplementedError


class TextSoFarReasoningParser(ReasoningParser):
    """A reasoning parser that reads the text so far on every step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._so_far = _TextSoFar()
        self._ended = False

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        previous_text, current_text, previous_ids, current_ids = self._so_far.advance(
            delta_text, delta_ids
        )
        delta = self.extract_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids
        )
        self._ended = self.is_reasoning_end_streaming(current_ids, delta_ids)
        return delta

    def ended(self) -> bool:
        return self._ended

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        raise NotImplementedError

    def is_reasoning_end_streaming(
        self, token_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> bool:
        """Whether the output so far (``token_ids``, this step's ``delta_ids``)
        has left reasoning."""
        return self.is_reasoning_end(token_ids)
