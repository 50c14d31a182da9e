"""The /v1/chat/completions request: its fields and vLLM's checks of them."""

from __future__ import annotations

from typing import Any

import msgspec

from frontend.errors import ApiError, field_error, schema_error, validation_errors
from frontend.openai import tooling
from frontend.openai import validators as rules
from frontend.openai.request_fields import SamplingRequest
from frontend.openai.sampling import SamplingFields
from frontend.render import check_template_override
from frontend.state import AppState

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
        raise validation_errors([field_error("list_type", ("body", "messages"), req.messages)])
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
    check_template_override(
        req.chat_template, req.chat_template_kwargs, state.config.trust_request_chat_template
    )
