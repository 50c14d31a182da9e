"""``pythonic``: a Python list of calls, as Llama 3.2/4 and ToolACE models write.

::

    [get_weather(city='Paris', days=3), get_time(zone="CET")]

Only keyword arguments with literal values are taken (``null``/``true``/
``false`` too); anything else makes the whole output content.  Streaming
closes the unfinished text (quotes, brackets) to parse it, and withholds the
JSON that closing invented.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Sequence
from typing import Any, cast

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)


class _NotACall(Exception):
    """The text parses, but not as a list of calls with literal arguments."""


class PythonicToolParser(TextSoFarToolParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._current_index = -1  # the call being streamed

    def extract(self, text: str) -> ExtractedToolCalls:
        if not looks_like_call_list(text):
            return ExtractedToolCalls(False, [], text)
        try:
            return ExtractedToolCalls(True, _calls(text), None)
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
        if not current_text.startswith("["):
            return ParsedDelta(content=delta_text)
        try:
            return self._stream_step(current_text)
        except Exception:
            return None

    # What the closing of an unfinished last call adds at the end (the list's
    # bracket too; olmo3's calls are not in a list).
    call_closer = ")]"

    def _call_list(self, valid_text: str) -> str:
        return valid_text

    def _stream_step(self, text: str) -> ParsedDelta | None:
        closed = close_python(text)
        if closed is None:
            return None
        valid_text, added = closed
        deltas = self._call_deltas(_calls(self._call_list(valid_text)), added)
        if deltas:
            return ParsedDelta(tool_calls=deltas)
        if not added and self._current_index > 0:
            return ParsedDelta(content="")  # all calls done
        return None

    def _call_deltas(self, calls: list[ToolCall], added: str) -> list[DeltaToolCall]:
        """What is new in ``calls``, parsed from the text closed with ``added``."""
        tail = len(self.call_closer)
        deltas = []
        for index, call in enumerate(calls):
            if index < self._current_index:
                continue
            self._current_index = index
            if len(self.streamed_args_for_tool) == index:
                self.streamed_args_for_tool.append("")
            call_complete = index < len(calls) - 1 or self.call_closer not in added
            if call_complete:
                self._current_index += 1
            # JSON of what the closing added: the object's "}" stands for ")"
            withheld = added[:-tail] if not call_complete else ""
            if not call_complete and added[-tail] == ")":
                withheld += "}"
            withheld = withheld.replace("'", '"')
            delta = _call_delta(self.streamed_args_for_tool[index], call, index, withheld)
            if delta is not None:
                deltas.append(delta)
                if delta.arguments:
                    self.streamed_args_for_tool[index] += delta.arguments
        if deltas and not self.prev_tool_call_arr:
            # Read back by the end-of-stream logic: a call happened.
            self.prev_tool_call_arr = [{"arguments": {}}]
        return deltas


def _call_delta(sent: str, call: ToolCall, index: int, withheld: str) -> DeltaToolCall | None:
    args = call.arguments
    if withheld:
        if not args.endswith(withheld):
            raise ValueError("arguments do not end with the withheld text")
        args = args[: -len(withheld)]
    if not sent:
        return DeltaToolCall(index, id=call.id, type="function", name=call.name, arguments=args)
    piece = args[len(sent) :]
    return DeltaToolCall(index, id=None, arguments=piece) if piece else None


def _parse(text: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(text)


def _calls(text: str) -> list[ToolCall]:
    node = getattr(_parse(text).body[0], "value", None)
    if not isinstance(node, ast.List) or not all(isinstance(e, ast.Call) for e in node.elts):
        raise _NotACall("tool output must be a list of function calls")
    return [_call(cast(ast.Call, e)) for e in node.elts]  # (all calls: checked)


def _call(call: ast.Call) -> ToolCall:
    arguments = {kw.arg: _literal(kw.value) for kw in call.keywords}
    return ToolCall(
        _dotted_name(call.func), json.dumps(arguments, ensure_ascii=False), make_tool_call_id()
    )


def _dotted_name(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise _NotACall("invalid tool call name")
    parts.append(node.id)
    return ".".join(reversed(parts))


_JSON_NAMES = {"null": None, "true": True, "false": False}


def _literal(node: ast.expr) -> Any:
    """A JSON-able literal (tuples and sets become lists)."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, int, float)):
            return node.value
        raise _NotACall("arguments must be JSON values")
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            raise _NotACall("dict keys must be literals")
        return {cast(ast.Constant, k).value: _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(cast(ast.Constant, p).value) for p in node.values)
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise _NotACall("arguments must be literals")


