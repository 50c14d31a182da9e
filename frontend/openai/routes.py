"""The route table: every endpoint once, with what admission control needs.

Routing, admission control (``--max-concurrent-requests``) and the drain gate
are all derived from this table: a route with a choice counter is a
generation route, so a new generation route cannot skip either.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from frontend.openai import adapters, chat, completions, generate, misc
from frontend.state import AppState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    # Generation routes: the body -> how many engine requests it asks for
    # (prompts x n), from a skeleton parse. None for every other route.
    count_choices: Callable[[bytes], int] | None = None
    # The msgspec struct the handler decodes its JSON body into (for /openapi.json).
    body: type | None = None


def openai_routes(state: AppState, generation: bool = True) -> list[Route]:
    """The generation routes (unless the engine does not generate: a pooling
    model, whose routes frontend/pooling adds) and those of every model."""

    def bind(handler) -> Handler:
        return functools.partial(handler, state)

    routes = []
    if generation:
        routes += [
            Route(
                "POST",
                "/v1/completions",
                bind(completions.create_completion),
                completions.count_choices,
                completions.CompletionRequest,
            ),
            Route(
                "POST",
                "/v1/chat/completions",
                bind(chat.create_chat_completion),
                chat.count_choices,
                chat.ChatCompletionRequest,
            ),
            Route(
                "POST",
                "/inference/v1/generate",
                bind(generate.create_generate),
                generate.count_choices,
                generate.GenerateRequest,
            ),
        ]
    routes += [
        Route("GET", "/v1/models", bind(misc.list_models)),
        Route("GET", "/health", bind(misc.health)),
        Route("GET", "/version", bind(misc.version)),
        Route("POST", "/tokenize", bind(misc.tokenize), body=misc.TokenizeRequest),
        Route("POST", "/detokenize", bind(misc.detokenize), body=misc.DetokenizeRequest),
    ]
    if state.config.runtime_lora_updating:
        routes += [
            Route(
                "POST",
                "/v1/load_lora_adapter",
                bind(adapters.load_lora_adapter),
                body=adapters.LoadLoRAAdapterRequest,
            ),
            Route(
                "POST",
                "/v1/unload_lora_adapter",
                bind(adapters.unload_lora_adapter),
                body=adapters.UnloadLoRAAdapterRequest,
            ),
        ]
    if state.config.enable_debug_endpoints:
        routes.append(Route("GET", "/debug/state", bind(misc.debug_state)))
    return routes
