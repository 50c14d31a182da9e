"""The operator's flags (vLLM's names where vLLM has the feature) -> OpsConfig."""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from frontend.ops import security
from frontend.ops.buckets import BUCKET_FAMILIES, check_bucket_overrides
from frontend.state import OperationalConfig

DEFAULT_MAX_BODY = 32 * 1024 * 1024


@dataclass
class OpsConfig:
    api_keys: list[str] = field(default_factory=list, repr=False)
    allowed_origins: list[str] = field(default_factory=list)
    allowed_methods: list[str] = field(default_factory=lambda: ["*"])
    allowed_headers: list[str] = field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    max_concurrent_requests: int = 0
    enable_request_id_headers: bool = False
    uds: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = int(ssl.CERT_NONE)
    ssl_ciphers: str | None = None
    timeout_keep_alive: float = 5.0
    disable_log_stats: bool = False
    kv_cache_metrics: bool = False
    custom_histogram_buckets: dict[str, list[float]] | None = None
    otlp_traces_endpoint: str | None = None
    # /load, /tokenizer_info, the docs, dev mode, profiling (vLLM's flags).
    operational: OperationalConfig = field(default_factory=OperationalConfig)


# --------------------------------------------------------------------- flags
def _json_list(text: str) -> list[str]:
    """vLLM's flags take JSON lists (``'["https://a.example"]'``); a bare
    comma-separated list is accepted too."""
    text = text.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"not a JSON list: {e}") from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise argparse.ArgumentTypeError("expected a JSON list of strings")
        return value
    return [part.strip() for part in text.split(",") if part.strip()]


def _histogram_buckets(text: str) -> dict[str, list[float]]:
    try:
        return check_bucket_overrides(json.loads(text))
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)


