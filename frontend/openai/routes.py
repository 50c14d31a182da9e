"""The route table: every endpoint once, with what admission control needs.

Routing, admission control (``--max-concurrent-requests``), the drain gate
and load tracking (``/load``) are all derived from this table: a route with a
choice counter is a generation route, so a new generation route cannot skip
any of them. ``/invocations`` has the counter of the route it hands a body to.
:func:`operational_routes` adds vLLM's operational routes (SageMaker, /load,
/tokenizer_info, profiling, the dev mode) around a model's own.
"""

from __future__ import annotations

import functools
import logging

from frontend.openai import (
    adapters,
    chat,
    completions,
    dev_routes,
    generate,
    misc,
    rl_routes,
    sagemaker,
    scale_out,
    tokenizer_info,
)
from frontend.openai.dev_schemas import (
    CollectiveRpcRequest,
    FinishWeightUpdateRequest,
    InitWeightTransferRequest,
    RlAbortRequest,
    StartProfileRequest,
    UpdateWeightsRequest,
    UpdateWeightVersionRequest,
    WeightCheckerRequest,
)
from frontend.openai.profile_routes import Profiler
from frontend.openai.route import Handler, Route
from frontend.state import AppState

__all__ = ["Handler", "Route", "openai_routes", "operational_routes"]
log = logging.getLogger("frontend.openai")


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
            # vLLM's scale-out routes (no engine request: no choice counter)
            Route(
                "POST",
                "/v1/chat/completions/render",
                bind(scale_out.render_chat),
                body=chat.ChatCompletionRequest,
            ),
            Route(
                "POST",
                "/v1/completions/render",
                bind(scale_out.render_completion),
                body=completions.CompletionRequest,
            ),
            Route(
                "POST",
                "/inference/v1/abort_requests",
                bind(scale_out.abort_requests),
                body=scale_out.AbortRequests,
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


def operational_routes(state: AppState, routes: list[Route], generation: bool) -> list[Route]:
    """vLLM's operational routes around ``routes`` (the model's own):
    /ping and /invocations (SageMaker), /load, /tokenizer_info (with its
    flag), /start_profile and /stop_profile (with a profiler), and the
    development routes (VLLM_SERVER_DEV_MODE=1)."""

    def bind(handler) -> Handler:
        return functools.partial(handler, state)

    config = state.operational
    out = [
        Route("GET", "/ping", bind(misc.health)),
        Route("POST", "/ping", bind(misc.health)),
        sagemaker.invocations_route(routes),
        Route("GET", "/load", bind(misc.server_load)),
    ]
    if config.enable_tokenizer_info_endpoint:
        out.append(Route("GET", "/tokenizer_info", bind(tokenizer_info.route_handler(generation))))
    profiler_kind = (config.profiler_config or {}).get("profiler")
    if profiler_kind is not None:
        log.warning(
            "Profiler with mode '%s' is enabled in the API server. This should ONLY be "
            "used for local development!",
            profiler_kind,
        )
        profiler = Profiler(state)
        out += [
            Route("POST", "/start_profile", bind(profiler.start), body=StartProfileRequest),
            Route("POST", "/stop_profile", bind(profiler.stop)),
        ]
    if config.dev_mode:
        log.warning(
            "SECURITY WARNING: Development endpoints are enabled! "
            "This should NOT be used in production!"
        )
        out += dev_mode_routes(bind)
    return out


def dev_mode_routes(bind) -> list[Route]:
    """vLLM's register_vllm_dev_api_routers and its RL router, in its order."""
    dev, rl = dev_routes, rl_routes
    return [
        Route("POST", "/reset_prefix_cache", bind(dev.reset_prefix_cache)),
        Route("POST", "/reset_mm_cache", bind(dev.reset_mm_cache)),
        Route("POST", "/reset_encoder_cache", bind(dev.reset_encoder_cache)),
        Route("POST", "/collective_rpc", bind(dev.collective_rpc), body=CollectiveRpcRequest),
        Route("GET", "/server_info", bind(dev.server_info)),
        Route("POST", "/sleep", bind(dev.sleep)),
        Route("POST", "/release_kv_cache_memory", bind(dev.release_kv_cache_memory)),
        Route("POST", "/wake_up", bind(dev.wake_up)),
        Route("GET", "/is_sleeping", bind(dev.is_sleeping)),
        Route("POST", "/pause", bind(rl.pause)),
        Route("POST", "/resume", bind(rl.resume)),
        Route("POST", "/abort_requests", bind(rl.abort_requests), body=RlAbortRequest),
        Route("GET", "/is_paused", bind(rl.is_paused)),
        Route(
            "POST",
            "/init_weight_transfer_engine",
            bind(rl.init_weight_transfer_engine),
            body=InitWeightTransferRequest,
        ),
        Route("POST", "/shutdown_weight_transfer_engine", bind(rl.shutdown_weight_transfer_engine)),
        Route("POST", "/start_weight_update", bind(rl.start_weight_update)),
        Route("POST", "/start_draft_weight_update", bind(rl.start_draft_weight_update)),
        Route("POST", "/update_weights", bind(rl.update_weights), body=UpdateWeightsRequest),
        Route(
            "POST",
            "/finish_weight_update",
            bind(rl.finish_weight_update),
            body=FinishWeightUpdateRequest,
        ),
        Route(
            "POST",
            "/update_weight_version",
            bind(rl.update_weight_version),
            body=UpdateWeightVersionRequest,
        ),
        Route("GET", "/weight_info", bind(rl.weight_info)),
        Route("POST", "/weight_checker", bind(rl.weight_checker), body=WeightCheckerRequest),
        Route("GET", "/get_world_size", bind(dev.get_world_size)),
    ]
