"""The chat completion's response views: whole JSON, or its stream (``ChatView``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from aiohttp import web

from frontend.choices import Choice, Delta, Group
from frontend.openai import tooling
from frontend.openai.chat_request import ChatCompletionRequest
from frontend.openai.common import (
    prompt_tokens_details,
    stream_usage_flags,
    transfer_params,
    usage_dict,
)
from frontend.openai.logprobs import chat_logprobs, prompt_logprobs_json
from frontend.openai.sse import stream_group
from frontend.openai.tooling import stream_finish_reason
from frontend.render import RenderedChat
from frontend.state import AppState
from frontend.text import Position


class ChatView:
    """Turns a group's choices into OpenAI chat completion JSON.

    With a tool-call or reasoning parser (``plan.parsing``) each choice's
    output is parsed into reasoning, content and tool calls: whole, or per
    engine output while streaming (the table calls the choice's
    :class:`~frontend.openai.tooling.StreamParser` as it queues each delta).
    """

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
        self.model_name = served
        self.rendered = rendered
        self.plan = plan
        self.created = int(group.created)
        messages = req.messages
        role = state.config.response_role  # --response-role
        self.role = (
            role if add_generation_prompt else messages[-1].get("role") if messages else role
        )
        self.echo_text = self._echo_text() if req.echo else ""
        self.prompt_text = rendered.text if req.return_prompt_text else None
        # Streaming with a parser: one per choice, installed as the table's hook
        # before the engine requests go out.
        self.hooks = tooling.install_stream_parsers(plan, group.choices) if req.stream else None

    def _echo_text(self) -> str:
        """The last message's content when its role is the response's (vLLM's echo)."""
        conversation = self.rendered.conversation
        last = conversation[-1] if conversation else None
        if not last or "content" not in last or last.get("role") != self.role:
            return ""
        content = last["content"] or ""
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if "text" in p)
        return content

    def _logprobs(self, token_ids: list[int], positions: Sequence[Position | None] | None):
        if not self.req.logprobs:
            return None
        return chat_logprobs(
            token_ids,
            positions or [],
            # logprob_token_ids: every listed id (vLLM's return_all), top_logprobs ignored
            -1 if self.req.logprob_token_ids else self.req.top_logprobs,
            bool(self.req.return_tokens_as_token_ids),
            token_bytes=not self.req.use_beam_search,
        )

    def _completion_details(self, reasoning_tokens: int) -> dict | None:
        """usage.completion_tokens_details: vLLM's reasoning count with a reasoning parser."""
        return {"reasoning_tokens": reasoning_tokens} if self.plan.reasoning_details else None

    # ------------------------------------------------------------ non-streaming
    def full_response(self) -> dict:
        req, plan = self.req, self.plan
        hide = plan.hide_metadata
        choices = []
        num_generated = reasoning_tokens = 0
        for choice in sorted(self.group.choices, key=lambda c: c.index):
            positions = choice.logprobs.sample if choice.logprobs else None
            if plan.parsing:
                fields, finish_reason, reasoning = plan.message(
                    choice.text, choice.token_ids, choice.finish_reason
                )
                reasoning_tokens += reasoning
            else:
                fields = {
                    "content": choice.text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                }
                finish_reason = choice.finish_reason or "stop"
            if req.echo:
                fields["content"] = self.echo_text + (fields["content"] or "")
            choices.append(
                {
                    "index": choice.index,
                    "message": {"role": self.role, **fields},
                    "logprobs": None if hide else self._logprobs(choice.token_ids, positions),
                    "finish_reason": finish_reason,
                    "stop_reason": choice.stop_reason,
                    "token_ids": choice.token_ids if req.return_token_ids and not hide else None,
                    "routed_experts": None,
                }
            )
            num_generated += len(choice.token_ids)
        if self.state.request_log is not None and self.state.request_log.log_outputs:
            self._log_outputs(choices)
        first = self.group.choices[0]
        prompt_ids = self.rendered.token_ids
        usage = usage_dict(len(prompt_ids), num_generated, details=True)
        usage["completion_tokens_details"] = self._completion_details(reasoning_tokens)
        if self.state.config.enable_prompt_tokens_details:
            usage["prompt_tokens_details"] = prompt_tokens_details(
                first.num_cached_tokens, first.num_cache_creation_tokens
            )
        return {
            "id": self.group.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model_name,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": self.state.system_fingerprint,
            "usage": usage,
            "prompt_logprobs": prompt_logprobs_json(
                first.logprobs.prompt if first.logprobs else None
            ),
            "prompt_token_ids": prompt_ids if req.return_token_ids else None,
            "prompt_text": self.prompt_text,
            **transfer_params(self.group),
            "metrics": None,
        }

    def _log_outputs(self, choices: list[dict]) -> None:
        """--enable-log-outputs: each choice's content (its tool calls when it has none)."""
        assert self.state.request_log is not None
        for c in choices:
            message = c["message"]
            text = message.get("content") or ""
            if not text and message.get("tool_calls"):
                calls = ", ".join(
                    f"{t['function']['name']}({t['function']['arguments']})"
                    for t in message["tool_calls"]
                )
                text = f"[tool_calls: {calls}]"
            if text:
                self.state.request_log.outputs(self.group.request_id, text, c["finish_reason"])

    # ------------------------------------------------------------ streaming
    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.start_stream()
        response = await stream_group(
            request,
            self.group,
            self._render,
            self._closing,
            keep_alive=self.state.config.sse_keep_alive_interval,
        )
        logger = self.state.request_log
        if logger is not None and logger.log_outputs:
            for choice in self.group.choices:
                logger.outputs(
                    self.group.request_id, choice.text, "streaming_complete", streaming=True
                )
        return response

    def start_stream(self) -> None:
        """Per-stream state and the byte prefix every chunk shares."""
        group, state = self.group, self.state
        self.include_usage, self.continuous = stream_usage_flags(
            self.req.stream_options, state.config.force_include_usage
        )
        self.emitted = [0] * len(group.choices)
        prefix = state.json(
            {
                "id": group.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model_name,
            }
        )[:-1]
        self.head = b"data: " + prefix + b',"choices":[{"index":'
        self.num_prompt = len(self.rendered.token_ids)
        self.started = False
        # Parsed choices (tools, reasoning) get the parser's deltas.
        self._chunk_of = self._chunk if self.hooks is None else self._parsed_chunk

    def _render(self, deltas: list[Delta]) -> bytes:
        chunk = self._chunk_of
        logger = self.state.request_log
        logged = logger is not None and logger.log_deltas
        if len(deltas) == 1 and self.started and not logged:  # one choice's step (most steps)
            step = chunk(
                self.head,
                deltas[0],
                self.emitted,
                self.num_prompt,
                self.include_usage,
                self.continuous,
            )
            return step or b""
        parts: list[bytes | None] = []
        if not self.started:  # the first engine output of any choice
            self.started = True
            parts.append(self._opening_chunks(self.head, self.num_prompt, self.continuous))
        if logger is not None and logged:
            for d in deltas:
                if d.text:
                    logger.outputs(self.group.request_id, d.text, d.finish_reason, delta=True)
        for d in deltas:
            parts.append(
                chunk(
                    self.head, d, self.emitted, self.num_prompt, self.include_usage, self.continuous
                )
            )
        return b"".join(p for p in parts if p)

    def _closing(self) -> bytes | None:
        if not self.include_usage:
            return None
        usage = usage_dict(self.num_prompt, sum(self.emitted))
        prefill = self.group.first_prefill
        if self.state.config.enable_prompt_tokens_details and prefill is not None:
            # (the chunk leaves out what is null)
            details = prompt_tokens_details(*prefill)
            usage["prompt_tokens_details"] = {k: v for k, v in details.items() if v is not None}
        if self.plan.reasoning_details:
            usage["completion_tokens_details"] = self._completion_details(
                sum(
                    hook.count_reasoning_tokens(c.token_ids)
                    for hook, c in zip(self.hooks or (), self.group.choices)
                )
            )
        return self.state.json(
            {
                "id": self.group.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model_name,
                "choices": [],
                "usage": usage,
                "system_fingerprint": self.state.system_fingerprint,
            }
        )

    def _opening_chunks(self, head: bytes, num_prompt: int, continuous: bool) -> bytes:
        """One role chunk per choice (then the echo chunks), as vLLM sends them."""
        json = self.state.json
        usage = (
            b',"usage":'
            + json(
                {
                    **usage_dict(num_prompt, 0),
                    "completion_tokens_details": self._completion_details(0),
                }
            )
            if continuous
            else b""
        )
        role_tail = (
            b',"delta":'
            + json({"role": self.role, "content": ""})
            + b',"logprobs":null,"finish_reason":null}]'
            + usage
            + b',"prompt_token_ids":'
            + json(self.rendered.token_ids if self.req.return_token_ids else None)
            + b',"prompt_text":'
            + json(self.prompt_text)
            + b"}\n\n"
        )
        n = len(self.group.choices)
        out = [head + str(i).encode() + role_tail for i in range(n)]
        if self.echo_text:
            echo_tail = (
                b',"delta":'
                + json({"content": self.echo_text})
                + b',"logprobs":null,"finish_reason":null}]'
                + usage
                + b"}\n\n"
            )
            out.extend(head + str(i).encode() + echo_tail for i in range(n))
        return b"".join(out)

    def _chunk(
        self,
        head: bytes,
        d: Delta,
        emitted: list[int],
        num_prompt: int,
        include_usage: bool,
        continuous: bool,
    ) -> bytes | None:
        c: Choice = d.choice
        i = c.index
        if not d.text and not d.token_ids and not emitted[i]:
            return None  # nothing yet (vLLM skips these, even a bare finish)
        emitted[i] += len(d.token_ids)
        json = self.state.json
        finished = d.finish_reason is not None
        body: dict[str, Any] = {
            "delta": {"content": d.text},
            "logprobs": self._logprobs(d.token_ids, d.logprobs),
            "finish_reason": d.finish_reason,
        }
        if finished:
            body["stop_reason"] = d.stop_reason
        body["token_ids"] = d.token_ids if self.req.return_token_ids else None
        tail = b"}]"
        if continuous:
            tail += b',"usage":' + json(
                {**usage_dict(num_prompt, emitted[i]), "completion_tokens_details": None}
            )
        if finished and not include_usage:
            tail += b',"system_fingerprint":' + json(self.state.system_fingerprint)
        return head + str(i).encode() + b"," + json(body)[1:-1] + tail + b"}\n\n"

    def _parsed_chunk(
        self,
        head: bytes,
        d: Delta,
        emitted: list[int],
        num_prompt: int,
        include_usage: bool,
        continuous: bool,
    ) -> bytes | None:
        """A chunk of a parsed choice: the parser's delta (reasoning, content,
        tool call pieces), as vLLM's serving layer sends it."""
        c: Choice = d.choice
        i = c.index
        if not d.text and not d.token_ids and not emitted[i]:
            return None
        emitted[i] += len(d.token_ids)
        hide = self.plan.hide_metadata
        logprobs = None if hide else self._logprobs(d.token_ids, d.logprobs)
        finished = d.finish_reason is not None
        parsed = d.parsed
        if parsed is None:  # nothing to show for this output (a marker token, ...)
            if not finished and logprobs is None and (not self.req.return_token_ids or hide):
                return None
            delta: dict[str, Any] = {}
        else:
            delta = parsed.to_dict()
        hook = cast("list[tooling.StreamParser]", self.hooks)[i]  # (parsed chunks: hooks set)
        body: dict[str, Any] = {"delta": delta, "logprobs": logprobs, "finish_reason": None}
        if finished:
            body["finish_reason"] = stream_finish_reason(
                hook.tools_streamed, self.req.tool_choice, d.finish_reason
            )
            body["stop_reason"] = d.stop_reason
        body["token_ids"] = d.token_ids if self.req.return_token_ids and not hide else None
        json = self.state.json
        tail = b"}]"
        if continuous:
            details = self._completion_details(
                hook.count_reasoning_tokens(c.token_ids[: emitted[i]])
                if self.plan.reasoning_details
                else 0
            )
            tail += b',"usage":' + json(
                {**usage_dict(num_prompt, emitted[i]), "completion_tokens_details": details}
            )
        if finished and not include_usage:
            tail += b',"system_fingerprint":' + json(self.state.system_fingerprint)
        return head + str(i).encode() + b"," + json(body)[1:-1] + tail + b"}\n\n"
