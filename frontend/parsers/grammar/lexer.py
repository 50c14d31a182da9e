"""Text and token ids -> terminals, for the grammar parsers.

Two stages, as in vLLM 0.32's parser engine:

* :class:`TokenScanner` looks at the step's token ids first: a special token
  the grammar knows (``<think>``, ``[TOOL_CALLS]``) becomes a terminal by id,
  so a literal ``<think>`` typed as plain text tokens is not mistaken for one.
  The detokenizer may hold text back (or flush held text later), so the
  scanner aligns each id terminal with the step's text and, when the text has
  not arrived yet, defers the terminal until it does.
* :class:`Lexer` splits the remaining text into literal terminals and content,
  holding back a tail that could still grow into a terminal (``"<tool_"``).

Token counts ride along so reasoning tokens can be counted for usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from frontend.parsers.tokenizer import ParserTokenizer

CONTENT = "__CONTENT__"
DROP = "__DROP__"  # special tokens the grammar does not use: dropped from output


@dataclass(slots=True)
class LexToken:
    terminal: str
    value: str
    token_count: int = 0


@dataclass(slots=True)
class TextChunk:
    text: str
    token_texts: tuple[str, ...] = ()
    token_count: int = 0


@dataclass(slots=True)
class IdTerminal:
    """A terminal recognized by its token id."""

    terminal: str
    token_id: int
    text: str


class LexerShape:
    """What a set of literal terminals implies, computed once per grammar."""

    def __init__(self, literals: list[tuple[str, str]]) -> None:
        # (literal text, terminal name); longest literal wins a match.
        self.literals = [(text, name) for text, name in literals if text]
        self.first_chars = frozenset(text[0] for text, _ in self.literals)
        self.prefixes = frozenset(
            text[:i] for text, _ in self.literals for i in range(1, len(text))
        )
        self.by_first: dict[str, list[tuple[str, str]]] = {}
        for text, name in self.literals:
            self.by_first.setdefault(text[0], []).append((text, name))


class Lexer:
    """Incremental literal lexer with prefix hold-back."""

    def __init__(self, shape: LexerShape) -> None:
        self.shape = shape
        self.buffer = ""
        self._counts: list[int] = []

    def reset(self) -> None:
        self.buffer = ""
        self._counts.clear()

    def feed(
        self, text: str, token_texts: tuple[str, ...] = (), token_count: int = 0
    ) -> list[LexToken]:
        counts = _char_token_counts(text, token_texts, token_count)
        first = self.shape.first_chars
        if not self.buffer and first and first.isdisjoint(text):
            return [LexToken(CONTENT, text, sum(counts))]
        self.buffer += text
        self._counts.extend(counts)
        return self._drain(final=False)

    def flush(self) -> list[LexToken]:
        tokens = self._drain(final=True) if self.buffer else []
        if self.buffer:
            tokens.append(LexToken(CONTENT, self.buffer, sum(self._counts)))
            self.reset()
        return tokens

    def _take(self, terminal: str, length: int) -> LexToken:
        count = sum(self._counts[:length])
        del self._counts[:length]
        token = LexToken(terminal, self.buffer[:length], count)
        self.buffer = self.buffer[length:]
        return token

    def _drain(self, *, final: bool) -> list[LexToken]:
        shape = self.shape
        tokens: list[LexToken] = []
        while self.buffer:
            buf = self.buffer
            if shape.first_chars.isdisjoint(buf):
                tokens.append(self._take(CONTENT, len(buf)))
                break
            candidates = shape.by_first.get(buf[0], ())
            best: tuple[str, str] | None = None
            for text, name in candidates:
                if buf.startswith(text) and (best is None or len(text) > len(best[0])):
                    best = (text, name)
            if buf in shape.prefixes and not final:
                # The buffer could still become a (longer) terminal: wait,
                # unless it already is one and nothing longer can follow.
                if best is not None and not any(
                    len(text) > len(best[0]) and text.startswith(buf) for text, _ in candidates
                ):
                    tokens.append(self._take(best[1], len(best[0])))
                    continue
                break
            if best is not None:
                tokens.append(self._take(best[1], len(best[0])))
            else:
                tokens.append(self._take(CONTENT, max(1, self._content_end())))
        return tokens

    def _content_end(self) -> int:
        """Where the next possible terminal (or terminal prefix) starts."""
        buf = self.buffer
        first = self.shape.first_chars
        for i in range(1, len(buf)):
            if buf[i] not in first:
                continue
            rest = buf[i:]
            for text, _ in self.shape.literals:
                n = min(len(rest), len(text))
                if rest[:n] == text[:n]:
                    return i
        return len(buf)


def _char_token_counts(text: str, token_texts: tuple[str, ...], token_count: int) -> list[int]:
    """Spread a chunk's token count over its characters (where each token starts)."""
    counts = [0] * len(text)
    if not text:
        return counts
    if token_texts:
        pos = assigned = 0
        for token_text in token_texts:
            if not token_text:
                continue
            found = text.find(token_text, pos)
            if found < 0:
                continue
            counts[found] += 1
            assigned += 1
            pos = found + len(token_text)
        if token_count > assigned:
            counts[0] += token_count - assigned
    elif token_count:
        counts[0] = token_count
    return counts


