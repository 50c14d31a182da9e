"""Rewrites that make a model's near-Python tool call text parse.

vLLM's pythonic helpers (``vllm/tool_parsers/utils.py``) that LFM2's parser
runs before ``ast.parse``; each leaves text that already parses alone:

* raw control characters inside string literals escaped (``'a<newline>b'``);
* leading zeros dropped from integer literals (``month=07``);
* parameters named after Python keywords renamed (``from=1`` ->
  ``from_pyreservedkw_=1``), and back after decoding;
* a string broken by unescaped nested quotes closed at the only quote that
  makes the text parse (``command='sed -n '1,9p' f.py'``).
"""

from __future__ import annotations

import ast
import keyword
import warnings

from frontend.parsers.tool.pythonic import _is_escaped as is_escaped

_QUOTES = ("'", '"')


def _skip_string_char(text: str, index: int, quote: str, out: list[str]) -> tuple[int, str | None]:
    """Copy one character inside a string literal; (next index, quote still open)."""
    char = text[index]
    out.append(char)
    if char == "\\" and index + 1 < len(text):
        out.append(text[index + 1])
        return index + 2, quote
    return index + 1, (None if char == quote else quote)


def escape_ctrl_chars(text: str) -> str:
    """``\\n``, ``\\r``, ``\\t`` and NUL inside string literals written as escapes."""
    escapes = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x00": "\\x00"}
    out: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(text):
        char = text[index]
        if quote is None:
            if char in _QUOTES:
                quote = char
            out.append(char)
        elif char == "\\" and index + 1 < len(text):
            out.append(text[index : index + 2])
            index += 2
            continue
        elif char == quote:
            quote = None
            out.append(char)
        else:
            out.append(escapes.get(char, char))
        index += 1
    return "".join(out)


RESERVED_SUFFIX = "_pyreservedkw_"


def _name_end(text: str, index: int) -> int:
    while index < len(text) and (text[index].isalnum() or text[index] == "_"):
        index += 1
    return index


def rename_reserved_kwargs(text: str) -> tuple[str, bool]:
    """Keyword-named arguments (after ``(`` or ``,``, before one ``=``)
    renamed, outside strings; (text, whether anything changed)."""
    out: list[str] = []
    quote: str | None = None
    changed = False
    last = ""  # the last significant character
    index = 0
    while index < len(text):
        if quote is not None:
            index, quote = _skip_string_char(text, index, quote, out)
            continue
        char = text[index]
        if char in _QUOTES:
            quote = last = char
            out.append(char)
            index += 1
            continue
        if char.isalpha() or char == "_":
            end = _name_end(text, index)
            name = text[index:end]
            look = end
            while look < len(text) and text[look].isspace():
                look += 1
            if (
                keyword.iskeyword(name)
                and look < len(text)
                and text[look] == "="
                and text[look + 1 : look + 2] != "="
                and last in ("(", ",")
            ):
                name += RESERVED_SUFFIX
                changed = True
            out.append(name)
            last = name[-1]
            index = end
            continue
        out.append(char)
        if not char.isspace():
            last = char
        index += 1
    return "".join(out), changed


def restore_reserved_kwargs(arguments: dict) -> dict:
    """Undo :func:`rename_reserved_kwargs` on decoded arguments."""
    restored = {}
    for key, value in arguments.items():
        stem = key[: -len(RESERVED_SUFFIX)] if isinstance(key, str) else ""
        if isinstance(key, str) and key.endswith(RESERVED_SUFFIX) and keyword.iskeyword(stem):
            restored[stem] = value
        else:
            restored[key] = value
    return restored


def normalize_leading_zero_ints(text: str) -> str:
    """``07`` -> ``7`` outside strings (not ``00``, floats, exponents, ``0x``...)."""
    out: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(text):
        if quote is not None:
            index, quote = _skip_string_char(text, index, quote, out)
            continue
        char = text[index]
        if char in _QUOTES:
            quote = char
            out.append(char)
            index += 1
        elif char.isalpha() or char == "_":
            end = _name_end(text, index)
            out.append(text[index:end])
            index = end
        elif char.isdigit():
            end = index
            while end < len(text) and (text[end].isdigit() or text[end] == "_"):
                end += 1
            token = text[index:end]
            digits = token.replace("_", "")
            follower = text[end : end + 1]
            if (
                digits[0] == "0"
                and digits.strip("0")
                and not (index > 0 and text[index - 1] == ".")
                and follower not in (".", "e", "E", "j", "J")
            ):
                token = str(int(digits))
            out.append(token)
            index = end
        else:
            out.append(char)
            index += 1
    return "".join(out)


_QUOTE_FOLLOWERS = {",", ")", "]", "}", ":"}


def _unescaped(text: str, start: int, quote: str) -> list[int]:
    positions = []
    j = start
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            positions.append(j)
        j += 1
    return positions


def _closes(text: str, pos: int) -> bool:
    """Whether the quote at ``pos`` is followed (past spaces) by a closer."""
    k = pos + 1
    while k < len(text) and text[k].isspace():
        k += 1
    return k < len(text) and text[k] in _QUOTE_FOLLOWERS


def _parses(text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            return False
    return True


def escape_nested_quotes(text: str) -> tuple[str, bool]:
    """The first broken string (its first closing quote is followed by none of
    ``, ) ] } :``) closed at the one later quote whose choice parses, the
    quotes inside escaped; unchanged when none or several do."""
    prefix: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char not in _QUOTES:
            prefix.append(char)
            index += 1
            continue
        quotes = _unescaped(text, index + 1, char)
        if not quotes:
            return text, False
        if _closes(text, quotes[0]):
            prefix.append(text[index : quotes[0] + 1])
            index = quotes[0] + 1
            continue
        winners = []
        for close in (j for j in quotes if _closes(text, j)):
            interior = [
                ("\\" + text[j]) if text[j] == char and not is_escaped(text, j) else text[j]
                for j in range(index + 1, close)
            ]
            candidate = "".join(prefix) + char + "".join(interior) + char + text[close + 1 :]
            if _parses(escape_ctrl_chars(candidate)):
                winners.append(candidate)
        if len(winners) == 1:
            return winners[0], True
        return text, False
    return text, False


def has_broken_string(text: str) -> bool:
    """Whether some string's first closing quote cannot close it (one at the
    very end counts: what follows it is unknown yet)."""
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char not in _QUOTES:
            index += 1
            continue
        quotes = _unescaped(text, index + 1, char)
        if not quotes:
            return False
        close = quotes[0]
        if not _closes(text, close):
            return True
        index = close + 1
    return False
