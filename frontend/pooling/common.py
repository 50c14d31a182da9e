"""What every pooling endpoint shares: the model a request names, its ids,
usage, and the JSON and binary responses."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from frontend.errors import ApiError
from frontend.pooling import vectors
from frontend.pooling.run import Pooled
from frontend.state import AppState


def served_model(state: AppState, name: str | None) -> tuple[str, str]:
    """(what the request runs as, the response's ``model``): vLLM's pooling
    servers answer with the adapter's name or the first served name, and
    refuse other names with a 404 of their own wording."""
    if not name or name in state.model.served_names:
        return state.model.name, state.model.name
    if name in state.lora.adapters:
        return name, name
    raise ApiError(f"The model `{name}` does not exist.", 404, "NotFoundError")


def usage(num_prompt_tokens: int) -> dict[str, Any]:
    """vLLM's UsageInfo of a pooling response."""
    return {
        "prompt_tokens": num_prompt_tokens,
        "total_tokens": num_prompt_tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def prompt_tokens(results: list[Pooled]) -> int:
    return sum(r.num_prompt_tokens for r in results)


def json_response(state: AppState, body: Any) -> web.Response:
    return web.Response(body=state.json(body), content_type="application/json")


def encoded(result: Pooled, encoding_format: str, embed_dtype: str, endianness: str) -> Any:
    """One result in a JSON response: floats, or base64 of ``embed_dtype``."""
    if encoding_format == "base64":
        return vectors.to_base64(result.values, embed_dtype, endianness)
    return vectors.nested(result.values, result.shape)


def list_response(
    state: AppState,
    *,
    request_id: str,
    model: str,
    results: list[Pooled],
    item_object: str,
    item_key: str,
    encoding_format: str,
    embed_dtype: str,
    endianness: str,
) -> web.StreamResponse:
    """/v1/embeddings and /pooling: a JSON list, or (``bytes``, ``bytes_only``)
    the raw values back to back with the list's metadata in a header."""
    created = int(time.time())
    if encoding_format in ("bytes", "bytes_only"):
        return bytes_response(
            request_id, created, model, results, encoding_format, embed_dtype, endianness
        )
    data = [
        {
            "index": i,
            "object": item_object,
            item_key: encoded(r, encoding_format, embed_dtype, endianness),
        }
        for i, r in enumerate(results)
    ]
    return json_response(
        state,
        {
            "id": request_id,
            "object": "list",
            "created": created,
            "model": model,
            "data": data,
            "usage": usage(prompt_tokens(results)),
        },
    )


def bytes_response(
    request_id: str,
    created: int,
    model: str,
    results: list[Pooled],
    encoding_format: str,
    embed_dtype: str,
    endianness: str,
) -> web.Response:
    """vLLM's build_pooling_bytes_streaming_response (its header is json.dumps)."""
    body, items, offset = [], [], 0
    for i, r in enumerate(results):
        raw = vectors.to_bytes(r.values, embed_dtype, endianness)
        body.append(raw)
        items.append(
            {
                "index": i,
                "embed_dtype": embed_dtype,
                "endianness": endianness,
                "start": offset,
                "end": offset + len(raw),
                "shape": r.shape,
            }
        )
        offset += len(raw)
    headers = None
    if encoding_format == "bytes":
        tokens = prompt_tokens(results)
        headers = {
            "metadata": json.dumps(
                {
                    "id": request_id,
                    "created": created,
                    "model": model,
                    "data": items,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                }
            )
        }
    return web.Response(
        body=b"".join(body), headers=headers, content_type="application/octet-stream"
    )
