"""One pooling batch through the fan-out table: an engine request per input.

As vLLM does, every input (a text, a conversation, a query/document pair) is
its own engine request; all of them are one group of the table, sent to one
engine rank. The handler waits for all of them; whatever happens (an error, a
failed sibling, the client leaving: aiohttp cancels the handler) the group is
released, which aborts in the engine what has not finished.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from frontend.choices import Choice, Group
from frontend.errors import from_validation, internal_error
from frontend.openai.common import trace_headers, warn_if_traced
from frontend.state import AppState
from protocol.errors import ProtocolError, ValidationError
from protocol.pooling import PoolingParams

log = logging.getLogger("frontend.pooling")


@dataclass
class Pooled:
    """One input's result: the engine's tensor, flat, with its shape."""

    values: list[float]
    shape: list[int]
    num_prompt_tokens: int


@dataclass
class Batch:
    request_id: str  # the response id (``embd-...``); engine ids derive from it
    token_lists: list[list[int]]
    params: list[PoolingParams]  # one per input
    served: str  # the served name or LoRA adapter asked for
    priority: int = 0
    cache_salt: str | None = None
    arrival: float | None = None  # time.monotonic() when the request was taken up


async def pool(state: AppState, request: web.Request, batch: Batch) -> list[Pooled]:
    """Run every input of ``batch`` and return their results in input order."""
    table = state.table
    group = Group(batch.request_id, stream=False, arrival=batch.arrival)
    group.lora = state.lora.get(batch.served)
    if state.config.trace_requests:
        group.trace_headers = trace_headers(request.headers)
    else:
        warn_if_traced(request.headers)
    for i, (ids, params) in enumerate(zip(batch.token_lists, batch.params)):
        engine_id = table.new_engine_id(batch.request_id, i, 0)
        group.choices.append(Choice(group, i, i, engine_id, ids, params, None, None))
    try:
        try:
            table.submit(group, priority=batch.priority, cache_salt=batch.cache_salt)
        except ValidationError as e:
            raise from_validation(e) from e
        await group.wait_done()
        if group.error is not None:
            raise group.error
        return [_result(choice) for choice in group.choices]
    finally:
        table.release(group)


def _result(choice: Choice) -> Pooled:
    tensor = choice.pooled
    if tensor is None:  # finished without a result (aborted by the engine)
        log.error(
            "engine request %s finished (%s) without a pooling output",
            choice.engine_id,
            choice.finish_reason,
        )
        raise internal_error()
    try:
        values = tensor.flat()
    except ProtocolError as e:
        log.error("engine request %s: unreadable pooling output: %s", choice.engine_id, e)
        raise internal_error() from e
    return Pooled(values, list(tensor.shape), len(choice.prompt_token_ids))
