"""POST /v1/completions: batch prompts x n, streaming and not, echo and logprobs.

Semantics and response shapes follow vLLM 0.32's Python server
(``vllm/entrypoints/openai/completion/serving.py``): choice index is
``prompt_index * n + j``, usage counts each prompt once, a stream ends with at
most one usage chunk and exactly one ``[DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from frontend import structured as so
from frontend.choices import Choice, Delta, Group
from frontend.errors import ApiError, invalid, schema_error
from frontend.openai import beam_search
from frontend.openai import validators as rules
from frontend.openai.common import (
    decode_body,
    prompt_tokens_details,
    reasoning_enabled,
    request_id_for,
    serve_group,
    stream_usage_flags,
    transfer_params,
    usage_dict,
)
from frontend.openai.counting import BodyCounts, choice_counter
from frontend.openai.logprobs import completion_logprobs, prompt_logprobs_json
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
from frontend.state import AppState
from protocol.sampling import SamplingParams

if TYPE_CHECKING:
    from frontend.text import Position

# The rest of a mid-stream chunk that carries only text (same keys as _chunk's).
PLAIN_CHUNK_TAIL = (
    b',"logprobs":null,"finish_reason":null,"stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":null}]}\n\n'
)


class CompletionRequest(SamplingRequest, kw_only=True):
    prompt: Any = None
    echo: bool | None = False
    logprobs: Any = None  # an int; checked by validate_request as vLLM does
    max_tokens: int | None = 16
    n: int = 1
    suffix: str | None = None
    add_special_tokens: bool = True
    prompt_embeds: Any = None
    # Not fields of vLLM's CompletionRequest, but read (and checked) as extras.
    mm_processor_kwargs: Any = None
    media_io_kwargs: Any = None

    def to_sampling_fields(self) -> SamplingFields:
        """vLLM's ``to_sampling_params``: echo asks for the prompt's logprobs, and
        ``logprob_token_ids`` replaces the top logprobs."""
        prompt_logprobs = self.prompt_logprobs
        if prompt_logprobs is None and self.echo:
            prompt_logprobs = self.logprobs
        return self.sampling_fields(
            n=self.n,
            logprobs=None if self.logprob_token_ids else self.logprobs,
            prompt_logprobs=prompt_logprobs,
        )


def validate_request(req: CompletionRequest) -> so.Constraints:
    """vLLM's CompletionRequest checks: its ``mode="before"`` model validators in
    pydantic's order (the last defined runs first), then the field constraints.
    Returns the request's grammar constraint fields."""
    if req.max_tokens is None:  # normalize_null_max_tokens
        req.max_tokens = 16
    rules.check_prompt_list_length(req.prompt)
    rules.check_prompt_or_embeds(req.prompt, req.prompt_embeds)
    rules.check_stream_options(req.stream_options, req.stream)
    # check_logprobs
    rules.check_no_logprob_token_ids_in_beam_search(req.logprob_token_ids, req.use_beam_search)
    rules.check_no_echo_logprobs_in_beam_search(req.use_beam_search, req.echo, req.logprobs)
    rules.check_logprob_token_ids_need_output(req.logprob_token_ids, req.echo, req.max_tokens)
    rules.check_logprob_token_ids_with_logprobs(req.logprob_token_ids, req.logprobs)
    rules.check_numbers((("prompt_logprobs", req.prompt_logprobs), ("logprobs", req.logprobs)))
    rules.check_prompt_logprobs(req.prompt_logprobs, req.stream)
    rules.check_positive_or_all("logprobs", req.logprobs)
    so.check_structured_outputs_count(req.structured_outputs, chat=False)
    so.check_response_format(req.response_format)
    rules.check_cache_salt(req.cache_salt)
    # Then pydantic's field validation.
    req.logprobs = rules.lax_int(req.logprobs, "logprobs")
    req.check_shared_fields()
    constraints = so.parse(req.response_format, req.structured_outputs)
    if req.prompt_embeds is not None:
        # What vLLM answers when started without --enable-prompt-embeds.
        raise invalid(
            "You must set `--enable-prompt-embeds` to input `prompt_embeds`.", "prompt_embeds"
        )
    if req.suffix is not None:
        raise ApiError(
            "suffix is only supported for models with FIM completion rendering",
            400,
            "BadRequestError",
            "suffix",
        )
    return constraints


