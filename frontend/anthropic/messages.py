"""POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages
API on the chat route's pipeline, as vLLM 0.32's ``AnthropicServingMessages``
does it (a subclass of its chat handler).

A request is converted into a chat completion request
(:mod:`frontend.anthropic.convert`), prepared by chat (checks, template,
parsers' plan, sampling params: :func:`frontend.openai.chat.prepare`), run
as a chat group through :func:`frontend.openai.common.serve_group` (engine
requests, aborts, admission, metrics, tracing as for chat), and its answer
converted back (:mod:`frontend.anthropic.view`). Errors after the body is
read come in the Messages API's shape (:mod:`frontend.anthropic.errors`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from aiohttp import web

from frontend.anthropic import convert
from frontend.anthropic.errors import error_response
from frontend.anthropic.probes import Probes
from frontend.anthropic.schemas import (
    AnyRequest,
    CountTokensRequest,
    MessagesRequest,
    ThinkingDisabled,
)
from frontend.anthropic.validate import decode
from frontend.anthropic.view import MessagesView
from frontend.choices import Group
from frontend.errors import ApiError
from frontend.openai import chat, tooling
from frontend.openai.adapters import check_json_media_type
from frontend.openai.common import request_id_for, serve_group
from frontend.openai.sampling import child_params
from frontend.state import AppState

log = logging.getLogger("frontend.anthropic")


async def answer(
    request: web.Request, handling: Awaitable[web.StreamResponse]
) -> web.StreamResponse:
    """The handler's response, or its failure in the Messages API's shape
    (vLLM's router catches whatever its handler raises: a ValueError or
    TypeError is a 400, anything unexpected a 500)."""
    try:
        return await handling
    except ApiError as e:
        return error_response(e)
    except ConnectionError:
        raise  # the client is gone
    except Exception as e:  # vLLM's create_error_response
        log.exception("Error in %s", request.path)
        if isinstance(e, (ValueError, TypeError)):
            return error_response(ApiError(str(e)))
        if isinstance(e, NotImplementedError):
            return error_response(ApiError(str(e), 501, "NotImplementedError"))
        return error_response(ApiError(str(e), 500, "InternalServerError"))


def count_choices(body: bytes) -> int:
    """Admission control: a Messages request is one engine request."""
    return 1


class MessagesApi:
    def __init__(self, state: AppState) -> None:
        self.state = state
        self.probes = Probes(state)

    async def create_messages(self, request: web.Request) -> web.StreamResponse:
        check_json_media_type(request)
        req = decode(await request.read(), MessagesRequest)
        return await answer(request, self._create(request, req))

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        check_json_media_type(request)
        req = decode(await request.read(), CountTokensRequest)
        return await answer(request, self._count(req))

    async def _count(self, req: CountTokensRequest) -> web.Response:
        _, prepared = await self._prepare(req, engine_checks=False)
        n = len(prepared.prompt_ids)
        body = {"input_tokens": n, "context_management": {"original_input_tokens": n}}
        return web.Response(body=self.state.json(body), content_type="application/json")

    async def _prepare(
        self, req: AnyRequest, *, engine_checks: bool = True
    ) -> tuple[convert.Converted, chat.PreparedChat]:
        state, probes = self.state, self.probes
        probes.refuse_harmony()
        effort = "none"
        if isinstance(req.thinking, ThinkingDisabled):
            effort = await probes.disabled_thinking_effort()
        converted = convert.to_chat_request(
            req, merge_inline_system=probes.merge_inline_system, disabled_effort=effort
        )
        if converted.sanitized or named_tool_missing(converted):
            state.resolve_model(converted.chat.model)  # (vLLM checks the model first)
            fit_tool_choice(state, converted)
        prepared = await chat.prepare(state, converted.chat, engine_checks=engine_checks)
        if converted.sanitized:  # vLLM's tool_choice, which its chat checks never saw
            converted.chat.tool_choice = prepared.plan.tool_choice = converted.tool_choice
        return converted, prepared

    async def _create(self, request: web.Request, req: MessagesRequest) -> web.StreamResponse:
        state = self.state
        converted, prepared = await self._prepare(req)
        chat_req = converted.chat
        params = prepared.params
        assert params is not None  # (no beam search here)
        group = Group(
            f"chatcmpl-{request_id_for(request, chat_req.request_id)}",
            stream=bool(chat_req.stream),
            max_pending=state.config.max_stream_buffer,
            arrival=prepared.arrival,
        )
        group.lora = state.lora.get(prepared.served)
        group.session_id = chat_req.resolve_session_id(request.headers)
        group.mm_features = prepared.mm_features
        state.table.add_choice(
            group,
            index=0,
            prompt_index=0,
            prompt_token_ids=prepared.prompt_ids,
            params=child_params(params, 0),
        )
        view = MessagesView(
            state,
            chat_req,
            group,
            prepared.served,
            prepared.rendered,
            prepared.add_generation_prompt,
            prepared.plan,
        )
        return await serve_group(
            state,
            request,
            group,
            view,
            priority=chat_req.priority,
            cache_salt=chat_req.cache_salt,
            reasoning_ended=prepared.plan.reasoning_ended,
            reasoning_parser_kwargs=prepared.plan.reasoning_parser_kwargs,
        )


def named_tool_missing(converted: convert.Converted) -> bool:
    choice = converted.tool_choice
    if not isinstance(choice, dict) or not converted.tools:
        return False
    name = choice["function"]["name"]
    return all(tool["function"]["name"] != name for tool in converted.tools)


def fit_tool_choice(state: AppState, converted: convert.Converted) -> None:
    """vLLM's answer to the tool choices chat's checks would refuse: the
    choice needs a tool parser; a named tool not in ``tools`` fails where vLLM
    forces the call (xgrammar's structural tag, or the call's JSON schema),
    and is served as "auto" by a parser that forces neither."""
    tooling.tool_parsing_unavailable(state.parsers, converted.tool_choice)
    if not named_tool_missing(converted):
        return
    name = converted.tool_choice["function"]["name"]
    parser = state.parsers.tool_parser if state.parsers is not None else None
    if getattr(parser, "structural_tag_model", None) is not None:
        raise ApiError(f"The tool with name '{name}' is not found in the tools list.")
    if getattr(parser, "supports_required_and_named", True):
        raise ApiError(f"Tool '{name}' has not been passed in `tools`.")
    converted.chat.tool_choice = "auto"
