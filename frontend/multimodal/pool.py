"""The processor worker pool: ``--mm-processor-workers`` processes of
``engine_core/mm_processor.py``, started only for a multimodal model.

Each worker runs vLLM's renderer and input processor; the frontend hands it a
chat request's body and gets back the prompt (token ids, text, the parsed
conversation) and the encoded ``mm_features``. Requests go to the worker with
the fewest in flight. A request whose client leaves is cancelled in its
worker (a media fetch stops there), and nothing of it reaches the engine.

Nothing lost, nothing leaked: a worker that dies fails the requests it had
(500) and another starts in its place (backing off while they die at
start-up); a request past ``--mm-processor-timeout`` gets a 500 and is
cancelled in its worker, and a worker that cannot even take that cancel is
killed and replaced (see worker.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from frontend.errors import ApiError
from frontend.multimodal.worker import Worker, WorkerGone

log = logging.getLogger("frontend.multimodal")

WORKER_MODULE = "engine_core.mm_processor"
READY_TIMEOUT_S = 300.0
RESPAWN_FIRST_DELAY_S = 1.0
RESPAWN_MAX_DELAY_S = 60.0
DEFAULT_TIMEOUT_S = 120.0
NO_WORKER = "no multimodal processor worker is running (see the frontend's log)"


def default_workers() -> int:
    """One worker per four cores, one to four (a warm request costs a few ms)."""
    return max(1, min(4, (os.cpu_count() or 1) // 4))


@dataclass
class Settings:
    """What a worker needs to build vLLM's renderer (see engine_core/mm_processor.py)."""

    engine_args: dict[str, Any]
    renderer: dict[str, Any]
    workers: int = field(default_factory=default_workers)
    timeout: float = DEFAULT_TIMEOUT_S  # seconds a request may take in a worker; 0: no limit


@dataclass
class Processed:
    """A chat request as vLLM's renderer and input processor made it."""

    prompt_token_ids: list[int]
    prompt: str
    conversation: list[dict[str, Any]]
    features: list[bytes]  # MsgpackEncoder frames of mm_features: the list, then its tensors
    placeholders: dict[str, list[dict[str, int]]]  # modality -> [{"offset", "length"}]


async def start_process() -> Worker:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        WORKER_MODULE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 30,
    )
    return Worker(proc)


def respawn_delay(previous: float, uptime: float) -> float:
    """The wait before starting a dead worker's successor: short after one that
    served a while, doubling while they die young (a worker that dies at
    start-up must not spin)."""
    if not previous or uptime >= RESPAWN_MAX_DELAY_S:
        return RESPAWN_FIRST_DELAY_S
    return min(2 * previous, RESPAWN_MAX_DELAY_S)


class ProcessorPool:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workers: list[Worker] = []
        self._ids = itertools.count()
        self._keepers: list[asyncio.Task] = []

    async def spawn(self) -> None:
        """Start the processes (they import vLLM while the engine starts)."""
        for _ in range(self.settings.workers):
            self.workers.append(await start_process())

    async def configure(self, max_model_len: int, dtype: str) -> None:
        """Build each worker's renderer for the attached engine's context length
        and dtype (the processor casts pixel values to the model's dtype)."""
        engine_args = {**self.settings.engine_args, "max_model_len": max_model_len}
        if dtype:
            engine_args["dtype"] = dtype.removeprefix("torch.")
        setup = {"engine_args": engine_args, "renderer": self.settings.renderer}
        try:
            await asyncio.gather(*(w.set_up(setup, READY_TIMEOUT_S) for w in self.workers))
        except WorkerGone as e:
            raise RuntimeError(
                f"a multimodal processor worker did not start ({e}); its errors are in this log"
            ) from None
        self._keepers = [
            asyncio.ensure_future(self._keep(slot, setup)) for slot in range(len(self.workers))
        ]
        log.info("%d multimodal processor worker(s) ready", len(self.workers))

    async def _keep(self, slot: int, setup: dict[str, Any]) -> None:
        """Keep a worker in ``slot``: when it dies (its requests got the error),
        start another after respawn_delay."""
        delay = 0.0
        while True:
            worker = self.workers[slot]
            if worker.reader is not None:
                await worker.reader
            await worker.stop()
            delay = respawn_delay(delay, worker.uptime())
            log.error(
                "%s (status %s); starting another in %.1f s",
                worker.gone,
                worker.proc.returncode,
                delay,
            )
            while True:
                await asyncio.sleep(delay)
                try:
                    worker = self.workers[slot] = await start_process()
                    break
                except OSError as e:  # (no fork: out of memory, or of processes)
                    delay = respawn_delay(delay, 0.0)
                    log.error("cannot start a processor worker (%s); again in %.1f s", e, delay)
            with contextlib.suppress(WorkerGone):  # (logged next round)
                await worker.set_up(setup, READY_TIMEOUT_S)
                log.info("processor worker %d ready (restarted)", worker.proc.pid)

    def in_flight(self) -> int:
        return sum(len(w.pending) for w in self.workers)

    async def process_chat(self, body: bytes, kind: str = "chat") -> Processed:
        """A chat request's body -> its prompt and features, or vLLM's ApiError;
        with ``kind="generate"``, /inference/v1/generate's token ids and features."""
        serving = [w for w in self.workers if w.serving]
        if not serving:
            raise ApiError(NO_WORKER, 503, "ServiceUnavailableError")
        worker = min(serving, key=Worker.load)
        request_id = next(self._ids)
        timeout = self.settings.timeout
        try:
            async with asyncio.timeout(timeout or None):
                message = {"id": request_id, "body": body, "kind": kind}
                answer = await (await worker.request(request_id, message))
        except TimeoutError:
            worker.abandon(request_id, past_deadline=True)
            raise ApiError(
                f"Multimodal processing timed out after {timeout:g}s. "
                "Adjust --mm-processor-timeout to override.",
                500,
                "InternalServerError",
            ) from None
        except asyncio.CancelledError:  # the client left: stop the work there
            worker.abandon(request_id)
            raise
        except WorkerGone as e:
            raise ApiError(str(e), 500, "InternalServerError") from None
        if not answer.get("ok"):
            status = answer.get("status", 500)
            kind = "BadRequestError" if status == 400 else "InternalServerError"
            raise ApiError(
                answer.get("message", "processing failed"), status, kind, answer.get("param")
            )
        return Processed(
            answer["prompt_token_ids"],
            answer["prompt"] or "",
            answer["conversation"],
            answer["features"],
            answer["placeholders"],
        )

    async def close(self) -> None:
        for task in (*self._keepers, *(w.reader for w in self.workers)):
            if task is not None:  # no more restarts; the exits below are no failure to log
                task.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        for worker in self.workers:
            worker.fail(WorkerGone("the frontend is shutting down"))
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()  # the worker's signal to exit
        await asyncio.gather(*(w.stop() for w in self.workers))
