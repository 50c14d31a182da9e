"""A multimodal processor worker: vLLM's own chat renderer and input processor.

    python -m engine_core.mm_processor

The frontend (``frontend/multimodal/pool.py``) starts these processes only for
a multimodal model; its own process never imports vllm or torch. A worker
reads messages (``protocol/mm_worker.py``) on stdin and answers on stdout:

* first the settings ``{"engine_args": {...}, "renderer": {...}}``:
  ``EngineArgs(**engine_args).create_engine_config()`` (the model and the
  media switches: ``limit_mm_per_prompt``, ``allowed_local_media_path``,
  ``allowed_media_domains``, ``media_io_kwargs``, ...), vLLM's
  ``OnlineRenderer`` with ``renderer``'s chat options, and its
  ``InputProcessor``; answered with ``{"ready": true}``;
* then requests ``{"id": N, "body": JSON bytes}`` (a chat completion request
  as the client sent it; with ``"kind": "generate"``, /inference/v1/generate's
  ``token_ids``, ``features`` and ``cache_salt``), each answered once, in any
  order, with ``{"id": N, "ok": true, "prompt_token_ids", "prompt",
  "conversation", "features", "placeholders"}`` or
  ``{"id": N, "ok": false, "message", "param", "status"}``;
  ``{"cancel": N}`` stops request N (a client that left), answered with
  ``{"id": N, "cancelled": true}`` unless its answer went out already.

vLLM does everything between the messages and the engine request: media
fetch and decode (its MediaConnector), the chat template, tokenization, the
model's HF processor, placeholder expansion. ``features`` is
``MsgpackEncoder().encode`` of the request's ``mm_features``: the first frame
the msgpack list of ``MultiModalFeatureSpec``, the others the tensors it
points to by index (1, 2, ...), exactly where they sit after an ADD payload.
The processor cache is off (``mm_processor_cache_gb=0``): every request
carries its data, so no worker needs to know what went to which engine rank.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from typing import Any

import zmq

from protocol import mm_worker


class Processor:
    def __init__(self, engine_args: dict[str, Any], renderer_options: dict[str, Any]) -> None:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.renderers import renderer_from_config
        from vllm.renderers.online_renderer import OnlineRenderer
        from vllm.sampling_params import SamplingParams
        from vllm.v1.engine.input_processor import InputProcessor
        from vllm.v1.serial_utils import MsgpackEncoder

        config = EngineArgs(**engine_args, mm_processor_cache_gb=0).create_engine_config()
        renderer = renderer_from_config(config)
        self.online = OnlineRenderer(
            config.model_config,
            renderer,
            request_logger=None,
            # The frontend checked the tool options already (with its own messages).
            enable_auto_tools=True,
            **renderer_options,
        )
        self.inputs = InputProcessor(config, renderer)
        self.params = SamplingParams(max_tokens=1)  # (the frontend sends its own)
        self.encoder = MsgpackEncoder()

    async def chat(self, body: bytes) -> dict[str, Any]:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.serve.engine.protocol import ErrorResponse

        request = ChatCompletionRequest.model_validate_json(body)
        result = await self.online.render_chat(request)
        if isinstance(result, ErrorResponse):
            error = result.error
            return _error(error.message, error.param, error.code)
        conversation, (engine_input,) = result
        return {
            **self.engine_request(engine_input),
            "prompt": engine_input.get("prompt"),
            "conversation": json.loads(json.dumps(conversation, default=str)),
        }

    async def generate(self, body: bytes) -> dict[str, Any]:
        """/inference/v1/generate's ``token_ids`` and ``features`` (vLLM's
        ``MultiModalFeatures``: base64 kwargs items, hashes, placeholder ranges),
        made an engine input as vLLM's ``serve_tokens`` makes it."""
        from vllm.entrypoints.scale_out.token_in_token_out.mm_features import (
            mm_kwargs_from_features,
        )
        from vllm.entrypoints.scale_out.token_in_token_out.protocol import MultiModalFeatures
        from vllm.inputs import mm_input
        from vllm.multimodal.inputs import MultiModalKwargsItems, PlaceholderRange

        request = json.loads(body)
        features = MultiModalFeatures.model_validate(request["features"])
        engine_input = mm_input(
            prompt_token_ids=request["token_ids"],
            mm_kwargs=MultiModalKwargsItems(mm_kwargs_from_features(features)),
            mm_hashes=features.mm_hashes,
            mm_placeholders={
                modality: [PlaceholderRange(offset=p.offset, length=p.length) for p in ranges]
                for modality, ranges in features.mm_placeholders.items()
            },
            cache_salt=request.get("cache_salt"),
        )
        return {**self.engine_request(engine_input), "prompt": None, "conversation": []}

    def engine_request(self, engine_input: Any) -> dict[str, Any]:
        processed = self.inputs.process_inputs("mm", engine_input, self.params, ("generate",))
        frames = self.encoder.encode(processed.mm_features)
        return {
            "ok": True,
            "prompt_token_ids": list(processed.prompt_token_ids or ()),
            "features": [f.bytes if isinstance(f, zmq.Frame) else bytes(f) for f in frames],
            "placeholders": {
                modality: [{"offset": p.offset, "length": p.length} for p in ranges]
                for modality, ranges in engine_input["mm_placeholders"].items()
            },
        }


