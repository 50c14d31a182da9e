"""POST /v1/embeddings (OpenAI) and POST /v2/embed (Cohere).

vLLM 0.32's ``vllm/entrypoints/pooling/embed/``: one engine request per input
(text, token ids, or a conversation rendered with the chat template), task
``embed``; floats, base64 or raw bytes in ``embed_dtype``; Matryoshka
``dimensions``. Cohere's form adds ``input_type`` task instructions (as a
system turn when the model has a chat template, else a text prefix), its
``truncate`` modes and typed embeddings.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from aiohttp import web

from frontend.errors import ApiError, schema_error
from frontend.openai.common import decode_body, request_id_for
from frontend.openai.validators import check_cache_salt
from frontend.pooling import params as pparams
from frontend.pooling import vectors
from frontend.pooling.common import json_response, list_response, prompt_tokens, served_model
from frontend.pooling.inputs import (
    Inputs,
    check_chat_options,
    check_mm_kwargs,
    check_truncation,
    read_inputs,
    render,
)
from frontend.pooling.model import PoolingModel
from frontend.pooling.run import Batch, pool
from frontend.pooling.schemas import CohereEmbedRequest, EmbeddingRequest, InputRequest
from frontend.state import AppState
from protocol.pooling import PoolingParams


async def create_embedding(
    state: AppState, model: PoolingModel, request: web.Request
) -> web.StreamResponse:
    req = await decode_body(request, EmbeddingRequest)
    inputs = checked_inputs(req, embeddings=True)
    served, response_model = served_model(state, req.model)
    check_truncation(req.truncate_prompt_tokens, state.max_model_len)
    arrival = time.monotonic()
    token_lists = await render(state, model, req, inputs)
    params = pparams.resolve(
        PoolingParams(task="embed", dimensions=req.dimensions, use_activation=req.use_activation),
        model,
        state.model.name,
    )
    rid = "embd-" + request_id_for(request, req.request_id)
    results = await pool(
        state,
        request,
        Batch(
            rid,
            token_lists,
            [params] * len(token_lists),
            served,
            req.priority,
            req.cache_salt,
            arrival,
        ),
    )
    return list_response(
        state,
        request_id=rid,
        model=response_model,
        results=results,
        item_object="embedding",
        item_key="embedding",
        encoding_format=req.encoding_format,
        embed_dtype=req.embed_dtype,
        endianness=req.endianness,
    )


def checked_inputs(req: InputRequest, *, embeddings: bool) -> Inputs:
    """The checks vLLM's request models run before any handler code, in order."""
    pparams.reject_removed(req.normalize, req.task)
    check_cache_salt(req.cache_salt)
    inputs = read_inputs(req, embeddings=embeddings)
    if inputs.conversations is not None:
        check_chat_options(req)
    check_mm_kwargs(req.mm_processor_kwargs, req.media_io_kwargs)
    return inputs


# ------------------------------------------------------------------ Cohere


async def create_cohere_embedding(
    state: AppState, model: PoolingModel, request: web.Request
) -> web.StreamResponse:
    req = await decode_body(request, CohereEmbedRequest)
    given = [f for f in (req.texts, req.images, req.inputs) if f is not None]
    if len(given) != 1 or not given[0]:
        raise schema_error(
            "Value error, Exactly one of texts, images, or inputs must be "
            "provided, and it must be non-empty",
            "body",
        )
    served, _ = served_model(state, req.model)  # (Cohere's answer names no model)
    truncate, side = cohere_truncation(req)
    proxy = EmbeddingRequest(
        model=req.model,
        truncate_prompt_tokens=truncate,
        truncation_side=side,
        priority=req.priority,
    )
    proxy.input, proxy.messages = cohere_inputs(
        model, req, has_chat_template=(state.renderer.template is not None)
    )
    arrival = time.monotonic()
    token_lists = await render(state, model, proxy, read_inputs(proxy, embeddings=True))
    if req.truncate == "NONE" and req.max_tokens is not None:
        for ids in token_lists:
            if len(ids) > req.max_tokens:
                raise ApiError(
                    f"Input of {len(ids)} tokens exceeds max_tokens="
                    f"{req.max_tokens} with truncate=NONE. Set truncate to END "
                    "or START to allow truncation."
                )
    params = pparams.resolve(
        PoolingParams(task="embed", dimensions=req.output_dimension), model, state.model.name
    )
    rid = "embd-" + request_id_for(request, None)
    results = await pool(
        state,
        request,
        Batch(rid, token_lists, [params] * len(token_lists), served, req.priority, None, arrival),
    )
    floats = [r.values for r in results]
    embeddings: dict[str, Any] = {}
    types = req.embedding_types or ["float"]
    for name in ("float", "binary", "ubinary", "base64"):  # the response model's order
        if name not in types:
            continue
        if name == "float":
            embeddings[name] = floats
        elif name == "base64":
            embeddings[name] = [vectors.cohere_base64(v) for v in floats]
        else:
            embeddings[name] = [vectors.packed_bits(v, name == "binary") for v in floats]
    body: dict[str, Any] = {"id": rid, "embeddings": embeddings}
    if req.texts is not None:
        body["texts"] = req.texts
    body["meta"] = {
        "api_version": {"version": "2"},
        "billed_units": {"input_tokens": prompt_tokens(results), "image_tokens": 0},
    }
    body["response_type"] = "embeddings_by_type"
    return json_response(state, body)


def cohere_truncation(req: CohereEmbedRequest) -> tuple[int | None, Literal["left"] | None]:
    """``(truncate_prompt_tokens, truncation_side)`` of Cohere's ``truncate``."""
    if req.truncate == "NONE":
        return None, None
    if req.truncate == "START":
        return (req.max_tokens if req.max_tokens is not None else -1), "left"
    return (req.max_tokens if req.max_tokens is not None else -1), None


def cohere_inputs(
    model: PoolingModel, req: CohereEmbedRequest, *, has_chat_template: bool
) -> tuple[Any, Any]:
    """``(input, messages)`` of the equivalent embeddings request."""
    instructions = model.task_instructions
    if req.input_type is not None:
        if instructions is None:
            raise ApiError(
                f"Unsupported input_type {req.input_type!r}. This model does not "
                "define any input_type task instructions."
            )
        if req.input_type not in instructions:
            raise ApiError(
                f"Unsupported input_type {req.input_type!r}. Supported values: "
                f"{', '.join(sorted(instructions))}"
            )
    prefix = (instructions or {}).get(req.input_type or "") or None
    if req.images is not None:
        raise ApiError("images: multimodal inputs are not supported by this frontend")
    if req.texts is not None:
        if prefix is None:
            return list(req.texts), None
        if not has_chat_template:
            return [prefix + t for t in req.texts], None
        return None, [_messages([{"type": "text", "text": t}], prefix) for t in req.texts]
    conversations = []
    for item in req.inputs or []:
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, list):
            raise schema_error("Field required", "body.inputs.content")
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise ApiError("inputs: only text content is supported by this frontend")
            parts.append({"type": "text", "text": part["text"]})
        conversations.append(_messages(parts, prefix))
    return None, conversations


def _messages(parts: list[dict], prefix: str | None) -> list[dict]:
    """vLLM's _mixed_input_to_messages: the instruction as a system turn."""
    messages = (
        []
        if prefix is None
        else [{"role": "system", "content": [{"type": "text", "text": prefix}]}]
    )
    return [*messages, {"role": "user", "content": parts}]
