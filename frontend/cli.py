"""``frontend --engine-addr tcp://HOST:PORT --model MODEL``: the process entry point."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import tempfile

from frontend import structured_outputs as so
from frontend.engine_client import derive_addresses
from frontend.model import ModelInfo, load_model_info
from frontend.ops import flags, logs
from frontend.parsers import REASONING_PARSERS, TOOL_PARSERS, ChatParsers, ParserTokenizer
from frontend.server import Server, ServerConfig
from frontend.state import ServingConfig

log = logging.getLogger("frontend")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="frontend",
        description="OpenAI-compatible HTTP frontend for an unmodified vLLM 0.32 EngineCore. "
                    "It binds --engine-addr; start the engine with `vllm serve MODEL "
                    "--headless --data-parallel-address HOST --data-parallel-rpc-port PORT`.")
    p.add_argument("--engine-addr", required=True,
                   help="handshake address this frontend binds and the engine connects to "
                        "(tcp://HOST:PORT, the engine's --data-parallel-address/-rpc-port)")
    p.add_argument("--engine-input-addr", default=None,
                   help="input socket address (default: engine-addr port + 1)")
    p.add_argument("--engine-output-addr", default=None,
                   help="output socket address (default: engine-addr port + 2)")
    p.add_argument("--engine-state-file", default=None,
                   help="where the engine's ready response is kept so that a restarted "
                        "frontend re-attaches to a running engine without a new handshake "
                        "(default: $XDG_RUNTIME_DIR or /tmp, named after --engine-addr; "
                        "'' disables)")
    p.add_argument("--model", required=True,
                   help="local Hugging Face model directory (tokenizer and configs)")
    p.add_argument("--served-model-name", nargs="+", default=None,
                   help="name(s) clients use in `model` (default: --model)")
    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --model)")
    p.add_argument("--chat-template", default=None, help="chat template file or inline text")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--engine-ready-timeout", type=float,
                   default=float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", 600)),
                   help="seconds to wait for the engine at start-up (default 600)")
    p.add_argument("--max-logprobs", type=int, default=20,
                   help="largest logprobs/prompt_logprobs a request may ask for; must not "
                        "exceed the engine's --max-logprobs (default 20)")
    p.add_argument("--enable-force-include-usage", action="store_true",
                   help="add usage to every stream, as if stream_options asked for it")
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds running requests may finish after SIGTERM (default 30)")
    p.add_argument("--max-stream-buffer", type=int, default=1 << 20,
                   help="bytes of a stream's output that may wait for a client that does "
                        "not read before the request is aborted as a slow consumer "
                        "(default 1 MiB)")
    p.add_argument("--enable-debug-endpoints", action="store_true",
                   help="serve GET /debug/state (table size, engine has_work)")
    p.add_argument("--log-level", default=os.environ.get("FRONTEND_LOG_LEVEL", "info"))
    tools = p.add_argument_group("tool calling and reasoning (vLLM's flags)")
    tools.add_argument("--enable-auto-tool-choice", action="store_true",
                       help='parse tool calls out of the output (tool_choice "auto", '
                            '"required", named); needs --tool-call-parser')
    tools.add_argument("--tool-call-parser", default=None, metavar="{" + ",".join(TOOL_PARSERS)
                       + "}", help="the model's tool call format (used with "
                                   "--enable-auto-tool-choice)")
    tools.add_argument("--reasoning-parser", default=None,
                       metavar="{" + ",".join(REASONING_PARSERS) + "}",
                       help="split the model's reasoning from its answer (the `reasoning` "
                            "field); same as --structured-outputs-config.reasoning_parser")
    so.add_arguments(p)
    flags.add_arguments(p)
    return p


def tooling_from_args(args: argparse.Namespace, model: ModelInfo
                      ) -> tuple[so.StructuredOutputsConfig, ChatParsers | None]:
    """The structured-outputs config and the chat parsers, checked as vLLM checks
    them at start-up. Raises ValueError with a message for the command line."""
    config = so.config_from_args(args)
    if args.reasoning_parser:  # vLLM: --reasoning-parser sets the config's key
        config = dataclasses.replace(config, reasoning_parser=args.reasoning_parser)
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise ValueError("--enable-auto-tool-choice requires --tool-call-parser")
    # Without --enable-auto-tool-choice vLLM builds no tool parser at all.
    tool_parser = args.tool_call_parser if args.enable_auto_tool_choice else None
    if not tool_parser and not config.reasoning_parser:
        return config, None
    parsers = ChatParsers(ParserTokenizer.from_model(model), tool_parser=tool_parser,
                          reasoning_parser=config.reasoning_parser or None)
    return config, parsers


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ops_config = flags.config_from_args(args)
    logs.setup(args.log_level, args.log_format, secrets=ops_config.api_keys)
    try:
        flags.validate(ops_config)
        addresses = derive_addresses(args.engine_addr, args.engine_input_addr,
                                     args.engine_output_addr)
        model = load_model_info(args.model, tokenizer_dir=args.tokenizer,
                                served_names=args.served_model_name,
                                chat_template_path=args.chat_template)
        so_config, parsers = tooling_from_args(args, model)
    except (ValueError, OSError) as e:
        print(f"frontend: {e}", file=sys.stderr)
        return 2
    state_file = args.engine_state_file
    if state_file is None:
        safe = re.sub(r"[^A-Za-z0-9]+", "_", args.engine_addr).strip("_")
        state_file = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(),
                                  f"vllm-frontend-{safe}.state")
    config = ServerConfig(
        host=args.host, port=args.port, engine_ready_timeout=args.engine_ready_timeout,
        shutdown_timeout=args.shutdown_timeout, engine_state_file=state_file or None,
        max_request_body=args.max_request_body_size,
        serving=ServingConfig(max_logprobs=args.max_logprobs,
                              force_include_usage=args.enable_force_include_usage,
                              max_stream_buffer=args.max_stream_buffer,
                              enable_debug_endpoints=args.enable_debug_endpoints,
                              structured_outputs=so_config),
        ops=ops_config, parsers=parsers)
    import uvloop
    return uvloop.run(_run(Server(model, addresses, config)))


async def _run(server: Server) -> int:
    try:
        await server.start()
    except (TimeoutError, OSError) as e:
        log.error("%s", e)
        await server.engine.close()
        return 1
    except Exception as e:  # version mismatch and other start-up refusals
        log.error("cannot start: %s", e)
        await server.engine.close()
        return 1
    await server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
