"""SageMaker's routes: ``GET|POST /ping`` (= /health) and ``POST /invocations``.

As vLLM 0.32 (``serve/sagemaker/api_router.py`` and the
``model_hosting_container_standards`` decorators it applies), /invocations:

1. needs ``Content-Type: application/json`` (vLLM's validate_json_request);
2. reads the body as JSON ("JSON decode error: ..." otherwise);
3. refuses SageMaker's stateful-session requests (``{"requestType": ...}``
   bodies, the ``X-Amzn-SageMaker-Session-Id`` header): sessions are off
   unless SageMaker's environment turns them on, which this frontend does not
   implement;
4. sets the body's ``model`` to the ``X-Amzn-SageMaker-Adapter-Identifier``
   header, **or to null without it** (the decorator always writes the field,
   so a plain /invocations runs on the default model);
5. hands the body to the first route whose request it is, in vLLM's order:
   chat (a ``messages`` list), completions, then the pooling routes (embed or
   classify, rerank, score, pooling), or answers "Cannot find suitable handler".

The chosen route's handler runs as if called on its own path, and the route
table counts /invocations like it: admission, the drain gate, load tracking.
Which request a body "is" follows vLLM's pydantic unions by the fields that
tell them apart (the README notes where validation order makes vLLM differ).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from frontend.errors import ApiError, invalid
from frontend.openai.fastapi_params import http_error, raw_json
from frontend.openai.route import Handler, Route

log = logging.getLogger("frontend.openai")

ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
SESSION_HEADER = "X-Amzn-SageMaker-Session-Id"
SESSIONS_OFF = "Invalid payload. stateful sessions not enabled"
MEDIA_TYPE_ERROR = (
    "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
)
SESSION_TYPES = ("NEW_SESSION", "CLOSE")


def _messages(body: dict) -> bool:
    """A chat request: a list of messages, each an object with a role."""
    messages = body.get("messages")
    return isinstance(messages, list) and all(isinstance(m, dict) and "role" in m for m in messages)


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    )


def _completion(body: dict) -> bool:
    """CompletionRequest's prompt: text, texts, token ids or lists of them (or none)."""
    prompt = body.get("prompt")
    if prompt is None or isinstance(prompt, str) or _token_ids(prompt):
        return True
    return isinstance(prompt, list) and (
        all(isinstance(p, str) for p in prompt) or all(_token_ids(p) for p in prompt)
    )


def _prompt_required(body: dict) -> ApiError | None:
    """CompletionRequest's before-validator: it runs ahead of the field checks
    and its error is not a pydantic one, so vLLM answers it for any body that
    is not chat and has no prompt (whatever else the body gets wrong)."""
    prompt, embeds = body.get("prompt"), body.get("prompt_embeds")
    if prompt in (None, "") and (embeds is None or embeds == []):
        return invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    return None


def _inputs(body: dict) -> bool:
    """A completion-style (``input``) or chat-style (``messages``) pooling request."""
    return body.get("input") is not None or _messages(body)


def _rerank(body: dict) -> bool:
    return "query" in body and "documents" in body


# ScoreRequest's union: queries+documents, queries+items, data_1+data_2, text_1+text_2.
SCORE_PAIRS: tuple[tuple[str, str], ...] = (("queries", "documents"), ("queries", "items"))
SCORE_PAIRS += (("data_1", "data_2"), ("text_1", "text_2"))


def _score(body: dict) -> bool:
    return any(a in body and b in body for a, b in SCORE_PAIRS)


def _never(body: dict) -> ApiError | None:
    return None


# vLLM's invocation types, in its order (generate, then pooling): the route
# that serves each, its request's name, what a body of that request has, and
# the error its model raises ahead of the rest (which ends the search).
CANDIDATES: tuple[tuple[str, str, Callable[[dict], bool], Callable], ...] = (
    ("/v1/chat/completions", "ChatCompletionRequest", _messages, _never),
    ("/v1/completions", "CompletionRequest", _completion, _prompt_required),
    ("/v1/embeddings", "EmbeddingRequest", _inputs, _never),
    ("/classify", "ClassificationRequest", _inputs, _never),
    ("/rerank", "RerankRequest", _rerank, _never),
    ("/score", "ScoreRequest", _score, _never),
    ("/pooling", "PoolingRequest", _inputs, _never),
)


