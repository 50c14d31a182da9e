"""OpenAI request fields -> the engine's SamplingParams, as vLLM's server builds them.

Shared by completions and chat. Order of precedence for the sampling knobs:
the client's value, then the model's generation_config.json default, then
OpenAI's default. Everything here raises ``ApiError``/``ValidationError`` with
vLLM's messages; nothing reaches the engine unvalidated.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec

from frontend import structured as so
from frontend.errors import ApiError, from_validation
from frontend.model import ModelInfo
from protocol.errors import ValidationError
from protocol.sampling import (
    MAX_NUM_BAD_WORDS,
    OutputKind,
    RepetitionDetection,
    SamplingParams,
    apply_generation_config,
    check,
    normalize,
)
from protocol.structured import StructuredOutputsParams

log = logging.getLogger("frontend.sampling")

# Knobs with a server default (vLLM's _DEFAULT_SAMPLING_PARAMS).
OPENAI_DEFAULTS = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}


def get_max_tokens(
    max_model_len: int,
    requested: int | None,
    prompt_len: int,
    defaults: dict[str, Any],
    override: int | None = None,
) -> int:
    """vLLM's get_max_tokens: the request (or the model's default), capped by the
    context and by ``override`` (vLLM's override_max_tokens: --generation-config
    DIR's max_new_tokens, or --override-generation-config's)."""
    if prompt_len > max_model_len:
        raise ApiError(
            f"Input length ({prompt_len}) exceeds model's maximum context length ({max_model_len})."
        )
    candidates = [max_model_len - prompt_len]
    fallback = requested if requested is not None else defaults.get("max_tokens")
    candidates += [v for v in (fallback, override) if v is not None]
    return min(candidates)


def check_max_output_tokens(
    max_tokens: int | None, max_model_len: int, param: str = "max_tokens"
) -> None:
    if max_tokens is not None and max_tokens > max_model_len:
        raise from_validation(
            ValidationError(
                f"{param}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
                "Please request fewer output tokens.",
                parameter=param,
                value=max_tokens,
            )
        )


def convert_logit_bias(logit_bias: dict[str, float] | None) -> dict[int, float] | None:
    if logit_bias is None:
        return None
    converted: dict[int, float] = {}
    invalid = []
    for key, bias in logit_bias.items():
        try:
            converted[int(key)] = min(100.0, max(-100.0, float(bias)))
        except (TypeError, ValueError):
            invalid.append(key)
    if invalid:
        raise from_validation(
            ValidationError(
                f"logit_bias contains key(s) that cannot be converted to integer token IDs: "
                f"{invalid!r}",
                parameter="logit_bias",
                value=invalid,
            )
        )
    return converted


def bad_words_token_ids(model: ModelInfo, bad_words: list[str]) -> list[list[int]]:
    """``SamplingParams.update_from_tokenizer``: each word with and without a leading space."""
    result: list[list[int]] = []
    for word in bad_words:
        for add_prefix_space in (False, True):
            ids = model.encode(
                (" " if add_prefix_space else "") + word.lstrip(), add_special_tokens=False
            )
            if not ids:
                if not add_prefix_space:
                    raise from_validation(
                        ValidationError(
                            "bad_words entries must tokenize to at least one token.",
                            parameter="bad_words",
                            value=bad_words,
                        )
                    )
                continue
            if not add_prefix_space or (ids[0] != result[-1][0] and len(ids) == len(result[-1])):
                result.append(ids)
                if len(result) > MAX_NUM_BAD_WORDS:
                    raise from_validation(
                        ValidationError(
                            f"Too many bad words after tokenization: {len(result)}. "
                            f"The max number is {MAX_NUM_BAD_WORDS}.",
                            parameter="bad_words",
                            value=bad_words,
                        )
                    )
    return result


class SamplingFields(msgspec.Struct, kw_only=True):
    """What a request asks of sampling (``to_sampling_fields()`` of its struct).
    A knob left None takes the model's generation_config.json value, then OpenAI's."""

    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    repetition_detection: dict[str, int] | None = None
    thinking_token_budget: int | None = None
    routed_experts_prompt_start: int = 0
    # vllm_xargs with the request's kv/ec transfer params (vLLM's extra_args)
    extra_args: dict[str, Any] | None = None
    watermarking: bool | None = None


def build_sampling_params(
    model: ModelInfo, fields: SamplingFields, *, max_tokens: int, stream: bool
) -> SamplingParams:
    """One validated SamplingParams for the engine (n is still the client's n)."""
    defaults = model.default_sampling
    stop = fields.stop
    if isinstance(stop, str):
        stop = [stop]
    repetition = fields.repetition_detection
    try:
        params = SamplingParams(
            n=fields.n,
            repetition_penalty=_or_default(
                fields.repetition_penalty, "repetition_penalty", defaults
            ),
            presence_penalty=_or_default(fields.presence_penalty, "presence_penalty", defaults),
            frequency_penalty=_or_default(fields.frequency_penalty, "frequency_penalty", defaults),
            temperature=_or_default(fields.temperature, "temperature", defaults),
            top_p=_or_default(fields.top_p, "top_p", defaults),
            top_k=_or_default(fields.top_k, "top_k", defaults),
            min_p=_or_default(fields.min_p, "min_p", defaults),
            seed=fields.seed,
            stop=list(stop) if stop else [],
            stop_token_ids=list(fields.stop_token_ids or []),
            ignore_eos=bool(fields.ignore_eos),
            max_tokens=max_tokens,
            min_tokens=fields.min_tokens or 0,
            logprobs=fields.logprobs,
            prompt_logprobs=fields.prompt_logprobs,
            logprob_token_ids=fields.logprob_token_ids or None,
            skip_special_tokens=fields.skip_special_tokens,
            spaces_between_special_tokens=fields.spaces_between_special_tokens,
            include_stop_str_in_output=bool(fields.include_stop_str_in_output),
            output_kind=OutputKind.DELTA if stream else OutputKind.FINAL_ONLY,
            stream_interval=fields.stream_interval,
            logit_bias=convert_logit_bias(fields.logit_bias),
            allowed_token_ids=fields.allowed_token_ids,
            bad_words=list(fields.bad_words or []),
            repetition_detection=(
                msgspec.convert(repetition, RepetitionDetection) if repetition else None
            ),
            watermarking=resolve_watermarking(fields.watermarking),
            thinking_token_budget=fields.thinking_token_budget,
            routed_experts_prompt_start=fields.routed_experts_prompt_start,
            extra_args=fields.extra_args,
        )
    except msgspec.ValidationError as e:
        raise ApiError(str(e)) from e
    return finalize(params, model)


_watermark_warned = False


def resolve_watermarking(requested: bool | None) -> bool:
    """vLLM's resolve_watermarking without a watermark config (the engine's
    --watermark-config is not the frontend's to know): never applied, and
    vLLM's one warning the first time a request asks for it."""
    global _watermark_warned
    if requested is True and not _watermark_warned:
        _watermark_warned = True
        log.warning(
            "Watermarking is enabled for this request, but the engine has no watermark "
            "configuration. This and subsequent requests will run without watermarking."
        )
    return False


def transfer_extra_args(
    vllm_xargs: dict[str, Any] | None,
    kv_transfer_params: dict[str, Any] | None,
    ec_transfer_params: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """vLLM's extra_args: the request's vllm_xargs, with its KV/EC transfer
    parameters (disaggregated prefill/decode) under their keys; the engine's
    connectors read them there. Empty ones are not sent."""
    extra_args = dict(vllm_xargs) if vllm_xargs else {}
    if kv_transfer_params:
        extra_args["kv_transfer_params"] = kv_transfer_params
    if ec_transfer_params:
        extra_args["ec_transfer_params"] = ec_transfer_params
    return extra_args or None


def _or_default(value: Any, name: str, model_defaults: dict[str, Any]) -> Any:
    """The client's value, else the model's generation_config.json one, else OpenAI's."""
    return value if value is not None else model_defaults.get(name, OPENAI_DEFAULTS[name])


def finalize(params: SamplingParams, model: ModelInfo) -> SamplingParams:
    """What vLLM does to every SamplingParams after building it: its
    ``__post_init__`` rules (a 400 on a bad value, never an engine crash),
    the greedy reset, bad words as token ids, the model's EOS ids."""
    normalize(params)
    try:
        check(params)
    except ValidationError as e:
        raise from_validation(e) from e
    if params.temperature < 1e-5:  # greedy: the engine ignores these anyway
        params.top_p, params.top_k, params.min_p = 1.0, 0, 0.0
    if params.bad_words:
        params.bad_words_token_ids = bad_words_token_ids(model, params.bad_words)
    apply_generation_config(
        params, eos_token_id=model.eos_token_id, generation_eos_ids=model.generation_eos_ids
    )
    if params.skip_reading_prefix_cache is None:  # (generate's body may set it)
        params.skip_reading_prefix_cache = params.prompt_logprobs is not None
    return params


def child_params(params: SamplingParams, sample: int) -> SamplingParams:
    """The n=1 engine request for sample ``sample`` of a request with n samples."""
    if params.n == 1:
        return params
    child = msgspec.structs.replace(params, n=1)
    if params.seed is not None:
        child.seed = params.seed + sample
    return child


async def resolve_structured_outputs(
    constraints: so.Constraints, config: so.StructuredOutputsConfig
) -> StructuredOutputsParams | None:
    """The request's validated grammar constraint, or None. Checking a new
    schema or grammar takes milliseconds (llguidance, which releases the GIL):
    done in a worker thread, off the event loop."""
    if constraints.structured_outputs is None and constraints.override is None:
        return None
    return await asyncio.get_running_loop().run_in_executor(None, so.resolve, constraints, config)
