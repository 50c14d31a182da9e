"""POST /v1/completions: batch prompts x n, streaming and not, echo and logprobs.

Semantics and response shapes follow vLLM 0.32's Python server
(``vllm/entrypoints/openai/completion/serving.py``): choice index is
``prompt_index * n + j``, usage counts each prompt once, a stream ends with at
most one usage chunk and exactly one ``[DONE]``.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec
from aiohttp import web

from frontend import structured_outputs as so
from frontend.errors import ApiError, from_validation, schema_error
from frontend.fanout import Choice, Delta, Group
from frontend.openai import beam_search
from frontend.openai.common import (
    StreamOptions,
    as_n,
    decode_body,
    request_id_for,
    serve_group,
    stream_usage_flags,
    usage_dict,
    validate_cache_salt,
)
from frontend.openai.logprobs import completion_logprobs, prompt_logprobs_json
from frontend.openai.sampling import (
    build_sampling_params,
    check_max_output_tokens,
    child_params,
    get_max_tokens,
    resolve_structured_outputs,
)
from frontend.openai.sse import stream_group
from frontend.state import AppState
from protocol.errors import ValidationError

MAX_COMPLETION_PROMPTS = 1024  # vLLM's VLLM_MAX_COMPLETION_PROMPTS
# The rest of a mid-stream chunk that carries only text (same keys as _chunk's).
PLAIN_CHUNK_TAIL = (b',"logprobs":null,"finish_reason":null,"stop_reason":null,'
                    b'"prompt_token_ids":null,"token_ids":null}]}\n\n')


class CompletionRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    prompt: Any = None
    echo: bool | None = False
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: Any = None  # an int; checked by validate_request as vLLM does
    max_tokens: int | None = 16
    n: int = 1
    presence_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None
    truncation_side: Literal["left", "right"] | None = None
    allowed_token_ids: list[int] | None = None
    prompt_logprobs: Any = None  # an int, see logprobs
    logprob_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    add_special_tokens: bool = True
    priority: int = 0
    request_id: str | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    cache_salt: str | None = None
    repetition_detection: dict[str, int] | None = None
    stream_interval: int | None = None
    response_format: Any = None
    structured_outputs: Any = None
    prompt_embeds: Any = None


def _invalid(message: str, parameter: str, value: Any = None) -> ApiError:
    """vLLM's model validators raise VLLMValidationError: a plain BadRequestError."""
    return from_validation(ValidationError(message, parameter=parameter, value=value))


