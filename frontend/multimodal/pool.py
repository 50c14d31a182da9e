"""The processor worker pool: ``--mm-processor-workers`` processes of
``engine_core/mm_processor.py``, started only for a multimodal model.

Each worker runs vLLM's renderer and input processor; the frontend hands it a
chat request's body and gets back the prompt (token ids, text, the parsed
conversation) and the encoded ``mm_features``. Requests go to the worker with
the fewest in flight. A request whose client leaves is cancelled in its
worker (a media fetch stops there), and nothing of it reaches the engine.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from frontend.errors import ApiError
from protocol import mm_worker

log = logging.getLogger("frontend.multimodal")

WORKER_MODULE = "engine_core.mm_processor"
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 5.0
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


@dataclass
class Processed:
    """A chat request as vLLM's renderer and input processor made it."""

    prompt_token_ids: list[int]
    prompt: str
    conversation: list[dict[str, Any]]
    features: list[bytes]  # MsgpackEncoder frames of mm_features: the list, then its tensors
    placeholders: dict[str, list[dict[str, int]]]  # modality -> [{"offset", "length"}]


class WorkerGone(Exception):
    pass


class Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: dict[int, asyncio.Future] = {}
        self.reader: asyncio.Task | None = None
        self.alive = True

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(mm_worker.encode(message))

    async def receive(self) -> Any:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            header = await stdout.readexactly(mm_worker.HEADER.size)
            (size,) = mm_worker.HEADER.unpack(header)
            return mm_worker.decode(await stdout.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            raise WorkerGone(f"processor worker {self.proc.pid} exited") from None

    async def read_answers(self) -> None:
        try:
            while True:
                answer = await self.receive()
                future = self.pending.pop(answer["id"], None)
                if future is not None and not future.done():
                    future.set_result(answer)
        except WorkerGone as e:
            self.fail(e)
            log.error("%s (status %s)", e, self.proc.returncode)

    def fail(self, error: WorkerGone) -> None:
        """No more answers: every request still waiting gets ``error``."""
        self.alive = False
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()


class ProcessorPool:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workers: list[Worker] = []
        self._ids = itertools.count()

    async def spawn(self) -> None:
        """Start the processes (they import vLLM while the engine starts)."""
        for _ in range(self.settings.workers):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                WORKER_MODULE,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=1 << 30,
            )
            self.workers.append(Worker(proc))

    async def configure(self, max_model_len: int, dtype: str) -> None:
        """Build each worker's renderer for the attached engine's context length
        and dtype (the processor casts pixel values to the model's dtype)."""
        engine_args = {**self.settings.engine_args, "max_model_len": max_model_len}
        if dtype:
            engine_args["dtype"] = dtype.removeprefix("torch.")
        for worker in self.workers:
            worker.send({"engine_args": engine_args, "renderer": self.settings.renderer})
        answers = [asyncio.wait_for(w.receive(), READY_TIMEOUT_S) for w in self.workers]
        try:
            await asyncio.gather(*answers)
        except (TimeoutError, WorkerGone) as e:
            raise RuntimeError(
                f"a multimodal processor worker did not start ({e}); its errors are in this log"
            ) from None
        for worker in self.workers:
            worker.reader = asyncio.ensure_future(worker.read_answers())
        log.info("%d multimodal processor worker(s) ready", len(self.workers))

    def in_flight(self) -> int:
        return sum(len(w.pending) for w in self.workers)

    async def process_chat(self, body: bytes, kind: str = "chat") -> Processed:
        """A chat request's body -> its prompt and features, or vLLM's ApiError;
        with ``kind="generate"``, /inference/v1/generate's token ids and features."""
        alive = [w for w in self.workers if w.alive]
        if not alive:
            raise ApiError(NO_WORKER, 503, "ServiceUnavailableError")
        worker = min(alive, key=lambda w: len(w.pending))
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        worker.pending[request_id] = future
        worker.send({"id": request_id, "body": body, "kind": kind})
        try:
            answer = await asyncio.shield(future)
        except asyncio.CancelledError:  # the client left: stop the work there
            if worker.pending.get(request_id) is future:
                worker.send({"cancel": request_id})
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
        for worker in self.workers:
            if worker.reader is not None:  # the exits below are no failure to log
                worker.reader.cancel()
            worker.fail(WorkerGone("the frontend is shutting down"))
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()  # the worker's signal to exit
        for worker in self.workers:
            try:
                await asyncio.wait_for(worker.proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                worker.proc.kill()
                await worker.proc.wait()
