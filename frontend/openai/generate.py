"""POST /inference/v1/generate: token ids in, token ids (and optionally text) out.

Every one of the ``n`` samples comes back, streaming or not: the request fans
out into n engine requests and the response is built only once all of them
have finished (vLLM bug #52398 lost choices here; its Rust frontend #52843
ignored n).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from aiohttp import web

from frontend import structured as so
from frontend.choices import Choice, Delta, Group
from frontend.errors import ApiError, invalid
from frontend.model import ModelInfo
from frontend.multimodal.pool import Processed
from frontend.openai import validators as rules
from frontend.openai.common import (
    StreamOptions,
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
from frontend.openai.logprobs import (
    generate_text_logprobs,
    generate_token_logprobs,
    prompt_logprobs_json,
)
from frontend.openai.sampling import (
    child_params,
    finalize,
    get_max_tokens,
    resolve_structured_outputs,
    resolve_watermarking,
)
from frontend.openai.sse import stream_group
from frontend.state import AppState
from frontend.text import Position
from protocol.sampling import OutputKind, RepetitionDetection, SamplingParams


class GenerateSamplingParams(msgspec.Struct, kw_only=True):
    """vLLM's SamplingParams as JSON: its own defaults, not the model's."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    repetition_detection: RepetitionDetection | None = None
    stream_interval: int | None = None
    watermarking: bool | None = None
    logprob_token_ids: list[int] | None = None
    structured_outputs: Any = None
    extra_args: dict[str, Any] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: Any = None  # an int >= 0, or -1 (checked by hand)
    routed_experts_prompt_start: int = 0
    # Refused with vLLM's messages (they need engine features vLLM gates).
    prompt_logprob_token_ids: Any = None
    prompt_logprob_start: int | None = None
    trace_decode_token_ids: Any = None
    # Accepted and without effect, as in vLLM's server: how vLLM's own output
    # processor stores logprobs, and fields its server overwrites.
    flat_logprobs: bool = False
    output_kind: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0


_json = msgspec.json.Encoder()


class GenerateRequest(msgspec.Struct, kw_only=True):
    token_ids: list[int]
    sampling_params: GenerateSamplingParams  # required, as in vLLM
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    request_id: str | None = None
    output_mode: Literal["tokens", "text"] = "tokens"
    return_token_ids: bool | None = None
    cache_salt: str | None = None
    priority: int = 0
    # Structured outputs behind a reasoning parser: whether the prompt already
    # ended the reasoning, and the template kwargs the engine's parser reads.
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: Any = None  # {"chat_template_kwargs": {...}} (checked by hand)
    # Sent as given (an empty object too), back in the non-streaming response.
    kv_transfer_params: Any = None  # dict[str, Any] | None (checked by hand)
    ec_transfer_params: Any = None
    token_offsets: Any = None  # (the render routes' output; accepted, unused)
    # Multimodal inputs: vLLM's MultiModalFeatures (/render's output), made
    # engine features by a processor worker; content_parts refused.
    features: Any = None
    content_parts: Any = None


def check_refused_fields(req: GenerateRequest) -> None:
    """Fields vLLM's server accepts only with engine features it gates, refused
    with its messages; raw media (``content_parts``: not implemented on this route)."""
    sp = req.sampling_params
    if sp.trace_decode_token_ids:
        raise invalid(
            "trace_decode_token_ids is set but trace replay is not enabled. Start the engine "
            "with --enable-trace-replay to use it.",
        )
    if sp.prompt_logprob_token_ids is not None:
        if req.stream:
            raise invalid("prompt_logprob_token_ids are not available when stream=true.")
        raise invalid(
            "prompt_logprob_token_ids requires the V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1).",
            "prompt_logprob_token_ids",
        )
    if sp.prompt_logprob_start is not None:
        raise invalid(
            "prompt_logprob_start requires prompt_logprob_token_ids.",
            "prompt_logprob_start",
            sp.prompt_logprob_start,
        )
    if req.content_parts is not None:
        raise invalid(
            "content_parts: media are not accepted on this route by this frontend "
            "(send them to /v1/chat/completions, or their features from /render)",
            "content_parts",
        )


