"""A faster ``DecodeStream`` for byte-level BPE tokenizers (GPT-2, Llama 3, Qwen...).

With a plain ``ByteLevel`` decoder, the text of a token sequence is the UTF-8
(lossy) decoding of the concatenated bytes of its tokens, so streaming text is
context-free: a token either completes the pending bytes into valid text or
leaves them pending. ``tokenizers.decoders.DecodeStream`` re-decodes a window
of tokens in Rust on every step; this does the same with a per-token cache and
is a few times cheaper, which matters because it runs for every token of every
stream. It is used only where it provably matches (tests compare it with
DecodeStream on random sequences): a ByteLevel decoder, and a prompt whose
decoding ends on a complete character.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

REPLACEMENT = "\ufffd"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte <-> printable-character map, as tokenizers uses it."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


BYTE_CHAR = _bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def is_byte_level(tokenizer: Tokenizer) -> bool:
    decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
    return decoder.get("type") == "ByteLevel"


# Typed Any so that ``table.get(id, _MISS)`` keeps the table's value type (a sentinel).
_MISS: Any = object()


class ByteLevelTexts:
    """Per-token bytes and, where they are complete text on their own, the text.

    Filled lazily (a 128k vocabulary would cost start-up time), one table per
    ``skip_special_tokens`` value so that a step is a single dict lookup.
    """

    def __init__(self, tokenizer: Tokenizer, special_ids: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self._special = special_ids
        self._bytes: dict[int, bytes] = {}
        # skip_special_tokens -> {id: text, or None when not complete on its own}
        self.complete: dict[bool, dict[int, str | None]] = {False: {}, True: {}}

    def token_bytes(self, token_id: int) -> bytes:
        data = self._bytes.get(token_id)
        if data is None:
            token = self._tokenizer.id_to_token(token_id) or ""
            try:
                data = bytes(CHAR_BYTE[c] for c in token)
            except KeyError:  # not byte-mapped (e.g. an added token): its UTF-8
                data = token.encode()
            self._bytes[token_id] = data
        return data

    def fill(self, token_id: int, skip_special: bool) -> str | None:
        """The token's text when it is valid UTF-8 on its own ("" if skipped)."""
        if skip_special and self.is_special(token_id):
            text: str | None = ""
        else:
            try:
                text = self.token_bytes(token_id).decode()
            except UnicodeDecodeError:
                text = None
            if text is not None and text.endswith(REPLACEMENT):
                text = None  # DecodeStream waits on a trailing U+FFFD, whatever its origin
        self.complete[skip_special][token_id] = text
        return text

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special


class ByteLevelStream:
    """``DecodeStream.step`` semantics for a byte-level tokenizer.

    Text comes out only when the pending bytes decode to text that does not end
    in U+FFFD (an incomplete or invalid sequence waits for more tokens).

    ``table`` and ``pending`` are public for the detokenizer's per-token fast
    path: with nothing pending, a token whose ``table`` entry is a non-empty
    string is exactly that text (anything else goes through :meth:`step`).
    """

    __slots__ = ("_texts", "table", "_skip_special", "pending")

    def __init__(self, texts: ByteLevelTexts, skip_special_tokens: bool) -> None:
        self._texts = texts
        self.table = texts.complete[skip_special_tokens]
        self._skip_special = skip_special_tokens
        self.pending = b""

    def step(self, _tokenizer: object, token_id: int) -> str | None:
        if not self.pending:
            text = self.table.get(token_id, _MISS)
            if text is _MISS:
                text = self._texts.fill(token_id, self._skip_special)
            if text is not None:
                return text or None
        return self._step_pending(token_id)

    def _step_pending(self, token_id: int) -> str | None:
        texts = self._texts
        if self._skip_special and texts.is_special(token_id):
            return None
        data = self.pending + texts.token_bytes(token_id)
        text = data.decode("utf-8", "replace")
        if text and not text.endswith(REPLACEMENT):
            self.pending = b""
            return text
        self.pending = data
        return None
