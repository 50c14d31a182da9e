"""Incremental detokenization, stop strings and logprob token texts.

Byte-for-byte compatibility with vLLM 0.32's Python frontend is the goal, so the
algorithms follow ``vllm/v1/engine/detokenizer.py`` (FastIncrementalDetokenizer
+ stop-string checks) and ``vllm/v1/engine/logprobs.py`` (per-token texts with
the U+FFFD repair): a ``tokenizers`` DecodeStream primed with the prompt, the
last token of a STOP finish left undecoded, the earliest-ending stop string
winning, and a hold-back of ``max(len(stop)) - 1`` characters while streaming.
"""

from __future__ import annotations

import logging
import sys
from bisect import bisect_left
from typing import TYPE_CHECKING, cast

from tokenizers import decoders

from frontend.bytelevel import ByteLevelStream, ByteLevelTexts

if TYPE_CHECKING:
    from frontend.model import ModelInfo

log = logging.getLogger("frontend.text")

INVALID_PREFIX_ERR_MSG = "Invalid prefix encountered"
REPLACEMENT_CHAR = "\ufffd"
# Characters of recent text kept unsettled beyond the longest stop string.
TAIL_SLACK = 256


def check_stop_strings(
    output_text: str, new_char_count: int, stop: list[str], include_in_output: bool
) -> tuple[str, int] | None:
    """(matched stop string, truncate-to offset or -1) for the newest text, or None.

    Only the last ``new_char_count`` characters (plus ``len(stop) - 1`` before
    them) are searched; the stop string that ends earliest wins, ties go to
    list order.
    """
    if not new_char_count or not stop:
        return None
    best: str | None = None
    best_index = 0
    best_end = sys.maxsize
    for stop_str in stop:
        index = output_text.find(stop_str, 1 - new_char_count - len(stop_str))
        if index == -1:
            continue
        end = index + len(stop_str)
        if end < best_end:
            best, best_index, best_end = stop_str, index, end
    if best is None:
        return None
    if include_in_output:
        return (best, -1) if best_end >= len(output_text) else (best, best_end)
    return best, best_index