async def engine_features(state: AppState, req: GenerateRequest) -> Processed | None:
    """The request's ``features`` as vLLM's input processor makes them, by a
    processor worker (a multimodal model's); None without features."""
    if req.features is None:
        return None
    if state.mm_pool is None:
        raise invalid(
            "features: multimodal inputs are accepted for multimodal models only", "features"
        )
    body = {"token_ids": req.token_ids, "features": req.features, "cache_salt": req.cache_salt}
    return await state.mm_pool.process_chat(_json.encode(body), kind="generate")


def to_engine_params(sp: GenerateSamplingParams, model: ModelInfo, stream: bool) -> SamplingParams:
    """vLLM's SamplingParams from the body, validated as its constructor does
    while the body is parsed; ``max_tokens`` stays None if the client left it
    out (the server default needs the prompt length; ``create_generate`` sets it).

    vLLM validates SamplingParams while parsing the body, but its
    VLLMValidationError is no ValueError: pydantic lets it through, and the
    client gets a BadRequestError, not a schema error (so does ours).
    """
    stop = [sp.stop] if isinstance(sp.stop, str) else list(sp.stop or [])
    params = SamplingParams(
        n=sp.n,
        presence_penalty=sp.presence_penalty,
        frequency_penalty=sp.frequency_penalty,
        repetition_penalty=sp.repetition_penalty,
        temperature=sp.temperature,
        top_p=sp.top_p,
        top_k=sp.top_k,
        min_p=sp.min_p,
        seed=sp.seed,
        stop=stop,
        stop_token_ids=list(sp.stop_token_ids or []),
        ignore_eos=sp.ignore_eos,
        max_tokens=sp.max_tokens,
        min_tokens=sp.min_tokens,
        logprobs=sp.logprobs,
        prompt_logprobs=sp.prompt_logprobs,
        detokenize=sp.detokenize,
        skip_special_tokens=sp.skip_special_tokens,
        spaces_between_special_tokens=sp.spaces_between_special_tokens,
        include_stop_str_in_output=sp.include_stop_str_in_output,
        output_kind=OutputKind.DELTA if stream else OutputKind.FINAL_ONLY,
        stream_interval=sp.stream_interval,
        logit_bias=sp.logit_bias,
        allowed_token_ids=sp.allowed_token_ids,
        bad_words=list(sp.bad_words or []),
        repetition_detection=sp.repetition_detection,
        watermarking=resolve_watermarking(sp.watermarking),
        logprob_token_ids=sp.logprob_token_ids,
        extra_args=sp.extra_args,
        thinking_token_budget=rules.thinking_token_budget(sp.thinking_token_budget),
        routed_experts_prompt_start=sp.routed_experts_prompt_start,
        skip_reading_prefix_cache=sp.skip_reading_prefix_cache,
    )
    return finalize(params, model)


def engine_extra_args(req: GenerateRequest, extra_args: dict[str, Any] | None) -> Any:
    """The route's transfer params join the sampling params' extra_args
    (``is not None``: an empty object is sent too, unlike chat's)."""
    if req.kv_transfer_params is None and req.ec_transfer_params is None:
        return extra_args
    out = dict(extra_args or {})
    if req.kv_transfer_params is not None:
        out["kv_transfer_params"] = req.kv_transfer_params
    if req.ec_transfer_params is not None:
        out["ec_transfer_params"] = req.ec_transfer_params
    return out


def check_prompt_len(prompt_len: int, max_model_len: int) -> None:
    """vLLM's InputProcessor._validate_prompt_len: this route has no renderer
    length check, so the engine client's messages are the ones clients see."""
    if prompt_len > max_model_len:
        raise invalid(
            f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
            f"length of {max_model_len}. Make sure that `max_model_len` is no smaller "
            "than the number of text tokens."
        )
    if prompt_len == max_model_len:
        raise invalid(
            f"The decoder prompt (length {prompt_len}) plus the number of requested output "
            f"tokens (at least 1) is longer than the maximum model length of "
            f"{max_model_len}. Make sure that `max_model_len` is no smaller than the "
            "number of text tokens (prompt + requested output tokens)."
        )


