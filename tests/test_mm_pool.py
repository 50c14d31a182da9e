"""The frontend's processor worker pool over real pipes, with workers that run
engine_core/mm_processor.py's message loop on a processor without vLLM
(tests/support/echo_mm_worker.py): a worker that dies is replaced, a request
past its deadline gets an error, and writes wait for the pipe."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time

import pytest

from frontend.cli import build_parser
from frontend.errors import ApiError
from frontend.model import load_model_info
from frontend.multimodal import pool as pool_module
from frontend.multimodal import settings as mm_settings
from frontend.multimodal import worker as worker_module
from frontend.multimodal.pool import ProcessorPool, Settings
from harness.models import tiny_vlm_dir


@pytest.fixture(autouse=True)
def echo_workers(monkeypatch):
    monkeypatch.setattr(pool_module, "WORKER_MODULE", "tests.support.echo_mm_worker")
    monkeypatch.setattr(pool_module, "RESPAWN_FIRST_DELAY_S", 0.1)


def run_pool(work, **settings) -> None:
    engine_args = settings.pop("engine_args", {})

    async def run() -> None:
        pool = ProcessorPool(Settings(engine_args, {}, workers=1, **settings))
        await pool.spawn()
        try:
            await pool.configure(16, "")
            await work(pool)
        finally:
            await pool.close()

    asyncio.run(run())


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


async def eventually(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


def restart_delays(caplog) -> list[float]:
    found = (re.search(r"starting another in ([\d.]+) s", r.getMessage()) for r in caplog.records)
    return [float(m.group(1)) for m in found if m]


def test_a_clean_shutdown_logs_no_error(caplog):
    async def work(pool: ProcessorPool) -> None:
        processed = await pool.process_chat(b"{}")
        assert processed.prompt_token_ids == [1, 2]

    with caplog.at_level(logging.INFO, logger="frontend.multimodal"):
        run_pool(work)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_cancelled_request_frees_its_entry():
    async def work(pool: ProcessorPool) -> None:
        task = asyncio.ensure_future(pool.process_chat(body(sleep=30)))
        await asyncio.sleep(0.2)
        assert pool.in_flight() == 1
        task.cancel()
        await eventually(lambda: pool.in_flight() == 0)  # the worker answered the cancel
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]

    run_pool(work)


def test_a_killed_worker_fails_its_requests_and_is_replaced(caplog):
    pids: list[int] = []

    async def work(pool: ProcessorPool) -> None:
        pids.append(pool.workers[0].proc.pid)
        waiting = asyncio.ensure_future(pool.process_chat(body(sleep=30)))
        await eventually(lambda: pool.in_flight() == 1)
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises(ApiError) as lost:
            await waiting
        assert (lost.value.status, lost.value.err_type) == (500, "InternalServerError")
        assert lost.value.message == f"processor worker {pids[0]} exited"
        assert pool.in_flight() == 0
        with pytest.raises(ApiError) as meanwhile:  # until the new one is ready
            await pool.process_chat(b"{}")
        assert meanwhile.value.status == 503
        await eventually(lambda: pool.workers[0].serving)
        pids.append(pool.workers[0].proc.pid)
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]

    with caplog.at_level(logging.INFO, logger="frontend.multimodal"):
        run_pool(work)
    first, second = pids
    assert first != second
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"processor worker {first} exited (status -9); starting another in 0.1 s"]
    assert f"processor worker {second} ready (restarted)" in caplog.messages


def test_a_worker_that_writes_garbage_is_replaced():
    async def work(pool: ProcessorPool) -> None:
        broken = pool.workers[0].proc.pid
        with pytest.raises(ApiError) as lost:
            await pool.process_chat(body(garbage=True, sleep=30))
        assert lost.value.status == 500
        assert lost.value.message.startswith(f"processor worker {broken} sent a malformed answer")
        await eventually(lambda: pool.workers[0].serving)
        assert pool.workers[0].proc.pid != broken
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]

    run_pool(work)


def test_a_request_waiting_for_a_dead_workers_pipe_gets_the_error():
    large = body(pad="x" * (1 << 20))

    async def work(pool: ProcessorPool) -> None:
        pid = pool.workers[0].proc.pid
        blocker = asyncio.ensure_future(pool.process_chat(body(block=60)))
        await eventually(lambda: pool.in_flight() == 1)
        writing = [asyncio.ensure_future(pool.process_chat(large)) for _ in range(2)]
        await asyncio.sleep(0.3)
        assert pool.workers[0].load() == 3  # one in the pipe, one waiting for it
        os.kill(pid, signal.SIGKILL)
        for request in (blocker, *writing):
            with pytest.raises(ApiError) as lost:
                await request
            assert lost.value.message == f"processor worker {pid} exited"
        assert pool.in_flight() == 0

    run_pool(work)


def test_a_worker_that_dies_at_start_up_is_retried_less_and_less_often(tmp_path, caplog):
    """Each failed start doubles the wait for the next one; once it starts
    again, the pool serves again."""
    poison = tmp_path / "die"

    async def work(pool: ProcessorPool) -> None:
        poison.touch()
        os.kill(pool.workers[0].proc.pid, signal.SIGKILL)
        await eventually(lambda: len(restart_delays(caplog)) >= 4)
        poison.unlink()
        await eventually(lambda: pool.workers[0].serving)
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]

    with caplog.at_level(logging.INFO, logger="frontend.multimodal"):
        run_pool(work, engine_args={"die_if_exists": str(poison)})
    delays = restart_delays(caplog)
    assert delays[:4] == [0.1, 0.2, 0.4, 0.8]
    assert any("exited (status 3)" in r.getMessage() for r in caplog.records)


def test_a_request_past_its_deadline_gets_an_error_and_is_cancelled():
    async def work(pool: ProcessorPool) -> None:
        pid = pool.workers[0].proc.pid
        started = time.monotonic()
        with pytest.raises(ApiError) as late:
            await pool.process_chat(body(sleep=30))
        assert 0.29 <= time.monotonic() - started < 5
        assert late.value.payload() == {
            "error": {
                "message": "Multimodal processing timed out after 0.3s. "
                "Adjust --mm-processor-timeout to override.",
                "type": "InternalServerError",
                "param": None,
                "code": 500,
            }
        }
        await eventually(lambda: pool.in_flight() == 0, timeout=2)  # the cancel's answer
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]
        assert pool.workers[0].proc.pid == pid

    run_pool(work, timeout=0.3)


def test_a_late_answer_is_dropped_and_frees_its_entry():
    """A worker busy past the deadline (its loop blocked: it reads the cancel
    only after its answer went out) answers late; the answer is dropped."""

    async def work(pool: ProcessorPool) -> None:
        pid = pool.workers[0].proc.pid
        with pytest.raises(ApiError) as late:
            await pool.process_chat(body(block=1.5))
        assert late.value.status == 500
        assert pool.in_flight() == 1  # the worker still has it
        await eventually(lambda: pool.in_flight() == 0, timeout=5)
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]
        assert pool.workers[0].proc.pid == pid  # within the grace: not killed

    run_pool(work, timeout=0.3)


def test_a_worker_stuck_past_the_grace_is_killed_and_replaced(monkeypatch, caplog):
    monkeypatch.setattr(worker_module, "STUCK_GRACE_S", 0.3)

    async def work(pool: ProcessorPool) -> None:
        stuck = pool.workers[0].proc.pid
        with pytest.raises(ApiError):
            await pool.process_chat(body(block=60))
        await eventually(lambda: pool.workers[0].serving and pool.workers[0].proc.pid != stuck)
        assert pool.in_flight() == 0
        assert (await pool.process_chat(b"{}")).prompt_token_ids == [1, 2]

    with caplog.at_level(logging.INFO, logger="frontend.multimodal"):
        run_pool(work, timeout=0.3)
    assert any("stuck in a processor" in r.getMessage() for r in caplog.records)


def test_writes_wait_for_the_pipe():
    """A flood of large requests to a worker that reads nothing: the main
    process's write buffer holds about one of them, not all."""
    large = body(pad="x" * (1 << 20))

    async def work(pool: ProcessorPool) -> None:
        stdin = pool.workers[0].proc.stdin
        blocker = asyncio.ensure_future(pool.process_chat(body(block=2)))
        await eventually(lambda: pool.in_flight() == 1)
        flood = asyncio.gather(*(pool.process_chat(large) for _ in range(16)))
        most = 0
        while not flood.done():
            most = max(most, stdin.transport.get_write_buffer_size())
            await asyncio.sleep(0.01)
        # (the pipe itself holds 64 KiB); 16 MiB without the flow control
        assert len(large) // 2 < most < 2 * len(large)
        assert [p.prompt_token_ids for p in await flood] == [[1, 2]] * 16
        await blocker

    run_pool(work)


def test_the_timeout_flag():
    model_dir = str(tiny_vlm_dir())
    model = load_model_info(model_dir)

    def settings(*argv: str) -> Settings:
        args = build_parser().parse_args(["--model", model_dir, *argv])
        return mm_settings.from_args(args, {}, model)

    assert settings().timeout == 120
    assert settings("--mm-processor-timeout", "7.5").timeout == 7.5
    assert settings("--mm-processor-timeout", "0").timeout == 0
    with pytest.raises(ValueError, match="--mm-processor-timeout"):
        settings("--mm-processor-timeout", "-1")
