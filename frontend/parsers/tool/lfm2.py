"""``lfm2``: LiquidAI LFM2/LFM2.5's pythonic calls between special tokens.

::

    <|tool_call_start|>[get_weather(location="Paris")]<|tool_call_end|>The weather...

vLLM's ``Lfm2ToolParser``: the calls are a pythonic list
(:mod:`frontend.parsers.tool.pythonic`), repaired first where the model's
text is not quite Python (:mod:`frontend.parsers.tool.python_repair`).
Content is the text before the start token and after the end token, each
stripped, joined by a newline; LFM2 often echoes the call body after the
end token and caps it with a second end token, so everything through the
last end token is dropped, and streaming holds back trailing text that
starts with ``[`` or ``<`` until that is settled.  Special tokens are kept
when tools are given.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence

from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool import python_repair as repair
from frontend.parsers.tool.pythonic import (
    PythonicToolParser,
    _calls,
    _parse,
    close_python,
)
from frontend.parsers.types import ExtractedToolCalls, ParsedDelta, ToolCall

START = "<|tool_call_start|>"
END = "<|tool_call_end|>"


def _strip_echo(after: str) -> str:
    """The text after the last (orphan) end token, if any."""
    last = after.rfind(END)
    return after[last + len(END) :] if last != -1 else after


def _split(text: str) -> tuple[str | None, str | None]:
    """(the text between the tokens, the content around them)."""
    start = text.find(START)
    if start == -1:
        return None, text
    before = text[:start].strip()
    end = text.find(END, start)
    if end == -1:  # unfinished: all the rest is the call
        return text[start + len(START) :], before or None
    after = _strip_echo(text[end + len(END) :]).strip()
    parts = [part for part in (before, after) if part]
    return text[start + len(START) : end], "\n".join(parts) if parts else None


def _restore(calls: list[ToolCall]) -> list[ToolCall]:
    for call in calls:
        arguments = json.loads(call.arguments)
        restored = repair.restore_reserved_kwargs(arguments)
        if restored != arguments:
            call.arguments = json.dumps(restored, ensure_ascii=False)
    return calls


def _parse_repaired(text: str) -> tuple[str, bool]:
    """The first of vLLM's rewrites of ``text`` that parses (the text itself
    first); (that text, whether keywords were renamed).  Raises if none does."""
    try:
        _parse(text)
        return text, False
    except (SyntaxError, ValueError):
        pass
    escaped = repair.escape_ctrl_chars(repair.normalize_leading_zero_ints(text))
    candidates = [escaped]
    requoted, changed = repair.escape_nested_quotes(escaped)
    if changed:  # requoting can move raw control characters into a string
        candidates.append(repair.escape_ctrl_chars(requoted))
    renamed, kw_renamed = repair.rename_reserved_kwargs(candidates[-1])
    if kw_renamed:
        candidates.append(renamed)
    for candidate in candidates:
        try:
            _parse(candidate)
        except (SyntaxError, ValueError):
            continue
        # vLLM restores the names whenever renaming changed the last
        # candidate, whichever candidate parsed.
        return candidate, kw_renamed
    raise SyntaxError("no rewrite parses")


class Lfm2ToolParser(PythonicToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._trailing_sent = ""  # content after the end token already sent

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if START not in tokenizer.vocab or END not in tokenizer.vocab:
            raise ValueError(f"the lfm2 tool parser needs the {START} and {END} tokens")

    def extract(self, text: str) -> ExtractedToolCalls:
        calls_text, content = _split(text)
        if calls_text is None:
            return ExtractedToolCalls(False, [], text)
        calls_text = calls_text.strip()
        # vLLM's r"\[.*\]$" (DOTALL, the text stripped)
        if not (calls_text.startswith("[") and calls_text.endswith("]")):
            return ExtractedToolCalls(False, [], text)
        try:
            source, renamed = _parse_repaired(calls_text)
            calls = _calls(source)
            if not calls:  # "[]" is no call
                raise ValueError("no calls")
            return ExtractedToolCalls(True, _restore(calls) if renamed else calls, content)
        except Exception:
            return ExtractedToolCalls(False, [], text)

    def _trailing(self, current_text: str) -> str:
        """The content after the first end token not sent yet; an echo
        suspect (``[`` or ``<`` first, no second end token) is held back."""
        full = current_text[current_text.find(END) + len(END) :]
        stripped = _strip_echo(full)
        if stripped != full:
            final = stripped
        elif full.lstrip().startswith(("[", "<")):
            final = self._trailing_sent
        else:
            final = full
        piece = final[len(self._trailing_sent) :] if final.startswith(self._trailing_sent) else ""
        self._trailing_sent = final
        return piece

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if START not in current_text:
            return ParsedDelta(content=delta_text)
        # Text before the start token that arrived in this same delta.
        leading = ""
        if START not in previous_text:
            leading = current_text[len(previous_text) : current_text.find(START)]
        ended = END in current_text
        trailing = self._trailing(current_text) if ended else ""
        if ended and self.prev_tool_call_arr and END in previous_text:
            return ParsedDelta(content=trailing)
        calls_text = current_text.split(START, 1)[1].split(END, 1)[0].lstrip()
        around = leading + trailing
        try:
            return self._calls_step(calls_text, ended, around)
        except Exception:  # vLLM logs and sends only the content
            return ParsedDelta(content=around) if around else None

    def _calls_step(self, text: str, ended: bool, around: str) -> ParsedDelta | None:
        text = repair.escape_ctrl_chars(repair.normalize_leading_zero_ints(text))
        if ended:
            # Nested quotes are settled only on the final text.
            try:
                ast.parse(text)
            except (SyntaxError, ValueError):
                requoted, changed = repair.escape_nested_quotes(text)
                if changed:
                    text = repair.escape_ctrl_chars(requoted)
        renamed_text, renamed = repair.rename_reserved_kwargs(text)
        if renamed:
            text = renamed_text
        # A broken string would stream an argument prefix never retracted.
        if repair.has_broken_string(text):
            return ParsedDelta(content=around) if around else None
        closed = close_python(text)
        if closed is None:
            return ParsedDelta(content=around) if around else None
        valid_text, added = closed
        calls = _calls(valid_text)
        if renamed:
            calls = _restore(calls)
        deltas = self._call_deltas(calls, added)
        if deltas or around:
            return ParsedDelta(content=around or None, tool_calls=deltas)
        if not added and self._current_index > 0:
            return ParsedDelta(content="")
        return None