# Admission control: ``sampling_params.n``.
count_choices = choice_counter(BodyCounts.sampling_params_n)


async def create_generate(state: AppState, request: web.Request) -> web.StreamResponse:
    req = await decode_body(request, GenerateRequest)
    rules.check_token_ids(req.token_ids)
    # (vLLM's GenerateRequest has no stream_options check: it is ignored
    # without stream.)
    params = to_engine_params(req.sampling_params, state.model, bool(req.stream))
    req.reasoning_parser_kwargs = rules.check_reasoning_parser_kwargs(req.reasoning_parser_kwargs)
    req.kv_transfer_params = rules.check_object(req.kv_transfer_params, "kv_transfer_params")
    req.ec_transfer_params = rules.check_object(req.ec_transfer_params, "ec_transfer_params")
    params.extra_args = engine_extra_args(req, params.extra_args)
    check_refused_fields(req)
    rules.check_cache_salt(req.cache_salt)
    served = state.resolve_model(req.model)
    max_num_seqs = state.ready.max_num_seqs if state.ready else 0
    if max_num_seqs and req.sampling_params.n > max_num_seqs:
        raise ApiError(
            f"sampling_params.n must be at most the server's max_num_seqs "
            f"({max_num_seqs}), got {req.sampling_params.n}."
        )
    state.renderer.check_vocab(req.token_ids)
    prompt_len = len(req.token_ids)
    if params.max_tokens is None:  # server-side default: the rest of the context
        params.max_tokens = get_max_tokens(
            state.max_model_len,
            None,
            prompt_len,
            state.model.default_sampling,
            state.model.override_max_tokens,
        )
    check_prompt_len(prompt_len, state.max_model_len)
    rules.check_thinking_budget_supported(params.thinking_token_budget, reasoning_enabled(state))
    rules.check_routed_experts_prompt_start(params.routed_experts_prompt_start, prompt_len)
    if req.sampling_params.structured_outputs is not None:
        params.structured_outputs = await resolve_structured_outputs(
            so.parse(None, req.sampling_params.structured_outputs),
            state.config.structured_outputs,
        )
    processed = await engine_features(state, req)
    rid = request_id_for(request, req.request_id)
    group = Group(
        f"generate-tokens-{rid}",
        stream=bool(req.stream),
        max_pending=state.config.max_stream_buffer,
    )
    if processed is not None:
        group.mm_features = processed.features
    group.lora = state.lora.get(served)
    group.session_id = request.headers.get("X-Session-ID")  # (no body field here)
    for j in range(params.n):
        state.table.add_choice(
            group,
            index=j,
            prompt_index=0,
            prompt_token_ids=req.token_ids,
            params=child_params(params, j),
        )
    view = GenerateView(state, req, group, served, processed)
    return await serve_group(
        state,
        request,
        group,
        view,
        priority=req.priority,
        cache_salt=req.cache_salt,
        reasoning_ended=req.reasoning_ended,
        reasoning_parser_kwargs=req.reasoning_parser_kwargs,
    )


