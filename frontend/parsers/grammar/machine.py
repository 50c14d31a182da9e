"""Grammar description and the state machine that turns terminals into events.

A :class:`Grammar` declares a model's output format: literal terminals, which
of them are also special tokens (matched by id), and a transition table
``(state, terminal) -> (next state, events)``.  Text between terminals is
classified by the current state (reasoning, content, tool name, arguments).
This is vLLM 0.32's declarative parser engine (``vllm/parser/engine``),
reduced to what the grammars here use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto

from frontend.parsers.grammar.lexer import (
    CONTENT,
    DROP,
    IdTerminal,
    Lexer,
    LexerShape,
    LexToken,
    TextChunk,
    TokenScanner,
)
from frontend.parsers.tokenizer import ParserTokenizer


class State(Enum):
    CONTENT = auto()
    REASONING = auto()
    # Between a block's role marker and its kind marker (Inkling): the text
    # there is held, and becomes content only if no block kind follows.
    MESSAGE_HEADER = auto()
    TOOL_PREAMBLE = auto()
    TOOL_NAME = auto()
    TOOL_ARGS = auto()
    TOOL_BETWEEN = auto()


TOOL_STATES = frozenset({State.TOOL_PREAMBLE, State.TOOL_NAME, State.TOOL_ARGS, State.TOOL_BETWEEN})
PLAIN_STATES = frozenset({State.CONTENT, State.REASONING})


class Ev(Enum):
    TEXT = auto()
    REASONING = auto()
    REASONING_END = auto()
    TOOL_START = auto()
    TOOL_NAME = auto()
    ARGS = auto()
    TOOL_END = auto()


@dataclass(slots=True)
class Event:
    type: Ev
    value: str = ""
    tool_index: int = -1
    token_count: int = 0


CONTENT_EVENTS = {
    State.CONTENT: Ev.TEXT,
    State.REASONING: Ev.REASONING,
    State.TOOL_NAME: Ev.TOOL_NAME,
    State.TOOL_ARGS: Ev.ARGS,
}


@dataclass(frozen=True)
class Grammar:
    name: str
    terminals: Mapping[str, str | tuple[str, ...]]  # name -> literal (or its spellings)
    id_terminals: dict[str, str]  # name -> special token text
    transitions: dict[tuple[State, str], tuple[State, tuple[Ev, ...]]]
    initial_state: State = State.CONTENT
    wait_for_reasoning: bool = False
    # raw argument text -> JSON, (raw, partial); None: arguments are JSON text.
    arg_converter: Callable[[str, bool], str] | None = None
    # Arguments are JSON streamed as is, holding back closing braces.
    args_json: bool = True
    strip_trailing_reasoning_ws: bool = True
    turn_boundary_tokens: frozenset[str] = frozenset()
    # Special tokens kept in the text (not dropped) though no terminal is
    # one: pieces of markers spelled in several tokens (PLaMo 3's).
    preserve_tokens: frozenset[str] = frozenset()
    stream_arg_deltas: bool = True
    # Only an argument piece holding one of these can change the converted
    # arguments (None: any piece can).
    arg_structural_chars: frozenset[str] | None = None
    # The tool region is one JSON array of {"name", "arguments"} objects: a
    # call per element; its "]" ends the region (Granite).
    tool_call_body_array: bool = False
    drop_ws_only_content_before_tools: bool = True
    strip_content_ws_with_tools: bool = True
    content_events: dict[State, Ev] = field(default_factory=lambda: dict(CONTENT_EVENTS))

    def literals(self) -> list[tuple[str, str]]:
        return [
            (text, name)
            for name, spelled in self.terminals.items()
            for text in ((spelled,) if isinstance(spelled, str) else spelled)
        ]


class _Compiled:
    """What a grammar implies for one tokenizer; shared by all its machines."""

    def __init__(self, grammar: Grammar, tokenizer: ParserTokenizer) -> None:
        vocab = tokenizer.vocab
        self.id_terminals = {
            vocab[text]: name for name, text in grammar.id_terminals.items() if text in vocab
        }
        configured = (
            set(grammar.id_terminals.values())
            | {t for t, _ in grammar.literals()}
            | grammar.preserve_tokens
        )
        drops = {
            text: token_id
            for text, token_id in tokenizer.special_tokens.items()
            if text not in configured
        }
        literals = grammar.literals()
        for text, token_id in drops.items():
            self.id_terminals[token_id] = DROP
            literals.append((text, DROP))
        self.has_drops = bool(drops)
        self.id_terminal_names = frozenset(self.id_terminals.values())
        self.shape = LexerShape(literals)
        transitions = grammar.transitions
        self.tool_terminals = frozenset(
            term
            for (state, term), (nxt, _) in transitions.items()
            if nxt in TOOL_STATES or state in TOOL_STATES
        )
        self.tool_exit_terminals = frozenset(
            term
            for (state, term), (nxt, _) in transitions.items()
            if state in TOOL_STATES and nxt not in TOOL_STATES
        )
        self.reasoning_markup = _reasoning_only_terminals(grammar)


def _reasoning_only_terminals(grammar: Grammar) -> frozenset[str]:
    """Terminals that only open/close reasoning (passed through as text when
    no reasoning parser runs); empty if any of them does more than that."""
    transitions = grammar.transitions
    markers = frozenset(
        term
        for (state, term), (nxt, _) in transitions.items()
        if State.REASONING in (state, nxt) and nxt not in TOOL_STATES
    )
    for (state, term), (nxt, events) in transitions.items():
        if term in markers and (
            state not in PLAIN_STATES
            or nxt not in PLAIN_STATES
            or not set(events) <= {Ev.REASONING_END}
        ):
            return frozenset()
    return markers


class Machine:
    """Consumes (delta text, delta token ids) and produces :class:`Event` lists."""

    def __init__(
        self, grammar: Grammar, tokenizer: ParserTokenizer, initial_state: State | None = None
    ) -> None:
        self.grammar = grammar
        # Grammars are module-level singletons, so their id is a stable key.
        compiled = tokenizer.cache.get(("grammar", id(grammar)))
        if compiled is None:
            compiled = tokenizer.cache[("grammar", id(grammar))] = _Compiled(grammar, tokenizer)
        self._id_terminals = compiled.id_terminals
        self._has_drops = compiled.has_drops
        self._id_terminal_names = compiled.id_terminal_names
        self._tool_terminals = compiled.tool_terminals
        self._tool_exit_terminals = compiled.tool_exit_terminals
        self._reasoning_markup = compiled.reasoning_markup
        self._scanner = TokenScanner(self._id_terminals, tokenizer)
        self._lexer = Lexer(compiled.shape)
        self.skip_tool_parsing = False
        self.skip_reasoning_parsing = False
        self.reset(initial_state)

    def reset(self, initial_state: State | None = None) -> None:
        self.state = initial_state if initial_state is not None else self.grammar.initial_state
        self.tool_index = -1
        self._had_token_ids = False
        self.reasoning_tokens = 0
        self._scanner.reset()
        self._lexer.reset()
        self._in_skipped_tool_span = False
        self._header = ""
        self._header_tokens = 0
        self._reset_args()
        self._reset_array()

    def _reset_array(self) -> None:
        # tool_call_body_array: whether the "[" was seen, and whether a
        # "{...}" element is being streamed.
        self._array_started = False
        self._array_in_element = False

    def _reset_args(self) -> None:
        self._args_buffer = ""
        self._args_depth = 0
        self._args_in_string = False
        self._args_escape = False

    # -- input ---------------------------------------------------------------

    def feed(self, delta_text: str, token_ids: Sequence[int]) -> list[Event]:
        if token_ids:
            self._had_token_ids = True
        if (
            delta_text
            and not self._lexer.buffer
            and not self._scanner.deferred
            and self._lexer.shape.first_chars.isdisjoint(delta_text)
            and not any(t in self._id_terminals for t in token_ids)
        ):
            events = self._emit(delta_text, len(token_ids))
        else:
            items = self._scanner.scan(delta_text, token_ids)
            if len(items) == 1 and isinstance(items[0], TextChunk):
                item = items[0]
                tokens = self._lexer.feed(item.text, item.token_texts, item.token_count)
                if len(tokens) == 1 and tokens[0].terminal == CONTENT:
                    events = self._emit(tokens[0].value, tokens[0].token_count)
                else:
                    events = self._on_tokens(tokens)
            else:
                events = self._on_items(items)
        self._count_reasoning(events)
        return events

    def finish(self) -> list[Event]:
        events = self._on_items(self._scanner.flush_pending())
        events.extend(self._on_tokens(self._lexer.flush()))
        if self._args_buffer:
            events.append(Event(Ev.ARGS, self._args_buffer, self.tool_index))
            self._args_buffer = ""
        if self.state in TOOL_STATES:
            # In array mode a closed element has sent its end already.
            open_call = self._array_in_element if self.grammar.tool_call_body_array else True
            if open_call and self.tool_index >= 0:
                events.append(Event(Ev.TOOL_END, tool_index=self.tool_index))
            self.state = State.CONTENT
        elif self.state == State.REASONING:
            events.append(Event(Ev.REASONING_END, tool_index=self.tool_index))
            self.state = State.CONTENT
        elif self.state == State.MESSAGE_HEADER:
            header, header_tokens = self._take_header()
            if header:
                events.append(Event(Ev.TEXT, header, self.tool_index, header_tokens))
            self.state = State.CONTENT
        self._count_reasoning(events)
        return events

    def _take_header(self) -> tuple[str, int]:
        header = self._header, self._header_tokens
        self._header, self._header_tokens = "", 0
        return header

    def _count_reasoning(self, events: list[Event]) -> None:
        self.reasoning_tokens += sum(e.token_count for e in events if e.type == Ev.REASONING)

    def _on_items(self, items: Sequence[TextChunk | IdTerminal]) -> list[Event]:
        events: list[Event] = []
        for item in items:
            if isinstance(item, IdTerminal):
                events.extend(self._on_tokens(self._lexer.flush()))
                events.extend(self._on_terminal(item.terminal, item.text))
            elif not item.text and item.token_count:
                events.extend(self._emit("", item.token_count))
            else:
                events.extend(
                    self._on_tokens(self._lexer.feed(item.text, item.token_texts, item.token_count))
                )
        return events

    def _on_tokens(self, tokens: list[LexToken]) -> list[Event]:
        # Once token ids flow, a special token's text typed as plain tokens is
        # content: only the scanner (by id) may produce those terminals.
        by_id_only = self._id_terminal_names if self._had_token_ids else frozenset()
        events: list[Event] = []
        for tok in tokens:
            if tok.terminal == CONTENT or tok.terminal in by_id_only:
                if tok.value:
                    events.extend(self._emit(tok.value, tok.token_count))
            else:
                events.extend(self._on_terminal(tok.terminal, tok.value, tok.token_count))
        return events

    # -- the state machine -----------------------------------------------------

    def _on_terminal(self, terminal: str, value: str, token_count: int = 0) -> list[Event]:
        transition = self.grammar.transitions.get((self.state, terminal))
        if transition is None:
            if self._has_drops and terminal == DROP:
                return []
            if self.skip_tool_parsing and terminal in self._tool_exit_terminals:
                self._in_skipped_tool_span = False
            return self._emit(value, token_count)

        if self.skip_reasoning_parsing and terminal in self._reasoning_markup:
            return self._emit(value, token_count)

        if self.skip_tool_parsing and terminal in self._tool_terminals:
            # The reasoning pass leaves tool markup in the content, unparsed.
            next_state, events = transition
            opener = next_state in TOOL_STATES
            exit_ = terminal in self._tool_exit_terminals
            if not (exit_ and not opener and not self._in_skipped_tool_span):
                if opener:
                    self._in_skipped_tool_span = True
                elif exit_:
                    self._in_skipped_tool_span = False
                leaving_header = self.state == State.MESSAGE_HEADER
                if leaving_header:
                    self._take_header()
                if Ev.REASONING_END in events:
                    self.state = State.CONTENT
                    return [
                        Event(Ev.REASONING_END, value, self.tool_index),
                        Event(Ev.TEXT, value, self.tool_index),
                    ]
                if leaving_header:
                    self.state = State.CONTENT
                    return [Event(Ev.TEXT, value, self.tool_index)]
                kind = self.grammar.content_events.get(self.state)
                return [Event(kind, value, self.tool_index)] if kind is not None else []

        return self._apply(transition, value, token_count)

    def _apply(
        self, transition: tuple[State, tuple[Ev, ...]], value: str, token_count: int
    ) -> list[Event]:
        next_state, kinds = transition
        events: list[Event] = []
        if self.state == State.TOOL_ARGS and next_state != State.TOOL_ARGS and self._args_buffer:
            events.append(Event(Ev.ARGS, self._args_buffer, self.tool_index))
            self._args_buffer = ""
        # Text out of a header is what the header held, not the terminal.
        text, text_tokens = (
            self._take_header() if self.state == State.MESSAGE_HEADER else (value, token_count)
        )
        self.state = next_state
        for kind in kinds:
            if kind == Ev.TOOL_START:
                self.tool_index += 1
            if kind == Ev.TEXT:
                if text:
                    events.append(Event(kind, text, self.tool_index, text_tokens))
                continue
            events.append(Event(kind, value, self.tool_index, token_count))
        if self.state == State.TOOL_ARGS:
            self._args_depth = 0
            self._args_in_string = False
            self._args_escape = False
            if self.grammar.tool_call_body_array:
                self._reset_array()
        return events

    def _emit(self, text: str, token_count: int = 0) -> list[Event]:
        """Text in the current state."""
        if self.state == State.MESSAGE_HEADER:
            self._header += text
            self._header_tokens += token_count
            return []
        if self.state == State.TOOL_ARGS:
            if self.grammar.tool_call_body_array:
                return self._feed_array(text)
            if self.grammar.args_json:
                return self._feed_args(text)
            return [Event(Ev.ARGS, text, self.tool_index, token_count)]
        kind = self.grammar.content_events.get(self.state)
        if kind is None:
            return []
        return [Event(kind, text, self.tool_index, token_count)]

    def _feed_args(self, text: str) -> list[Event]:
        """Stream JSON arguments, holding back a top-level closing brace until
        more text (or the end) shows it really closes the arguments."""
        events: list[Event] = []
        for ch in text:
            event = self._feed_args_char(ch)
            if event is not None:
                events.append(event)
        return events

    def _feed_args_char(self, ch: str) -> Event | None:
        self._args_buffer += ch
        if self._args_escape:
            self._args_escape = False
        elif self._args_in_string:
            if ch == "\\":
                self._args_escape = True
            elif ch == '"':
                self._args_in_string = False
        elif ch == '"':
            self._args_in_string = True
        elif ch in "{[":
            self._args_depth += 1
        elif ch in "}]":
            if self._args_depth > 0:
                self._args_depth -= 1
            if self._args_depth == 0:
                return None
        event = Event(Ev.ARGS, self._args_buffer, self.tool_index)
        self._args_buffer = ""
        return event

    # -- a JSON array of calls (tool_call_body_array) ----------------------------

    def _feed_array(self, text: str) -> list[Event]:
        """Each ``{...}`` element of the array is one call's body, streamed as
        JSON arguments are; text after the closing ``]`` is content."""
        events: list[Event] = []
        for i, ch in enumerate(text):
            if self.state != State.TOOL_ARGS:
                events.extend(self._emit(text[i:]))
                break
            events.extend(self._feed_array_char(ch))
        return events

    def _feed_array_char(self, ch: str) -> list[Event]:
        if self._array_in_element:
            event = self._feed_args_char(ch)
            events = [event] if event is not None else []
            if ch == "}" and not self._args_in_string and self._args_depth == 0:
                self._array_in_element = False
                if self._args_buffer:  # the held "}": the slot gets the whole element
                    events.append(Event(Ev.ARGS, self._args_buffer, self.tool_index))
                    self._args_buffer = ""
                events.append(Event(Ev.TOOL_END, tool_index=self.tool_index))
            return events
        if ch in " \t\r\n":
            return []
        if not self._array_started:
            if ch == "[":
                self._array_started = True
                return []
        elif ch == ",":
            return []
        elif ch == "{":
            self.tool_index += 1
            self._reset_args()
            self._array_in_element = True
            events = [Event(Ev.TOOL_START, tool_index=self.tool_index)]
            event = self._feed_args_char(ch)
            return events + [event] if event is not None else events
        elif ch == "]":
            self.state = State.CONTENT
            self._reset_array()
            return []
        # Not a JSON array after the marker: content, no call.
        self.state = State.CONTENT
        self._reset_array()
        return self._emit(ch)
