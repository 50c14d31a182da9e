"""Every logprobs format the routes answer with, from the fan-out table's positions.

A position (``frontend.text.Position``) maps token id -> (logprob, rank,
text), the sampled token first. The formats, as vLLM 0.32 writes them:

* completions: ``{text_offset, token_logprobs, tokens, top_logprobs}``;
* chat, and generate with ``output_mode: "text"``:
  ``{"content": [{token, logprob, bytes, top_logprobs: [...]}]}``;
* generate with token output: ``{"content": [{token_id, logprob, rank, top_logprobs}]}``;
* ``prompt_logprobs``: null first, then ``{"<id>": {logprob, rank, decoded_token}}``.

-inf is written as -9999.0 (OpenAI's JSON-safe stand-in), as vLLM does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from frontend.text import Position

if TYPE_CHECKING:
    from frontend.model import ModelInfo

LOGPROB_FLOOR = -9999.0


def _floor(logprob: float) -> float:
    return max(logprob, LOGPROB_FLOOR)


def _positions(
    token_ids: list[int], positions: Sequence[Position | None]
) -> Iterator[tuple[int, Position | None]]:
    """Each output token with its position (None where there is none)."""
    for i, token_id in enumerate(token_ids):
        yield token_id, positions[i] if i < len(positions) else None


def _utf8(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="replace"))


def completion_logprobs(
    model: ModelInfo,
    token_ids: list[int],
    positions: Sequence[Position | None],
    num_top: int,
    all_alternatives: bool,
    initial_offset: int,
    as_token_ids: bool,
) -> dict:
    """The completions ``logprobs`` object.

    ``top_logprobs`` holds the sampled token plus the top ``num_top`` (keyed by
    text, so equal texts collapse); a position without logprobs (the first
    prompt token) gives nulls and the token's plain decoding.
    """
    offsets: list[int] = []
    token_logprobs: list[float | None] = []
    tokens: list[str] = []
    top: list[dict[str, float] | None] = []
    last_len = 0
    for token_id, pos in _positions(token_ids, positions):
        if pos is None:
            token = f"token_id:{token_id}" if as_token_ids else model.decode([token_id])
            token_logprobs.append(None)
            top.append(None)
        else:
            lp, _, text = pos[token_id]
            token = f"token_id:{token_id}" if as_token_ids else text
            token_logprobs.append(_floor(lp))
            top.append(
                {
                    (f"token_id:{tid}" if as_token_ids else t): _floor(v)
                    for k, (tid, (v, _, t)) in enumerate(pos.items())
                    if all_alternatives or num_top == -1 or num_top >= k
                }
            )
        tokens.append(token)
        offsets.append(initial_offset if not offsets else offsets[-1] + last_len)
        last_len = len(token)
    return {
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": top,
    }


def chat_logprobs(
    token_ids: list[int],
    positions: Sequence[Position | None],
    num_top: int,
    as_token_ids: bool,
    token_bytes: bool = True,
) -> dict:
    """Chat's ``logprobs``: ``top_logprobs`` holds the first ``num_top`` entries of
    the position (the sampled token first); a token that ended in a partial
    UTF-8 character has the text ``""``. Without ``token_bytes`` (beam search,
    whose logprobs vLLM decodes only when answering) a token's ``bytes`` is null."""
    content = []
    for token_id, pos in _positions(token_ids, positions):
        if not pos or (entry := pos.get(token_id)) is None:
            token = f"token_id:{token_id}" if as_token_ids else ""
            content.append(
                {
                    "token": token,
                    "logprob": LOGPROB_FLOOR,
                    "bytes": _utf8(token),
                    "top_logprobs": [],
                }
            )
            continue
        lp, _, text = entry
        top = []
        for k, (tid, (v, _, t)) in enumerate(pos.items()):
            if num_top != -1 and k >= num_top:
                break
            t = f"token_id:{tid}" if as_token_ids else t
            top.append({"token": t, "logprob": _floor(v), "bytes": _utf8(t)})
        content.append(
            {
                "token": f"token_id:{token_id}" if as_token_ids else text,
                "logprob": _floor(lp),
                "bytes": _utf8(text) if token_bytes else None,
                "top_logprobs": top,
            }
        )
    return {"content": content}


def generate_text_logprobs(
    token_ids: list[int],
    positions: Sequence[Position | None],
    num_top: int,
    as_token_ids: bool = False,
) -> dict:
    """``/inference/v1/generate`` with ``output_mode: "text"``: chat's entries, but
    at least one alternative and no bytes where a position is missing;
    ``as_token_ids`` (--return-tokens-as-token-ids): every token a ``token_id:N``
    placeholder without bytes."""
    if as_token_ids:
        return _placeholder_logprobs(token_ids, positions, num_top)
    content = []
    for token_id, pos in _positions(token_ids, positions):
        if not pos or (entry := pos.get(token_id)) is None:
            content.append(
                {
                    "token": f"token_id:{token_id}",
                    "logprob": LOGPROB_FLOOR,
                    "bytes": None,
                    "top_logprobs": [],
                }
            )
            continue
        lp, _, text = entry
        content.append(
            {
                "token": text,
                "logprob": _floor(lp),
                "bytes": _utf8(text),
                "top_logprobs": [
                    {"token": t, "logprob": _floor(v), "bytes": _utf8(t)}
                    for k, (tid, (v, _, t)) in enumerate(pos.items())
                    if num_top == -1 or k < max(num_top, 1)
                ],
            }
        )
    return {"content": content}


def generate_token_logprobs(
    token_ids: list[int], positions: Sequence[Position | None], num_top: int
) -> dict:
    """``/inference/v1/generate`` with token output: ids and ranks, no texts."""
    content: list[dict[str, Any]] = []
    for token_id, pos in _positions(token_ids, positions):
        if not pos or (entry := pos.get(token_id)) is None:
            content.append(
                {"token_id": token_id, "logprob": LOGPROB_FLOOR, "rank": None, "top_logprobs": []}
            )
            continue
        lp, rank, _ = entry
        content.append(
            {
                "token_id": token_id,
                "logprob": _floor(lp),
                "rank": rank or None,
                "top_logprobs": [
                    {"token_id": tid, "logprob": _floor(v), "rank": r or None}
                    for k, (tid, (v, r, _)) in enumerate(pos.items())
                    if num_top == -1 or k < max(num_top, 1)
                ],
            }
        )
    return {"content": content}


def prompt_logprobs_json(positions: Sequence[Position | None] | None) -> list | None:
    if positions is None:
        return None
    return [
        None
        if p is None
        else {
            str(tid): {"logprob": _floor(lp), "rank": rank, "decoded_token": text}
            for tid, (lp, rank, text) in p.items()
        }
        for p in positions
    ]


def _placeholder_logprobs(
    token_ids: list[int], positions: Sequence[Position | None], num_top: int
) -> dict:
    content = []
    for token_id, pos in _positions(token_ids, positions):
        entry = pos.get(token_id) if pos else None
        content.append(
            {
                "token": f"token_id:{token_id}",
                "logprob": LOGPROB_FLOOR if entry is None else _floor(entry[0]),
                "bytes": None,
                "top_logprobs": []
                if entry is None or pos is None
                else [
                    {"token": f"token_id:{tid}", "logprob": _floor(v), "bytes": None}
                    for k, (tid, (v, _, _)) in enumerate(pos.items())
                    if num_top == -1 or k < max(num_top, 1)
                ],
            }
        )
    return {"content": content}
