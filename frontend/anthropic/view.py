"""The Messages response of a group: chat's whole answer converted, or its
stream as Messages API events.

The stream reads the same per-step deltas chat's view does (parsed by the
choice's tool/reasoning parser, installed as the table's hook, when the server
has one), skips the steps chat would send no chunk for, and hands each
chunk's delta to :class:`~frontend.anthropic.events.EventStream`. The bytes
go to the socket from the engine reader, as chat's stream
(:class:`frontend.openai.sse.SseWriter`); only the framing differs: named
events, an ``event: error`` on failure, no ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from frontend.anthropic import response
from frontend.anthropic.errors import stream_error_event
from frontend.anthropic.events import EventStream
from frontend.choices import Delta, Group
from frontend.errors import internal_error
from frontend.openai import tooling
from frontend.openai.chat_request import ChatCompletionRequest
from frontend.openai.chat_view import ChatView
from frontend.openai.common import prompt_tokens_details
from frontend.openai.sse import SseWriter
from frontend.render import RenderedChat
from frontend.state import AppState

log = logging.getLogger("frontend.anthropic")


class MessagesView:
    """What :func:`frontend.openai.common.serve_group` needs of a view."""

    def __init__(
        self,
        state: AppState,
        req: ChatCompletionRequest,
        group: Group,
        served: str,
        rendered: RenderedChat,
        add_generation_prompt: bool,
        plan: tooling.ChatTooling,
    ) -> None:
        self.state = state
        self.req = req
        self.group = group
        self.served = served
        self.num_prompt = len(rendered.token_ids)
        self.plan = plan
        self.hooks: list[tooling.StreamParser] | None = None
        if req.stream:
            self.hooks = tooling.install_stream_parsers(plan, group.choices)
        else:
            self.chat = ChatView(state, req, group, served, rendered, add_generation_prompt, plan)

    # ------------------------------------------------------------ non-streaming
    def full_response(self) -> dict:
        return response.message(self.chat.full_response())

    # ------------------------------------------------------------ streaming
    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.events = EventStream(self.state.json)
        self.started = False
        self.emitted = 0  # the choice's tokens sent so far (chat's running count)
        group = self.group
        writer = SseWriter(request, group)
        await writer.start()
        group.sink = lambda deltas: writer.push(self._render(deltas))
        last = b""
        try:
            while not group.done:
                if group.pending:  # deltas that came before the sink was installed
                    writer.push(self._render(group.take()))
                await writer.flush()
                await group.wait()
            last = self._render(group.take()) if group.pending else b""  # (see stream_group)
        except (ConnectionError, asyncio.CancelledError):
            raise  # the client is gone: serve_group aborts the rest
        except Exception:
            # The 200 is out: an error can only be reported in the stream.
            log.exception("stream %s failed", group.request_id)
            group.error = group.error or internal_error()
        finally:
            group.sink = None
        if group.error is not None:  # vLLM: an error event, and no message_stop
            await writer.finish(last, stream_error_event(group.error.message))
        else:
            await writer.finish(last, self.events.finish(self._usage()))
        logger = self.state.request_log  # --enable-log-outputs, as chat's stream
        if logger is not None and logger.log_outputs:
            for choice in group.choices:
                logger.outputs(group.request_id, choice.text, "streaming_complete", streaming=True)
        return writer.response

    def _render(self, deltas: list[Delta]) -> bytes:
        parts = []
        if not self.started:  # chat's role chunk: the first engine output
            self.started = True
            parts.append(self.events.start(self.group.request_id, self.served, self.num_prompt))
        logger = self.state.request_log
        if logger is not None and logger.log_deltas:  # (as chat's stream)
            for d in deltas:
                if d.text:
                    logger.outputs(self.group.request_id, d.text, d.finish_reason, delta=True)
        for d in deltas:
            part = self._chunk(d)
            if part:
                parts.append(part)
        return b"".join(parts)

    def _chunk(self, d: Delta) -> bytes | None:
        """The delta of chat's chunk for this step, as events (None where chat
        sends no chunk)."""
        if not d.text and not d.token_ids and not self.emitted:
            return None
        self.emitted += len(d.token_ids)
        finish = d.finish_reason
        if self.hooks is None:  # no parser: the text is the content
            return self.events.chunk(None, d.text, [], finish, d.stop_reason)
        parsed = d.parsed
        if parsed is None and finish is None:  # nothing to show (a marker token, ...)
            return None
        if finish is not None:
            hook = self.hooks[d.choice.index]
            finish = tooling.stream_finish_reason(hook.tools_streamed, self.req.tool_choice, finish)
        if parsed is None:
            return self.events.chunk(None, None, [], finish, d.stop_reason)
        return self.events.chunk(
            _text(parsed.reasoning),
            _text(parsed.content),
            [call.to_dict() for call in parsed.tool_calls],
            finish,
            d.stop_reason,
        )

    def _usage(self) -> dict[str, int]:
        """The final usage chunk's, converted (vLLM's message_delta usage):
        with --enable-prompt-tokens-details, the prefix cache's share."""
        chat_usage: dict[str, Any] = {
            "prompt_tokens": self.num_prompt,
            "completion_tokens": self.emitted,
        }
        prefill = self.group.first_prefill
        if self.state.config.enable_prompt_tokens_details and prefill is not None:
            chat_usage["prompt_tokens_details"] = prompt_tokens_details(*prefill)
        return response.usage(chat_usage)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
