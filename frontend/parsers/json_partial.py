"""Parse the JSON a model has written so far (an unfinished object or array).

vLLM's ``llama3_json`` streaming reads partial tool-call JSON with the
``partial_json_parser`` package: the unfinished innermost container is closed
(a dangling key, comma or colon dropped; an unfinished string kept or dropped;
a number kept as far as it is valid), everything before it is kept as
written, and the result goes to ``json.loads``.  Text after a complete value
is not an error: the first value and where it ends are returned.  These rules
are reproduced here (the tests compare with the package), so streamed
arguments match vLLM's piece by piece.
"""

from __future__ import annotations

import json
from typing import Any


class PartialJSONError(ValueError):
    """The text is not a (prefix of a) JSON value this parser can complete."""


_DECODER = json.JSONDecoder()
_NUMBER_CHARS = frozenset("1234567890.-+eE")
_NUMBER_TAIL = frozenset(".-+eE")
_LITERALS = (("null", 4), ("true", 4), ("false", 5), ("Infinity", 8))


def loads_partial(text: str, allow_partial_strings: bool) -> tuple[Any, int]:
    """(value, end index): the completed value, or the first complete value
    when more text follows it.  Raises :class:`PartialJSONError`."""
    head, tail = complete(text, allow_partial_strings)
    try:
        return json.loads(head + tail), len(text)
    except json.JSONDecodeError as e:
        if "Extra data" not in e.msg:
            raise PartialJSONError(e.msg) from e
    try:
        return _DECODER.raw_decode(text)
    except json.JSONDecodeError as e:
        raise PartialJSONError(e.msg) from e


def complete(text: str, allow_str: bool) -> tuple[str, str]:
    """(kept text, closing suffix) that make ``text`` a JSON document."""
    try:
        return _complete(text, allow_str)
    except (AssertionError, IndexError) as e:
        raise PartialJSONError("malformed JSON") from e


def _escaped(text: str, index: int) -> bool:
    backslashes = index - len(text[:index].rstrip("\\"))
    return backslashes % 2 == 1


def _closers(stack: list[tuple[int, str]]) -> str:
    return "".join("}" if c == "{" else "]" for _, c in reversed(stack))


def _complete(text: str, allow_str: bool) -> tuple[str, str]:
    # Find the open containers, skipping brackets inside strings.
    marks = [(i, c) for i, c in enumerate(text) if c in '"[]{}']
    if not marks or marks[0][1] == '"':
        return _fix(text, allow_str, top_level=True)
    stack: list[tuple[int, str]] = []
    in_string = False
    string_start = string_end = -1
    i, c = marks[-1]
    for i, c in marks:
        if c == '"':
            if not in_string:
                in_string, string_start = True, i
            elif not _escaped(text, i):
                in_string, string_end = False, i
        elif not in_string:
            if c in "}]":
                _, opener = stack.pop()
                assert opener == ("{" if c == "}" else "[")
            else:
                stack.append((i, c))
    if not stack:
        return text, ""
    top_pos, top_char = stack[-1]

    if not allow_str and in_string:
        # Drop the unfinished string, and its key if it is a value.
        if top_pos > string_end and top_char == "{":
            return text[: top_pos + 1], _closers(stack)
        comma = text.rfind(",", max(top_pos, string_end) + 1, string_start)
        if comma != -1:
            return text[:comma], _closers(stack)
        return _cut_before_last_key(text, top_pos, string_end, stack)

    if in_string:
        if top_char == "[":
            head, tail = _fix(text[string_start:], allow_str)
            return text[:string_start] + head, tail + _closers(stack)
        start = max(string_end, top_pos)
        between = text[start + 1 : string_start]
        if "," in between:
            comma = text.rindex(",", start, string_start)
            head, tail = _fix("{" + text[comma + 1 :], allow_str)
            return text[:comma] + head[1:], tail + _closers(stack[:-1])
        if ":" in between:
            head, tail = _fix(text[string_start:], allow_str)
            return text[:string_start] + head, tail + _closers(stack)
        return text[:string_start], _closers(stack)

    # ``i``/``c``: the last bracket or quote in the text.
    comma = text.rfind(",", max(string_end, i) + 1)
    if comma != -1:
        if not text[comma + 1 :].strip():
            return text[:comma], _closers(stack)
        assert top_char == "["
        head, tail = _fix("[" + text[comma + 1 :], allow_str)
        if not head[1:] + tail[:-1].strip():
            return text[:comma] + head[1:], tail + _closers(stack[:-1])
        return text[: comma + 1] + head[1:], tail + _closers(stack[:-1])
    if c in "]}":
        assert not text[i + 1 :].strip()
        return text, _closers(stack)
    if c in "[{":
        head, tail = _fix(text[i:], allow_str)
        return text[:i] + head, tail + _closers(stack[:-1])
    # The last mark is a closing quote, directly in the open container.
    if top_char == "[":
        return text, _closers(stack)
    colon = text.rfind(":", string_end)
    comma = text.rfind(",", top_pos + 1, string_start)
    if comma == -1:
        head, tail = _fix(text[top_pos:], allow_str)
        return text[:top_pos] + head, tail + _closers(stack[:-1])
    if colon == -1 and text.rfind(":", max(top_pos, comma) + 1, string_start) != -1:
        return text, _closers(stack)
    head, tail = _fix("{" + text[comma + 1 :], allow_str)
    if not head[1:] + tail[:-1].strip():
        return text[:comma] + head[1:], tail + _closers(stack[:-1])
    if colon == -1:
        return text[: comma + 1] + head[1:], tail + _closers(stack)
    return text[: comma + 1] + head[1:], tail + _closers(stack[:-1])


