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

from frontend.errors import invalid, schema_error

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
        raise schema_error(f"Input should be greater than or equal to {minimum}", f"body.{name}")


# a ``Literal[...] | None`` field (truncation_side, reasoning_effort)
def check_one_of(value: Any, allowed: Sequence[str], name: str) -> None:
    if value is not None and value not in allowed:
        quoted = [f"'{a}'" for a in allowed]
        raise schema_error(
            f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}", f"body.{name}"
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
