"""The processor workers' settings, from the frontend's command line.

The workers build vLLM's renderer with ``EngineArgs`` and ``OnlineRenderer``:
the same ``vllm serve`` flags mean the same there (media switches, limits,
processor kwargs), so they are passed on by vLLM's own names.
"""

from __future__ import annotations

import argparse
from typing import Any

from frontend.model import ModelInfo
from frontend.multimodal.detect import is_multimodal
from frontend.multimodal.pool import DEFAULT_TIMEOUT_S, Settings, default_workers

# The recorded engine flags that shape rendering and multimodal processing.
ENGINE_FLAGS = (
    "hf_overrides",
    "limit_mm_per_prompt",
    "media_io_kwargs",
    "mm_processor_kwargs",
    "allowed_local_media_path",
    "allowed_media_domains",
    "interleave_mm_strings",
    "mm_hasher_algorithm",
    "max_num_batched_tokens",
    "enable_prompt_embeds",
    "enable_mm_embeds",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mm-processor-workers",
        type=int,
        default=None,
        help="processes running vLLM's multimodal processor for a vision or audio "
        f"model (default: one per four cores, 1-4; here {default_workers()}); "
        "text-only models start none",
    )
    parser.add_argument(
        "--mm-processor-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="the longest a request may take in a processor worker (media fetch "
        "and decode, the model's processor; vLLM's VLLM_*_FETCH_TIMEOUT apply "
        "inside): past it the request gets a 500, and a worker too stuck to "
        f"cancel it is restarted (default {DEFAULT_TIMEOUT_S:g}; 0 disables)",
    )


def from_args(
    args: argparse.Namespace, engine_flags: dict[str, Any], model: ModelInfo
) -> Settings | None:
    """The workers' settings, or None for a text-only model (no worker starts).
    ``engine_flags``: the recorded ``vllm serve`` engine flags, by vLLM's names."""
    directory = model.directory or model.path
    if not is_multimodal(directory):
        return None
    workers = args.mm_processor_workers
    if workers is not None and workers < 1:
        raise ValueError("--mm-processor-workers must be at least 1")
    if args.mm_processor_timeout < 0:
        raise ValueError("--mm-processor-timeout must not be negative")
    engine_args: dict[str, Any] = {
        "model": directory,
        "tokenizer": args.tokenizer,
        "tokenizer_mode": args.tokenizer_mode,
        "trust_remote_code": args.trust_remote_code,
        "revision": args.revision,
        "tokenizer_revision": args.tokenizer_revision,
        **{name: engine_flags[name] for name in ENGINE_FLAGS if name in engine_flags},
    }
    renderer = {
        "chat_template": model.chat_template if args.chat_template is not None else None,
        "chat_template_content_format": args.chat_template_content_format,
        "trust_request_chat_template": args.trust_request_chat_template,
        "trust_request_mm_kwargs": args.trust_request_mm_kwargs,
        "default_chat_template_kwargs": args.default_chat_template_kwargs,
        "exclude_tools_when_tool_choice_none": args.exclude_tools_when_tool_choice_none,
    }
    settings = Settings(
        {k: v for k, v in engine_args.items() if v is not None},
        renderer,
        timeout=args.mm_processor_timeout,
    )
    if workers is not None:
        settings.workers = workers
    return settings