def validate_request(req: CompletionRequest) -> so.Constraints:
    """The checks vLLM's ``mode="before"`` model validators run, in pydantic's order
    (the last defined runs first); their errors are VLLMValidationErrors, not
    schema errors. Then the field checks; returns the request's grammar
    constraint fields."""
    if req.max_tokens is None:
        req.max_tokens = 16
    prompt = req.prompt
    if (isinstance(prompt, list) and not all(_is_int(t) for t in prompt)
            and len(prompt) > MAX_COMPLETION_PROMPTS):
        raise _invalid(f"prompt list length {len(prompt)} exceeds the maximum allowed count "
                       f"of {MAX_COMPLETION_PROMPTS}. To increase this limit, set the "
                       "VLLM_MAX_COMPLETION_PROMPTS environment variable.", "prompt")
    embeds = req.prompt_embeds
    if (prompt is None or prompt == "") and (embeds is None or embeds == []):
        raise _invalid("Either prompt or prompt_embeds must be provided and non-empty.",
                       "prompt")
    if req.stream_options and not req.stream:
        raise _invalid("Stream options can only be defined when `stream=True`.",
                       "stream_options")
    beam_search.check_completion_fields(req)
    if req.logprob_token_ids and req.echo and req.max_tokens == 0:
        raise _invalid("`logprob_token_ids` is not supported when `echo=True` and "
                       "`max_tokens=0` because no output tokens are generated.",
                       "logprob_token_ids")
    if req.logprob_token_ids and req.logprobs is None:
        raise _invalid("when using `logprob_token_ids`, `logprobs` must be set.",
                       "logprob_token_ids")
    for name in ("prompt_logprobs", "logprobs"):
        value = getattr(req, name)
        if value is not None and not isinstance(value, (int, float)):
            raise _invalid(f"`{name}` must be an integer.", name, value)
    if req.prompt_logprobs is not None:
        if req.stream and (req.prompt_logprobs > 0 or req.prompt_logprobs == -1):
            raise _invalid("`prompt_logprobs` are not available when `stream=True`.",
                           "prompt_logprobs")
        if req.prompt_logprobs < -1:
            raise _invalid("`prompt_logprobs` must be a positive value or -1.",
                           "prompt_logprobs", req.prompt_logprobs)
    if req.logprobs is not None and req.logprobs < -1:
        raise _invalid("`logprobs` must be a positive value or -1.", "logprobs", req.logprobs)
    so.check_structured_outputs_count(req.structured_outputs, chat=False)
    so.check_response_format(req.response_format)
    validate_cache_salt(req.cache_salt)
    # Then pydantic's field validation: logprobs are ints (lax: bools and
    # integral floats convert).
    req.logprobs = _lax_int(req.logprobs, "logprobs")
    req.prompt_logprobs = _lax_int(req.prompt_logprobs, "prompt_logprobs")
    constraints = so.parse(req.response_format, req.structured_outputs)
    if req.prompt_embeds is not None:
        # What vLLM answers when started without --enable-prompt-embeds.
        raise _invalid("You must set `--enable-prompt-embeds` to input `prompt_embeds`.",
                       "prompt_embeds")
    if req.suffix is not None:
        raise ApiError("suffix is only supported for models with FIM completion rendering",
                       400, "BadRequestError", "suffix")
    if req.truncate_prompt_tokens is not None and req.truncate_prompt_tokens < -1:
        raise schema_error("Input should be greater than or equal to -1",
                           "body.truncate_prompt_tokens")
    return constraints


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _lax_int(value: Any, name: str) -> int | None:
    """pydantic's lax ``int``: bools and integral floats convert, other floats fail."""
    if value is None or _is_int(value):
        return value
    if isinstance(value, bool) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    raise schema_error("Input should be a valid integer, got a number with a fractional "
                       "part", f"body.{name}")


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
    raise schema_error("prompt must be a string, a list of strings, a list of token ids "
                       "(>= 0) or a list of lists of token ids (>= 0)",
                       f"body.prompt.{first_bad}")


def _is_token(value: Any) -> bool:
    return _is_int(value) and value >= 0


class _Skeleton(msgspec.Struct):
    prompt: msgspec.Raw = msgspec.Raw(b"null")
    n: Any = 1


_skeleton = msgspec.json.Decoder(_Skeleton)
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])


def count_choices(body: bytes) -> int:
    """``len(prompts) * n`` for admission control, without decoding the prompts."""
    try:
        req = _skeleton.decode(body)
    except msgspec.DecodeError:
        return 1
    return _count_prompts(bytes(req.prompt)) * as_n(req.n)


def _count_prompts(raw: bytes) -> int:
    raw = raw.lstrip()
    if not raw.startswith(b"["):
        return 1
    try:
        items = _raw_list.decode(raw)
    except msgspec.DecodeError:
        return 1
    if not items:
        return 1
    head = bytes(items[0]).lstrip()[:1]
    # A list of strings or of token lists is a batch; a list of ints is one prompt.
    return len(items) if head in (b'"', b"[") else 1