def split_prompts(prompt: Any) -> list[str | list[int]]:
    """str | list[str] | list[int] | list[list[int]] -> one entry per prompt."""
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list):
        raise schema_error("Input should be a valid string or list", "body.prompt")
    if not prompt:
        # vLLM's renderer: a ValueError, so no parameter.
        raise ApiError("You must pass at least one prompt", 400, "BadRequestError")
    if all(_is_token(t) for t in prompt):
        return [prompt]
    if all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if all(isinstance(p, list) and all(_is_token(t) for t in p) for p in prompt):
        return list(prompt)
    # pydantic tries the union's branches in order and reports the first error
    # of the first one, list[int >= 0]: the first element that is not such an int.
    first_bad = next(i for i, t in enumerate(prompt) if not _is_token(t))
    raise schema_error(
        "prompt must be a string, a list of strings, a list of token ids "
        "(>= 0) or a list of lists of token ids (>= 0)",
        f"body.prompt.{first_bad}",
    )


def _is_token(value: Any) -> bool:
    return rules.is_int(value) and value >= 0


# Admission control: ``len(prompts) * n``, without decoding the prompts.
count_choices = choice_counter(BodyCounts.prompts_times_n)


@dataclass
class PreparedCompletion:
    """A completion request taken as far as the engine: its prompts rendered
    and each one's sampling params (none for beam search)."""

    served: str
    rendered: list[tuple[list[int], str | None]]
    arrival: float
    params: list[SamplingParams] | None


async def prepare(
    state: AppState, req: CompletionRequest, *, engine_checks: bool = True
) -> PreparedCompletion:
    """vLLM's completion preprocessing: every check, the prompts, each
    prompt's sampling params (their max_tokens depends on its length)."""
    constraints = validate_request(req)
    beam_search.check_not_streaming(req)
    served = state.resolve_model(req.model)
    if req.return_tokens_as_token_ids is None:
        req.return_tokens_as_token_ids = state.config.return_tokens_as_token_ids
    prompts = split_prompts(req.prompt)
    rules.check_mm_kwargs(
        req.mm_processor_kwargs, req.media_io_kwargs, state.config.trust_request_mm_kwargs
    )
    max_model_len = state.max_model_len
    check_max_output_tokens(req.max_tokens, max_model_len)
    arrival = time.monotonic()  # before tokenization, as vLLM's arrival_time
    rendered = await state.renderer.render_prompts(
        prompts,
        add_special_tokens=req.add_special_tokens,
        truncate=req.truncate_prompt_tokens,
        truncation_side=req.truncation_side,
        detokenize=bool(req.echo) and not req.return_token_ids,
    )
    if req.use_beam_search:
        return PreparedCompletion(served, rendered, arrival, params=None)
    echo_without_generation = bool(req.echo) and req.max_tokens == 0
    model = state.model
    fields = req.to_sampling_fields()
    grammar = None
    per_prompt = []
    for p_idx, (ids, _) in enumerate(rendered):
        max_tokens = get_max_tokens(
            max_model_len,
            req.max_tokens,
            len(ids),
            model.default_sampling,
            model.override_max_tokens,
        )
        params = build_sampling_params(
            model,
            fields,
            max_tokens=1 if echo_without_generation else max_tokens,
            stream=bool(req.stream),
        )
        if engine_checks:  # (vLLM's input processor's; its render routes skip them)
            rules.check_thinking_budget_supported(
                params.thinking_token_budget, reasoning_enabled(state)
            )
            rules.check_routed_experts_prompt_start(params.routed_experts_prompt_start, len(ids))
        if p_idx == 0:  # after the sampling checks, as vLLM validates it; once per request
            grammar = await resolve_structured_outputs(constraints, state.config.structured_outputs)
        params.structured_outputs = grammar
        per_prompt.append(params)
    return PreparedCompletion(served, rendered, arrival, per_prompt)


