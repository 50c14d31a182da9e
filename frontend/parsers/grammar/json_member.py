"""A top-level member's object value, verbatim, in a (possibly unfinished) JSON object.

The Granite and Inkling grammars stream a call's arguments as the text of
one member of the call's JSON object (``arguments``, ``args``): verbatim, so
that each step's text extends the last.  vLLM 0.32's
``extract_json_member_object`` and ``scan_json_object_end``
(``vllm/parser/utils.py``).
"""

from __future__ import annotations

_JSON_WS = " \t\r\n"


def _object_end(raw: str, start: int) -> int | None:
    """The end (exclusive) of the JSON object at ``raw[start]``, None while unterminated."""
    depth, in_string, escape = 0, False, False
    for i in range(start, len(raw)):
        ch = raw[i]
        if escape:
            escape = False
        elif in_string:
            if ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def member_object(raw: str, key: str) -> str | None:
    """The verbatim text of the top-level member ``key``'s object value in a
    (possibly unfinished) JSON object, possibly unterminated: prefix-stable as
    ``raw`` grows.  None before the value starts; ValueError if it is not an
    object."""
    depth, in_string, escape = 0, False, False
    string_start = -1
    last_string: str | None = None
    for i, ch in enumerate(raw):
        if escape:
            escape = False
            continue
        if in_string:
            if ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
                if depth == 1:
                    last_string = raw[string_start + 1 : i]
            continue
        if ch == '"':
            in_string = True
            string_start = i
        elif ch == ":" and depth == 1 and last_string == key:
            start = i + 1
            while start < len(raw) and raw[start] in _JSON_WS:
                start += 1
            if start >= len(raw):
                return None
            if raw[start] != "{":
                raise ValueError(f"member {key!r} must be a JSON object")
            end = _object_end(raw, start)
            return raw[start:] if end is None else raw[start:end]
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return None


def member_arguments(raw: str, key: str, partial: bool) -> str:
    """A call's arguments as the member ``key``'s object text: "" while it has
    not started (streaming), ``{}`` when the finished call has none."""
    span = member_object(raw, key)
    if span is None:
        return "" if partial else "{}"
    return span