def _byte_size(text: str) -> int:
    """``33554432``, ``32MiB``, ``32M``, ``512k`` (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 33554432 or 32MiB)")
    number, unit = int(match.group(1)), (match.group(2) or "b").lower()
    return number * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit[0]]


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("security and limits")
    g.add_argument(
        "--api-key",
        nargs="+",
        action="extend",
        default=None,
        metavar="KEY",
        help="require `Authorization: Bearer KEY` on /v1, /v2, /inference and "
        "/cohere, as vLLM (repeatable; default: $VLLM_API_KEY); "
        "prefer the environment variable, command lines are visible to "
        "other users",
    )
    g.add_argument(
        "--allowed-origins",
        type=_json_list,
        default=[],
        help="CORS origins, a JSON list such as '[\"https://app.example\"]' or "
        "'[\"*\"]' (default: none, cross-origin browser access is off)",
    )
    g.add_argument(
        "--allowed-methods",
        type=_json_list,
        default=["*"],
        help='CORS methods, a JSON list (default: ["*"])',
    )
    g.add_argument(
        "--allowed-headers",
        type=_json_list,
        default=["*"],
        help='CORS request headers, a JSON list (default: ["*"])',
    )
    g.add_argument(
        "--allow-credentials",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="CORS: allow credentials (default: off)",
    )
    g.add_argument(
        "--max-request-body-size",
        type=_byte_size,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="larger request bodies get 413 (default 32MiB; accepts k/M/G suffixes)",
    )
    g.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=0,
        metavar="N",
        help="at most N choices (prompts x n, so a batch of 8 prompts with n=4 "
        "counts 32) in flight; more get 429 with Retry-After before any "
        "tokenization (default 0: no limit)",
    )
    g.add_argument(
        "--enable-request-id-headers",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="answer with X-Request-Id: the request's, or a new one (also used as the response id)",
    )
    g = p.add_argument_group("listener")
    g.add_argument(
        "--uds",
        default=None,
        metavar="PATH",
        help="listen on this Unix socket instead of --host/--port",
    )
    g.add_argument("--ssl-certfile", default=None, help="TLS certificate (PEM) for HTTPS")
    g.add_argument("--ssl-keyfile", default=None, help="TLS private key (PEM)")
    g.add_argument(
        "--ssl-ca-certs", default=None, help="CA certificates to verify client certificates with"
    )
    g.add_argument(
        "--ssl-cert-reqs",
        type=int,
        default=int(ssl.CERT_NONE),
        choices=(0, 1, 2),
        help="client certificates: 0 none (default), 1 optional, 2 required (stdlib ssl.CERT_*)",
    )
    g.add_argument("--ssl-ciphers", default=None, help="TLS 1.2 cipher suites (OpenSSL syntax)")
    g.add_argument(
        "--timeout-keep-alive",
        type=float,
        default=float(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", 5)),
        metavar="SECONDS",
        help="close idle keep-alive connections after this long (default 5, or "
        "$VLLM_HTTP_TIMEOUT_KEEP_ALIVE)",
    )
    g = p.add_argument_group("observability")
    g.add_argument(
        "--disable-log-stats",
        action="store_true",
        help="no vllm:* engine/request metrics (HTTP and process metrics stay)",
    )
    g.add_argument(
        "--kv-cache-metrics",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="export vLLM's KV-cache residency histograms "
        "(vllm:kv_block_*_seconds); the engine needs --kv-cache-metrics too",
    )
    g.add_argument(
        "--custom-histogram-buckets",
        type=_histogram_buckets,
        default=None,
        metavar="JSON",
        help="vLLM's bucket families' bounds, e.g. "
        "'{\"request_latency\": [0.01, 0.05, 0.1, 0.5]}' (families: "
        + ", ".join(sorted(BUCKET_FAMILIES))
        + ")",
    )
    g.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        metavar="URL",
        help="send one OpenTelemetry span per engine request to this OTLP "
        "endpoint (gRPC; $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf "
        "for HTTP); needs the 'tracing' extra",
    )
    g.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("FRONTEND_LOG_FORMAT", "text"),
        help="stderr log lines as text (default) or one JSON object per line",
    )
    g = p.add_argument_group(
        "operational routes (vLLM's flags)",
        "VLLM_SERVER_DEV_MODE=1 adds vLLM's development routes (/sleep, /pause, "
        "/collective_rpc, the weight-transfer routes, ...); --profiler-config (the "
        "engine's flag, give it to both) adds /start_profile and /stop_profile.",
    )
    g.add_argument(
        "--enable-server-load-tracking",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="GET /load counts the generation and pooling requests in flight "
        "(without it /load says 0)",
    )
    g.add_argument(
        "--enable-tokenizer-info-endpoint",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve GET /tokenizer_info (it shows the tokenizer config and chat template)",
    )
    g.add_argument(
        "--disable-fastapi-docs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="no /openapi.json, /docs, /docs/oauth2-redirect or /redoc",
    )


def config_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> OpsConfig:
    env = os.environ if environ is None else environ
    keys = [k for k in (args.api_key or [env.get("VLLM_API_KEY", "")]) if k]
    return OpsConfig(
        api_keys=keys,
        allowed_origins=args.allowed_origins,
        allowed_methods=args.allowed_methods,
        allowed_headers=args.allowed_headers,
        allow_credentials=args.allow_credentials,
        max_concurrent_requests=max(args.max_concurrent_requests, 0),
        enable_request_id_headers=args.enable_request_id_headers,
        uds=args.uds,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_ca_certs=args.ssl_ca_certs,
        ssl_cert_reqs=args.ssl_cert_reqs,
        ssl_ciphers=args.ssl_ciphers,
        timeout_keep_alive=args.timeout_keep_alive,
        disable_log_stats=args.disable_log_stats,
        kv_cache_metrics=args.kv_cache_metrics,
        custom_histogram_buckets=args.custom_histogram_buckets,
        otlp_traces_endpoint=args.otlp_traces_endpoint or None,
        operational=operational_from_args(args, env),
    )


def operational_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> OperationalConfig:
    """The operational routes' flags; VLLM_SERVER_DEV_MODE from the environment."""
    dev_mode = env.get("VLLM_SERVER_DEV_MODE", "0")
    try:
        dev = bool(int(dev_mode))  # vLLM's reading: "1" on, "0" off, anything else fails
    except ValueError:
        raise ValueError(f"VLLM_SERVER_DEV_MODE must be an integer, got {dev_mode!r}") from None
    # The engine's --profiler-config is recorded (frontend/ops/vllm_flags.py), and read here.
    profiler = getattr(args, "vllm:profiler_config", None)
    kind = profiler.get("profiler") if isinstance(profiler, dict) else None
    if kind not in (None, "torch", "cuda", "proton"):
        raise ValueError(
            f"--profiler-config: profiler must be 'torch', 'cuda' or 'proton', got {kind!r}"
        )
    return OperationalConfig(
        enable_server_load_tracking=args.enable_server_load_tracking,
        enable_tokenizer_info_endpoint=args.enable_tokenizer_info_endpoint,
        disable_fastapi_docs=args.disable_fastapi_docs,
        dev_mode=dev,
        profiler_config=profiler if isinstance(profiler, dict) else None,
        chat_template_given=getattr(args, "chat_template", None) is not None,
        tokenizer_name=str(getattr(args, "tokenizer", None) or getattr(args, "model", "") or ""),
    )


def validate(config: OpsConfig) -> ssl.SSLContext | None:
    """Fail at start-up (exit 2) on inconsistent flags; returns the TLS context."""
    if config.otlp_traces_endpoint and config.disable_log_stats:
        # vLLM accepts both and then fails every request at its first finish.
        raise ValueError(
            "--otlp-traces-endpoint needs the request stats that --disable-log-stats turns off"
        )
    return security.ssl_context(
        config.ssl_certfile,
        config.ssl_keyfile,
        config.ssl_ca_certs,
        config.ssl_cert_reqs,
        config.ssl_ciphers,
    )
