"""Waiting on state: the one deadline loop of the tests.

A test waits until what it needs is true (a table entry, an engine counter, a
metric) rather than for a fixed time: a sleep passes or fails with the
machine's load, and proves nothing about the state it hopes for.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

Message = str | Callable[[], str]


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05,
             message: Message = "") -> float:
    """Poll ``predicate`` until true; returns the seconds it took.

    ``message`` may be a function, to show the last state seen on a timeout.
    """
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            _timed_out(timeout, message)
        time.sleep(interval)
    return time.monotonic() - start


async def wait_for_async(predicate: Callable[[], Awaitable[Any]], timeout: float,
                         interval: float = 0.05, message: Message = "") -> float:
    """``wait_for`` inside an event loop: ``await predicate()`` until true."""
    start = time.monotonic()
    while not await predicate():
        if time.monotonic() - start > timeout:
            _timed_out(timeout, message)
        await asyncio.sleep(interval)
    return time.monotonic() - start


def _timed_out(timeout: float, message: Message) -> None:
    text = message() if callable(message) else message
    raise AssertionError(f"not true within {timeout} s: {text}")
