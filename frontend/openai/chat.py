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
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from frontend.choices import Group
from frontend.errors import ApiError, schema_error
from frontend.openai import beam_search, tooling
from frontend.openai import validators as rules
from frontend.openai.chat_view import ChatView
from frontend.openai.common import (
    decode_body,
    reasoning_enabled,
    request_id_for,
    serve_group,
)
from frontend.openai.counting import BodyCounts, choice_counter
from frontend.openai.request_fields import SamplingRequest
from frontend.openai.sampling import (
    SamplingFields,
    build_sampling_params,
    check_max_output_tokens,
    child_params,
    get_max_tokens,
    resolve_structured_outputs,
)
from frontend.render import RenderedChat, check_template_override, template_kwargs
from frontend.state import AppState
from protocol.sampling import SamplingParams

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


@dataclass
class PreparedChat:
    """A chat request taken as far as the engine: rendered, its tools and
    parsers planned, its sampling params built (None for beam search)."""

    served: str
    rendered: RenderedChat
    plan: tooling.ChatTooling
    add_generation_prompt: bool
    requested: int | None  # max_completion_tokens or max_tokens, as asked
    arrival: float
    params: SamplingParams | None

    @property
    def prompt_ids(self) -> list[int]:
        return self.rendered.token_ids


async def prepare(
    state: AppState, req: ChatCompletionRequest, *, engine_checks: bool = True
) -> PreparedChat:
    """vLLM's chat preprocessing: every check, the template, the parsers'
    plan, and the sampling params (not for beam search)."""
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
    prepared = PreparedChat(
        served, rendered, plan, add_generation_prompt, requested, arrival, params=None
    )
    if req.use_beam_search:
        return prepared
    model = state.model
    max_tokens = get_max_tokens(
        max_model_len, requested, len(prompt_ids), model.default_sampling, model.override_max_tokens
    )
    fields = req.to_sampling_fields()
    if plan.skip_special_tokens is False:  # the parser reads its marker tokens
        fields.skip_special_tokens = False
    params = build_sampling_params(model, fields, max_tokens=max_tokens, stream=bool(req.stream))
    if engine_checks:  # (vLLM's input processor's; its render routes skip them)
        rules.check_thinking_budget_supported(
            params.thinking_token_budget, reasoning_enabled(state)
        )
        rules.check_routed_experts_prompt_start(params.routed_experts_prompt_start, len(prompt_ids))
    params.structured_outputs = await resolve_structured_outputs(
        plan.constraints, state.config.structured_outputs
    )
    prepared.params = params
    return prepared


async def create_chat_completion(state: AppState, request: web.Request) -> web.StreamResponse:
    req = await decode_body(request, ChatCompletionRequest)
    prepared = await prepare(state, req)
    served, rendered, plan = prepared.served, prepared.rendered, prepared.plan

    def view(group: Group) -> ChatView:
        return ChatView(state, req, group, served, rendered, prepared.add_generation_prompt, plan)

    rid = request_id_for(request, req.request_id)
    if prepared.params is None:  # beam search
        return await beam_search.serve(
            state,
            request,
            req,
            f"chatcmpl-{rid}",
            [prepared.prompt_ids],
            prepared.requested,
            state.lora.get(served),
            view,
        )
    params = prepared.params
    group = Group(
        f"chatcmpl-{rid}",
        stream=bool(req.stream),
        max_pending=state.config.max_stream_buffer,
        arrival=prepared.arrival,
    )
    group.lora = state.lora.get(served)
    group.session_id = req.resolve_session_id(request.headers)
    for j in range(params.n):
        state.table.add_choice(
            group,
            index=j,
            prompt_index=0,
            prompt_token_ids=prepared.prompt_ids,
            params=child_params(params, j),
        )
    return await serve_group(
        state,
        request,
        group,
        view(group),
        priority=req.priority,
        cache_salt=req.cache_salt,
        reasoning_ended=plan.reasoning_ended,
        reasoning_parser_kwargs=plan.reasoning_parser_kwargs,
    )
