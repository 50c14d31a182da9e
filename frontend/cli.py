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
from frontend.engine_client import beyond_loopback, derive_addresses
from frontend.lora import parse_lora_modules
from frontend.model import ModelInfo, load_model_info
from frontend.ops import flags, logs
from frontend.ops.tracing import RequestTracer
from frontend.parsers import REASONING_PARSERS, TOOL_PARSERS, ChatParsers, ParserTokenizer
from frontend.routing import POLICIES
from frontend.server import Server, ServerConfig
from frontend.state import ServingConfig
from frontend.supervisor import WorkerSpec, become_worker

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
    p.add_argument("--api-server-count", "-asc", type=int, default=1, metavar="N",
                   help="frontend processes serving one address (vLLM's flag): a supervisor "
                        "and N workers, each with its own engine link; connections spread "
                        "over them (default 1: this process serves)")
    g = p.add_argument_group("data parallel (several engine ranks)")
    g.add_argument("--data-parallel-size", "-dp", type=int, default=1, metavar="N",
                   help="engine ranks (vLLM's flag): wait for N ranks on --engine-addr, "
                        "route every request to one of them (default 1)")
    g.add_argument("--dp-routing", choices=POLICIES, default="prefix",
                   help="prefix: the rank holding the longest cached prefix of the prompt "
                        "unless it is loaded well above the others; load: the least loaded "
                        "(default prefix)")
    p.add_argument("--engine-stall-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="an engine rank that has requests but sends nothing for this long "
                        "is stalled: its requests end with an error and /health answers "
                        "503 unless another rank serves; it serves again once it sends "
                        "(default 60; 0 disables)")
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
    p.add_argument("--lora-modules", nargs="+", default=None,
                   help="LoRA adapters to serve, loaded into the engine at start-up: "
                        "name=path, or a JSON object {\"name\", \"path\", "
                        "\"base_model_name\"} per item (vLLM's two forms); the engine "
                        "must run with --enable-lora and a --max-lora-rank that fits")
    p.add_argument("--enable-lora", action="store_true",
                   help="refuse to start unless the engine supports LoRA (implied by "
                        "--lora-modules); adapters can also be loaded at run time with "
                        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true")
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


def runtime_lora_updating() -> bool:
    """vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING: "1" or "true", any case."""
    value = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0")
    return value.strip().lower() in ("1", "true")


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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        parse_lora_modules(args.lora_modules)
    except ValueError as e:
        parser.error(str(e))  # exits 2, as vLLM's parser does
    try:
        model, addresses, config = prepare(args)
    except (ValueError, OSError) as e:
        print(f"frontend: {e}", file=sys.stderr)
        return 2
    exposed = beyond_loopback(addresses)
    if exposed:
        log.warning("the engine link listens beyond this host (%s): it has no "
                    "authentication, so firewall these ports to the engine hosts (README: "
                    "Network isolation); for engines on this host use ipc:// addresses",
                    ", ".join(exposed))
    if args.api_server_count > 1:
        from frontend.supervisor import Supervisor
        return Supervisor(argv, args, addresses, config.shutdown_timeout, worker_main).run()
    return serve(model, addresses, config)


def prepare(args: argparse.Namespace):
    """Flags -> (model facts, engine addresses, server config); ValueError/OSError
    for anything that must stop the start (exit status 2)."""
    ops_config = flags.config_from_args(args)
    logs.setup(args.log_level, args.log_format, secrets=ops_config.api_keys)
    flags.validate(ops_config)
    lora_modules = parse_lora_modules(args.lora_modules)
    if args.api_server_count < 1:
        raise ValueError("--api-server-count must be at least 1")
    if args.api_server_count > 1 and runtime_lora_updating():
        # (each process would allocate its own adapter ids, as in vLLM, which
        # refuses the same combination)
        raise ValueError("VLLM_ALLOW_RUNTIME_LORA_UPDATING cannot be used with "
                         "--api-server-count > 1")
    addresses = derive_addresses(args.engine_addr, args.engine_input_addr,
                                 args.engine_output_addr, clients=args.api_server_count)
    model = load_model_info(args.model, tokenizer_dir=args.tokenizer,
                            served_names=args.served_model_name,
                            chat_template_path=args.chat_template)
    so_config, parsers = tooling_from_args(args, model)
    if args.data_parallel_size < 1:
        raise ValueError("--data-parallel-size must be at least 1")
    if args.data_parallel_size > 1 and model.num_experts:
        raise ValueError(
            f"{args.model} is a mixture-of-experts model ({model.num_experts} experts): "
            "its data-parallel ranks must step together in waves driven by vLLM's DP "
            "coordinator, which this frontend does not implement. Run it with "
            "--data-parallel-size 1 per frontend, or behind vLLM's own API server")
    state_file = args.engine_state_file
    if state_file is None:
        safe = re.sub(r"[^A-Za-z0-9]+", "_", args.engine_addr).strip("_")
        state_file = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(),
                                  f"vllm-frontend-{safe}.state")
    config = ServerConfig(
        host=args.host, port=args.port, engine_ready_timeout=args.engine_ready_timeout,
        shutdown_timeout=args.shutdown_timeout, engine_state_file=state_file or None,
        max_request_body=args.max_request_body_size,
        data_parallel_size=args.data_parallel_size, dp_routing=args.dp_routing,
        engine_stall_timeout=max(args.engine_stall_timeout, 0.0),
        num_clients=args.api_server_count,
        serving=ServingConfig(max_logprobs=args.max_logprobs,
                              force_include_usage=args.enable_force_include_usage,
                              max_stream_buffer=args.max_stream_buffer,
                              enable_debug_endpoints=args.enable_debug_endpoints,
                              runtime_lora_updating=runtime_lora_updating(),
                              trace_requests=bool(ops_config.otlp_traces_endpoint),
                              structured_outputs=so_config),
        ops=ops_config, lora_modules=lora_modules,
        require_lora=args.enable_lora or bool(lora_modules), parsers=parsers)
    return model, addresses, config


def serve(model, addresses, config: ServerConfig) -> int:
    """Run one frontend process until it stops; its exit status."""
    endpoint = config.ops.otlp_traces_endpoint
    try:
        tracer = RequestTracer(endpoint) if endpoint else None
    except ValueError as e:
        print(f"frontend: {e}", file=sys.stderr)
        return 2
    import uvloop
    return uvloop.run(_run(Server(model, addresses, config, tracer)))


def worker_main(spec: WorkerSpec) -> None:
    """One of ``--api-server-count`` frontend processes (started by the supervisor);
    exits with the status a single frontend would."""
    become_worker()
    model, addresses, config = prepare(build_parser().parse_args(spec.argv))
    state_file = config.engine_state_file
    config = dataclasses.replace(
        config, client_index=spec.index, shared=spec.shared,
        handoff=spec.handoff, metrics_dir=spec.metrics_dir,
        engine_state_file=f"{state_file}.w{spec.index}" if state_file else None)
    sys.exit(serve(model, addresses, config))


async def _run(server: Server) -> int:
    try:
        await server.start()
    except (TimeoutError, OSError) as e:
        log.error("%s", e)
        await server.close_engine_link()
        return 1
    except Exception as e:  # version mismatch and other start-up refusals
        log.error("cannot start: %s", e)
        await server.close_engine_link()
        return 1
    await server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
