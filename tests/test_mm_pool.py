"""The frontend's processor worker pool over real pipes, with workers that run
engine_core/mm_processor.py's message loop on a processor without vLLM."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from frontend.multimodal import pool as pool_module
from frontend.multimodal.pool import ProcessorPool, Settings


@pytest.fixture(autouse=True)
def echo_workers(monkeypatch):
    monkeypatch.setattr(pool_module, "WORKER_MODULE", "tests.support.echo_mm_worker")


def run_pool(work) -> None:
    async def run() -> None:
        pool = ProcessorPool(Settings({}, {}, workers=1))
        await pool.spawn()
        try:
            await pool.configure(16, "")
            await work(pool)
        finally:
            await pool.close()

    asyncio.run(run())


def test_a_clean_shutdown_logs_no_error(caplog):
    async def work(pool: ProcessorPool) -> None:
        processed = await pool.process_chat(b"{}")
        assert processed.prompt_token_ids == [1, 2]

    with caplog.at_level(logging.INFO, logger="frontend.multimodal"):
        run_pool(work)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_cancelled_request_frees_its_entry():
    async def work(pool: ProcessorPool) -> None:
        task = asyncio.ensure_future(pool.process_chat(json.dumps({"sleep": 30}).encode()))
        await asyncio.sleep(0.2)
        assert pool.in_flight() == 1
        task.cancel()
        for _ in range(100):
            if pool.in_flight() == 0:
                break
            await asyncio.sleep(0.05)
        assert pool.in_flight() == 0  # the worker answered the cancel
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]

    run_pool(work)
