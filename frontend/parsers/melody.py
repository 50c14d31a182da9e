"""vLLM 0.32's Cohere Command parsers: one ``cohere_melody`` filter over an output.

vLLM's ``CohereCommandParser`` (``vllm/parser/cohere_command.py``) hands the
whole output to Cohere's ``cohere_melody`` filter (the library made for the
Command A formats: ``<|START_THINKING|>``, ``<|START_RESPONSE|>``,
``<|START_ACTION|>`` JSON tool calls, citations) with the model's preset
(``cmd3``, ``cmd4``), for reasoning, content and tool calls at once.
:class:`CohereOutputParser` is that, with the composite ``OutputParser``'s
interface.  ``cohere_melody`` is imported only when a Cohere parser is chosen
(the ``cohere`` extra).

Citations (``<co>span</co: 0:[1]>``) are streamed as vLLM's OpenAI route
streams them, a ``citations`` field of the delta, with no sources (only
vLLM's Cohere v2 route resolves those).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from frontend.parsers.composite import ChoiceSetup, OutputParser, ParsedOutput
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import DeltaToolCall, ParsedDelta, ToolCall

START_THINKING, END_THINKING = "<|START_THINKING|>", "<|END_THINKING|>"
CHATBOT = "<|CHATBOT_TOKEN|>"


def check_tokenizer_markers(tokenizer: ParserTokenizer) -> None:
    missing = [t for t in (START_THINKING, END_THINKING, CHATBOT) if t not in tokenizer.vocab]
    if missing:
        raise ValueError(f"the Cohere Command parsers need the tokens {missing} in the tokenizer")


def _filter(preset: str) -> Any:
    try:
        from cohere_melody import PyFilter, PyFilterOptions
    except ImportError as e:
        raise ImportError(
            "The Cohere Command parser requires the `cohere_melody` package. "
            "Install it with:\n    pip install 'cohere-melody>=0.14.0'"
        ) from e
    return PyFilter(getattr(PyFilterOptions(), preset)())


def _join(parts: Iterable[str | None]) -> str | None:
    present = [p for p in parts if p is not None]
    return "".join(present) if present else None


def _citation(citation: Any) -> dict[str, Any]:
    """vLLM's ``Citation`` as its stream dumps it (sources unresolved)."""
    return {
        "start": citation.start_index,
        "end": citation.end_index,
        "text": citation.text,
        "sources": [],
        "type": "THINKING_CONTENT" if citation.is_thinking else "TEXT_CONTENT",
    }


class CohereOutputParser(OutputParser):
    """One choice's output through melody (vLLM's ``CohereCommandParser``), in
    place of the composite's reasoning-then-tools pipeline."""

    def __init__(self, tokenizer: ParserTokenizer, setup: ChoiceSetup) -> None:
        shim: Any = setup.reasoning_parser or setup.tool_parser
        self._preset = shim.melody_preset
        self._stream: Any = None
        self.tools_allowed = setup.tool_parser is not None and setup.tool_choice != "none"
        self.has_reasoning_parser = setup.reasoning_parser is not None
        self.include_reasoning = setup.include_reasoning
        self._start_id = tokenizer.vocab.get(START_THINKING)
        self._end_id = tokenizer.vocab.get(END_THINKING)
        self._chatbot_id = tokenizer.vocab.get(CHATBOT)
        # Melody may give a call's id before its name: held for the name's delta.
        self._pending_ids: dict[int, str] = {}
        self.tools_streamed = False

    def parse(self, text: str) -> ParsedOutput:
        result = _filter(self._preset).process_full_text(text)
        calls = None
        if self.tools_allowed:
            calls = [ToolCall(c.name, c.arguments, c.id) for c in result.tool_calls] or None
        reasoning = result.reasoning if self.include_reasoning else None
        return ParsedOutput(reasoning, result.content, calls)

    def feed(
        self, delta_text: str, delta_ids: Sequence[int], *, finished: bool = False
    ) -> ParsedDelta | None:
        if self._stream is None:
            self._stream = _filter(self._preset)
        results = [self._stream.write_decoded(delta_text)]
        if finished:
            results.append(self._stream.flush_partials())
        content = _join(r.content for r in results)
        reasoning = _join(r.reasoning for r in results) if self.include_reasoning else None
        calls: list[DeltaToolCall] = []
        citations: list[dict[str, Any]] = []
        for result in results:
            if result.tool_calls and self.tools_allowed:
                calls.extend(self._call_deltas(result.tool_calls))
            citations.extend(map(_citation, result.citations))
        if not (content or reasoning or calls or citations):
            return None
        delta = ParsedDelta(tool_calls=calls, citations=citations)
        if content is not None:
            delta.content = content
        if reasoning is not None:
            delta.reasoning = reasoning
        if calls:
            self.tools_streamed = True
        return delta

    def _call_deltas(self, melody_calls: list[Any]) -> list[DeltaToolCall]:
        deltas: list[DeltaToolCall] = []
        for call in melody_calls:
            name = call.name or None
            arguments = call.arguments or None
            if call.id:
                self._pending_ids[call.index] = call.id
            if name is None and arguments is None:
                continue  # melody's empty placeholders
            delta = DeltaToolCall(call.index)
            if name is not None:
                delta.name = name
                resolved = call.id or self._pending_ids.pop(call.index, None)
                if resolved is not None:
                    delta.id = resolved
                delta.type = "function"
            if arguments is not None:
                delta.arguments = arguments
            deltas.append(delta)
        return deltas

    def is_reasoning_end(self, prompt_token_ids: Sequence[int]) -> bool:
        """vLLM's ``BaseCohereCommandReasoningParser.is_reasoning_end``: the last
        thinking block of the prompt (after the last chatbot turn) is closed."""
        if not self.has_reasoning_parser:
            return False
        has_end = False
        for token_id in reversed(prompt_token_ids):
            if token_id == self._start_id:
                return has_end
            if token_id == self._chatbot_id:
                return False
            if token_id == self._end_id:
                has_end = True
        return has_end

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        count = depth = 0
        for token_id in token_ids:
            if token_id == self._start_id:
                depth += 1
            elif token_id == self._end_id:
                depth = max(depth - 1, 0)
            elif depth > 0:
                count += 1
        return count