async def create_completion(state: AppState, request: web.Request) -> web.StreamResponse:
    req = await decode_body(request, CompletionRequest)
    constraints = validate_request(req)
    beam_search.check_not_streaming(req)
    served = state.resolve_model(req.model)
    prompts = split_prompts(req.prompt)
    max_model_len = state.max_model_len
    check_max_output_tokens(req.max_tokens, max_model_len)
    arrival = time.monotonic()  # before tokenization, as vLLM's arrival_time
    rendered = await state.renderer.render_prompts(
        prompts, add_special_tokens=req.add_special_tokens,
        truncate=req.truncate_prompt_tokens, truncation_side=req.truncation_side,
        detokenize=bool(req.echo) and not req.return_token_ids)
    echo_without_generation = bool(req.echo) and req.max_tokens == 0
    fields = msgspec.structs.asdict(req)
    if fields["prompt_logprobs"] is None and req.echo:
        fields["prompt_logprobs"] = req.logprobs
    if req.logprob_token_ids:
        fields["logprobs"] = None
    rid = request_id_for(request, req.request_id)
    if req.use_beam_search:
        return await beam_search.serve(
            state, request, req, f"cmpl-{rid}", [ids for ids, _ in rendered], req.max_tokens,
            state.lora.get(served),
            lambda group: CompletionView(state, req, group, served, rendered))
    group = Group(f"cmpl-{rid}", stream=bool(req.stream),
                  max_pending=state.config.max_stream_buffer, arrival=arrival)
    group.lora = state.lora.get(served)
    model = state.model
    grammar = None
    for p_idx, (ids, _) in enumerate(rendered):
        max_tokens = get_max_tokens(max_model_len, req.max_tokens, len(ids),
                                    model.default_sampling, model.override_max_tokens)
        params = build_sampling_params(
            model, fields, max_tokens=1 if echo_without_generation else max_tokens,
            stream=bool(req.stream))
        if p_idx == 0:  # after the sampling checks, as vLLM validates it; once per request
            grammar = await resolve_structured_outputs(constraints,
                                                       state.config.structured_outputs)
        params.structured_outputs = grammar
        for j in range(req.n):
            state.table.add_choice(group, index=p_idx * req.n + j, prompt_index=p_idx,
                                   prompt_token_ids=ids, params=child_params(params, j))
    view = CompletionView(state, req, group, served, rendered)
    return await serve_group(state, request, group, view, priority=req.priority,
                             cache_salt=req.cache_salt)


class CompletionView:
    """Turns a group's choices into OpenAI completion JSON."""

    def __init__(self, state: AppState, req: CompletionRequest, group: Group,
                 served: str, rendered: list[tuple[list[int], str]]) -> None:
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
                    self.state.model, token_ids, positions or [], req.logprobs,
                    bool(req.logprob_token_ids), 0, bool(req.return_tokens_as_token_ids))
            choices.append({
                "index": choice.index,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": choice.finish_reason,
                "stop_reason": choice.stop_reason,
                "token_ids": choice.token_ids if req.return_token_ids else None,
                "prompt_logprobs": prompt_logprobs_json(prompt_positions),
                "prompt_token_ids": prompt_ids if req.return_token_ids else None,
                "routed_experts": None,
            })
            num_generated += len(choice.token_ids)
        num_prompt = sum(len(ids) for ids, _ in self.rendered)
        return {
            "id": self.group.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model_name,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": self.state.system_fingerprint,
            "usage": usage_dict(num_prompt, num_generated, details=True),
            "kv_transfer_params": None,
            "ec_transfer_params": None,
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
            self.req.stream_options, state.config.force_include_usage)
        n_choices = len(group.choices)
        self.text_offsets = [0] * n_choices
        self.emitted = [0] * n_choices
        self.started = [False] * n_choices
        prefix = state.json({"id": group.request_id, "object": "text_completion",
                              "created": self.created, "model": self.model_name})[:-1]
        self.head = b'data: ' + prefix + b',"choices":[{"index":'
        self.index_bytes = [str(i).encode() for i in range(n_choices)]
        # Most chunks carry text only: those skip building a dict.
        self.plain = (self.req.logprobs is None and not self.req.return_token_ids
                      and not self.continuous)

    def _render(self, deltas: list[Delta]) -> bytes:
        return b"".join([self._chunk(d) for d in deltas])

    def _closing(self) -> bytes | None:
        if not self.include_usage:
            return None
        num_prompt = sum(len(ids) for ids, _ in self.rendered)
        return self.state.json({
            "id": self.group.request_id, "object": "text_completion",
            "created": self.created, "model": self.model_name, "choices": [],
            "usage": usage_dict(num_prompt, sum(self.emitted)),
            "system_fingerprint": self.state.system_fingerprint})

    def _chunk(self, d: Delta) -> bytes:
        c: Choice = d.choice
        i = c.index
        if self.plain and d.finish_reason is None and self.started[i]:
            self.emitted[i] += len(d.token_ids)
            return (self.head + self.index_bytes[i] + b',"text":' + self.state.json(d.text)
                    + PLAIN_CHUNK_TAIL)
        req, state = self.req, self.state
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
                state.model, token_ids, positions or [], req.logprobs,
                bool(req.logprob_token_ids), text_offsets[i],
                bool(req.return_tokens_as_token_ids))
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
