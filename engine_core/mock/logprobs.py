"""Sample and prompt logprobs, as numpy/torch arrays on the wire.

The sampled token has rank 1 when greedy, rank 1-3 when sampling (so it may be
missing from a small top-k); values are negative and fall by 0.5 per rank.
"""

from __future__ import annotations

from engine_core.mock.requests import Request, mix
from protocol.arrays import make_array
from protocol.wire import LogprobsLists, LogprobsTensors

_LOGPROB_SALT = 0x5EED_109
_PROMPT_SALT = 0x5EED_9E0


def _row(
    token: int, rank: int, width: int, x: int, vocab: int, ids: list[int], lps: list[float]
) -> None:
    """Append one row: the token, then the top ``width`` ids, best first.

    The token sits at 1-based ``rank`` among distinct ids (so it is not in
    the row when rank > width); values fall by 0.5 per rank.
    """
    best = -0.05 - (x & 0xFF) / 1024.0
    ids.append(token)
    lps.append(best - 0.5 * (rank - 1))
    other = 1
    for j in range(width):
        if j == rank - 1:
            ids.append(token)
        else:
            ids.append((token + other) % vocab)
            other += 1
        lps.append(best - 0.5 * j)


def sample_logprobs(r: Request, tokens: list[int], vocab: int, aux: list[bytes]) -> LogprobsLists:
    """Rows for this step's ``tokens`` (already counted in ``r.num_out``)."""
    width = r.logprobs
    assert width is not None  # the scheduler asks only where logprobs were requested
    ids: list[int] = []
    lps: list[float] = []
    ranks: list[int] = []
    first = r.num_out - len(tokens)
    for p, token in enumerate(tokens):
        x = mix(r.key ^ _LOGPROB_SALT ^ (first + p))
        rank = 1 if r.greedy else 1 + (x >> 40) % 3
        _row(token, rank, width, x, vocab, ids, lps)
        ranks.append(rank)
    shape = [len(tokens), width + 1]
    # numpy on the wire: int32 ids, float32 logprobs, int64 ranks (a count).
    return LogprobsLists(
        make_array(ids, shape, "i", aux),
        make_array(lps, shape, "f", aux),
        make_array(ranks, [len(tokens)], "q", aux),
    )


def prompt_logprobs(r: Request, vocab: int, aux: list[bytes]) -> LogprobsTensors:
    """Rows for prompt tokens 1.. (the first has none)."""
    width = r.prompt_logprobs
    assert width is not None  # the scheduler asks only where prompt logprobs were requested
    ids: list[int] = []
    lps: list[float] = []
    ranks: list[int] = []
    for i, token in enumerate(r.prompt[1:]):
        x = mix(r.key ^ _PROMPT_SALT ^ i)
        rank = 1 + (x >> 40) % 4
        _row(token, rank, width, x, vocab, ids, lps)
        ranks.append(rank)
    rows = r.prompt_len - 1
    shape = [rows, width + 1]
    # torch on the wire; ranks share the int32 buffer type of the ids.
    return LogprobsTensors(
        make_array(ids, shape, "i", aux, torch_names=True),
        make_array(lps, shape, "f", aux, torch_names=True),
        make_array(ranks, [rows], "i", aux, torch_names=True),
    )
