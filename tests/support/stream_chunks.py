"""Comparing two streams of the same engine steps cut into chunks differently.

Both vLLM's server and ours send one chunk per engine step unless steps pile
up before the client takes them, and then merge them (vLLM's
``RequestOutputCollector`` when its HTTP side lags; ours, the steps read in
one wake-up). On a loaded machine either may merge, so a parity test compares
streams up to that coarsening.
"""

from __future__ import annotations

from typing import Any

# Fields of a stream chunk (top level, or of its one choice) that hold a delta
# and are concatenated when vLLM merges two engine steps into one chunk.
_CONCATENATED = ("text", "token_ids")
# Fields set only on the first chunk of a choice: a merged chunk keeps the first.
_FIRST_ONLY = ("prompt_token_ids", "mm_placeholders")


def merge_chunks(first: dict, second: dict) -> dict:
    """One chunk for two consecutive engine steps of one choice, as vLLM builds it.

    vLLM's per-request output collector merges DELTA outputs when the engine
    gets ahead of the HTTP consumer (``RequestOutputCollector.put`` ->
    ``RequestOutput.add(aggregate=True)``): text, token ids and logprobs are
    concatenated, finish/stop reason and the other terminal fields come from
    the later step, the prompt fields from the first. Continuous usage is
    cumulative, so the later one counts.
    """
    merged = {**first, **second}
    for key in _FIRST_ONLY:
        if key in first or key in second:
            merged[key] = first.get(key) if first.get(key) is not None else second.get(key)
    a, b = first["choices"][0], second["choices"][0]
    choice = {**a, **b}
    for key in _CONCATENATED:
        if key in a and a[key] is not None and b.get(key) is not None:
            choice[key] = a[key] + b[key]
    for key in _FIRST_ONLY:
        if key in a:
            choice[key] = a[key] if a[key] is not None else b.get(key)
    choice["logprobs"] = _merge_logprobs(a.get("logprobs"), b.get("logprobs"))
    merged["choices"] = [choice]
    return merged


def _merge_logprobs(a: Any, b: Any) -> Any:
    """Completions' {text_offset, token_logprobs, tokens, top_logprobs} or
    generate's {content}: every list is concatenated."""
    if a is None or b is None:
        return b if a is None else a
    merged = {**a, **b}
    for key in merged:
        if isinstance(a.get(key), list) or isinstance(b.get(key), list):
            merged[key] = (a.get(key) or []) + (b.get(key) or [])
    return merged


def match_coarsening(ours: list[dict], theirs: list[dict]) -> bool:
    """True if both streams are the same engine steps, merged into chunks
    possibly differently.

    Both frontends send one chunk per engine step unless steps pile up before
    the client takes them (vLLM's consumer lagged; ours read several steps in
    one wake-up), and then merge them. So the streams must cut into runs of
    consecutive chunks that merge pairwise to equal chunks, in order (plain
    equality chunk by chunk when neither merged anything).
    """
    memo: dict[tuple[int, int], bool] = {}

    def text_len(chunk: dict) -> int:
        return len(chunk["choices"][0].get("text") or "")

    def walk(i: int, j: int) -> bool:
        if i == len(theirs) or j == len(ours):
            return i == len(theirs) and j == len(ours)
        key = (i, j)
        if key not in memo:
            memo[key] = False
            mine = ours[j]
            for k in range(j + 1, len(ours) + 1):
                if k > j + 1:
                    mine = merge_chunks(mine, ours[k - 1])
                other = theirs[i]
                for m in range(i + 1, len(theirs) + 1):
                    if m > i + 1:
                        other = merge_chunks(other, theirs[m - 1])
                    if text_len(other) > text_len(mine):
                        break  # texts only grow as runs extend
                    if other == mine and walk(m, k):
                        memo[key] = True
                        return True
        return memo[key]

    return walk(0, 0)
