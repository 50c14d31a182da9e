"""A response's views of its group: the whole response object, or its event
stream (to the client, or into a background stream's log).

Either way the output goes through the chat plan's parsers (reasoning, tool
calls): whole for a non-streaming response, per engine step while streaming
(the fan-out table calls each choice's stream parser as it queues a delta,
as for chat). ``finished`` is told the final response object (the store).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from frontend.choices import Delta, Group
from frontend.errors import ApiError, internal_error
from frontend.openai import tooling
from frontend.openai.sse import SseWriter
from frontend.parsers import ParsedDelta
from frontend.render import RenderedChat
from frontend.responses.events import EventMachine, Framer, event
from frontend.responses.output import (
    Echo,
    ToolNames,
    full_logprobs,
    message_item,
    new_id,
    output_items,
    raw_message,
    text_part,
    usage,
)
from frontend.responses.store import EventLog
from frontend.state import AppState

log = logging.getLogger("frontend.responses")


class ResponsesView:
    def __init__(
        self,
        state: AppState,
        echo: Echo,
        group: Group,
        rendered: RenderedChat,
        plan: tooling.ChatTooling,
        finished: Callable[[dict[str, Any]], None] | None = None,
        events: EventLog | None = None,
    ) -> None:
        self.state = state
        self.echo = echo
        self.req = echo.req
        self.group = group
        self.rendered = rendered
        self.plan = plan
        self.finished = finished
        self.events = events  # a background stream writes here, not to a client
        self.names = ToolNames.of(self.req.tools)
        self.hooks = tooling.install_stream_parsers(plan, group.choices) if group.stream else None
        # include_reasoning=false with a parser: no logprobs (they would show it).
        self.logprobs_shown = self.req.wants_logprobs and not plan.hide_metadata
        self.as_token_ids = state.config.return_tokens_as_token_ids

    # ------------------------------------------------------------ common
    def _status(self) -> str:
        return "incomplete" if self.group.choices[0].finish_reason == "length" else "completed"

    def _usage(self, reasoning_tokens: int) -> dict[str, Any]:
        choice = self.group.choices[0]
        return usage(
            len(self.rendered.token_ids),
            len(choice.token_ids),
            choice.num_cached_tokens,
            choice.num_cache_creation_tokens,
            reasoning_tokens,
        )

    def _raw_messages(self) -> tuple[Any, Any]:
        if not self.req.enable_response_messages:
            return None, None
        choice = self.group.choices[0]
        prompt = [raw_message(self.rendered.text, self.rendered.token_ids)]
        output = [raw_message(choice.text, choice.token_ids)] if choice.token_ids else []
        return prompt, output

    def _final(self, output: list[dict[str, Any]], reasoning_tokens: int) -> dict[str, Any]:
        kv, ec = self.group.transfer_params.get(0, (None, None))
        response = self.echo.response(
            self._status(),
            output,
            self._usage(reasoning_tokens),
            (kv, ec),
            self._raw_messages(),
        )
        logger = self.state.request_log  # --enable-log-outputs: the raw text, as vLLM
        if logger is not None and logger.log_outputs:
            choice = self.group.choices[0]
            logger.outputs(
                self.echo.response_id,
                choice.text,
                choice.finish_reason,
                streaming=self.group.stream,
            )
        if self.finished is not None:
            self.finished(response)
        return response

    # ------------------------------------------------------------ non-streaming
    def full_response(self) -> dict[str, Any]:
        choice = self.group.choices[0]
        req, plan = self.req, self.plan
        logprobs = None
        if req.wants_logprobs and choice.logprobs is not None and choice.token_ids:
            logprobs = full_logprobs(
                choice.token_ids, choice.logprobs.sample, req.top_logprobs, self.as_token_ids
            )
        if not plan.parsing:
            parts = [text_part(choice.text, logprobs)] if choice.text else []
            return self._final([message_item(new_id("msg"), parts, "completed")], 0)
        parser = plan.new_parser()
        parsed = parser.parse(choice.text)
        calls = parsed.tool_calls or []
        if req.parallel_tool_calls is False:
            calls = calls[:1]
        if not req.include_reasoning:
            logprobs = None
        items = output_items(parsed.reasoning, parsed.content, calls, logprobs, self.names)
        return self._final(items, parser.count_reasoning_tokens(choice.token_ids))

    # ------------------------------------------------------------ streaming
    def _opening(self) -> list[dict[str, Any]]:
        """response.created and response.in_progress, before any engine output."""
        initial = self.echo.response("in_progress", [])
        return [
            event("response.created", response=initial),
            event("response.in_progress", response=initial),
        ]

    def _render(self, deltas: list[Delta]) -> list[dict[str, Any]]:
        machine, out = self.machine, []
        for d in deltas:
            parsed = d.parsed if self.hooks is not None else ParsedDelta(content=d.text)
            logprobs = functools.partial(self._step_logprobs, d)
            if parsed is None:
                machine.hold(logprobs)
            else:
                out += machine.feed(parsed, logprobs)
        return out

    def _step_logprobs(self, d: Delta) -> list[dict[str, Any]]:
        """A step's logprobs, all its tokens (vLLM attaches them to its text delta)."""
        if not self.logprobs_shown or d.logprobs is None:
            return []
        return full_logprobs(d.token_ids, d.logprobs, self.req.top_logprobs, self.as_token_ids)

    def _closing(self) -> list[dict[str, Any]]:
        """The open item's done events and response.completed (also when incomplete)."""
        events = self.machine.close()
        reasoning_tokens = 0
        if self.hooks:
            reasoning_tokens = self.hooks[0].count_reasoning_tokens(self.group.choices[0].token_ids)
        final = self._final(self.machine.items, reasoning_tokens)
        events.append(event("response.completed", response=final))
        return events

    def _tail(self) -> list[dict[str, Any]]:
        error = self.group.error
        return self._closing() if error is None else [self._error(error)]

    @staticmethod
    def _error(error: ApiError) -> dict[str, Any]:
        """An ``error`` event (vLLM's stream just breaks off; see the README)."""
        return event("error", code=str(error.status), message=error.message, param=error.param)

    def _start(self) -> list[dict[str, Any]]:
        self.machine = EventMachine(self.names)
        self.framer = Framer(self.state.json)
        return self._opening()

    async def stream(self, request: web.Request) -> web.StreamResponse:
        if self.events is not None:
            await self._stream_to_log(self.events)
            return web.StreamResponse()
        group = self.group
        writer = SseWriter(request, group)
        await writer.start()
        opening = self._start()
        frames = self.framer.frames
        writer.push(frames(opening))
        group.sink = lambda deltas: writer.push(frames(self._render(deltas)))
        last = b""
        try:
            while not group.done:
                if group.pending:  # deltas that came before the sink was installed
                    writer.push(frames(self._render(group.take())))
                await writer.flush()
                await group.wait()
            # (see stream_group: the last deltas go out with the tail)
            last = frames(self._render(group.take())) if group.pending else b""
            tail = self._tail()
        except (ConnectionError, asyncio.CancelledError):
            raise  # the client is gone: serve_group's cleanup aborts the rest
        except Exception:
            log.exception("stream %s failed", group.request_id)
            tail = [self._error(group.error or internal_error())]
        finally:
            group.sink = None
        await writer.finish(last, frames(tail))
        return writer.response

    async def _stream_to_log(self, events: EventLog) -> None:
        """A background stream: every event into ``events`` (no client to wait for)."""
        group = self.group

        def add(evs: list[dict[str, Any]]) -> None:
            events.append([self.framer.frame(e) for e in evs])

        add(self._start())
        try:
            while True:
                if group.pending:
                    add(self._render(group.take()))
                if group.done and not group.pending:
                    break
                await group.wait()
            tail = self._tail()
        except asyncio.CancelledError:
            events.close()
            raise
        except Exception:
            log.exception("background stream %s failed", group.request_id)
            tail = [self._error(group.error or internal_error())]
        add(tail)
        events.close()
