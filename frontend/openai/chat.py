"""POST /v1/chat/completions: the model's chat template, n choices, streaming and not.

Semantics and response shapes follow vLLM 0.32's Python server
(``vllm/entrypoints/openai/chat_completion/{protocol,serving}.py``): the
messages are rendered with the chat template (``frontend/chat_template.py``),
tokenized without special tokens, and fanned out into ``n`` engine requests
(choice index ``j``). A stream starts, when the first engine output arrives,
with one role chunk per choice, then content chunks (``finish_reason`` on the
last one of each choice), at most one usage chunk and exactly one ``[DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import msgspec
from aiohttp import web

from frontend.choices import Choice, Delta, Group
from frontend.errors import ApiError, schema_error
from frontend.openai import beam_search, tooling
from frontend.openai import validators as rules
from frontend.openai.common import (
    decode_body,
    reasoning_enabled,
    request_id_for,
    serve_group,
    stream_usage_flags,
    transfer_params,
    usage_dict,
)
from frontend.openai.counting import BodyCounts, choice_counter
from frontend.openai.logprobs import chat_logprobs, prompt_logprobs_json
from frontend.openai.request_fields import SamplingRequest
from frontend.openai.sampling import (
    SamplingFields,
    build_sampling_params,
    check_max_output_tokens,
    child_params,
    get_max_tokens,
    resolve_structured_outputs,
)
from frontend.openai.sse import stream_group
from frontend.openai.tooling import stream_finish_reason
from frontend.render import RenderedChat, check_template_override, template_kwargs
from frontend.state import AppState
from frontend.text import Position

RESPONSE_ROLE = "assistant"  # vLLM's --response-role default
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class ChatCompletionRequest(SamplingRequest, kw_only=True):
    messages: Any = msgspec.UNSET
    logprobs: bool | None = False
    # Any: vLLM rejects non-numbers here before coercing (see validate_request).
    top_logprobs: Any = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    tools: Any = None
    tool_choice: Any = msgspec.UNSET
    functions: Any = None
    function_call: Any = None
    reasoning_effort: str | None = None
    include_reasoning: bool = True
    parallel_tool_calls: bool | None = True
    echo: bool = False
    # UNSET: vLLM's "both set" check looks at what the client sent, not the default.
    add_generation_prompt: bool | msgspec.UnsetType = msgspec.UNSET
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[Any] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_prompt_text: bool | None = None
    media_io_kwargs: Any = None
    mm_processor_kwargs: Any = None

    def to_sampling_fields(self) -> SamplingFields:
        """vLLM's ``to_sampling_params``: ``logprobs`` is a flag and
        ``top_logprobs`` the count, which echo also asks for the prompt."""
        prompt_logprobs = self.prompt_logprobs
        if prompt_logprobs is None and self.echo:
            prompt_logprobs = self.top_logprobs
        return self.sampling_fields(
            n=self.n if self.n is not None else 1,
            logprobs=self.top_logprobs if self.logprobs and not self.logprob_token_ids else None,
            prompt_logprobs=prompt_logprobs,
        )


def validate_request(req: ChatCompletionRequest) -> tooling.Constraints:
    """vLLM's ChatCompletionRequest checks, before anything else runs: its
    ``mode="before"`` model validators in pydantic's order (the last defined
    runs first), then the field constraints. Returns the request's grammar
    constraint fields.
    """
    rules.check_generation_prompt(req.continue_final_message, req.add_generation_prompt)
    req.tool_choice = tooling.check_tool_usage(
        req.tools, req.tool_choice, tool_choice_set=req.tool_choice is not msgspec.UNSET
    )
    tooling.check_structured_outputs_count(
        req.structured_outputs, chat=True, tool_choice=req.tool_choice
    )
    # check_logprobs
    rules.check_no_logprob_token_ids_in_beam_search(req.logprob_token_ids, req.use_beam_search)
    rules.check_logprob_token_ids_with_logprobs_flag(req.logprob_token_ids, req.logprobs)
    rules.check_numbers(
        (("prompt_logprobs", req.prompt_logprobs), ("top_logprobs", req.top_logprobs))
    )
    rules.check_prompt_logprobs(req.prompt_logprobs, req.stream)
    rules.check_top_logprobs(req.top_logprobs, req.logprobs)
    rules.check_stream_options(req.stream_options, req.stream)
    tooling.check_response_format(req.response_format)
    rules.check_cache_salt(req.cache_salt)

    # field validation
    if req.messages is msgspec.UNSET:
        raise schema_error("Field required", "body.messages")
    if not isinstance(req.messages, list):
        raise schema_error("Input should be a valid list", "body.messages")
    if req.top_logprobs is None:  # null means omitted
        req.top_logprobs = 0
    req.top_logprobs = rules.lax_int(req.top_logprobs, "top_logprobs")
    req.check_shared_fields()
    rules.check_one_of(req.reasoning_effort, REASONING_EFFORTS, "reasoning_effort")
    req.tools = tooling.normalize_tools(req.tools)
    tooling.check_named_tool_choice(req.tool_choice)
    return tooling.parse_constraints(req.response_format, req.structured_outputs)


def check_supported(req: ChatCompletionRequest, state: AppState) -> None:
    """What vLLM refuses once the request is valid, and what this frontend
    cannot do: a clear 400/501."""
    tooling.tool_parsing_unavailable(state.parsers, req.tool_choice)
    if req.functions is not None or req.function_call is not None:
        raise ApiError(
            "`functions` and `function_call` (deprecated function calling) are "
            "not supported by this frontend",
            param="functions",
        )
    check_template_override(req.chat_template, req.chat_template_kwargs)


# Admission control: ``n``.
count_choices = choice_counter(BodyCounts.samples)


# ---------------------------------------------------------------------------- handler


async def create_chat_completion(state: AppState, request: web.Request) -> web.StreamResponse:
    req = await decode_body(request, ChatCompletionRequest)
    constraints = validate_request(req)
    served = state.resolve_model(req.model)
    check_supported(req, state)
    max_model_len = state.max_model_len
    requested: int | None
    if req.max_completion_tokens is not None:
        requested, param = req.max_completion_tokens, "max_completion_tokens"
    else:
        requested, param = req.max_tokens, "max_tokens"
    check_max_output_tokens(requested, max_model_len, param)
    add_generation_prompt = req.add_generation_prompt is not False
    renderer = state.renderer
    arrival = time.monotonic()  # before tokenization, as vLLM's arrival_time
    kwargs = template_kwargs(
        req.chat_template_kwargs, documents=req.documents, reasoning_effort=req.reasoning_effort
    )
    if req.tools is not None:  # as vLLM dumps them; the client's kwargs win
        kwargs = {"tools": req.tools, **kwargs}
    rendered = await renderer.render_chat(
        renderer.parse_messages(req.messages),
        add_generation_prompt=add_generation_prompt,
        continue_final_message=req.continue_final_message,
        kwargs=kwargs,
        add_special_tokens=req.add_special_tokens,
        truncate=req.truncate_prompt_tokens,
        truncation_side=req.truncation_side,
        max_output_tokens=requested or 0,
    )
    prompt_ids = rendered.token_ids
    plan = tooling.plan(
        state.parsers,
        tools=req.tools,
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        include_reasoning=req.include_reasoning,
        response_format=req.response_format,
        structured_outputs=req.structured_outputs,
        constraints=constraints,
        prompt_token_ids=prompt_ids,
        template_kwargs=tooling.parser_template_kwargs(
            req.chat_template_kwargs,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=req.continue_final_message,
            documents=req.documents,
            reasoning_effort=req.reasoning_effort,
        ),
    )
    if req.use_beam_search:
        return await beam_search.serve(
            state,
            request,
            req,
            f"chatcmpl-{request_id_for(request, req.request_id)}",
            [prompt_ids],
            requested,
            state.lora.get(served),
            lambda group: ChatView(
                state, req, group, served, rendered, add_generation_prompt, plan
            ),
        )

    model = state.model
    max_tokens = get_max_tokens(
        max_model_len, requested, len(prompt_ids), model.default_sampling, model.override_max_tokens
    )
    fields = req.to_sampling_fields()
    if plan.skip_special_tokens is False:  # the parser reads its marker tokens
        fields.skip_special_tokens = False
    params = build_sampling_params(model, fields, max_tokens=max_tokens, stream=bool(req.stream))
    rules.check_thinking_budget_supported(params.thinking_token_budget, reasoning_enabled(state))
    rules.check_routed_experts_prompt_start(params.routed_experts_prompt_start, len(prompt_ids))
    params.structured_outputs = await resolve_structured_outputs(
        plan.constraints, state.config.structured_outputs
    )
    rid = request_id_for(request, req.request_id)
    group = Group(
        f"chatcmpl-{rid}",
        stream=bool(req.stream),
        max_pending=state.config.max_stream_buffer,
        arrival=arrival,
    )
    group.lora = state.lora.get(served)
    group.session_id = req.resolve_session_id(request.headers)
    for j in range(params.n):
        state.table.add_choice(
            group,
            index=j,
            prompt_index=0,
            prompt_token_ids=prompt_ids,
            params=child_params(params, j),
        )
    view = ChatView(state, req, group, served, rendered, add_generation_prompt, plan)
    return await serve_group(
        state,
        request,
        group,
        view,
        priority=req.priority,
        cache_salt=req.cache_salt,
        reasoning_ended=plan.reasoning_ended,
        reasoning_parser_kwargs=plan.reasoning_parser_kwargs,
    )


# ---------------------------------------------------------------------------- responses


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
        self.role = (
            RESPONSE_ROLE
            if add_generation_prompt
            else messages[-1].get("role")
            if messages
            else RESPONSE_ROLE
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
        first = self.group.choices[0]
        prompt_ids = self.rendered.token_ids
        usage = usage_dict(len(prompt_ids), num_generated, details=True)
        usage["completion_tokens_details"] = self._completion_details(reasoning_tokens)
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

    # ------------------------------------------------------------ streaming
    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.start_stream()
        return await stream_group(request, self.group, self._render, self._closing)

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
        parts: list[bytes | None] = []
        if not self.started:  # the first engine output of any choice
            self.started = True
            parts.append(self._opening_chunks(self.head, self.num_prompt, self.continuous))
        chunk = self._chunk_of
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