async def create_completion(state: AppState, request: web.Request) -> web.StreamResponse:
    req = await decode_body(request, CompletionRequest)
    prepared = await prepare(state, req)
    served, rendered = prepared.served, prepared.rendered
    rid = request_id_for(request, req.request_id)
    if prepared.params is None:  # beam search
        return await beam_search.serve(
            state,
            request,
            req,
            f"cmpl-{rid}",
            [ids for ids, _ in rendered],
            req.max_tokens,
            state.lora.get(served),
            lambda group: CompletionView(state, req, group, served, rendered),
        )
    group = Group(
        f"cmpl-{rid}",
        stream=bool(req.stream),
        max_pending=state.config.max_stream_buffer,
        arrival=prepared.arrival,
    )
    group.lora = state.lora.get(served)
    group.session_id = req.resolve_session_id(request.headers)
    for p_idx, ((ids, _), params) in enumerate(zip(rendered, prepared.params)):
        for j in range(req.n):
            state.table.add_choice(
                group,
                index=p_idx * req.n + j,
                prompt_index=p_idx,
                prompt_token_ids=ids,
                params=child_params(params, j),
            )
    view = CompletionView(state, req, group, served, rendered)
    return await serve_group(
        state, request, group, view, priority=req.priority, cache_salt=req.cache_salt
    )


