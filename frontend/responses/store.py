"""The Responses API's store: responses by id, the chat messages each was
generated from (``previous_response_id``), background tasks and the event
logs of background streams.

vLLM 0.32 keeps them in plain dicts behind ``VLLM_ENABLE_RESPONSES_API_STORE=1``
and never removes anything ("This may cause a memory leak"). This store is
bounded on purpose: at most ``capacity`` responses
(``FRONTEND_RESPONSES_STORE_SIZE``, default 1000), least recently used first
out; a response whose background task still runs is never dropped (it is
the task's to finish). A finished task leaves the store's task table at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("frontend.responses")

STORE_ENV = "VLLM_ENABLE_RESPONSES_API_STORE"
SIZE_ENV = "FRONTEND_RESPONSES_STORE_SIZE"
DEFAULT_SIZE = 1000


def store_enabled(environ: Any = os.environ) -> bool:
    """vLLM's switch: ``bool(int(os.getenv("VLLM_ENABLE_RESPONSES_API_STORE", "0")))``."""
    try:
        return bool(int(environ.get(STORE_ENV, "0")))
    except ValueError:
        return False


def store_size(environ: Any = os.environ) -> int:
    try:
        return max(1, int(environ.get(SIZE_ENV, DEFAULT_SIZE)))
    except ValueError:
        return DEFAULT_SIZE


class EventLog:
    """A background stream's SSE frames (one per event, index = sequence
    number), read by the POST that started it and by ``GET ?stream=true``."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.closed = False
        self._changed = asyncio.Event()

    def append(self, frames: list[bytes]) -> None:
        if frames:
            self.frames.extend(frames)
            self._changed.set()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    async def follow(self, start: int = 0):
        """Frames from ``start`` on, as they come, until the log is closed."""
        index = start
        while True:
            self._changed.clear()
            while index < len(self.frames):
                yield self.frames[index]
                index += 1
            if self.closed:
                return
            await self._changed.wait()


@dataclass
class Entry:
    response: dict[str, Any] | None = None  # the latest state of the response object
    messages: list[dict[str, Any]] | None = None  # its chat messages (history)
    events: EventLog | None = None
    task: asyncio.Task | None = None


@dataclass
class ResponseStore:
    enabled: bool = False
    capacity: int = DEFAULT_SIZE
    entries: OrderedDict[str, Entry] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.enabled:
            log.warning(
                "`%s` is enabled: responses are kept in memory, at most %d of them "
                "(%s), the least recently used dropped first.",
                STORE_ENV,
                self.capacity,
                SIZE_ENV,
            )

    def get(self, response_id: str) -> Entry | None:
        entry = self.entries.get(response_id)
        if entry is not None:
            self.entries.move_to_end(response_id)
        return entry

    def response(self, response_id: str) -> dict[str, Any] | None:
        entry = self.get(response_id)
        return entry.response if entry is not None else None

    def entry(self, response_id: str) -> Entry:
        entry = self.get(response_id)
        if entry is None:
            entry = self.entries[response_id] = Entry()
            self._evict()
        return entry

    def put(self, response: dict[str, Any]) -> None:
        """The response's final state, unless it was cancelled meanwhile (vLLM's rule)."""
        entry = self.entry(response["id"])
        if entry.response is None or entry.response["status"] != "cancelled":
            entry.response = response

    def start(self, response_id: str, work: Coroutine[Any, Any, None]) -> asyncio.Task:
        entry = self.entry(response_id)
        task = asyncio.create_task(work, name=f"response {response_id}")
        entry.task = task

        def finished(_: asyncio.Task) -> None:
            if entry.task is task:
                entry.task = None

        task.add_done_callback(finished)
        return task

    def running(self) -> list[asyncio.Task]:
        return [e.task for e in self.entries.values() if e.task is not None]

    def _evict(self) -> None:
        excess = len(self.entries) - self.capacity
        if excess <= 0:
            return
        for response_id in [k for k, e in self.entries.items() if e.task is None][:excess]:
            del self.entries[response_id]

    async def close(self) -> None:
        """Cancel every background task (their engine requests are aborted) and wait."""
        tasks = self.running()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
