"""Utility calls as vLLM's engine client makes them for its operational routes.

vLLM's ``AsyncMPClient`` calls one engine; under data parallel its
``call_utility_async`` calls every engine and returns the first result,
``call_utility_all_async`` returns them all, and a consensus call fails
unless every engine agrees (``core_client.py``). None of them has a timeout:
sleep, a pause that waits for running requests and weight transfers take as
long as they take, and so do these.
"""

from __future__ import annotations

from typing import Any

from frontend.engine_client import EngineUnavailableError
from frontend.errors import engine_failure
from frontend.state import AppState
from protocol.errors import UtilityCallError


class EngineCallError(Exception):
    """A failed utility call as vLLM's client raises it: ``Exception(failure_message)``
    (``"Call to <method> method failed: <error>"``), or the engine is gone."""


async def every(state: AppState, method: str, *args: Any) -> list[Any]:
    """``call_utility_all_async``: one result per attached engine rank."""
    try:
        return await state.engine.call_utility_all(method, *args, timeout=None)
    except UtilityCallError as e:
        raise EngineCallError(e.failure_message) from None
    except EngineUnavailableError as e:  # no rank attached (vLLM: its engine is dead)
        raise EngineCallError(engine_failure(str(e)).message) from None


async def first(state: AppState, method: str, *args: Any) -> Any:
    """``call_utility_async``: every rank is called, the first result is returned."""
    return (await every(state, method, *args))[0]


async def consensus(state: AppState, method: str, *args: Any) -> Any:
    """``call_utility_consensus_async``: the ranks' one answer."""
    results = await every(state, method, *args)
    if any(result != results[0] for result in results):
        raise RuntimeError(f"Engines returned different {method} results: {results}")
    return results[0]


async def collective_rpc(
    state: AppState,
    method: Any,
    timeout: Any = None,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> Any:
    """``collective_rpc(method, timeout, args, kwargs)`` on the engine: its
    workers' results (the first rank's), as AsyncLLM.collective_rpc sends it."""
    return await first(state, "collective_rpc", method, timeout, args or [], kwargs)