class IncrementalDetokenizer:
    """Text of one generated sequence, fed with the engine's per-step token deltas."""

    __slots__ = (
        "_model",
        "_tokenizer",
        "_stream",
        "_byte_level",
        "_skip_special",
        "_spaces_between_special",
        "plain",
        "_last_special",
        "stop",
        "min_tokens",
        "include_stop_str_in_output",
        "stop_buffer_length",
        "token_ids",
        "_head",
        "_head_len",
        "_tail",
        "_keep",
        "_streaming",
        "_last_output_offset",
    )

    def __init__(
        self,
        model: ModelInfo,
        prompt_token_ids: list[int],
        *,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        stop: list[str] | None = None,
        min_tokens: int = 0,
        include_stop_str_in_output: bool = False,
    ) -> None:
        self._model = model
        self._tokenizer = model.tokenizer
        self._skip_special = skip_special_tokens
        self._stream = _decode_stream(model, prompt_token_ids, skip_special_tokens)
        # The byte-level stream, whose table the per-token fast path reads.
        self._byte_level = self._stream if isinstance(self._stream, ByteLevelStream) else None
        # Spaces between consecutive added tokens are suppressed only when
        # specials are kept and the client asked for it.
        self._spaces_between_special = (
            skip_special_tokens or spaces_between_special_tokens or not model.added_token_ids
        )
        self._last_special = False
        self.stop = stop or []
        # No stop strings and no special-token spacing: the lean path of update
        # (and, streaming, of the fan-out table: see step_text).
        self.plain = not self.stop and self._spaces_between_special
        self.min_tokens = min_tokens
        self.include_stop_str_in_output = include_stop_str_in_output
        self.stop_buffer_length = (
            max(len(s) for s in self.stop) - 1
            if self.stop and not include_stop_str_in_output
            else 0
        )
        self.token_ids: list[int] = []
        # The text is kept as settled pieces (_head) plus a short _tail that
        # every new token appends to: appending to one growing str would copy
        # it each time (quadratic for long outputs). The tail keeps what stop
        # strings may still match and, when streaming, what is not sent yet.
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self._keep = max((len(s) for s in self.stop), default=0) + TAIL_SLACK
        self._streaming = False
        self._last_output_offset = 0

    @property
    def output_text(self) -> str:
        if self._head:
            if len(self._head) > 1:
                self._head = ["".join(self._head)]
            return self._head[0] + self._tail
        return self._tail

    @property
    def text_length(self) -> int:
        return self._head_len + len(self._tail)

    def _settle(self) -> None:
        """Move the tail's older part to the head (amortized: at most every
        ``_keep`` characters), keeping stop-string context and unsent text."""
        tail = self._tail
        cut = len(tail) - self._keep
        if self._streaming:
            cut = min(cut, self._last_output_offset - self._head_len)
        if cut < self._keep:
            return
        self._head.append(tail[:cut])
        self._head_len += cut
        self._tail = tail[cut:]

    def update(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        """Append a step's tokens; return the stop string that matched, if any.

        On a match the text is truncated and tokens after the one that
        completed the match are dropped (possible with multi-token steps).
        """
        if not new_token_ids:
            return None
        if self.plain:
            self._append_plain(new_token_ids, stop_terminated)
            return None
        skipped_stop_token = None
        if stop_terminated and not self.include_stop_str_in_output:
            # The EOS/stop token that ended generation is not detokenized.
            skipped_stop_token = new_token_ids[-1]
            new_token_ids = new_token_ids[:-1]
        num_prev = len(self.token_ids)
        # Offsets are into the tail, which holds all of this step's text.
        offsets = [len(self._tail)] if self.stop else None
        for token_id in new_token_ids:
            self.token_ids.append(token_id)
            self._tail += self._decode_next(token_id)
            if offsets is not None:
                offsets.append(len(self._tail))
        if skipped_stop_token is not None:
            self.token_ids.append(skipped_stop_token)
            if offsets is not None:
                offsets.append(len(self._tail))
        match = None
        if offsets is not None and len(self.token_ids) > self.min_tokens:
            check_from = offsets[max(self.min_tokens - num_prev, 0)]
            # The tail also holds the longest stop string's length before the
            # new text, so searching it finds what searching the whole would.
            match = check_stop_strings(
                self._tail, len(self._tail) - check_from, self.stop, self.include_stop_str_in_output
            )
        if match is None:
            self._settle()
            return None
        stop_string, truncate_to = match
        stop_end = len(self._tail) if truncate_to == -1 else truncate_to
        if not self.include_stop_str_in_output:
            stop_end += len(stop_string)
        kept = bisect_left(cast("list[int]", offsets), stop_end, lo=1)  # (a match needs them)
        del self.token_ids[num_prev + kept :]
        if truncate_to != -1:
            self._tail = self._tail[:truncate_to]
        return stop_string

    def _append_plain(self, new_token_ids: list[int], stop_terminated: bool) -> None:
        """``update`` without stop strings or special-token spacing: the common
        case, kept lean because it runs for every token of every stream."""
        if len(new_token_ids) == 1 and not stop_terminated:  # one token per step
            self.append_one(new_token_ids[0])
            return
        if stop_terminated and not self.include_stop_str_in_output:
            decoded = new_token_ids[:-1]
        else:
            decoded = new_token_ids
        self.token_ids += new_token_ids
        pieces = [piece for piece in map(self._step, decoded) if piece]
        if pieces:
            self._tail += "".join(pieces)
            self._settle()

    def append_one(self, token_id: int) -> str:
        """Append one token (plain update); return its text, "" if none yet."""
        self.token_ids.append(token_id)
        byte_level = self._byte_level
        # A token that is whole text on its own, nothing pending: the
        # byte-level stream's table has its text (what step would return).
        piece = (
            byte_level.table.get(token_id)
            if byte_level is not None and not byte_level.pending
            else None
        )
        if not piece:
            try:  # _step, inlined
                piece = self._stream.step(self._tokenizer, token_id)
            except Exception as e:
                piece = self._recover(e, token_id)
            if not piece:
                return ""
        self._tail += piece
        if len(self._tail) > 2 * self._keep:
            self._settle()
        return piece

    def step_text(self, token_id: int) -> str:
        """``update([token_id], False)`` then ``next_text(False)``, fused, for a
        ``plain`` detokenizer: with no stop string to hold text back, a step's
        new text is the token's own, and every earlier step's was taken."""
        piece = self.append_one(token_id)
        self._streaming = True
        self._last_output_offset += len(piece)
        return piece

    def next_text(self, finished: bool) -> str:
        """New text since the last call, holding back a possible partial stop string."""
        self._streaming = True
        head_len = self._head_len
        length = head_len + len(self._tail) - (0 if finished else self.stop_buffer_length)
        last = self._last_output_offset
        if last < length:
            self._last_output_offset = length
            if last >= head_len:
                return self._tail[last - head_len : length - head_len]
            return self.output_text[last:length]  # (text settled before streaming began)
        return ""

    def _decode_next(self, token_id: int) -> str:
        token = self._step(token_id)
        if not self._spaces_between_special:
            special = self._model.added_token_ids.get(token_id)
            if special is not None and self._last_special:
                token = special  # raw token, without the separating space
            self._last_special = special is not None
        return token or ""

    def _step(self, token_id: int) -> str | None:
        try:
            return self._stream.step(self._model.tokenizer, token_id)
        except Exception as e:
            return self._recover(e, token_id)

    def _recover(self, error: Exception, token_id: int) -> str | None:
        """A failed ``DecodeStream.step``, handled as vLLM handles it."""
        if isinstance(error, (OverflowError, TypeError)):
            log.error("invalid token id from the engine: %r", token_id)
            return None
        if not str(error).startswith(INVALID_PREFIX_ERR_MSG):
            raise error
        # tokenizers can produce non-monotonic invalid UTF-8 and break the
        # stream's state; start a fresh stream like vLLM does.
        self._stream = decoders.DecodeStream(skip_special_tokens=self._skip_special)
        self._byte_level = None
        return self._stream.step(self._model.tokenizer, token_id)


def _decode_stream(model: ModelInfo, prompt_token_ids: list[int], skip_special_tokens: bool):
    """A stream primed with the prompt: the fast byte-level one where it matches
    DecodeStream exactly (the prompt ends on a complete character), else DecodeStream."""
    texts = model.byte_level
    if texts is not None and not _ends_mid_character(texts, prompt_token_ids, skip_special_tokens):
        return ByteLevelStream(texts, skip_special_tokens)
    return decoders.DecodeStream(ids=prompt_token_ids, skip_special_tokens=skip_special_tokens)


def _ends_mid_character(texts: ByteLevelTexts, ids: list[int], skip_special: bool) -> bool:
    tail = b""
    count = 0
    for token_id in reversed(ids):  # a partial character spans at most 3 tokens
        if skip_special and texts.is_special(token_id):
            continue
        piece = texts.token_bytes(token_id)
        if not tail and piece and piece[-1] < 0x80:
            return False  # the text ends on an ASCII byte: a whole character
        tail = piece + tail
        count += 1
        if count == 4:
            break
    return tail.decode("utf-8", "replace").endswith(REPLACEMENT_CHAR)


class TokenTexts:
    """Per-token texts for logprobs, with vLLM's repair of split UTF-8 characters.

    ``decode([id])`` is cached per id: logprob requests decode k+1 ids per
    position, and the same ids come up again and again.
    """

    def __init__(self, model: ModelInfo) -> None:
        self._model = model
        self._cache: dict[int, str] = {}

    def single(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._model.decode([token_id]) or ""
            marker = self._model.space_marker
            if marker:  # vLLM's _restore_leading_spaces: decode() strips them
                raw = self._model.id_to_token(token_id) or ""
                markers = len(raw) - len(raw.lstrip(marker))
                missing = markers - (len(text) - len(text.lstrip(" ")))
                text = " " * missing + text if missing > 0 else text
            self._cache[token_id] = text
        return text

    def position(self, token_ids: list[int], context: list[int]) -> list[str]:
        """Texts of the alternatives at one position, given preceding sampled ids."""
        texts = [self.single(t) for t in token_ids]
        for i, text in enumerate(texts):
            if text.endswith(REPLACEMENT_CHAR):
                texts[i] = self._repair(token_ids[i], context)
        return texts

    def _repair(self, token_id: int, context: list[int]) -> str:
        """The text a byte-fallback token adds after up to 4 context tokens."""
        decode = self._model.decode
        for num_ctx in range(1, min(len(context), 4) + 1):
            ctx = context[-num_ctx:]
            full = decode(ctx + [token_id])
            if full.endswith(REPLACEMENT_CHAR):
                continue
            clean_end = len(ctx)
            for j in range(len(ctx) - 1, -1, -1):
                if self.single(ctx[j]).endswith(REPLACEMENT_CHAR):
                    clean_end = j
                else:
                    break
            prefix = decode(ctx[:clean_end]) if clean_end > 0 else ""
            if full.startswith(prefix):
                return full[len(prefix) :]
            common = 0
            for a, b in zip(prefix, full):
                if a != b:
                    break
                common += 1
            return full[common:]
        return ""


# One logprobs position: token id -> (logprob, rank, text), sampled token first.
Position = dict[int, tuple[float, int, str]]


def make_position(
    token_ids: list[int],
    logprobs: list[float],
    sampled_rank: int,
    num_logprobs: int,
    texts: list[str],
) -> Position:
    """vLLM's per-position dict: the sampled token (its rank), then top-k ranks 1..k.

    A token that appears twice keeps its first place and the later values,
    exactly like vLLM's dict comprehension.
    """
    if num_logprobs == -1:
        num_logprobs = len(logprobs)
    ranks = [sampled_rank, *range(1, num_logprobs + 1)]
    return {t: (lp, r, s) for t, lp, r, s in zip(token_ids, logprobs, ranks, texts)}


class LogprobsState:
    """Sample (and prompt) logprobs of one sequence, decoded position by position."""

    __slots__ = ("texts", "num_logprobs", "num_prompt_logprobs", "sample", "prompt", "cumulative")

    def __init__(
        self, texts: TokenTexts, num_logprobs: int | None, num_prompt_logprobs: int | None
    ) -> None:
        self.texts = texts
        self.num_logprobs = num_logprobs
        self.num_prompt_logprobs = num_prompt_logprobs
        self.sample: list[Position] = []
        # Prompt position 0 has no logprob.
        self.prompt: list[Position | None] | None = (
            [None] if num_prompt_logprobs is not None else None
        )
        self.cumulative = 0.0

    @staticmethod
    def _context(positions: list) -> list[int]:
        return [next(iter(p)) for p in positions[-4:] if p]

    def add_sample(
        self, token_rows: list[list[int]], logprob_rows: list[list[float]], ranks: list[int]
    ) -> list[Position]:
        """Positions for one engine step; returns the new ones."""
        new: list[Position] = []
        num = cast(int, self.num_logprobs)  # (sample rows come only where logprobs were asked)
        for ids, lps, rank in zip(token_rows, logprob_rows, ranks):
            texts = self.texts.position(ids, self._context(self.sample))
            self.cumulative += lps[0]
            pos = make_position(ids, lps, rank, num, texts)
            self.sample.append(pos)
            new.append(pos)
        return new

    def add_prompt(
        self, token_rows: list[list[int]], logprob_rows: list[list[float]], ranks: list[int]
    ) -> None:
        assert self.prompt is not None
        num = cast(int, self.num_prompt_logprobs)  # (set with self.prompt)
        for ids, lps, rank in zip(token_rows, logprob_rows, ranks):
            texts = self.texts.position(ids, self._context(self.prompt))
            self.prompt.append(make_position(ids, lps, rank, num, texts))
