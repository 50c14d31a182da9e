"""What a request handler may read and use: the application state.

The composition root (``server.py``) builds one :class:`AppState` and hands it
to the routes; handlers never see the server. It holds the model's facts, the
fan-out table, the renderer, the LoRA adapters, the handler-facing flags, and
what is known of the engine (attached, its limits, the fingerprint), kept
current by the server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from frontend.errors import not_found_model
from frontend.fanout import Table
from frontend.lora import LoraRegistry
from frontend.model import ModelInfo
from frontend.multimodal.pool import ProcessorPool
from frontend.parsers import ChatParsers
from frontend.render import Renderer
from frontend.request_log import RequestLogger
from frontend.structured import StructuredOutputsConfig
from protocol.handshake import ReadyResponse
from protocol.sampling import ModelLimits


@dataclass(frozen=True)
class ServingConfig:
    """The flags request handlers follow."""

    max_logprobs: int = 20
    force_include_usage: bool = False
    max_stream_buffer: int = 1 << 20
    enable_debug_endpoints: bool = False
    # VLLM_ALLOW_RUNTIME_LORA_UPDATING: serve /v1/load_lora_adapter and unload.
    runtime_lora_updating: bool = False
    trace_requests: bool = False  # --otlp-traces-endpoint: trace headers go to the engine
    # --structured-outputs-config (its backend goes into every constrained request).
    structured_outputs: StructuredOutputsConfig = field(default_factory=StructuredOutputsConfig)
    # vLLM's chat and completion flags (frontend/ops/serving_flags.py).
    default_chat_template_kwargs: dict[str, Any] | None = None
    chat_template_content_format: str = "auto"
    trust_request_chat_template: bool = False
    server_chat_template: bool = False  # --chat-template given (it outranks a kwargs template)
    trust_request_mm_kwargs: bool = False
    response_role: str = "assistant"
    return_tokens_as_token_ids: bool = False
    enable_prompt_tokens_details: bool = False
    exclude_tools_when_tool_choice_none: bool = False
    sse_keep_alive_interval: int = 0
    root_path: str = ""  # --root-path, without its trailing slash
    anthropic_disabled_thinking_effort: str = "auto"
    reasoning_config: bool = False  # --reasoning-config given (a thinking budget is allowed)
    # The request log, the access log, error tracebacks (vLLM's logging flags).
    enable_log_requests: bool = False
    max_log_len: int | None = None
    enable_log_outputs: bool = False
    enable_log_deltas: bool = True
    access_log: bool = True
    access_log_skip: tuple[str, ...] = ()
    log_error_stack: bool = False


@dataclass(frozen=True)
class OperationalConfig:
    """The flags of vLLM's operational routes (/load, /tokenizer_info, the docs,
    the dev-mode routes, profiling), read by the routes that serve them."""

    enable_server_load_tracking: bool = False
    enable_tokenizer_info_endpoint: bool = False
    disable_fastapi_docs: bool = False
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE=1
    # --profiler-config (the engine's flag; its ``profiler`` serves the routes).
    profiler_config: dict[str, Any] | None = None
    chat_template_given: bool = False  # --chat-template: /tokenizer_info shows it
    tokenizer_name: str = ""  # --tokenizer, else --model, as given


class EngineLink(Protocol):
    """What handlers may ask of the engine link."""

    num_aborts_sent: int
    data_parallel_size: int

    @property
    def alive(self) -> bool: ...  # some rank takes requests

    @property
    def death_reason(self) -> str | None: ...

    @property
    def rejected(self) -> dict[str, int]: ...  # messages from the engine side dropped, by reason

    def routable_ranks(self) -> list[int]: ...

    def rank_states(self) -> list[str]: ...

    async def call_utility(
        self, method: str, *args: Any, rank: int | None = None, timeout: float | None = 10.0
    ) -> Any: ...

    async def call_utility_all(
        self, method: str, *args: Any, timeout: float | None = 10.0
    ) -> list[Any]: ...

    def set_paused(self, paused: bool) -> None: ...  # (a paused rank's silence is no stall)


class AppState:
    def __init__(
        self,
        model: ModelInfo,
        config: ServingConfig,
        engine: EngineLink,
        table: Table,
        renderer: Renderer,
        parsers: ChatParsers | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.engine = engine
        self.table = table
        self.renderer = renderer
        self.lora = LoraRegistry(engine, model.served_names)
        # The tool-call parser (--enable-auto-tool-choice --tool-call-parser) and
        # the reasoning parser (--reasoning-parser); None when neither is set.
        self.parsers = parsers
        self.request_log = (
            RequestLogger(
                max_log_len=config.max_log_len,
                log_outputs=config.enable_log_outputs,
                log_deltas=config.enable_log_deltas,
            )
            if config.enable_log_requests
            else None
        )
        self.ready: ReadyResponse | None = None  # the attached engine's facts
        # The multimodal processor workers (a vision/audio model only).
        self.mm_pool: ProcessorPool | None = None
        self.system_fingerprint: str | None = None
        self.draining = False
        # The operational routes' flags (set by the server), and what /load
        # reports: the load-tracked requests in flight (frontend/ops/load.py).
        self.operational = OperationalConfig()
        self.server_load = 0
        # JSON bytes of a value: the encoder's own method (no Python frame per call).
        self.json: Callable[[object], bytes] = msgspec.json.Encoder().encode

    def engine_attached(self, ready: ReadyResponse) -> None:
        self.ready = ready
        self.renderer.max_model_len = ready.max_model_len
        digest = hashlib.sha256(
            f"{self.model.path}:{ready.max_model_len}:{ready.dtype}".encode()
        ).hexdigest()[:8]
        self.system_fingerprint = f"vllm-{ready.vllm_version}-{digest}"

    @property
    def max_model_len(self) -> int:
        assert self.ready is not None, "no engine attached yet"
        return self.ready.max_model_len

    @property
    def serving(self) -> bool:
        """What /health says: an engine is attached and no drain has begun."""
        return self.engine.alive and not self.draining

    def model_limits(self) -> ModelLimits:
        return ModelLimits(
            vocab_size=self.model.vocab_size,
            max_model_len=self.max_model_len,
            max_logprobs=self.config.max_logprobs,
        )

    def resolve_model(self, name: str | None) -> str:
        """The served name or LoRA adapter a request asks for (default: the
        first served name), or a 404."""
        if not name:
            return self.model.name
        if name in self.model.served_names or name in self.lora.adapters:
            return name
        raise not_found_model(name, self.model.served_names)