class TokenScanner:
    """Splits a step's (text, token ids) into id terminals and text chunks."""

    def __init__(self, id_terminals: dict[int, str], tokenizer: ParserTokenizer) -> None:
        self.id_terminals = id_terminals
        self.tokenizer = tokenizer
        self.deferred: list[IdTerminal] = []
        self._deferred_prefix_counts: list[int] = []
        self._deferred_trailing_count = 0
        self._deferred_text = ""

    def reset(self) -> None:
        self.deferred.clear()
        self._deferred_prefix_counts.clear()
        self._deferred_trailing_count = 0
        self._deferred_text = ""

    def _texts(self, token_ids: Sequence[int]) -> tuple[str, ...]:
        return tuple(self.tokenizer.token_text(t) for t in token_ids)

    def scan(self, delta_text: str, token_ids: Sequence[int]) -> list[TextChunk | IdTerminal]:
        items: list[TextChunk | IdTerminal] = []
        text = delta_text
        trailing = 0
        if self.deferred:
            items, text, trailing = self._resolve_deferred(delta_text, len(token_ids))

        if not self.id_terminals or not any(t in self.id_terminals for t in token_ids):
            if text:
                texts = self._texts(token_ids)
                items.append(TextChunk(text, texts, trailing + len(texts)))
            return items

        results: list[TextChunk | IdTerminal] = []
        pending: list[str] = []
        for token_id in token_ids:
            token_text = self.tokenizer.token_text(token_id)
            terminal = self.id_terminals.get(token_id)
            if terminal is None:
                pending.append(token_text)
                continue
            if pending and "".join(pending):
                results.append(TextChunk("".join(pending), tuple(pending), len(pending)))
            pending = []
            results.append(IdTerminal(terminal, token_id, token_text))
        if pending and "".join(pending):
            results.append(TextChunk("".join(pending), tuple(pending), len(pending)))
        if trailing:
            results.insert(0, TextChunk("", token_count=trailing))

        if text:
            results = self._recover_holdback(text, results)
        else:
            # No text to align with yet: hold the terminals (and count the
            # tokens before them) until their text arrives or the stream ends.
            before = 0
            for item in results:
                if isinstance(item, TextChunk):
                    before += item.token_count
                else:
                    self.deferred.append(item)
                    self._deferred_prefix_counts.append(before)
                    before = 0
            self._deferred_trailing_count += before
            results = []
        return items + results

    def flush_pending(self) -> list[TextChunk | IdTerminal]:
        if not self.deferred and not self._deferred_text:
            return []
        results: list[TextChunk | IdTerminal] = []
        if self._deferred_text:
            count = self._deferred_prefix_counts[0] if self._deferred_prefix_counts else 0
            results.append(TextChunk(self._deferred_text, token_count=count))
            self._deferred_text = ""
        results.extend(self.deferred)
        if self._deferred_trailing_count:
            results.append(TextChunk("", token_count=self._deferred_trailing_count))
        self.reset()
        return results

    def _resolve_deferred(
        self, delta_text: str, token_count: int
    ) -> tuple[list[TextChunk | IdTerminal], str, int]:
        """Place deferred terminals in the newly arrived text."""
        deferred, prefix_counts = self.deferred, self._deferred_prefix_counts
        trailing = self._deferred_trailing_count
        self.deferred, self._deferred_prefix_counts = [], []
        self._deferred_trailing_count = 0

        results: list[TextChunk | IdTerminal] = []
        remaining = self._deferred_text + delta_text
        self._deferred_text = ""
        for terminal, before in zip(deferred, prefix_counts):
            pos = remaining.find(terminal.text)
            if pos >= 0:
                if pos > 0:
                    results.append(TextChunk(remaining[:pos], token_count=before))
                results.append(terminal)
                remaining = remaining[pos + len(terminal.text) :]
                continue
            # Still not there: keep accumulating text until it is.
            if remaining:
                self._deferred_text += remaining
                before += token_count
                remaining = ""
            self.deferred.append(terminal)
            self._deferred_prefix_counts.append(before)
        if self.deferred:
            self._deferred_trailing_count = trailing
            trailing = 0
        return results, remaining, trailing

    def _recover_holdback(
        self, delta_text: str, results: list[TextChunk | IdTerminal]
    ) -> list[TextChunk | IdTerminal]:
        """Align the per-token texts with the detokenizer's text for this step.

        The detokenizer may release held-back text (from earlier tokens) at
        the start of ``delta_text``; that prefix becomes its own chunk.
        """
        if not results:
            return [TextChunk(delta_text)]
        joined = "".join(item.text for item in results)
        if not joined:
            return [TextChunk(delta_text), *results]
        pos = delta_text.find(joined)
        if pos > 0:
            return [TextChunk(delta_text[:pos]), *results]
        if pos == 0:
            return results
        return self._rebuild_from_anchors(delta_text, results)

    def _rebuild_from_anchors(
        self, delta_text: str, results: list[TextChunk | IdTerminal]
    ) -> list[TextChunk | IdTerminal]:
        """Re-split ``delta_text`` around the id terminals found in it.

        Each terminal binds to the rightmost occurrence of its text before the
        next one; a terminal whose text is missing is deferred.
        """
        anchors = [item for item in results if isinstance(item, IdTerminal)]
        if not anchors:
            return [TextChunk(delta_text)]
        groups: list[list[str]] = [[] for _ in range(len(anchors) + 1)]
        group_counts = [0] * (len(anchors) + 1)
        g = 0
        for item in results:
            if isinstance(item, IdTerminal):
                g += 1
            else:
                groups[g].extend(item.token_texts)
                group_counts[g] += item.token_count

        positions = [-1] * len(anchors)
        end = len(delta_text)
        for i in range(len(anchors) - 1, -1, -1):
            pos = delta_text.rfind(anchors[i].text, 0, end)
            if pos >= 0:
                positions[i] = end = pos

        rebuilt: list[TextChunk | IdTerminal] = []
        consumed = 0
        for i, anchor in enumerate(anchors):
            pos = positions[i]
            if pos >= consumed:
                if pos > consumed:
                    rebuilt.append(
                        TextChunk(delta_text[consumed:pos], tuple(groups[i]), group_counts[i])
                    )
                rebuilt.append(anchor)
                consumed = pos + len(anchor.text)
                continue
            later_found = any(p >= 0 for p in positions[i + 1 :])
            # A dropped token's text (e.g. EOS) may never arrive: do not hold
            # the rest of the text back waiting for it.
            if not later_found and consumed < len(delta_text) and anchor.terminal != DROP:
                self._deferred_text += delta_text[consumed:]
                consumed = len(delta_text)
            self.deferred.append(anchor)
            self._deferred_prefix_counts.append(group_counts[i])
        if consumed < len(delta_text):
            rebuilt.append(TextChunk(delta_text[consumed:], tuple(groups[-1]), group_counts[-1]))
        return rebuilt
