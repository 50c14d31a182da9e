"""The Responses API's JSON: the response object, its output items, usage and
logprobs, with vLLM 0.32's keys in its order (openai's pydantic types dumped
``by_alias``, every null present; ``responses/protocol.py``, ``utils.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from frontend.ids import random_hex
from frontend.openai.logprobs import chat_logprobs
from frontend.responses.request import ResponsesRequest
from frontend.responses.tools import call_names, custom_names
from frontend.text import Position
from protocol.sampling import SamplingParams


def new_id(prefix: str) -> str:
    """vLLM's ids: a prefix and 16 hex digits (``random_uuid()``)."""
    return f"{prefix}_{random_hex(8)}"


# ---------------------------------------------------------------------------- items


def reasoning_item(item_id: str, text: str | None, status: str | None) -> dict[str, Any]:
    content = None if text is None else [{"text": text, "type": "reasoning_text"}]
    return {
        "id": item_id,
        "summary": [],
        "type": "reasoning",
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def text_part(text: str, logprobs: list | None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "content": parts,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, namespace: str | None, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        "async": None,
        "caller": None,
        "namespace": namespace,
        "status": status,
    }


def custom_call_item(item_id: str, call_id: str, name: str, payload: str) -> dict[str, Any]:
    return {
        "call_id": call_id,
        "input": payload,
        "name": name,
        "type": "custom_tool_call",
        "id": item_id,
        "async": None,
        "caller": None,
        "namespace": None,
    }


@dataclass(frozen=True)
class ToolNames:
    """How a model-facing tool name reads in an output item (namespaces, custom tools)."""

    namespaced: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    custom: frozenset[str] = frozenset()

    @classmethod
    def of(cls, tools: list[dict[str, Any]]) -> ToolNames:
        return cls(call_names(tools), custom_names(tools))

    def resolve(self, name: str) -> tuple[str, str | None]:
        return self.namespaced.get(name, (name, None))


def output_items(
    reasoning: str | None,
    content: str | None,
    calls: Sequence[Any],
    logprobs: list | None,
    names: ToolNames,
) -> list[dict[str, Any]]:
    """vLLM's ``build_response_output_items`` (a parser's result): reasoning,
    then the message, then one item per tool call."""
    items = []
    if reasoning:
        items.append(reasoning_item(new_id("rs"), reasoning, None))
    if content:
        items.append(message_item(new_id("msg"), [text_part(content, logprobs)], "completed"))
    for call in calls:
        call_id = call.id or f"chatcmpl-tool-{random_hex(8)}"
        if call.name in names.custom:
            items.append(
                custom_call_item(new_id("ctc"), call_id, call.name, custom_input(call.arguments))
            )
            continue
        name, namespace = names.resolve(call.name)
        items.append(
            function_call_item(new_id("fc"), call_id, name, namespace, call.arguments, "completed")
        )
    return items


def custom_input(arguments: str) -> str:
    """vLLM's ``decode_custom_tool_input``: the shim call's ``input``, else the text."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    value = parsed.get("input") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments


# ---------------------------------------------------------------------------- logprobs


def full_logprobs(
    token_ids: list[int], positions: Sequence[Position | None], top: int, as_token_ids: bool
) -> list[dict[str, Any]]:
    """An output_text part's ``logprobs``: openai's Logprob, ``bytes`` included
    (``as_token_ids``: --return-tokens-as-token-ids, tokens as ``token_id:N``)."""
    return [
        {
            "token": e["token"],
            "bytes": e["bytes"],
            "logprob": e["logprob"],
            "top_logprobs": [
                {"token": t["token"], "bytes": t["bytes"], "logprob": t["logprob"]}
                for t in e["top_logprobs"]
            ],
        }
        for e in chat_logprobs(token_ids, positions, top, as_token_ids)["content"]
    ]


def stream_logprobs(full: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A text delta's ``logprobs``: the same entries without ``bytes``."""
    return [
        {
            "token": e["token"],
            "logprob": e["logprob"],
            "top_logprobs": [
                {"token": t["token"], "logprob": t["logprob"]} for t in e["top_logprobs"]
            ],
        }
        for e in full
    ]


# ---------------------------------------------------------------------------- usage, response


def raw_message(text: str, token_ids: list[int]) -> dict[str, Any]:
    """``enable_response_messages``: a prompt or an output as text and tokens."""
    return {"message": text, "tokens": token_ids, "type": "raw_message_tokens"}


def usage(
    prompt_tokens: int,
    output_tokens: int,
    cached: int,
    cache_write: int | None,
    reasoning_tokens: int,
) -> dict[str, Any]:
    """vLLM's ResponseUsage (its extra keys included; ``cached_tokens`` always)."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": cache_write or 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": reasoning_tokens,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": prompt_tokens + output_tokens,
    }


@dataclass
class Echo:
    """What a response object repeats of its request (vLLM's ``from_request``):
    the request's fields after its validators, and the sampling values in
    effect."""

    req: ResponsesRequest
    response_id: str
    model: str
    params: SamplingParams
    text: Any
    created_at: int = field(default_factory=lambda: int(time.time()))

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        transfer: tuple[Any, Any] = (None, None),
        raw_messages: tuple[Any, Any] = (None, None),
    ) -> dict[str, Any]:
        req, params = self.req, self.params
        return {
            "id": self.response_id,
            "created_at": self.created_at,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": req.instructions,
            "metadata": req.metadata,
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": req.parallel_tool_calls
            if req.parallel_tool_calls is not None
            else True,
            "temperature": params.temperature,
            "tool_choice": req.tool_choice,
            "tools": req.tools,
            "top_p": params.top_p,
            "background": req.background,
            "max_output_tokens": params.max_tokens,
            "max_tool_calls": req.max_tool_calls,
            "previous_response_id": req.previous_response_id,
            "prompt": None,
            "reasoning": req.reasoning,
            "service_tier": req.service_tier,
            "status": status,
            "text": self.text,
            "top_logprobs": params.logprobs,
            "truncation": req.truncation,
            "usage": usage,
            "user": req.user,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            "kv_transfer_params": transfer[0],
            "ec_transfer_params": transfer[1],
            "input_messages": raw_messages[0],
            "output_messages": raw_messages[1],
        }