def _error(message: str, param: Any, status: int = 400) -> dict[str, Any]:
    return {"ok": False, "message": message, "param": param, "status": status}


def _failure(exc: BaseException) -> dict[str, Any]:
    """vLLM's answer to an exception while rendering: its 400s, else a 500."""
    from pydantic import ValidationError as PydanticError
    from vllm.exceptions import VLLMValidationError

    if isinstance(exc, VLLMValidationError):
        return _error(str(exc), exc.parameter)
    if isinstance(exc, (ValueError, TypeError, PydanticError)):
        return _error(str(exc), None)
    return _error(str(exc), None, 500)


class Server:
    """Requests run as tasks on one event loop (media fetches overlap)."""

    def __init__(self, processor: Processor, out) -> None:
        self.processor = processor
        self.out = out
        self.tasks: dict[int, asyncio.Task] = {}

    def answer(self, message: dict[str, Any]) -> None:
        self.out.write(mm_worker.encode(message))
        self.out.flush()

    async def serve(self, reader: asyncio.StreamReader) -> None:
        while (message := await read_message(reader)) is not None:
            if "cancel" in message:
                task = self.tasks.get(message["cancel"])
                if task is not None:
                    task.cancel()
                continue
            request_id = message["id"]
            work = getattr(self.processor, message["kind"])  # "chat" or "generate"
            task = asyncio.ensure_future(work(message["body"]))
            self.tasks[request_id] = task
            # A callback, not a try in the task: a task cancelled before it
            # starts (its cancel was in the same read) never runs its body.
            task.add_done_callback(functools.partial(self.finish, request_id))

    def finish(self, request_id: int, task: asyncio.Task) -> None:
        del self.tasks[request_id]
        if task.cancelled():
            answer = {"cancelled": True}
        elif (error := task.exception()) is not None:  # one bad request, not a dead worker
            answer = _failure(error)
        else:
            answer = task.result()
        self.answer({"id": request_id, **answer})


async def read_message(reader: asyncio.StreamReader) -> Any:
    try:
        header = await reader.readexactly(mm_worker.HEADER.size)
        (size,) = mm_worker.HEADER.unpack(header)
        return mm_worker.decode(await reader.readexactly(size))
    except asyncio.IncompleteReadError:  # the frontend closed our stdin: stop
        return None


async def amain() -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # vLLM's prints must not corrupt the answers
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 30)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    settings = await read_message(reader)
    if settings is None:
        return 0
    server = Server(Processor(settings["engine_args"], settings["renderer"]), out)
    server.answer({"ready": True})
    await server.serve(reader)
    return 0


def main() -> int:
    # vLLM's modules load while the frontend waits for its engine (~5 s).
    import vllm.entrypoints.openai.chat_completion.protocol  # noqa: F401
    import vllm.v1.engine.input_processor  # noqa: F401

    return asyncio.run(amain())


if __name__ == "__main__":
    sys.exit(main())