# -- the gate before parsing ----------------------------------------------------

_CALL_OPEN = re.compile(r"[a-zA-Z]\w*\(")
_KEYWORD = re.compile(r"[a-zA-Z]\w*=")
_COMMA_SPACE = re.compile(r",\s*")
_SPACE = re.compile(r"\s*")
_CLOSE = re.compile(r"\)\s*\]")


def looks_like_call_list(text: str) -> bool:
    """Whether the text starts like ``[name(kw=...), ...]``.

    The same language as vLLM's ``TOOL_CALL_REGEX`` (matched at the start),
    decided in one pass instead of by backtracking: calls without arguments
    (``name()``, comma-separated, then space-separated), and once a call has a
    keyword argument, anything up to a later ``)`` and ``]``.
    """
    if not text.startswith("["):
        return False
    pos = 1
    commas = True  # still in the comma-separated calls
    while True:
        m = _CALL_OPEN.match(text, pos)
        if m is None:
            return False
        pos = m.end()
        kw = _KEYWORD.match(text, pos)
        if kw is not None:
            return _CLOSE.search(text, kw.end()) is not None
        if not text.startswith(")", pos):
            return False
        pos += 1
        if commas:
            m = _COMMA_SPACE.match(text, pos)
            if m is not None:
                pos = m.end()
                continue
            commas = False
        pos = cast("re.Match[str]", _SPACE.match(text, pos)).end()  # (\s* always matches)
        if text.startswith("]", pos):
            return True


# -- closing unfinished Python ------------------------------------------------------

_CLOSING = {"[": "]", "(": ")", "{": "}", "'": "'", '"': '"'}


def _is_escaped(text: str, index: int) -> bool:
    backslashes = 0
    j = index - 1
    while j >= 0 and text[j] == "\\":
        backslashes += 1
        j -= 1
    return backslashes % 2 == 1


def close_python(text: str) -> tuple[str, str] | None:
    """(text closed so it parses, what was added), or None when the text is
    too unfinished (mid name, after ``=`` or ``:``).  Raises ValueError on
    mismatched brackets."""
    stack: list[str] = []
    for index, char in enumerate(text):
        if stack and stack[-1] in "'\"":
            if char == stack[-1] and not _is_escaped(text, index):
                stack.pop()
            continue
        if char in "[({":
            stack.append(char)
        elif char in ")]}":
            opener = {")": "(", "]": "[", "}": "{"}[char]
            if not stack or stack.pop() != opener:
                raise ValueError(f"mismatched {char!r}")
        elif char in "'\"":
            stack.append(char)
    text = text.rstrip()
    if text.endswith(("=", ":")):
        return None
    if stack and stack[-1] == "{":
        before = text[: text.rfind("{")]
        if before.count(":") <= before.count(","):
            return None
    if stack and stack[-1] == "(":
        before = text[: text.rfind("(")]
        if before.count("=") <= before.count(","):
            return None
    if text.endswith(","):
        text = text[:-1]
    if stack and stack[-1] == "[" and not text.endswith(("[", ")")):
        return None
    added = "".join(_CLOSING[c] for c in reversed(stack))
    candidate = text + added
    try:
        module = _parse(candidate)
    except SyntaxError:
        return None
    if not module.body:
        return None
    # A "}" the closing added that made a set means a dict cut mid-key.
    if "}" in added and any(isinstance(node, ast.Set) for node in ast.walk(module)):
        return None
    return candidate, added
