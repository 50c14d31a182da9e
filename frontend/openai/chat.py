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

from aiohttp import web

from frontend.choices import Group
from frontend.errors import ApiError
from frontend.multimodal import chat as multimodal_chat
from frontend.multimodal.detect import has_media
from frontend.openai import beam_search, tooling
from frontend.openai import validators as rules
from frontend.openai.chat_request import ChatCompletionRequest, check_supported, validate_request
from frontend.openai.chat_view import ChatView
from frontend.openai.common import (
    decode_body,
    reasoning_enabled,
    request_id_for,
    serve_group,
)
from frontend.openai.counting import BodyCounts, choice_counter
from frontend.openai.sampling import (
    build_sampling_params,
    check_max_output_tokens,
    child_params,
    get_max_tokens,
    resolve_structured_outputs,
)
from frontend.render import RenderedChat, request_template, template_kwargs
from frontend.state import AppState
from protocol.sampling import SamplingParams

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
    # A prompt with media: its mm_features frames (frontend/multimodal/chat.py).
    mm_features: list[bytes] | None = None

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
    config = state.config
    if req.return_tokens_as_token_ids is None:
        req.return_tokens_as_token_ids = config.return_tokens_as_token_ids
    renderer = state.renderer
    arrival = time.monotonic()  # before tokenization, as vLLM's arrival_time
    template = (
        renderer.template_for(
            request_template(
                req.chat_template, req.chat_template_kwargs, config.server_chat_template
            )
        )
        if config.trust_request_chat_template
        else None
    )
    rules.check_mm_kwargs(
        req.mm_processor_kwargs, req.media_io_kwargs, config.trust_request_mm_kwargs
    )
    kwargs = template_kwargs(
        req.chat_template_kwargs,
        documents=req.documents,
        reasoning_effort=req.reasoning_effort,
        defaults=config.default_chat_template_kwargs,
    )
    hide_tools = config.exclude_tools_when_tool_choice_none and req.tool_choice == "none"
    if req.tools is not None and not hide_tools:  # as vLLM dumps them; the client's kwargs win
        kwargs = {"tools": req.tools, **kwargs}
    mm_features = None
    if state.mm_pool is not None and has_media(req.messages):
        if req.use_beam_search:
            raise ApiError("beam search with multimodal inputs is not supported by this frontend")
        prompt = await multimodal_chat.render(state.mm_pool, req, kwargs.get("tools"))
        rendered = RenderedChat(prompt.conversation, prompt.text, prompt.token_ids)
        mm_features = prompt.features
    else:
        rendered = await renderer.render_chat(
            renderer.parse_messages(req.messages, template),
            add_generation_prompt=add_generation_prompt,
            continue_final_message=req.continue_final_message,
            kwargs=kwargs,
            add_special_tokens=req.add_special_tokens,
            truncate=req.truncate_prompt_tokens,
            truncation_side=req.truncation_side,
            max_output_tokens=requested or 0,
            template=template,
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
            defaults=config.default_chat_template_kwargs,
        ),
    )
    prepared = PreparedChat(
        served, rendered, plan, add_generation_prompt, requested, arrival, None, mm_features
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
    if plan.spaces_between_special_tokens is False:  # as one piece of text
        fields.spaces_between_special_tokens = False
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
    group.mm_features = prepared.mm_features
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
