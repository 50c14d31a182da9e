"""A chat request with media, rendered by a processor worker.

The worker runs vLLM's ``OnlineRenderer.render_chat`` on a chat completion
request made of the fields that shape the prompt; the frontend has already
checked the request and planned its tools, so ``tool_choice`` stays out (the
tools are in unless ``--exclude-tools-when-tool-choice-none`` hides them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from frontend.multimodal.pool import ProcessorPool

# ChatCompletionRequest fields that reach vLLM's renderer.
RENDER_FIELDS = (
    "messages",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "reasoning_effort",
    "mm_processor_kwargs",
    "media_io_kwargs",
    "add_special_tokens",
    "truncate_prompt_tokens",
    "truncation_side",
    "cache_salt",
    "max_tokens",
    "max_completion_tokens",
)

_json = msgspec.json.Encoder()


@dataclass
class MultimodalPrompt:
    conversation: list[dict[str, Any]]
    text: str
    token_ids: list[int]
    features: list[bytes]  # mm_features as vLLM's encoder framed them


def render_body(req: Any, tools: list[Any] | None) -> bytes:
    """The JSON body a worker renders: ``req``'s prompt fields, and ``tools``."""
    body = {}
    for name in RENDER_FIELDS:
        value = getattr(req, name, None)
        if value is not None and value is not msgspec.UNSET:
            body[name] = value
    if tools is not None:
        body["tools"] = tools
    return _json.encode(body)


async def render(pool: ProcessorPool, req: Any, tools: list[Any] | None) -> MultimodalPrompt:
    processed = await pool.process_chat(render_body(req, tools))
    return MultimodalPrompt(
        processed.conversation, processed.prompt, processed.prompt_token_ids, processed.features
    )
