"""How many engine requests a generation body asks for, read before the body
is decoded: admission control (``--max-concurrent-requests``) counts them.

One skeleton parse serves every route (fields it does not name are skipped
unparsed; ``prompt`` stays raw bytes); each route picks its count. Anything
odd counts 1: the handler then answers with the proper validation error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec


class BodyCounts(msgspec.Struct):
    prompt: msgspec.Raw = msgspec.Raw(b"null")
    n: Any = 1
    sampling_params: Any = None

    def samples(self) -> int:
        """``n`` (/v1/chat/completions)."""
        return as_n(self.n)

    def prompts_times_n(self) -> int:
        """``len(prompts) * n`` (/v1/completions)."""
        return _count_prompts(bytes(self.prompt)) * as_n(self.n)

    def sampling_params_n(self) -> int:
        """``sampling_params.n`` (/inference/v1/generate)."""
        params = self.sampling_params
        return as_n(params.get("n", 1)) if isinstance(params, dict) else 1


_decoder = msgspec.json.Decoder(BodyCounts)
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])


def choice_counter(count: Callable[[BodyCounts], int]) -> Callable[[bytes], int]:
    """A route's counter: body bytes -> ``count`` of its skeleton (1 if unreadable)."""

    def count_choices(body: bytes) -> int:
        try:
            counts = _decoder.decode(body)
        except msgspec.DecodeError:
            return 1
        return count(counts)

    return count_choices


def as_n(value: Any) -> int:
    """``n`` as sent, for admission only: anything but an int >= 1 counts 1."""
    if isinstance(value, bool):
        return 1
    try:
        n = int(value)
    except (TypeError, ValueError):
        return 1
    return n if n >= 1 else 1


def _count_prompts(raw: bytes) -> int:
    raw = raw.lstrip()
    if not raw.startswith(b"["):
        return 1
    try:
        items = _raw_list.decode(raw)
    except msgspec.DecodeError:
        return 1
    if not items:
        return 1
    head = bytes(items[0]).lstrip()[:1]
    # A list of strings or of token lists is a batch; a list of ints is one prompt.
    return len(items) if head in (b'"', b"[") else 1
