"""POST /v1/responses, GET /v1/responses/{id}, POST /v1/responses/{id}/cancel,
in vLLM 0.32's order of checks (``responses/serving.py``).

A response is a chat request underneath (:mod:`frontend.responses.convert`):
``frontend.openai.chat.prepare`` renders and plans it, one engine request
(``<response id>_0``, as vLLM names it) runs in the fan-out table and
``serve_group`` serves it, so aborts, admission, metrics, tracing and the
drain apply as to chat. Background responses run the same ``serve_group`` in
a task the store keeps; cancelling one cancels its task, which aborts its
engine request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
from typing import Any

from aiohttp import web

from frontend.choices import Group
from frontend.errors import ApiError, invalid
from frontend.openai import chat
from frontend.openai.adapters import check_json_media_type
from frontend.openai.common import serve_group
from frontend.openai.fastapi_params import Params
from frontend.openai.sampling import check_max_output_tokens
from frontend.openai.sse import HEADERS
from frontend.responses import convert, tools
from frontend.responses import request as request_mod
from frontend.responses.messages import input_messages
from frontend.responses.output import Echo, new_id
from frontend.responses.store import EventLog, ResponseStore, store_enabled, store_size
from frontend.responses.view import ResponsesView
from frontend.state import AppState

log = logging.getLogger("frontend.responses")

NO_STORE = (
    "This vLLM engine does not support `store=True` and therefore does not support the "
    "background mode. To enable these features, set the environment variable "
    "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."
)
# (as the Messages API's refusal: vLLM renders gpt-oss through Harmony, whose
# vocabulary file this server cannot fetch)
HARMONY = "The Responses API is not supported for gpt-oss (Harmony) models by this server"
CANCELLABLE = ("queued", "in_progress")


def not_found(response_id: str) -> ApiError:
    return ApiError(
        f"Response with id '{response_id}' not found.", 404, "invalid_request_error", "response_id"
    )


class ResponsesApi:
    """The three routes over one store (one per server)."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.store = ResponseStore(store_enabled(), store_size())
        self._harmony: bool | None = None

    def _json(self, value: Any) -> web.Response:
        return web.Response(body=self.state.json(value), content_type="application/json")

    def _refuse_harmony(self) -> None:
        """gpt-oss (config ``model_type`` "gpt_oss") takes vLLM's Harmony path: refused."""
        if self._harmony is None:
            config = pathlib.Path(self.state.model.directory or self.state.model.path)
            try:
                model_type = json.loads((config / "config.json").read_text()).get("model_type")
            except (OSError, ValueError, AttributeError):
                model_type = None
            self._harmony = model_type == "gpt_oss"
        if self._harmony:
            raise ApiError(HARMONY, 400, "invalid_request_error")

    # ------------------------------------------------------------ POST /v1/responses
    async def create(self, request: web.Request) -> web.StreamResponse:
        check_json_media_type(request)
        req, _ = request_mod.parse(await request.read())
        state, store = self.state, self.store
        state.resolve_model(req.model)
        self._refuse_harmony()
        if req.store and not store.enabled and req.background:
            raise ApiError(NO_STORE, 400, "invalid_request_error", "background")
        if req.previous_input_messages and req.previous_response_id:
            raise ApiError(
                "Only one of `previous_input_messages` and `previous_response_id` can be set.",
                400,
                "invalid_request_error",
                "previous_response_id",
            )
        keep = bool(req.store) and store.enabled  # (vLLM: store=true quietly off without it)
        history, previous = None, None
        if req.previous_response_id is not None:
            entry = store.get(req.previous_response_id)
            if entry is None or entry.response is None:
                raise not_found(req.previous_response_id)
            history, previous = entry.messages, entry.response["output"]
        messages = input_messages(req.instructions, req.input, history, previous)
        has_tool_parser = state.parsers is not None and state.parsers.tool_parser is not None
        chat_req = convert.to_chat(req, messages, has_tool_parser=has_tool_parser)
        check_max_output_tokens(req.max_output_tokens, state.max_model_len, "max_output_tokens")
        prepared = await chat.prepare(state, chat_req)
        plan, params = prepared.plan, prepared.params
        assert params is not None  # (no beam search here)
        # The parsers read the Responses tool_choice (allowed_tools: no forced call).
        plan.tool_choice = tools.parser_tool_choice(req.tool_choice)
        prompt_len = len(prepared.prompt_ids)
        if prompt_len >= state.max_model_len:
            raise ApiError(
                f"The engine prompt length {prompt_len} exceeds the max_model_len "
                f"{state.max_model_len}. Please reduce prompt.",
                400,
                "invalid_request_error",
                "input",
            )
        response_id = req.request_id or new_id("resp")
        echo = Echo(
            req, response_id, prepared.served, params, convert.echoed_text(req, chat_req, plan)
        )
        group = Group(
            f"{response_id}_0",
            stream=bool(req.stream),
            max_pending=state.config.max_stream_buffer,
            arrival=prepared.arrival,
        )
        group.lora = state.lora.get(prepared.served)
        group.session_id = chat_req.resolve_session_id(request.headers)
        group.mm_features = prepared.mm_features
        state.table.add_choice(
            group, index=0, prompt_index=0, prompt_token_ids=prepared.prompt_ids, params=params
        )
        if keep:
            store.entry(response_id).messages = messages
        finished = store.put if keep else None

        def serve(view: ResponsesView):
            return serve_group(
                state,
                request,
                group,
                view,
                priority=req.priority,
                cache_salt=req.cache_salt,
                reasoning_ended=plan.reasoning_ended,
                reasoning_parser_kwargs=plan.reasoning_parser_kwargs,
            )

        if not req.background:
            return await serve(ResponsesView(state, echo, group, prepared.rendered, plan, finished))
        placeholder = echo.response("queued", [])
        entry = store.entry(response_id)
        entry.response = placeholder
        entry.events = EventLog() if req.stream else None
        view = ResponsesView(state, echo, group, prepared.rendered, plan, finished, entry.events)
        store.start(response_id, self._background(response_id, lambda: serve(view), group))
        if entry.events is not None:
            return await self._replay(request, entry.events, 0)
        return self._json(placeholder)

    async def _background(self, response_id: str, work: Any, group: Group) -> None:
        """A background response's engine work; a failure marks it "failed"."""
        try:
            await work()
        except ApiError as e:
            self._failed(response_id, e.message)
        except asyncio.CancelledError:
            self.state.table.release(group)
            raise
        except Exception:
            log.exception("background response %s failed", response_id)
            self._failed(response_id, "internal error")

    def _failed(self, response_id: str, why: str) -> None:
        response = self.store.response(response_id)
        if response is not None and response["status"] not in ("completed", "cancelled"):
            response["status"] = "failed"
        log.warning("background response %s failed: %s", response_id, why)

    async def _replay(
        self, request: web.Request, events: EventLog, start: int
    ) -> web.StreamResponse:
        """A background stream's events from ``start`` on, as they come."""
        response = web.StreamResponse(status=200, headers=HEADERS)
        response.enable_chunked_encoding()
        await response.prepare(request)
        async for frame in events.follow(start):
            await response.write(frame)
        await response.write_eof()
        return response

    # ------------------------------------------------------------ GET /v1/responses/{id}
    async def retrieve(self, request: web.Request) -> web.StreamResponse:
        response_id = request.match_info["response_id"]
        params = Params(request)
        starting_after = params.query_int("starting_after", -1)
        stream = params.query_bool("stream", False)
        params.check()
        entry = self.store.get(response_id)
        if entry is None or entry.response is None:
            raise not_found(response_id)
        if not stream:
            return self._json(entry.response)
        if entry.events is None:  # (vLLM breaks off the stream it has begun)
            raise invalid(f"Unknown response_id: {response_id}", "response_id", response_id)
        return await self._replay(request, entry.events, starting_after + 1)

    # ------------------------------------------------------------ POST .../cancel
    async def cancel(self, request: web.Request) -> web.Response:
        response_id = request.match_info["response_id"]
        entry = self.store.get(response_id)
        if entry is None or entry.response is None:
            raise not_found(response_id)
        response = entry.response
        if response["status"] not in CANCELLABLE:
            raise ApiError(
                "Cannot cancel a synchronous response.", 400, "invalid_request_error", "response_id"
            )
        response["status"] = "cancelled"
        task = entry.task
        if task is not None:
            task.cancel()  # its engine request is aborted as the task unwinds
            await asyncio.wait([task])
        return self._json(response)

    async def close(self) -> None:
        """Cancel the background responses still running (for a shutdown hook)."""
        await self.store.close()
