"""The processor worker's request loop on its own (no vLLM): every request is
answered exactly once, so the frontend's pending table entry is freed."""

from __future__ import annotations

import asyncio
import io

from engine_core.mm_processor import Server, read_message
from protocol import mm_worker


class SlowProcessor:
    """Stands in for vLLM's renderer: a request that takes a while."""

    async def chat(self, body: bytes) -> dict:
        await asyncio.sleep(10)
        return {"ok": True, "body": body}


def answers_to(*messages: dict) -> list[dict]:
    async def run() -> list[dict]:
        reader = asyncio.StreamReader()
        for message in messages:
            reader.feed_data(mm_worker.encode(message))
        reader.feed_eof()
        out = io.BytesIO()
        server = Server(SlowProcessor(), out)
        await server.serve(reader)
        if server.tasks:
            await asyncio.wait(list(server.tasks.values()), timeout=5)
        await asyncio.sleep(0)  # the tasks' done callbacks
        assert server.tasks == {}
        answers = asyncio.StreamReader()
        answers.feed_data(out.getvalue())
        answers.feed_eof()
        got = []
        while (answer := await read_message(answers)) is not None:
            got.append(answer)
        return got

    return asyncio.run(run())


def test_a_cancel_read_with_its_request_is_answered():
    """The client left before the worker's loop ran the request (both messages
    were in the pipe at once): the request is still answered, as cancelled."""
    request = {"id": 7, "body": b"{}", "kind": "chat"}
    assert answers_to(request, {"cancel": 7}) == [{"id": 7, "cancelled": True}]


def test_a_cancel_after_the_answer_is_ignored():
    assert answers_to({"cancel": 3}) == []
