"""vLLM's API-server flags for the chat and completion routes: the template,
the response shapes, SSE keep-alives (vLLM's names and value checks)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("chat and completion routes (vLLM's flags)")
    g.add_argument(
        "--default-chat-template-kwargs",
        type=_json_object,
        default=None,
        help="JSON object of chat template arguments every request starts from "
        "(the request's chat_template_kwargs override them)",
    )
    g.add_argument(
        "--chat-template-content-format",
        choices=("auto", "string", "openai"),
        default="auto",
        help="how message content reaches the template: a string, or OpenAI's list of "
        "parts (default: detected from the template)",
    )
    g.add_argument(
        "--trust-request-chat-template",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="let a request bring its own chat template (chat_template, or "
        "chat_template_kwargs.chat_template)",
    )
    g.add_argument(
        "--trust-request-mm-kwargs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="accept a request's mm_processor_kwargs and media_io_kwargs",
    )
    g.add_argument(
        "--response-role",
        default="assistant",
        help="the role of the reply when the request asks for a generation prompt",
    )
    g.add_argument(
        "--return-tokens-as-token-ids",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="logprob tokens as 'token_id:N' unless the request says otherwise",
    )
    g.add_argument(
        "--enable-prompt-tokens-details",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="usage.prompt_tokens_details with the prompt tokens the engine's prefix "
        "cache held (cached_tokens)",
    )
    g.add_argument(
        "--exclude-tools-when-tool-choice-none",
        action=argparse.BooleanOptionalAction,
        default=False,
        help='with tool_choice "none", leave the tools out of the prompt',
    )
    g.add_argument(
        "--anthropic-disabled-thinking-effort",
        choices=("auto", "none", "low", "medium", "high", "xhigh", "max"),
        default="auto",
        help="the reasoning_effort an Anthropic thinking.type=disabled request renders with "
        '(auto: "none", or "low" for a template that ignores "none")',
    )
    g.add_argument(
        "--root-path",
        default=None,
        help="the path prefix a proxy serves this under (e.g. /api): every route answers "
        "with and without it",
    )
    g.add_argument(
        "--sse-keep-alive-interval",
        type=int,
        default=0,
        metavar="SECONDS",
        help="send an SSE comment on a stream that has been silent this long "
        "(chat and completions; 0: never)",
    )


def add_logging_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("request and access logs (vLLM's flags)")
    g.add_argument(
        "--enable-log-requests",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log each request's sampling params (INFO; its prompt at DEBUG)",
    )
    g.add_argument(
        "--max-log-len",
        type=int,
        default=None,
        help="characters of a prompt or output (and token ids) the request log keeps",
    )
    g.add_argument(
        "--enable-log-outputs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log what chat and generate requests produced (needs --enable-log-requests)",
    )
    g.add_argument(
        "--enable-log-deltas",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --enable-log-outputs, log each chunk of a chat stream too",
    )
    g.add_argument(
        "--disable-uvicorn-access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="no access log (one line per request with status, latency and id)",
    )
    g.add_argument(
        "--disable-access-log-for-endpoints",
        default=None,
        help="comma-separated paths left out of the access log (e.g. /health,/metrics)",
    )
    g.add_argument(
        "--log-error-stack",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log the traceback of an error a request met (default: VLLM_SERVER_DEV_MODE)",
    )


def endpoint_paths(text: str | None) -> tuple[str, ...]:
    """--disable-access-log-for-endpoints' value, as vLLM splits it."""
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


def check(args: argparse.Namespace) -> None:
    """vLLM's start-up refusals for these flags."""
    if args.sse_keep_alive_interval < 0:
        raise ValueError(
            "Error: --sse-keep-alive-interval must be a non-negative integer (0 disables "
            "keep-alive comments)."
        )
    if args.enable_log_outputs and not args.enable_log_requests:
        raise ValueError("Error: --enable-log-outputs requires --enable-log-requests")
