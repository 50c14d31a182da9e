"""A Responses request as the chat request vLLM 0.32 effectively renders and
samples (``ResponsesRequest.build_chat_params`` / ``to_sampling_params``), so
that the chat route's pipeline (``frontend.openai.chat.prepare``) does the
rest: template, parsers' plan, structured outputs, sampling params.

* ``instructions`` and ``input`` (and the stored turn) become ``messages``
  (:mod:`frontend.responses.messages`); a partial last assistant item
  continues that message instead of opening a new one;
* ``text.format`` becomes ``structured_outputs`` (json / json_object);
* ``reasoning.effort`` becomes ``reasoning_effort`` (and ``enable_thinking``);
* ``max_output_tokens`` caps the output; ``truncation: "auto"`` keeps the end
  of a prompt that does not fit;
* logprobs only with the ``message.output_text.logprobs`` include;
* function, custom and namespace tools as chat tools; ``tool_choice`` as chat
  spells it. vLLM's Responses route never asks for
  ``--enable-auto-tool-choice``: without a tool parser the tools are rendered
  and the output is text, so the chat request gets ``tool_choice: "none"``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from frontend.errors import invalid
from frontend.openai import tooling
from frontend.openai.chat_request import ChatCompletionRequest
from frontend.responses import tools
from frontend.responses.messages import continue_final_message
from frontend.responses.request import ResponsesRequest

TOOL_CALLING_RESPONSE = "tool_calling_response"


def structured_outputs(req: ResponsesRequest) -> Any:
    """vLLM's ``extract_structured_outputs``: ``text.format`` as structured outputs."""
    fmt = req.text.get("format") if req.text is not None else None
    if fmt is None:
        return req.structured_outputs
    if req.structured_outputs is not None:
        raise invalid(
            "Cannot specify both structured_outputs and text.format", "structured_outputs"
        )
    if fmt["type"] == "json_object":
        return {"json_object": True}
    if fmt["type"] == "json_schema" and fmt.get("schema") is not None:
        return {"json": fmt["schema"]}
    return None


def chat_tool_choice(req: ResponsesRequest, has_tool_parser: bool, has_tools: bool) -> Any:
    """What the chat pipeline plans with: chat's spelling of a named choice;
    "none" where vLLM neither parses nor constrains for tools up front."""
    choice = req.tool_choice
    if not has_tools or not has_tool_parser:
        return msgspec.UNSET if not has_tools else "none"
    if isinstance(choice, str):
        return choice
    if choice.get("type") in ("function", "custom"):
        return tools.parser_tool_choice(choice)
    return "none"  # allowed_tools, hosted tools: no forced call, no grammar


def to_chat(
    req: ResponsesRequest, messages: list[dict[str, Any]], *, has_tool_parser: bool
) -> ChatCompletionRequest:
    continue_final = continue_final_message(req.input)
    reasoning = req.reasoning or {}
    chat_tools = tools.chat_tools(req.tools)
    wants_logprobs = req.wants_logprobs
    return ChatCompletionRequest(
        model=req.model,
        messages=messages,
        frequency_penalty=req.frequency_penalty,
        presence_penalty=req.presence_penalty,
        repetition_penalty=req.repetition_penalty,
        logit_bias=req.logit_bias,
        seed=req.seed,
        stop=req.stop,
        stop_token_ids=req.stop_token_ids,
        ignore_eos=req.ignore_eos,
        stream=bool(req.stream),
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        skip_special_tokens=req.skip_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
        max_completion_tokens=req.max_output_tokens,
        logprobs=wants_logprobs,
        top_logprobs=req.top_logprobs if wants_logprobs else 0,
        tools=chat_tools,
        tool_choice=chat_tool_choice(req, has_tool_parser, chat_tools is not None),
        parallel_tool_calls=req.parallel_tool_calls,
        reasoning_effort=reasoning.get("effort"),
        include_reasoning=req.include_reasoning,
        structured_outputs=structured_outputs(req),
        chat_template_kwargs=req.chat_template_kwargs,
        add_generation_prompt=not continue_final,
        continue_final_message=continue_final,
        truncate_prompt_tokens=-1 if req.truncation != "disabled" else None,
        # vLLM's build_tok_params leaves TokenizeParams' default: special tokens on.
        add_special_tokens=True,
        priority=req.priority,
        cache_salt=req.cache_salt,
        session_id=req.session_id,
        vllm_xargs=req.vllm_xargs,
        kv_transfer_params=req.kv_transfer_params,
        ec_transfer_params=req.ec_transfer_params,
        watermarking=req.watermarking,
        mm_processor_kwargs=req.mm_processor_kwargs,
        media_io_kwargs=req.media_io_kwargs,
    )


def echoed_text(req: ResponsesRequest, chat: ChatCompletionRequest, plan: Any) -> Any:
    """The ``text`` the response echoes: vLLM's ``adjust_request`` changes it
    in the request when it constrains tool calls (null under a structural
    tag, the forced call's JSON schema as ``tool_calling_response``)."""
    before = tooling.parse_constraints(None, chat.structured_outputs)
    after = plan.constraints
    if after == before:
        return req.text
    fields = after.structured_outputs or {}
    if fields.get("structural_tag") is not None:
        return None
    return {
        "format": {
            "name": TOOL_CALLING_RESPONSE,
            "schema": fields.get("json"),
            "type": "json_schema",
            "description": None,
            "strict": True,
        },
        "verbosity": None,
    }
