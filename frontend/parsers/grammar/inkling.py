"""The Inkling output grammar: typed content blocks, every marker a special token.

::

    <|message_model|><|content_thinking|>...reasoning...<|end_message|>
    <|message_model|><|content_text|>...visible text...<|end_message|>
    <|message_model|><|content_invoke_tool_json|>
        {"name":"get_weather","args":{"city":"SF"}}<|end_message|>

Blocks may repeat in any order; ``<|content_model_end_sampling|>`` may end
one too.  A tool block is one JSON object: its ``name``, and its ``args``
object streamed verbatim.  ``<|end_message|>`` closes every kind of block;
it is labelled THINK_END as in vLLM, whose reasoning plumbing keys on that
label (``vllm/parser/inkling.py``).  The markers are matched as text (vLLM
keeps no terminal by id here).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from frontend.parsers.grammar.json_member import member_arguments
from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ExtractedToolCalls

MESSAGE_MODEL = "<|message_model|>"
CONTENT_TEXT = "<|content_text|>"
CONTENT_THINKING = "<|content_thinking|>"
CONTENT_INVOKE_TOOL_JSON = "<|content_invoke_tool_json|>"
CONTENT_INVOKE_TOOL_TEXT = "<|content_invoke_tool_text|>"
CONTENT_TOOL_ERROR = "<|content_tool_error|>"
CONTENT_MODEL_END_SAMPLING = "<|content_model_end_sampling|>"
END_MESSAGE = "<|end_message|>"
SPECIAL_TOKENS = (
    MESSAGE_MODEL,
    CONTENT_TEXT,
    CONTENT_THINKING,
    CONTENT_INVOKE_TOOL_JSON,
    CONTENT_INVOKE_TOOL_TEXT,
    CONTENT_TOOL_ERROR,
    CONTENT_MODEL_END_SAMPLING,
    END_MESSAGE,
)


def args_of_call(raw: str, partial: bool) -> str:
    """The ``args`` object of a ``{"name": ..., "args": {...}}`` call body."""
    return member_arguments(raw, "args", partial)


@functools.cache
def inkling_grammar() -> Grammar:
    S = State
    # Opening a visible block proves no reasoning is still open: it ends
    # reasoning, so a response without a thinking block reaches the tool pass.
    openers: dict[str, tuple[State, tuple[Ev, ...]]] = {
        "TEXT_START": (S.CONTENT, (Ev.REASONING_END,)),
        "THINK_START": (S.REASONING, ()),
        "TOOL_START": (S.TOOL_ARGS, (Ev.REASONING_END, Ev.TOOL_START)),
        # Raw and error tool blocks read as visible text.
        "TOOL_TEXT": (S.CONTENT, (Ev.REASONING_END,)),
        "TOOL_ERROR": (S.CONTENT, (Ev.REASONING_END,)),
    }
    transitions: dict[tuple[State, str], tuple[State, tuple[Ev, ...]]] = {
        (S.CONTENT, "MSG_MODEL"): (S.MESSAGE_HEADER, ())
    }
    for terminal, transition in openers.items():
        transitions[(S.CONTENT, terminal)] = transition
        transitions[(S.MESSAGE_HEADER, terminal)] = transition
    transitions.update(
        {
            # A function name between the role and kind markers is metadata.
            (S.MESSAGE_HEADER, "MSG_MODEL"): (S.MESSAGE_HEADER, ()),
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "TOOL_START"): (S.TOOL_ARGS, (Ev.REASONING_END, Ev.TOOL_START)),
        }
    )
    for end in ("THINK_END", "END_SAMPLING"):
        transitions[(S.CONTENT, end)] = (S.CONTENT, ())
        # <|end_message|> leaves reasoning for the next block's opener to end.
        transitions[(S.REASONING, end)] = (
            S.CONTENT,
            () if end == "THINK_END" else (Ev.REASONING_END,),
        )
        transitions[(S.TOOL_ARGS, end)] = (S.CONTENT, (Ev.TOOL_END,))
        # A header no block kind followed is content after all.
        transitions[(S.MESSAGE_HEADER, end)] = (S.CONTENT, (Ev.TEXT,))
    return Grammar(
        name="inkling",
        terminals={
            "MSG_MODEL": MESSAGE_MODEL,
            "TEXT_START": CONTENT_TEXT,
            "THINK_START": CONTENT_THINKING,
            "THINK_END": END_MESSAGE,
            "END_SAMPLING": CONTENT_MODEL_END_SAMPLING,
            "TOOL_START": CONTENT_INVOKE_TOOL_JSON,
            "TOOL_TEXT": CONTENT_INVOKE_TOOL_TEXT,
            "TOOL_ERROR": CONTENT_TOOL_ERROR,
        },
        # The markers are the grammar, matched as text: the reasoning pass may
        # hand the tool pass text whose ids lack the block's kind marker.
        id_terminals={},
        transitions=transitions,
        # Generation continues after the prompt's <|message_model|>.
        initial_state=S.MESSAGE_HEADER,
        wait_for_reasoning=True,
        arg_converter=args_of_call,
        args_json=True,
        strip_content_ws_with_tools=False,
    )


class InklingParser(GrammarParser):
    args_keys = ("args", "arguments", "parameters")

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        super().__init__(inkling_grammar(), tokenizer, tools, tool_choice)
        vocab = tokenizer.vocab
        self._thinking_id = vocab.get(CONTENT_THINKING)
        self._text_id = vocab.get(CONTENT_TEXT)
        self._model_id = vocab.get(MESSAGE_MODEL)
        self._end_sampling_id = vocab.get(CONTENT_MODEL_END_SAMPLING)
        self._block_end_ids = frozenset(
            vocab[t] for t in (END_MESSAGE, CONTENT_MODEL_END_SAMPLING) if t in vocab
        )
        self._special_ids = frozenset(vocab[t] for t in SPECIAL_TOKENS if t in vocab)

    def adjust_initial_state_from_prompt(self, prompt_ids: Sequence[int]) -> None:
        """The last block marker of the prompt says where generation goes on:
        in a thinking block, a text block, or a message header."""
        starts = {
            self._thinking_id: State.REASONING,
            self._text_id: State.CONTENT,
            self._model_id: State.MESSAGE_HEADER,
        }
        for token_id in reversed(prompt_ids):
            state = starts.get(token_id) if token_id is not None else None
            if state is not None:
                self._machine.reset(state)
                self._streaming_initialized = True
                return
            if token_id in self._special_ids:
                return

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        for token_id in reversed(token_ids):
            if token_id in (self._thinking_id, self._model_id):
                return False
            if token_id in (self._text_id, self._end_sampling_id):
                return True
        return False

    def count_reasoning_ids(self, token_ids: Sequence[int]) -> int:
        """The tokens inside thinking blocks, counted by id (streamed or not)."""
        in_reasoning = False
        count = 0
        for token_id in token_ids:
            if token_id == self._thinking_id:
                in_reasoning = True
            elif token_id in self._block_end_ids:
                in_reasoning = False
            elif in_reasoning:
                count += 1
        return count

    def _single_pass(
        self, text: str, token_ids: Sequence[int], initial_state: State | None
    ) -> tuple[str | None, str | None, ExtractedToolCalls]:
        reasoning, content, info = super()._single_pass(text, token_ids, initial_state)
        # Text blocks may follow tool blocks: the text held after a call is
        # content too.
        if self._deferred_content:
            trailing, self._deferred_content = self._deferred_content, ""
            content = self._strip_content_whitespace((content or "") + trailing, info.tools_called)
            info = ExtractedToolCalls(info.tools_called, info.tool_calls, content)
        return reasoning, content, info
