"""The body fields /v1/completions and /v1/chat/completions share, declared once.

``CompletionRequest`` and ``ChatCompletionRequest`` subclass
:class:`SamplingRequest` and add their own fields (and override the few whose
type or default differs between vLLM's two request models). Every field has a
default, and unknown fields are ignored, as vLLM ignores them, so the field
order (base first) changes nothing in decoding.

A field typed ``Any`` is checked by the route itself, the way vLLM checks it
(its model validators see the raw value; see ``frontend/openai/validators.py``);
``frontend/openai/openapi.py`` describes what those accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from frontend.errors import schema_error
from frontend.openai.common import StreamOptions
from frontend.openai.sampling import SamplingFields, transfer_extra_args
from frontend.openai.validators import (
    check_at_least,
    check_lax_bool,
    check_object,
    check_one_of,
    check_stop,
    check_str,
    check_vllm_xargs,
    lax_int,
    thinking_token_budget,
)

TRUNCATION_SIDES = ("left", "right")
MM_PAYLOADS = ("tensors", "none")


class SamplingRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    n: int | None = 1
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = None
    response_format: Any = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: Any = None  # vLLM's check reads the raw object ({} is "not set")
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
    truncation_side: Any = None  # "left" | "right", checked with vLLM's message
    allowed_token_ids: list[int] | None = None
    prompt_logprobs: Any = None  # an int; vLLM rejects non-numbers before coercing
    logprob_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    structured_outputs: Any = None
    priority: int = 0
    request_id: str | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    cache_salt: Any = None  # a string; vLLM's check_cache_salt_support sees the raw value
    repetition_detection: dict[str, int] | None = None
    stream_interval: int | None = None
    # Disaggregated serving: to the engine's KV/EC connectors in extra_args,
    # and back in the (non-streaming) response.
    # (Any: checked by hand, for pydantic's messages)
    kv_transfer_params: Any = None  # dict[str, Any] | None
    ec_transfer_params: Any = None  # dict[str, Any] | None
    vllm_xargs: Any = None  # custom logits processors' arguments
    thinking_token_budget: Any = None  # an int >= 0, or -1
    session_id: Any = None  # str | None
    routed_experts_prompt_start: int = 0
    watermarking: Any = None  # a lax bool
    # Only the /render routes use these; generation accepts and ignores them.
    return_token_offsets: bool | None = False
    mm_payload: Any = "tensors"  # "tensors" | "none"
    return_mm_kwargs: bool | None = None

    def check_shared_fields(self) -> None:
        """The field constraints both routes have (pydantic's, after the model
        validators): lax ints, ``StreamOptions``, the stop list, the bounds."""
        self.prompt_logprobs = lax_int(self.prompt_logprobs, "prompt_logprobs")
        if self.stream_options is not None:
            try:
                self.stream_options = msgspec.convert(
                    self.stream_options, StreamOptions, strict=False
                )
            except msgspec.ValidationError as e:
                raise schema_error(str(e), "body.stream_options") from None
        check_stop(self.stop)
        check_at_least(self.truncate_prompt_tokens, -1, "truncate_prompt_tokens")
        check_one_of(self.truncation_side, TRUNCATION_SIDES, "truncation_side")
        check_at_least(self.stream_interval, 1, "stream_interval")
        self.kv_transfer_params = check_object(self.kv_transfer_params, "kv_transfer_params")
        self.ec_transfer_params = check_object(self.ec_transfer_params, "ec_transfer_params")
        self.vllm_xargs = check_vllm_xargs(self.vllm_xargs)
        self.session_id = check_str(self.session_id, "session_id")
        check_at_least(self.routed_experts_prompt_start, 0, "routed_experts_prompt_start")
        self.watermarking = check_lax_bool(self.watermarking, "watermarking")
        check_one_of(self.mm_payload, MM_PAYLOADS, "mm_payload")
        self.thinking_token_budget = thinking_token_budget(self.thinking_token_budget)

    def sampling_fields(
        self, *, n: int, logprobs: int | None, prompt_logprobs: int | None
    ) -> SamplingFields:
        """The shared fields as sampling asks for them; the route's own
        ``to_sampling_fields()`` gives what differs (``n``, the logprobs)."""
        return SamplingFields(
            n=n,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            ignore_eos=self.ignore_eos,
            min_tokens=self.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            logprob_token_ids=self.logprob_token_ids,
            skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output,
            stream_interval=self.stream_interval,
            logit_bias=self.logit_bias,
            allowed_token_ids=self.allowed_token_ids,
            bad_words=self.bad_words,
            repetition_detection=self.repetition_detection,
            thinking_token_budget=self.thinking_token_budget,
            routed_experts_prompt_start=self.routed_experts_prompt_start,
            extra_args=transfer_extra_args(
                self.vllm_xargs, self.kv_transfer_params, self.ec_transfer_params
            ),
            watermarking=self.watermarking,
        )

    def resolve_session_id(self, headers: Mapping[str, str]) -> str | None:
        """vLLM's _get_session_id: the body's, the X-Session-ID header's, or
        vllm_xargs' (the first given)."""
        from_xargs = (self.vllm_xargs or {}).get("session_id")
        return (
            self.session_id
            or headers.get("X-Session-ID")
            or (from_xargs if isinstance(from_xargs, str) and from_xargs else None)
        )
