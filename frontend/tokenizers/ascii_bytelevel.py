"""Prompt tokenization for GPT-2-style byte-level BPE on ASCII text: same ids, 3x faster.

Most of a ``tokenizers`` encode goes into its pre-tokenizer (the GPT-2 split
regex, in Oniguruma) and into building the ``Encoding`` object. For a
tokenizer whose whole pipeline is no normalizer, a ``ByteLevel``
pre-tokenizer (GPT-2 regex, no prefix space), a BPE model without dropout,
no truncation or padding, and a post-processor that only adds fixed special
tokens, the ids of a text are the special prefix,
the model's ids of each regex piece (byte-level mapped), and the special
suffix; added tokens in the text (special tokens of a chat prompt) are split
out first, as the tokenizer does, where they are matched as written. On ASCII
text the regex needs no Unicode classes, so Python's ``re`` splits exactly as
Oniguruma does; each piece's ids come from the tokenizer's own model and are
kept in a bounded cache (lines of single-spaced text skip the regex: their
words' ids are cached whole). Any other text (not ASCII, or holding an added token
with stripping or word-boundary options) goes to the tokenizer.
"""

from __future__ import annotations

import itertools
import json
import re

from tokenizers import Tokenizer

from frontend.bytelevel import BYTE_CHAR

# tokenizers' ByteLevel split regex, with \p{L} and \p{N} on ASCII; words and
# numbers first (findall 12 % faster on prose): no other alternative can match
# where they do (the contractions start with an apostrophe), so the split is
# the same.
PIECES = re.compile(
    r" ?[A-Za-z]+| ?[0-9]+|'(?:s|t|re|ve|m|ll|d)| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", re.ASCII
)
TO_BYTE_CHARS = {b: BYTE_CHAR[b] for b in range(128)}
_CACHE_LIMIT = 65536  # entries of each cache (pieces, words); a full one is cleared
_CACHED_LENGTH = 64  # longer pieces and words are not kept (a cache stays small)
_PROBES = ("a", "Hello, world!")


class AsciiByteLevelEncoder:
    def __init__(self, tokenizer: Tokenizer, prefix: list[int], suffix: list[int]) -> None:
        self._model = tokenizer.model
        self._prefix = prefix
        self._suffix = suffix
        added = [(i, t) for i, t in tokenizer.get_added_tokens_decoder().items() if t.content]
        self._added_ids = {t.content: i for i, t in added}
        # Longest first: at one position the regex then takes the longest
        # match, the tokenizer's leftmost-longest split around added tokens.
        contents = sorted(self._added_ids, key=len, reverse=True)
        self._added = re.compile("|".join(map(re.escape, contents))) if contents else None
        # That split alone holds for tokens matched as written (no stripping,
        # word boundaries or normalized form), each content once.
        self._splits_added = (
            not tokenizer.encode_special_tokens
            and len(self._added_ids) == len(added)
            and not any(t.lstrip or t.rstrip or t.single_word or t.normalized for _, t in added)
        )
        self._cache: dict[str, list[int]] = {}  # a regex piece -> its ids
        # Single-spaced text: a space-separated word (punctuation included) ->
        # its ids, without and with the space before it.
        self._words: dict[str, list[int]] = {}
        self._spaced_words: dict[str, list[int]] = {}
        self._newline: list[int] = []
        self._extend_pieces(self._newline, "\n")

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer) -> AsciiByteLevelEncoder | None:
        """The encoder where the tokenizer's pipeline is the one described above."""
        if not isinstance(tokenizer, Tokenizer):
            return None
        spec = json.loads(tokenizer.to_str())
        pre = spec.get("pre_tokenizer") or {}
        model = spec.get("model") or {}
        if (
            spec.get("normalizer") is not None
            or pre.get("type") != "ByteLevel"
            or pre.get("add_prefix_space")
            or not pre.get("use_regex", True)
            or model.get("type") != "BPE"
            or model.get("dropout")
            or tokenizer.truncation is not None
            or tokenizer.padding is not None
        ):
            return None
        affixes = {_affixes(tokenizer, probe) for probe in _PROBES}
        found = affixes.pop()
        if affixes or found is None:
            return None  # a post-processor that does more than add fixed tokens
        prefix, suffix = found
        return cls(tokenizer, list(prefix), list(suffix))

    def encode(self, text: str, add_special_tokens: bool) -> list[int] | None:
        """The tokenizer's ids for ``text``, or None where this does not apply."""
        if not text.isascii():
            return None
        ids = self._prefix[:] if add_special_tokens else []
        added = self._added
        if added is None or added.search(text) is None:
            self._extend(ids, text)
        elif not self._splits_added:
            return None
        else:  # the text between added tokens is pre-tokenized on its own
            start = 0
            for match in added.finditer(text):
                self._extend(ids, text[start : match.start()])
                ids.append(self._added_ids[match.group()])
                start = match.end()
            self._extend(ids, text[start:])
        if add_special_tokens:
            ids += self._suffix
        return ids

    def _extend(self, ids: list[int], text: str) -> None:
        """``text``'s ids. Lines of single-spaced printable text (no space at
        either end of a line, no empty line) go word by word: no regex piece
        holds whitespace but as its first character, a space before a
        non-space, and a newline between two non-spaces is a piece of its own;
        so the split of the whole text is the split of each word with the
        space before it, and a word's ids can be kept whole. Anything else is
        split by the regex."""
        if "\n" not in text:  # (one line, the common case: no per-line lists)
            words = text.split(" ")
            if "" in words or not text.isprintable():
                self._extend_pieces(ids, text)
            else:
                self._extend_words(ids, words)
            return
        lines = text.split("\n")
        lines_words = [line.split(" ") for line in lines]  # (an empty line: [""])
        if any("" in words for words in lines_words) or not all(map(str.isprintable, lines)):
            self._extend_pieces(ids, text)
            return
        self._extend_words(ids, lines_words[0])
        for words in itertools.islice(lines_words, 1, None):
            ids += self._newline
            self._extend_words(ids, words)

    def _extend_words(self, ids: list[int], words: list[str]) -> None:
        spaced = self._spaced_words
        ids += self._words.get(words[0]) or self._word(words[0], False)
        for word in itertools.islice(words, 1, None):
            ids += spaced.get(word) or self._word(word, True)

    def _word(self, word: str, spaced: bool) -> list[int]:
        word_ids: list[int] = []
        self._extend_pieces(word_ids, " " + word if spaced else word)
        _keep(self._spaced_words if spaced else self._words, word, word_ids)
        return word_ids

    def _extend_pieces(self, ids: list[int], text: str) -> None:
        cache = self._cache
        for piece in PIECES.findall(text):
            piece_ids = cache.get(piece)
            if piece_ids is None:
                mapped = piece.translate(TO_BYTE_CHARS)
                piece_ids = [t.id for t in self._model.tokenize(mapped)]
                _keep(cache, piece, piece_ids)
            ids += piece_ids


def _keep(cache: dict[str, list[int]], text: str, ids: list[int]) -> None:
    """Cache ``text``'s ids unless it is long; a full cache starts over."""
    if len(text) <= _CACHED_LENGTH:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[text] = ids


def _affixes(tokenizer: Tokenizer, probe: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The special ids the post-processor puts before and after ``probe``'s ids."""
    plain = tokenizer.encode(probe, add_special_tokens=False).ids
    full = tokenizer.encode(probe, add_special_tokens=True).ids
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return tuple(full[:start]), tuple(full[start + len(plain) :])
    return None
