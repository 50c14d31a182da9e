"""Newlines a tokenizer decodes as the two characters ``\\`` ``n``, recovered.

MiniCPM-V's tokenizer has a token (id 1639) that decodes a newline as ``\\n``
written out.  vLLM 0.32's MiniCPM-V parser (``vllm/parser/minicpmv.py``)
turns ``\\n``, ``\\r`` and ``\\r\\n`` back into a newline in the reasoning
and the content, leaving code blocks, inline code, LaTeX spans and doubled
backslashes alone; tool call arguments (JSON) are never touched.  Streaming
holds back a half-written escape so the stream adds up to the whole result.
"""

from __future__ import annotations

from frontend.parsers.types import UNSET, ParsedDelta


class EscapedNewlineNormalizer:
    """One text stream, character by character (vLLM's class of that name)."""

    def __init__(self) -> None:
        self._closing_marker: str | None = None
        self._pending = ""

    def feed(self, text: str, *, final: bool = False) -> str:
        text = self._pending + text
        self._pending = ""
        output: list[str] = []
        index = 0

        while index < len(text):
            if self._closing_marker is not None:
                marker = self._closing_marker
                remaining = text[index:]
                if remaining.startswith(marker):
                    output.append(marker)
                    index += len(marker)
                    self._closing_marker = None
                    continue
                if not final and marker.startswith(remaining):
                    self._pending = remaining
                    break
                output.append(text[index])
                index += 1
                continue

            remaining = text[index:]
            if text[index] == "`":
                if not final and remaining in ("`", "``"):
                    self._pending = remaining
                    break
                fence = "```" if remaining.startswith("```") else "`"
                output.append(fence)
                index += len(fence)
                self._closing_marker = fence
                continue

            if text[index] == "$":
                if not final and remaining == "$":
                    self._pending = remaining
                    break
                fence = "$$" if remaining.startswith("$$") else "$"
                output.append(fence)
                index += len(fence)
                self._closing_marker = fence
                continue

            if text[index] != "\\":
                output.append(text[index])
                index += 1
                continue

            slash_end = index + 1
            while slash_end < len(text) and text[slash_end] == "\\":
                slash_end += 1
            if slash_end - index > 1:
                if not final and slash_end == len(text):
                    # The run's parity decides what a following "n" is: wait.
                    self._pending = text[index:slash_end]
                    break
                output.append(text[index:slash_end])
                index = slash_end
                continue

            if not final and remaining in ("\\", "\\r", "\\r\\"):
                self._pending = remaining
                break
            if remaining.startswith("\\r\\n"):
                output.append("\n")
                index += 4
            elif remaining.startswith(("\\n", "\\r")):
                output.append("\n")
                index += 2
            elif remaining.startswith("\\("):
                output.append("\\(")
                index += 2
                self._closing_marker = "\\)"
            elif remaining.startswith("\\["):
                output.append("\\[")
                index += 2
                self._closing_marker = "\\]"
            else:
                output.append("\\")
                index += 1

        if final and self._pending:
            output.append(self._pending)
            self._pending = ""
        return "".join(output)


def recover_newlines(text: str | None) -> str | None:
    if text is None or "\\" not in text:
        return text
    return EscapedNewlineNormalizer().feed(text, final=True)


def _is_set(value: object) -> bool:
    """vLLM's ``is not None`` on a delta field (unset reads as None there)."""
    return value is not None and value is not UNSET


class EscapedNewlinesOutput:
    """A whole choice's output: reasoning and content streams apart, so a
    half escape at the end of reasoning does not swallow the content's start
    (vLLM's ``MiniCPMVOutputNormalizer``)."""

    def __init__(self) -> None:
        self._reasoning = EscapedNewlineNormalizer()
        self._content = EscapedNewlineNormalizer()

    @staticmethod
    def parsed(reasoning: str | None, content: str | None) -> tuple[str | None, str | None]:
        """A complete output's reasoning and content."""
        return recover_newlines(reasoning), recover_newlines(content)

    def delta(self, delta: ParsedDelta | None, *, finished: bool) -> ParsedDelta | None:
        reasoning_finished = finished or (
            delta is not None and (_is_set(delta.content) or bool(delta.tool_calls))
        )
        reasoning = self._reasoning.feed(
            delta.reasoning if delta and delta.reasoning else "", final=reasoning_finished
        )
        content = self._content.feed(
            delta.content if delta and delta.content else "", final=finished
        )

        if delta is None:
            if not reasoning and not content:
                return None
            return ParsedDelta(content=content or None, reasoning=reasoning or None)

        if reasoning:
            delta.reasoning = reasoning
        elif _is_set(delta.reasoning):
            delta.reasoning = None
        if content:
            delta.content = content
        elif _is_set(delta.content):
            delta.content = None
        # A chunk that comes to nothing is not sent.
        if not delta.content and not delta.reasoning and not delta.tool_calls:
            return None
        return delta