def _cut_before_last_key(
    text: str, container: int, string_end: int, stack: list[tuple[int, str]]
) -> tuple[str, str]:
    key_start = string_end
    while True:
        key_start = text.rfind('"', container, key_start)
        if key_start == -1:
            return text[: container + 1], _closers(stack)
        if _escaped(text, key_start):
            key_start -= 1
            continue
        comma = text.rfind(",", container, key_start)
        if comma == -1:
            return text[: container + 1], _closers(stack)
        return text[:comma], _closers(stack)


# -- completing one value from its start ---------------------------------------
# Each returns (length of the text kept, closing suffix), suffix None when the
# value is complete; False when it is unfinished and may not be kept.


def _fix(text: str, allow_str: bool, top_level: bool = False) -> tuple[str, str]:
    # The value is completed on the stripped text but cut from the original
    # (a quirk kept for fidelity: leading blanks shift the cut).
    result = _value(text.strip(), allow_str, top_level)
    if result is False:
        raise PartialJSONError("unfinished value")
    index, suffix = result
    return text[:index], suffix or ""


def _skip_blank(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _value(text: str, allow_str: bool, top_level: bool = False):
    char = text[_skip_blank(text, 0)]
    if char == '"':
        return _string(text, allow_str)
    if char in "1234567890":
        return _number(text, top_level)
    if char == "[":
        return _array(text, allow_str)
    if char == "{":
        return _object(text, allow_str)
    for literal, length in _LITERALS:
        if text.startswith(literal):
            return length, None
        if literal.startswith(text):
            return 0, literal
    if char == "-":
        if len(text) == 1:
            return False
        if text[1] != "I":
            return _number(text, top_level)
    if text.startswith("-Infinity"):
        return 9, None
    if "-Infinity".startswith(text):
        return 0, "-Infinity"
    if text.startswith("NaN"):
        return 3, None
    if "NaN".startswith(text):
        return 0, "NaN"
    raise PartialJSONError(f"unexpected character {char!r}")


def _string(text: str, allow_str: bool):
    assert text[0] == '"'
    i = 1
    while i < len(text):
        char = text[i]
        if char == "\\":
            if i + 1 == len(text):
                break
            i += 2
            continue
        if char == '"':
            return i + 1, None
        i += 1
    if not allow_str:
        return False
    # Cut an unfinished escape sequence off the kept string.
    for escape, span in (("\\u", 5), ("\\U", 9), ("\\x", 3)):
        pos = text.rfind(escape, max(0, i - span), i)
        if pos != -1 and not _escaped(text, pos):
            return pos, '"'
    return i, '"'


def _number(text: str, top_level: bool):
    i = 1
    while i < len(text) and text[i] in _NUMBER_CHARS:
        i += 1
    trimmed = False
    while text[i - 1] in _NUMBER_TAIL:
        trimmed = True
        i -= 1
    if trimmed or (i == len(text) and not top_level):
        return i, ""
    return i, None


def _array(text: str, allow_str: bool):
    assert text[0] == "["
    kept = j = 1
    try:
        while True:
            j = _skip_blank(text, j)
            if text[j] == "]":
                return j + 1, None
            result = _value(text[j:], allow_str)
            if result is False:
                return kept, "]"
            length, suffix = result
            if suffix is not None:
                return j + length, suffix + "]"
            kept = j = j + length
            j = _skip_blank(text, j)
            if text[j] == ",":
                j += 1
            elif text[j] == "]":
                return j + 1, None
            else:
                raise PartialJSONError("expected ',' or ']'")
    except IndexError:
        return kept, "]"


def _object(text: str, allow_str: bool):
    assert text[0] == "{"
    kept = j = 1
    try:
        while True:
            j = _skip_blank(text, j)
            if text[j] == "}":
                return j + 1, None
            key = _string(text[j:], allow_str)
            if not key or key[1] is not None:
                return kept, "}"
            j = _skip_blank(text, j + key[0])
            if text[j] != ":":
                raise PartialJSONError("expected ':'")
            j = _skip_blank(text, j + 1)
            result = _value(text[j:], allow_str)
            if result is False:
                return kept, "}"
            length, suffix = result
            if suffix is not None:
                return j + length, suffix + "}"
            kept = j = j + length
            j = _skip_blank(text, j)
            if text[j] == ",":
                j += 1
            elif text[j] == "}":
                return j + 1, None
            else:
                raise PartialJSONError("expected ',' or '}'")
    except IndexError:
        return kept, "}"


def loads_partial_whole(text: str, allow_partial_strings: bool) -> Any:
    """``partial_json_parser.loads`` itself: the completed JSON of the whole
    text (text after the first value is an error, unlike :func:`loads_partial`).
    Raises ValueError."""
    head, tail = complete(text, allow_partial_strings)
    return json.loads(head + tail)


def common_prefix(a: str, b: str) -> str:
    """vLLM's ``find_common_prefix``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def common_suffix(a: str, b: str) -> str:
    """vLLM's ``find_common_suffix``: stops at an alphanumeric character."""
    n = 0
    for i in range(1, min(len(a), len(b)) + 1):
        if a[-i] != b[-i] or a[-i].isalnum():
            break
        n = i
    return a[len(a) - n :]


def intermediate_diff(curr: str, old: str) -> str:
    """vLLM's ``extract_intermediate_diff``: ``curr`` without the prefix and
    the (non-alphanumeric) suffix it shares with ``old``."""
    suffix = common_suffix(curr, old)
    old = old[::-1].replace(suffix[::-1], "", 1)[::-1]
    prefix = common_prefix(curr, old)
    diff = curr
    if suffix:
        diff = diff[::-1].replace(suffix[::-1], "", 1)[::-1]
    if prefix:
        diff = diff.replace(prefix, "", 1)
    return diff
