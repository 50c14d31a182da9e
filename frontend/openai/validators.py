"""vLLM 0.32's request rules, one small function each, shared by
/v1/completions, /v1/chat/completions and /inference/v1/generate.

vLLM's pydantic request models check a body in two passes, and so do the
routes' ``validate_request`` functions, calling these in the same order:

1. model validators (``mode="before"``) on the raw body, the last defined
   first; a broken rule is a VLLMValidationError, which clients get as a
   plain ``BadRequestError`` (:func:`frontend.errors.invalid`);
2. field constraints, in field order: pydantic's schema errors
   (``Bad Request``, ``param`` ``body.<field>``; :func:`frontend.errors.schema_error`).

Each function's comment names the vLLM validator or field it mirrors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from frontend.errors import (
    bool_error,
    field_error,
    invalid,
    lax_bool,
    schema_error,
    validation_errors,
)
from protocol.sampling import THINKING_BUDGET_MESSAGE

MAX_COMPLETION_PROMPTS = 1024  # vLLM's VLLM_MAX_COMPLETION_PROMPTS
MAX_STOP_STRINGS = 4  # vLLM's VLLM_MAX_STOP_STRINGS
CACHE_SALT_MAX_LENGTH = 128
CACHE_SALT_FORBIDDEN_CHARS = frozenset("@/\\\x00")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------- model validators


# CompletionRequest.validate_prompt_list_length (prompts, not one token list)
def check_prompt_list_length(prompt: Any) -> None:
    if (
        isinstance(prompt, list)
        and not all(is_int(t) for t in prompt)
        and len(prompt) > MAX_COMPLETION_PROMPTS
    ):
        raise invalid(
            f"prompt list length {len(prompt)} exceeds the maximum allowed count "
            f"of {MAX_COMPLETION_PROMPTS}. To increase this limit, set the "
            "VLLM_MAX_COMPLETION_PROMPTS environment variable.",
            "prompt",
        )


# CompletionRequest.validate_prompt_and_prompt_embeds
def check_prompt_or_embeds(prompt: Any, prompt_embeds: Any) -> None:
    if (prompt is None or prompt == "") and (prompt_embeds is None or prompt_embeds == []):
        raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")


# validate_stream_options (completions and chat): a truthy value needs stream
def check_stream_options(stream_options: Any, stream: bool | None) -> None:
    if stream_options and not stream:
        raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")


# check_logprobs (completions and chat), its first rule
def check_no_logprob_token_ids_in_beam_search(
    logprob_token_ids: Any, use_beam_search: bool
) -> None:
    if logprob_token_ids and use_beam_search:
        raise invalid("`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")


# CompletionRequest.check_logprobs: beam search computes no prompt logprobs
def check_no_echo_logprobs_in_beam_search(use_beam_search: bool, echo: Any, logprobs: Any) -> None:
    if use_beam_search and echo and logprobs is not None:
        raise invalid(
            "`echo` with `logprobs` is not supported with beam search because "
            "beam search does not compute prompt logprobs.",
            "echo",
        )


# CompletionRequest.check_logprobs: echo with max_tokens=0 generates nothing
def check_logprob_token_ids_need_output(
    logprob_token_ids: Any, echo: Any, max_tokens: int | None
) -> None:
    if logprob_token_ids and echo and max_tokens == 0:
        raise invalid(
            "`logprob_token_ids` is not supported when `echo=True` and "
            "`max_tokens=0` because no output tokens are generated.",
            "logprob_token_ids",
        )


# CompletionRequest.check_logprobs: logprobs is a count here
def check_logprob_token_ids_with_logprobs(logprob_token_ids: Any, logprobs: Any) -> None:
    if logprob_token_ids and logprobs is None:
        raise invalid(
            "when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids"
        )


# ChatCompletionRequest.check_logprobs: logprobs is a flag here
def check_logprob_token_ids_with_logprobs_flag(logprob_token_ids: Any, logprobs: Any) -> None:
    if logprob_token_ids and not logprobs:
        raise invalid(
            "when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids"
        )


# check_logprobs (completions and chat): raw non-numbers would be a 500 there
def check_numbers(fields: Sequence[tuple[str, Any]]) -> None:
    for name, value in fields:
        if value is not None and not isinstance(value, (int, float)):
            raise invalid(f"`{name}` must be an integer.", name, value)


# check_logprobs (completions and chat): prompt_logprobs
def check_prompt_logprobs(prompt_logprobs: Any, stream: bool | None) -> None:
    if prompt_logprobs is None:
        return
    if stream and (prompt_logprobs > 0 or prompt_logprobs == -1):
        raise invalid("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    check_positive_or_all("prompt_logprobs", prompt_logprobs)


# check_logprobs (completions and chat): a count of logprobs, -1 meaning all
def check_positive_or_all(name: str, value: Any) -> None:
    if value is not None and value < 0 and value != -1:
        raise invalid(f"`{name}` must be a positive value or -1.", name, value)


# ChatCompletionRequest.check_logprobs: top_logprobs
def check_top_logprobs(top_logprobs: Any, logprobs: Any) -> None:
    if top_logprobs is None:
        return
    check_positive_or_all("top_logprobs", top_logprobs)
    if (top_logprobs == -1 or top_logprobs > 0) and not logprobs:
        raise invalid("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")


# ChatCompletionRequest.check_generation_prompt: only values the client sent count
def check_generation_prompt(continue_final_message: bool, add_generation_prompt: Any) -> None:
    if continue_final_message and add_generation_prompt is True:
        raise invalid(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )


# check_cache_salt_support (vLLM's validate_cache_salt; generate calls it too)
def check_cache_salt(cache_salt: object) -> None:
    if cache_salt is None:
        return
    if not isinstance(cache_salt, str) or not cache_salt:
        raise invalid(
            "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt"
        )
    if len(cache_salt) > CACHE_SALT_MAX_LENGTH or any(
        c in CACHE_SALT_FORBIDDEN_CHARS for c in cache_salt
    ):
        raise invalid(
            f"Parameter 'cache_salt' must be at most {CACHE_SALT_MAX_LENGTH} "
            "characters and must not contain '@', '/', '\\\\', or NUL.",
            "cache_salt",
        )


# ---------------------------------------------------------------------------- field constraints


# a plain ``int`` field in pydantic's lax mode: bools and integral floats convert
def lax_int(value: Any, name: str) -> Any:
    if isinstance(value, bool) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    if isinstance(value, float):
        raise schema_error(
            "Input should be a valid integer, got a number with a fractional part", f"body.{name}"
        )
    return value


# StopParam: at most VLLM_MAX_STOP_STRINGS stop strings
def check_stop(stop: Any) -> None:
    if isinstance(stop, list) and len(stop) > MAX_STOP_STRINGS:
        raise schema_error(
            f"List should have at most {MAX_STOP_STRINGS} items after validation, not {len(stop)}",
            "body.stop",
        )


# ``Field(ge=minimum)`` (truncate_prompt_tokens: -1, stream_interval: 1)
def check_at_least(value: int | None, minimum: int, name: str) -> None:
    if value is not None and value < minimum:
        raise validation_errors(
            [field_error("greater_than_equal", ("body", name), value, {"ge": minimum})]
        )


# a ``Literal[...] | None`` field (truncation_side, reasoning_effort)
def check_one_of(value: Any, allowed: Sequence[str], name: str) -> None:
    if value is not None and value not in allowed:
        quoted = [f"'{a}'" for a in allowed]
        expected = f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        raise validation_errors(
            [field_error("literal_error", ("body", name), value, {"expected": expected})]
        )


# GenerateRequest.token_ids: Field(min_length=1) and validate_token_ids
def check_token_ids(token_ids: list[int]) -> None:
    if not token_ids:
        raise schema_error(
            "List should have at least 1 item after validation, not 0", "body.token_ids"
        )
    if min(token_ids) < 0:
        raise schema_error(
            "Value error, token_ids must not contain negative values", "body.token_ids"
        )


# ThinkingTokenBudget (validate_thinking_token_budget): an int >= 0, or -1 for
# unlimited (None)
def thinking_token_budget(value: Any) -> int | None:
    if value is None:
        return None
    if not is_int(value) or value < -1:
        raise invalid(THINKING_BUDGET_MESSAGE, "thinking_token_budget", value)
    return None if value == -1 else value


# InputProcessor: a thinking budget needs the reasoning config a reasoning
# parser gives (its start and end strings)
def check_thinking_budget_supported(budget: int | None, reasoning_enabled: bool) -> None:
    if budget is not None and not reasoning_enabled:
        raise invalid(
            "thinking_token_budget is set but reasoning_config is not configured. Please set "
            "--reasoning-parser and/or --reasoning-config to use thinking_token_budget."
        )


# InputProcessor.process_inputs, per prompt
def check_routed_experts_prompt_start(start: int, prompt_len: int) -> None:
    if not 0 <= start <= prompt_len:
        raise invalid(
            f"routed_experts_prompt_start must be between 0 and the prompt length "
            f"({prompt_len}), inclusive.",
            "routed_experts_prompt_start",
            start,
        )


_XARG_SCALARS = ("string_type", "int_type", "float_type")


# vllm_xargs: dict[str, str | int | float | list[str | int | float]] (lax: a
# bool is an int). vLLM's rendering leaves the union's members out of ``loc``.
def check_vllm_xargs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    loc = ("body", "vllm_xargs")
    if not isinstance(value, dict):
        raise validation_errors([field_error("dict_type", loc, value)])
    errors: list[dict] = []
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, list):
            bad = [(i, x) for i, x in enumerate(item) if not _xarg_scalar(x)]
            if bad:  # every member of the union fails: the scalars, then the list's items
                errors += [field_error(kind, (*loc, key), item) for kind in _XARG_SCALARS]
                for i, x in bad:
                    errors += [field_error(kind, (*loc, key, i), x) for kind in _XARG_SCALARS]
            out[key] = [_xarg(x) for x in item]
        elif _xarg_scalar(item):
            out[key] = _xarg(item)
        else:
            errors += [field_error(kind, (*loc, key), item) for kind in _XARG_SCALARS]
            errors.append(field_error("list_type", (*loc, key), item))
    if errors:
        raise validation_errors(errors)
    return out


def _xarg_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float))


def _xarg(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value


# a lax ``bool | None`` field typed by hand (watermarking)
def check_lax_bool(value: Any, name: str) -> bool | None:
    if value is None:
        return None
    flag = lax_bool(value)
    if flag is None:
        raise validation_errors([bool_error(("body", name), value)])
    return flag


# a ``dict[str, Any] | None`` field typed by hand (kv/ec_transfer_params)
def check_object(value: Any, name: str) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise validation_errors([field_error("dict_type", ("body", name), value)])
    return value


# a ``str | None`` field typed by hand (session_id)
def check_str(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise validation_errors([field_error("string_type", ("body", name), value)])
    return value


# GenerateRequest.reasoning_parser_kwargs: {"chat_template_kwargs": dict}, extra="forbid"
def check_reasoning_parser_kwargs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    loc = ("body", "reasoning_parser_kwargs")
    if not isinstance(value, dict):
        raise validation_errors([field_error("model_attributes_type", loc, value)])
    errors = [
        field_error("extra_forbidden", (*loc, k), v)
        for k, v in value.items()
        if k != "chat_template_kwargs"
    ]
    kwargs = value.get("chat_template_kwargs", {})
    if not isinstance(kwargs, dict):
        errors.insert(0, field_error("dict_type", (*loc, "chat_template_kwargs"), kwargs))
    if errors:
        raise validation_errors(errors)
    return {"chat_template_kwargs": kwargs}


# validate_request_mm_kwargs: per-request multimodal kwargs need
# --trust-request-mm-kwargs (checked when the prompt is rendered)
def check_mm_kwargs(mm_processor_kwargs: Any, media_io_kwargs: Any, trusted: bool) -> None:
    if trusted:
        return
    for name, value, what in (
        ("mm_processor_kwargs", mm_processor_kwargs, "multimodal preprocessing"),
        ("media_io_kwargs", media_io_kwargs, "multimodal media loading"),
    ):
        if value:
            raise invalid(
                f"Per-request {name} are disabled by default because they can change "
                f"{what} resource usage. Start the server with --trust-request-mm-kwargs "
                "only when clients are trusted.",
                name,
            )