class CompletionView:
    """Turns a group's choices into OpenAI completion JSON."""

    def __init__(
        self,
        state: AppState,
        req: CompletionRequest,
        group: Group,
        served: str,
        rendered: list[tuple[list[int], str | None]],
    ) -> None:
        self.state = state
        self.req = req
        self.group = group
        self.model_name = served
        self.rendered = rendered
        self.created = int(group.created)

    # ------------------------------------------------------------ non-streaming
    def prompt_text(self, prompt_index: int) -> str:
        if self.req.return_token_ids:
            return ""
        ids, text = self.rendered[prompt_index]
        if text is None:
            # A token prompt: vLLM echoes its decoding (needs_detokenization),
            # special tokens kept.
            text = self.state.model.decode(ids)
        return text

    def full_response(self) -> dict:
        req = self.req
        choices = []
        num_generated = 0
        for choice in sorted(self.group.choices, key=lambda c: c.index):
            prompt_ids = choice.prompt_token_ids
            text = choice.text
            token_ids = choice.token_ids
            positions: Sequence[Position | None] | None
            positions = choice.logprobs.sample if choice.logprobs else None
            prompt_positions = choice.logprobs.prompt if choice.logprobs else None
            if req.echo:
                prompt_text = self.prompt_text(choice.prompt_index)
                if req.max_tokens == 0:
                    text, token_ids, positions = prompt_text, prompt_ids, prompt_positions
                else:
                    text = prompt_text + text
                    token_ids = [*prompt_ids, *token_ids]
                    if req.logprobs is not None:
                        positions = [*(prompt_positions or []), *(positions or [])]
            logprobs = None
            if req.logprobs is not None:
                logprobs = completion_logprobs(
                    self.state.model,
                    token_ids,
                    positions or [],
                    req.logprobs,
                    bool(req.logprob_token_ids),
                    0,
                    bool(req.return_tokens_as_token_ids),
                )
            choices.append(
                {
                    "index": choice.index,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": choice.finish_reason,
                    "stop_reason": choice.stop_reason,
                    "token_ids": choice.token_ids if req.return_token_ids else None,
                    "prompt_logprobs": prompt_logprobs_json(prompt_positions),
                    "prompt_token_ids": prompt_ids if req.return_token_ids else None,
                    "routed_experts": None,
                }
            )
            num_generated += len(choice.token_ids)
        num_prompt = sum(len(ids) for ids, _ in self.rendered)
        usage = usage_dict(num_prompt, num_generated, details=True)
        if self.state.config.enable_prompt_tokens_details:  # the last prompt's, as vLLM's
            last = self.group.choices[-1].prompt_index
            cached = next(c for c in self.group.choices if c.prompt_index == last)
            usage["prompt_tokens_details"] = prompt_tokens_details(cached.num_cached_tokens)
        return {
            "id": self.group.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model_name,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": self.state.system_fingerprint,
            "usage": usage,
            **transfer_params(self.group),
            "metrics": None,
        }

    # ------------------------------------------------------------ streaming
    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.start_stream()
        return await stream_group(
            request,
            self.group,
            self._render,
            self._closing,
            keep_alive=self.state.config.sse_keep_alive_interval,
        )

    def start_stream(self) -> None:
        """Per-stream state and the byte prefix every chunk shares."""
        group, state = self.group, self.state
        self.include_usage, self.continuous = stream_usage_flags(
            self.req.stream_options, state.config.force_include_usage
        )
        n_choices = len(group.choices)
        self.text_offsets = [0] * n_choices
        self.emitted = [0] * n_choices
        self.started = [False] * n_choices
        prefix = state.json(
            {
                "id": group.request_id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model_name,
            }
        )[:-1]
        self.head = b"data: " + prefix + b',"choices":[{"index":'
        self.index_bytes = [str(i).encode() for i in range(n_choices)]
        # Most chunks carry text only: those skip building a dict, and start
        # with their choice's ready-made bytes.
        self.plain = (
            self.req.logprobs is None and not self.req.return_token_ids and not self.continuous
        )
        self.text_heads = [self.head + index + b',"text":' for index in self.index_bytes]

    def _render(self, deltas: list[Delta]) -> bytes:
        if len(deltas) == 1:  # one choice's step (most steps: no list to join)
            return self._chunk(deltas[0])
        return b"".join([self._chunk(d) for d in deltas])

    def _closing(self) -> bytes | None:
        if not self.include_usage:
            return None
        num_prompt = sum(len(ids) for ids, _ in self.rendered)
        return self.state.json(
            {
                "id": self.group.request_id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model_name,
                "choices": [],
                "usage": self._stream_usage(num_prompt),
                "system_fingerprint": self.state.system_fingerprint,
            }
        )

    def _stream_usage(self, num_prompt: int) -> dict:
        usage = usage_dict(num_prompt, sum(self.emitted))
        prefill = self.group.first_prefill
        if self.state.config.enable_prompt_tokens_details and prefill is not None:
            usage["prompt_tokens_details"] = prompt_tokens_details(prefill[0], full=False)
        return usage

    def _chunk(self, d: Delta) -> bytes:
        c: Choice = d.choice
        i = c.index
        if self.plain and d.finish_reason is None and self.started[i]:
            self.emitted[i] += len(d.token_ids)
            return self.text_heads[i] + self.state.json(d.text) + PLAIN_CHUNK_TAIL
        req, state = self.req, self.state
        positions: Sequence[Position | None] | None
        text, token_ids, positions = d.text, d.token_ids, d.logprobs
        prompt_ids_out = None
        text_offsets, emitted, started = self.text_offsets, self.emitted, self.started
        if not started[i]:
            started[i] = True
            if req.echo:
                prompt_text = self.prompt_text(c.prompt_index)
                prompt_positions = c.logprobs.prompt if c.logprobs else None
                if req.max_tokens == 0:
                    text, token_ids, positions = prompt_text, c.prompt_token_ids, prompt_positions
                else:
                    text = prompt_text + text
                    token_ids = [*c.prompt_token_ids, *token_ids]
                    positions = [*(prompt_positions or []), *(positions or [])]
                prompt_ids_out = c.prompt_token_ids
            elif req.return_token_ids:
                prompt_ids_out = c.prompt_token_ids
        emitted[i] += len(d.token_ids)
        logprobs = None
        if req.logprobs is not None:
            logprobs = completion_logprobs(
                state.model,
                token_ids,
                positions or [],
                req.logprobs,
                bool(req.logprob_token_ids),
                text_offsets[i],
                bool(req.return_tokens_as_token_ids),
            )
            if logprobs["tokens"]:
                text_offsets[i] = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
        body = {
            "text": text,
            "logprobs": logprobs,
            "finish_reason": d.finish_reason,
            "stop_reason": d.stop_reason,
            "prompt_token_ids": prompt_ids_out,
            "token_ids": d.token_ids if req.return_token_ids else None,
        }
        tail = b"}]"
        if self.continuous:
            prompt_tokens = len(c.prompt_token_ids)
            tail += b',"usage":' + state.json(usage_dict(prompt_tokens, emitted[i]))
        if d.finish_reason is not None and not self.include_usage:
            tail += b',"system_fingerprint":' + state.json(state.system_fingerprint)
        return self.head + self.index_bytes[i] + b"," + state.json(body)[1:-1] + tail + b"}\n\n"