@dataclass(frozen=True)
class Candidate:
    name: str
    route: Route
    has_shape: Callable[[dict], bool]
    refusal: Callable[[dict], ApiError | None] = _never

    def accepts(self, body: Any) -> bool:
        """The body is this route's request: its shape, and its schema."""
        if not isinstance(body, dict) or not self.has_shape(body):
            return False
        if self.route.body is None:
            return True
        try:
            msgspec.convert(body, self.route.body, strict=False)
        except msgspec.ValidationError:
            return False
        return True


def candidates(routes: list[Route]) -> list[Candidate]:
    by_path = {r.path: r for r in routes if r.method == "POST"}
    return [
        Candidate(name, by_path[path], shape, refusal)
        for path, name, shape, refusal in CANDIDATES
        if path in by_path
    ]


def _session_errors(body: dict) -> list[dict]:
    """pydantic's errors for a body that names ``requestType`` but is not a
    SessionRequest (the model's field first, then each extra key)."""
    errors: list[dict] = []
    if body.get("requestType") not in SESSION_TYPES:
        expected = "'NEW_SESSION' or 'CLOSE'"
        errors.append(
            {
                "type": "enum",
                "loc": ["requestType"],
                "msg": f"Input should be {expected}",
                "input": body.get("requestType"),
                "ctx": {"expected": expected},
            }
        )
    for key, value in body.items():
        if key != "requestType":
            errors.append(
                {
                    "type": "extra_forbidden",
                    "loc": [key],
                    "msg": "Extra inputs are not permitted",
                    "input": value,
                }
            )
    return errors


def _not_an_object(body: Any) -> dict:
    return {
        "type": "model_type",
        "loc": [],
        "msg": "Input should be a valid dictionary or instance of SessionRequest",
        "input": body,
        "ctx": {"class_name": "SessionRequest"},
    }


def _transformed(body: Any, request: web.Request) -> dict:
    """What SageMaker's session and adapter decorators leave of the body (or
    their errors: theirs are TypeErrors for JSON that is not an object)."""
    if not isinstance(body, (dict, list, str)):
        raise ApiError(f"argument of type '{type(body).__name__}' is not iterable")
    if "requestType" in body:  # (membership, as the decorator tests it)
        errors = _session_errors(body) if isinstance(body, dict) else [_not_an_object(body)]
        if errors:
            raise http_error(msgspec.json.encode(errors).decode())
        raise http_error(SESSIONS_OFF)  # NEW_SESSION / CLOSE: sessions are off
    if request.headers.get(SESSION_HEADER) is not None:
        raise http_error(f"{SESSIONS_OFF}, {SESSION_HEADER} header not supported")
    if isinstance(body, list):
        raise ApiError("list indices must be integers or slices, not str")
    if isinstance(body, str):
        raise ApiError("'str' object does not support item assignment")
    body["model"] = request.headers.get(ADAPTER_HEADER)  # None without the header
    return body


def invocations_route(routes: list[Route]) -> Route:
    """POST /invocations over the routes it may hand a body to."""
    options = candidates(routes)

    def pick(body: Any) -> Candidate | None:
        """The first candidate the body is a request of; a refusal on the way
        is raised (as vLLM's VLLMValidationError escapes its loop)."""
        for candidate in options:
            if candidate.accepts(body):
                return candidate
            error = candidate.refusal(body) if isinstance(body, dict) else None
            if error is not None:
                raise error
        return None

    async def invocations(request: web.Request) -> web.StreamResponse:
        media_type = request.headers.get("Content-Type", "").lower().split(";", 1)[0]
        if media_type != "application/json":
            raise ApiError(MEDIA_TYPE_ERROR, 400, "Bad Request")
        body = _transformed(raw_json(await request.read(), "JSON decode error: {}"), request)
        chosen = pick(body)
        if chosen is None:
            names = [c.name for c in options]
            raise ApiError(f"Cannot find suitable handler for request. Expected one of: {names}")
        # The handler reads the body the decorators rewrote (aiohttp caches
        # what read() returns; the rewritten bytes take its place).
        request._read_bytes = msgspec.json.encode(body)
        return await chosen.route.handler(request)

    def count_choices(raw: bytes) -> int:
        try:
            body = msgspec.json.decode(raw)
            chosen = pick(body)
        except (msgspec.DecodeError, ApiError):
            return 1
        counter = chosen.route.count_choices if chosen is not None else None
        return counter(raw) if counter is not None else 1

    handler: Handler = invocations
    return Route("POST", "/invocations", handler, count_choices)
