"""The tool parser protocol, per delta: what the composite ``OutputParser`` calls.

A tool parser instance belongs to one choice of one request.  ``extract``
parses a complete output; ``feed`` is called once per engine step with that
step's new text and token ids (nothing else: a parser keeps whatever state it
needs) and returns the :class:`~frontend.parsers.types.ParsedDelta` to send,
or None; ``finish`` returns what it still holds back when the output ends.

A parser is written one of two ways:

* on a grammar (:mod:`frontend.parsers.grammar`), as vLLM's declarative
  parsers are: subclass :class:`~frontend.parsers.tool.grammar_based.GrammarToolParser`;
* on the text so far, as vLLM's classic parsers are: subclass
  :class:`~frontend.parsers.text_so_far.TextSoFarToolParser` and write
  ``extract_streaming(previous_text, current_text, delta_text, ...)``.

Class attributes describe what vLLM's ``adjust_request`` does for the parser
(see :mod:`frontend.structured.tool_choice`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ExtractedToolCalls, ParsedDelta


class ToolParser:
    # vLLM handles tool_choice "required"/named for this parser by forcing a
    # JSON array / the tool's parameters with a JSON schema and parsing that;
    # False: the parser's own format is parsed as with "auto".  vLLM's
    # default VLLM_ENFORCE_STRICT_TOOL_CALLING=1 turns it off for every
    # parser with a structural tag model.
    supports_required_and_named: ClassVar[bool] = True
    # xgrammar structural tag format that constrains this parser's calls (a
    # key of frontend.structured.tool_tags.BUILDERS).
    structural_tag_model: ClassVar[str | None] = None
    # vLLM's default_tool_strict_level: "function" constrains tool_choice
    # "auto" calls with the structural tag even without strict tools.
    default_tool_strict_level: ClassVar[str | None] = None
    # False: the structural tag constrains only "required"/named calls, never
    # "auto" (vLLM's hy_v4 get_structural_tag).
    structural_tag_for_auto: ClassVar[bool] = True
    # vLLM's Cohere parser: tools and JSON schema folded into one structural
    # tag, per architecture (frontend.structured.cohere_tags).
    cohere_structural_tags: ClassVar[bool] = False
    # When adjust_request sets skip_special_tokens=False: "with_tools"
    # (tools given and tool_choice != "none"), "always", or None.
    keeps_special_tokens: ClassVar[str | None] = None
    # adjust_request also sets spaces_between_special_tokens=False (whenever
    # vLLM calls it): markers of several special tokens must arrive joined.
    joins_special_tokens: ClassVar[bool] = False
    # For "required"/named, Mistral's parsers force a bare [{"name", "arguments"}] array.
    mistral_guided_schema: ClassVar[bool] = False
    # A grammar parser (vLLM's "engine-based"): see OutputParser for the two
    # rules vLLM applies only when every configured parser is one.
    grammar_based: ClassVar[bool] = False
    # vLLM's hf parser is one parser of the whole output (reasoning, content,
    # calls): this class replaces the composite for the choice, and pairs
    # only with a reasoning parser of the same output_parser.
    output_parser: ClassVar[Callable[..., Any] | None] = None
    # vLLM runs adjust_request even for tool_choice "none" (always_adjust_request).
    always_adjust_request: ClassVar[bool] = False
    # vLLM's hf parser answers 400 to strict tools, "required"/named
    # tool_choice and parallel_tool_calls=false: nothing can enforce them.
    refuses_tool_guarantees: ClassVar[bool] = False
    # The model-specific composite vLLM's ParserManager picks when this
    # parser is configured ("kimi_k3"; see OutputParser), else None.
    vllm_composite: ClassVar[str | None] = None
    # Set when no reasoning parser runs: reasoning markup is plain content (a
    # grammar that knows reasoning markers leaves them in the text).
    skip_reasoning_parsing: bool = False

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or []
        self.tool_choice = tool_choice
        # What vLLM's serving layer reads back at the end of a stream.
        self.prev_tool_call_arr: list[dict] = []
        self.streamed_args_for_tool: list[str] = []

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        """Raise ValueError if the model's tokenizer lacks the parser's tokens."""

    @classmethod
    def structural_tag_suffix(cls, tokenizer: ParserTokenizer) -> str:
        """The suffix the model's markers carry in the structural tag ("" for most)."""
        return ""

    @classmethod
    def check_request(cls, chat_template_kwargs: dict | None) -> None:
        """Raise ValueError for a request vLLM's ``adjust_request`` refuses."""

    def extract(self, text: str) -> ExtractedToolCalls:
        raise NotImplementedError

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        """One engine step's new text and token ids -> what to send for it."""
        raise NotImplementedError

    def finish(self) -> ParsedDelta | None:
        """Anything still held back at the end of the stream."""
        return None

    def remaining_unstreamed_args(self) -> str:
        """Arguments of the last call parsed but not yet sent (vLLM appends
        them to the last tool call piece of the final delta)."""
        if not self.prev_tool_call_arr:
            return ""
        index = len(self.prev_tool_call_arr) - 1
        last = self.prev_tool_call_arr[index]
        args = last.get("arguments", {}) if isinstance(last, dict) else {}
        expected = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        sent = (
            self.streamed_args_for_tool[index] if index < len(self.streamed_args_for_tool) else ""
        )
        return expected[len(sent) :] if expected.startswith(sent) else ""


def partial_tag_overlap(text: str, tag: str) -> int:
    """Length of the longest proper prefix of ``tag`` that ends ``text``."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def is_complete_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
