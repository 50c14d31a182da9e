"""GET /openapi.json: an OpenAPI 3.1 description of every route, as vLLM's
FastAPI server serves one.

The request bodies are the JSON Schemas of the msgspec structs the handlers
decode (``msgspec.json.schema_components``), so the description follows the
code. A few fields are typed ``Any`` in those structs because the handler
checks them itself, the way vLLM does (its error messages need the raw
value); :data:`FIELD_SHAPES` says what they accept. Built once, on the first
request, and served as cached bytes.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import msgspec
from aiohttp import web

from frontend.openai.routes import Route

REF = "#/components/schemas/{name}"
TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
INT_OR_NULL = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
TEXT_PART = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
}
MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}, {"type": "null"}]
        },
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
    },
    "required": ["role"],
}
# The ``Any`` fields of SamplingRequest, which both chat and completions requests have.
SHARED_FIELD_SHAPES: dict[str, dict[str, Any]] = {
    "prompt_logprobs": INT_OR_NULL,
    "stream_options": {"anyOf": [{"$ref": REF.format(name="StreamOptions")}, {"type": "null"}]},
    "cache_salt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "truncation_side": {"anyOf": [{"enum": ["left", "right"]}, {"type": "null"}]},
}
# (struct, field) -> the schema of an ``Any`` field: what its handler accepts.
# Fields this frontend refuses whatever their value (tools, response_format,
# prompt_embeds, ...) stay ``{}``: any JSON value, answered with a 400.
FIELD_SHAPES: dict[tuple[str, str], dict[str, Any]] = {
    ("CompletionRequest", "prompt"): {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            {**TOKEN_IDS, "minItems": 1},
            {"type": "array", "items": {**TOKEN_IDS, "minItems": 1}, "minItems": 1},
        ]
    },
    ("CompletionRequest", "logprobs"): INT_OR_NULL,
    **{
        (struct, field): shape
        for struct in ("CompletionRequest", "ChatCompletionRequest")
        for field, shape in SHARED_FIELD_SHAPES.items()
    },
    ("ChatCompletionRequest", "messages"): {"type": "array", "items": MESSAGE},
    ("ChatCompletionRequest", "top_logprobs"): INT_OR_NULL,
    ("TokenizeRequest", "messages"): {
        "anyOf": [{"type": "array", "items": MESSAGE}, {"type": "null"}]
    },
}
# Fields without which the handler always answers 400 (the structs give them
# a default to report that the way vLLM does; prompt_embeds is refused).
REQUIRED = {"ChatCompletionRequest": ["messages"], "CompletionRequest": ["prompt"]}

ERROR_RESPONSE = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "code": {"type": "integer"},
            },
            "required": ["message", "type", "param", "code"],
        }
    },
    "required": ["error"],
}
ERRORS = {  # status -> when
    "400": "invalid request (OpenAI's error shape)",
    "404": "unknown model",
    "413": "body larger than --max-request-body-size",
    "429": "over --max-concurrent-requests",
    "500": "the engine failed",
    "503": "no engine attached, or draining",
}
SUMMARIES = {
    "/v1/completions": "Completions (batch prompts, n, streaming)",
    "/v1/chat/completions": "Chat completions",
    "/inference/v1/generate": "Tokens in, tokens out",
    "/v1/models": "The served models",
    "/health": "200 while serving, 503 without an engine or while draining",
    "/version": "The engine's vLLM version",
    "/tokenize": "Prompt or messages to token ids",
    "/detokenize": "Token ids to text",
    "/metrics": "Prometheus metrics",
    "/debug/state": "Fan-out table size and engine work (--enable-debug-endpoints)",
    "/openapi.json": "This description",
    "/ping": "SageMaker's health check (as /health)",
    "/invocations": "SageMaker: a chat, completions or pooling body, sent to its route",
    "/load": "Generation and pooling requests in flight (--enable-server-load-tracking)",
    "/tokenizer_info": "The tokenizer's configuration (--enable-tokenizer-info-endpoint)",
    "/start_profile": "Start the engine's profiler (--profiler-config)",
    "/stop_profile": "Stop the engine's profiler",
    "/server_info": "What the frontend knows of the engine's config (dev mode)",
    "/reset_prefix_cache": "Reset the engine's prefix cache (dev mode)",
    "/reset_mm_cache": "Reset the engine's multi-modal cache (dev mode)",
    "/reset_encoder_cache": "Reset the engine's encoder cache (dev mode)",
    "/sleep": "Pause and put the engine to sleep (dev mode)",
    "/wake_up": "Wake the engine up (dev mode)",
    "/is_sleeping": "Whether the engine sleeps or is paused (dev mode)",
    "/release_kv_cache_memory": "Discard the KV cache after a pause (dev mode)",
    "/collective_rpc": "Call a method on every model worker (dev mode)",
    "/pause": "Pause generation: abort, wait or keep the requests in flight (dev mode)",
    "/resume": "Resume generation (dev mode)",
    "/is_paused": "Whether generation is paused (dev mode)",
    "/abort_requests": "Abort requests by id, or all in flight (dev mode)",
    "/init_weight_transfer_engine": "Weight transfer: connect to the trainer (dev mode)",
    "/shutdown_weight_transfer_engine": "Weight transfer: release the trainer (dev mode)",
    "/start_weight_update": "Weight transfer: start an update (dev mode)",
    "/start_draft_weight_update": "Weight transfer: start a draft-model update (dev mode)",
    "/update_weights": "Weight transfer: one chunk of an update (dev mode)",
    "/finish_weight_update": "Weight transfer: finish the update (dev mode)",
    "/update_weight_version": "Set the weight version (dev mode)",
    "/weight_info": "The weight version (dev mode)",
    "/weight_checker": "Weight checksums, compare or reset (dev mode)",
    "/get_world_size": "TP x PP (x DP) of the engine (dev mode)",
}
PATH = "/openapi.json"


def describe(routes: list[Route]) -> dict[str, Any]:
    """The OpenAPI document for ``routes``."""
    bodies = [r.body for r in routes if r.body is not None]
    refs, components = msgspec.json.schema_components(bodies, ref_template=REF)
    for (struct, field), shape in FIELD_SHAPES.items():
        if struct not in components:  # a pooling model has no generation routes
            continue
        properties = components[struct]["properties"]
        default = properties[field].get("default", msgspec.UNSET)
        properties[field] = shape if default is msgspec.UNSET else {**shape, "default": default}
    for struct, fields in REQUIRED.items():
        if struct not in components:
            continue
        components[struct]["required"] = sorted({*components[struct]["required"], *fields})
    components["ErrorResponse"] = ERROR_RESPONSE
    ref_of: dict[type | None, dict[str, Any]] = {body: ref for body, ref in zip(bodies, refs)}
    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        paths.setdefault(r.path, {})[r.method.lower()] = _operation(r, ref_of.get(r.body))
    return {
        "openapi": "3.1.0",
        "info": {"title": "vllm-frontend", "version": _version()},
        "paths": paths,
        "components": {"schemas": components},
    }


def _operation(route: Route, body_ref: dict | None) -> dict[str, Any]:
    json_body = {"application/json": {"schema": {"type": "object"}}}
    responses: dict[str, Any] = {"200": {"description": "OK", "content": json_body}}
    if route.count_choices is not None:
        responses["200"]["content"] = {
            **json_body,
            "text/event-stream": {"schema": {"type": "string"}},
        }
    if route.path == "/health":
        responses = {
            "200": {"description": "serving"},
            "503": {"description": "no engine attached, or draining"},
        }
    elif route.path == "/metrics":
        responses["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}
    error = {"application/json": {"schema": {"$ref": REF.format(name="ErrorResponse")}}}
    if body_ref is not None:
        wanted = (
            ERRORS
            if route.count_choices is not None
            else {k: ERRORS[k] for k in ("400", "404", "413", "503")}
        )
        for status, why in wanted.items():
            responses[status] = {"description": why, "content": error}
    op: dict[str, Any] = {
        "operationId": _operation_id(route),
        "summary": SUMMARIES.get(route.path, route.path),
        "responses": responses,
    }
    if body_ref is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body_ref}},
        }
    return op


def _operation_id(route: Route) -> str:
    return route.method.lower() + route.path.replace("/", "_").replace(".", "_")


def _version() -> str:
    try:
        return metadata.version("vllm-frontend")
    except metadata.PackageNotFoundError:
        return "0"


def route(routes: list[Route], root_path: str = "") -> Route:
    """GET /openapi.json, describing ``routes`` and itself; built on first use
    (under --root-path, FastAPI's ``servers`` entry names the prefix)."""
    cached: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        if not cached:
            doc = describe([*routes, this])
            if root_path:
                doc = {
                    "openapi": doc["openapi"],
                    "info": doc["info"],
                    "servers": [{"url": root_path}],
                    **doc,
                }
            cached.append(msgspec.json.encode(doc))
        return web.Response(body=cached[0], content_type="application/json")

    this = Route("GET", PATH, handle)
    return this