class GenerateView:
    def __init__(
        self,
        state: AppState,
        req: GenerateRequest,
        group: Group,
        served: str,
        processed: Processed | None,
    ) -> None:
        self.state = state
        # (vLLM's response carries the placeholder ranges with the prompt ids.)
        self.placeholders = processed.placeholders if processed and req.return_token_ids else None
        self.req = req
        self.group = group
        self.model_name = served
        self.text_mode = req.output_mode == "text"
        self.num_top = req.sampling_params.logprobs

    def _logprobs(self, token_ids: list[int], positions: list[Position] | None) -> Any:
        if self.num_top is None:
            return None
        if self.text_mode:
            return generate_text_logprobs(
                token_ids,
                positions or [],
                self.num_top,
                as_token_ids=self.state.config.return_tokens_as_token_ids,
            )
        return generate_token_logprobs(token_ids, positions or [], self.num_top)

    def _choice(
        self,
        index: int,
        finish: str | None,
        stop_reason: Any,
        token_ids: list[int],
        positions: list[Position] | None,
        weight_versions: list | None,
        text: str | None,
    ) -> dict:
        choice: dict[str, Any] = {"index": index}
        if self.text_mode:
            choice["text"] = text
        choice.update(
            {
                "finish_reason": finish,
                "stop_reason": stop_reason,
                "token_ids": token_ids,
                "routed_experts": None,
                "sampling_mask": None,
                "weight_versions": weight_versions,
                "logprobs": self._logprobs(token_ids, positions),
            }
        )
        return choice

    def full_response(self) -> dict:
        logger = self.state.request_log
        if logger is not None and logger.log_outputs:  # (vLLM logs no text here)
            for c in self.group.choices:
                logger.outputs(self.group.request_id, "", c.finish_reason)
        choices = []
        for c in sorted(self.group.choices, key=lambda c: c.index):
            choices.append(
                self._choice(
                    c.index,
                    c.finish_reason or "stop",
                    c.stop_reason,
                    c.token_ids,
                    c.logprobs.sample if c.logprobs else None,
                    c.weight_spans(),
                    c.text,
                )
            )
        prompt_ids = self.req.token_ids
        first = self.group.choices[0]
        usage = usage_dict(
            len(prompt_ids), sum(len(c.token_ids) for c in self.group.choices), details=True
        )
        if self.state.config.enable_prompt_tokens_details:
            usage["prompt_tokens_details"] = prompt_tokens_details(first.num_cached_tokens)
        return {
            "request_id": self.group.request_id,
            "model": self.model_name,
            "created": int(self.group.created),
            "usage": usage,
            "prompt_logprobs": prompt_logprobs_json(
                first.logprobs.prompt if first.logprobs else None
            ),
            "prompt_token_id_logprobs": None,
            "prompt_token_ids": prompt_ids if self.req.return_token_ids else None,
            "mm_placeholders": self.placeholders,
            "metrics": None,
            **transfer_params(self.group),
            "output_mode": self.req.output_mode,
            "choices": choices,
        }

    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.include_usage, self.continuous = stream_usage_flags(self.req.stream_options, False)
        self.generated = [0] * len(self.group.choices)
        self.prompt_ids_pending = bool(self.req.return_token_ids)
        return await stream_group(request, self.group, self._render, self._closing)

    def _render(self, deltas: list[Delta]) -> bytes:
        state, group, req = self.state, self.group, self.req
        out = []
        for d in deltas:
            c: Choice = d.choice
            self.generated[c.index] += len(d.token_ids)
            if not (d.token_ids or d.finish_reason is not None or (self.text_mode and d.text)):
                continue
            chunk: dict[str, Any] = {"request_id": group.request_id, "usage": None}
            if self.prompt_ids_pending:
                chunk["prompt_token_ids"] = req.token_ids
                if self.placeholders is not None:  # (vLLM leaves it out when null)
                    chunk["mm_placeholders"] = self.placeholders
                self.prompt_ids_pending = False
            if self.continuous:
                # A full UsageInfo: these chunks are not dumped with exclude_none.
                chunk["usage"] = usage_dict(
                    len(req.token_ids), self.generated[c.index], details=True
                )
            chunk["output_mode"] = req.output_mode
            chunk["choices"] = [
                self._choice(
                    c.index,
                    d.finish_reason,
                    d.stop_reason,
                    d.token_ids,
                    d.logprobs,
                    c.weight_spans() if d.finish_reason else None,
                    d.text,
                )
            ]
            out.append(b"data: " + state.json(chunk) + b"\n\n")
        return b"".join(out)

    def _stream_usage(self) -> dict:
        usage = usage_dict(len(self.req.token_ids), sum(self.generated))
        prefill = self.group.first_prefill
        if self.state.config.enable_prompt_tokens_details and prefill is not None:
            usage["prompt_tokens_details"] = prompt_tokens_details(prefill[0], full=False)
        return usage

    def _closing(self) -> bytes | None:
        if not self.include_usage:
            return None
        return self.state.json(
            {
                "request_id": self.group.request_id,
                "usage": self._stream_usage(),
                "output_mode": self.req.output_mode,
                "choices": [],
            }
        )
