"""Aborting requests in flight by vLLM's external request ids (RL ``/abort_requests``).

vLLM's ``AsyncLLM.abort(ids)`` takes the ids its handlers gave the engine
client: ``cmpl-<id>-<prompt index>`` for completions (one per prompt),
``chatcmpl-<id>`` for chat, ``generate-tokens-<id>`` for generate, and
``<id>-<index>`` for each pooling input. An id names every engine request
of it (``n`` samples included); each ends as if the engine had aborted it: a
last output with ``finish_reason "abort"`` and no new tokens, so a stream gets
its final chunk and ``[DONE]``, and a non-streaming response its choices.
Unknown ids are ignored. The engine gets an ABORT for each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from frontend.choices import Choice
from frontend.fanout import Table


def external_id(choice: Choice) -> str:
    """The id vLLM's handler would have given this engine request's prompt."""
    rid = choice.group.request_id
    if rid.startswith("cmpl-") or choice.detok is None:  # completions, pooling
        return f"{rid}-{choice.prompt_index}"
    return rid


def in_flight(table: Table) -> list[Choice]:
    return list(table.entries.values())


def matching(table: Table, ids: Iterable[str]) -> list[Choice]:
    wanted = set(ids)
    return [c for c in table.entries.values() if external_id(c) in wanted]


def tracked_ids(choices: list[Choice]) -> int:
    """How many ids vLLM's output processor tracks for these engine requests:
    one per request, and one parent per prompt sampled ``n`` > 1 times."""
    per_prompt: dict[tuple[int, int], int] = defaultdict(int)
    for c in choices:
        per_prompt[(id(c.group), c.prompt_index)] += 1
    return len(choices) + sum(1 for count in per_prompt.values() if count > 1)
