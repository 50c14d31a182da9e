"""``frontend --engine-addr tcp://HOST:PORT --model MODEL``: the process entry point."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import tempfile
from typing import NoReturn

from frontend import structured as so
from frontend.engine_addresses import beyond_loopback, derive_addresses
from frontend.hub import HubOptions
from frontend.lora import parse_lora_modules
from frontend.model import ModelInfo, ModelSource, load_model_info
from frontend.multimodal import settings as multimodal_settings
from frontend.ops import argv as vllm_argv
from frontend.ops import flags, logs, serving_flags, vllm_flags
from frontend.ops.tracing import RequestTracer
from frontend.parsers import REASONING_PARSERS, TOOL_PARSERS, ChatParsers, ParserTokenizer
from frontend.parsers.plugins import load_plugin
from frontend.routing import POLICIES
from frontend.server import Server, ServerConfig
from frontend.state import ServingConfig
from frontend.structured.config import json_object
from frontend.supervisor import WorkerSpec, become_worker

log = logging.getLogger("frontend")


DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # vLLM's, when no model is named
LOOPBACK = ("127.", "::1", "localhost")
ALL_INTERFACES = "0.0.0.0"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="frontend",
        usage="frontend [serve] [MODEL] [--engine-addr tcp://HOST:PORT] [options]",
        description="OpenAI-compatible HTTP frontend for an unmodified vLLM 0.32 EngineCore. "
        "It binds --engine-addr; start the engine with `vllm serve MODEL "
        "--headless --data-parallel-address HOST --data-parallel-rpc-port PORT`. "
        "Every `vllm serve` flag is accepted, and `--config FILE.yaml`.",
    )
    p.add_argument(
        "model_tag",
        nargs="?",
        default=None,
        metavar="MODEL",
        help="the model (as `vllm serve MODEL`); same as --model",
    )
    p.add_argument(
        "--engine-addr",
        default=None,
        help="handshake address this frontend binds and the engine connects to "
        "(default: tcp://DATA_PARALLEL_ADDRESS:DATA_PARALLEL_RPC_PORT, i.e. "
        "tcp://127.0.0.1:29550, where `vllm serve --headless` with the same "
        "flags connects)",
    )
    p.add_argument(
        "--data-parallel-address",
        "-dpa",
        default=None,
        help="vLLM's flag: the host part of the default --engine-addr "
        "(default 127.0.0.1, or --master-addr)",
    )
    p.add_argument(
        "--data-parallel-rpc-port",
        "-dpp",
        type=int,
        default=None,
        help="vLLM's flag: the port of the default --engine-addr (default 29550)",
    )
    p.add_argument(
        "--engine-input-addr",
        default=None,
        help="input socket address (default: engine-addr port + 1)",
    )
    p.add_argument(
        "--engine-output-addr",
        default=None,
        help="output socket address (default: engine-addr port + 2)",
    )
    p.add_argument(
        "--engine-state-file",
        default=None,
        help="where the engine's ready response is kept so that a restarted "
        "frontend re-attaches to a running engine without a new handshake "
        "(default: $XDG_RUNTIME_DIR or /tmp, named after --engine-addr; "
        "'' disables)",
    )
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="name(s) clients use in `model` (default: --model)",
    )
    add_model_arguments(p)
    p.add_argument("--chat-template", default=None, help="chat template file or inline text")
    p.add_argument(
        "--host", default=None, help="address to listen on (default: all interfaces, as vLLM)"
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--api-server-count",
        "-asc",
        type=int,
        default=1,
        metavar="N",
        help="frontend processes serving one address (vLLM's flag): a supervisor "
        "and N workers, each with its own engine link; connections spread "
        "over them (default 1: this process serves)",
    )
    g = p.add_argument_group("data parallel (several engine ranks)")
    g.add_argument(
        "--data-parallel-size",
        "-dp",
        type=int,
        default=1,
        metavar="N",
        help="engine ranks (vLLM's flag): wait for N ranks on --engine-addr, "
        "route every request to one of them (default 1)",
    )
    g.add_argument(
        "--dp-routing",
        choices=POLICIES,
        default="prefix",
        help="prefix: the rank holding the longest cached prefix of the prompt "
        "unless it is loaded well above the others; load: the least loaded "
        "(default prefix)",
    )
    p.add_argument(
        "--engine-stall-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="an engine rank that has requests but sends nothing for this long "
        "is stalled: its requests end with an error and /health answers "
        "503 unless another rank serves; it serves again once it sends "
        "(default 60; 0 disables)",
    )
    p.add_argument(
        "--engine-ready-timeout",
        type=float,
        default=float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", 600)),
        help="seconds to wait for the engine at start-up (default 600)",
    )
    p.add_argument(
        "--max-logprobs",
        type=int,
        default=20,
        help="largest logprobs/prompt_logprobs a request may ask for; must not "
        "exceed the engine's --max-logprobs (default 20)",
    )
    p.add_argument(
        "--enable-force-include-usage",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="add usage to every stream, as if stream_options asked for it",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds running requests may finish after SIGTERM (default 30)",
    )
    p.add_argument(
        "--max-stream-buffer",
        type=int,
        default=1 << 20,
        help="bytes of a stream's output that may wait for a client that does "
        "not read before the request is aborted as a slow consumer "
        "(default 1 MiB)",
    )
    p.add_argument(
        "--enable-debug-endpoints",
        action="store_true",
        help="serve GET /debug/state (table size, engine has_work)",
    )
    p.add_argument(
        "--lora-modules",
        nargs="+",
        default=None,
        help="LoRA adapters to serve, loaded into the engine at start-up: "
        'name=path, or a JSON object {"name", "path", '
        '"base_model_name"} per item (vLLM\'s two forms); the engine '
        "must run with --enable-lora and a --max-lora-rank that fits",
    )
    p.add_argument(
        "--enable-lora",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="refuse to start unless the engine supports LoRA (implied by "
        "--lora-modules); adapters can also be loaded at run time with "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true",
    )
    p.add_argument("--log-level", default=os.environ.get("FRONTEND_LOG_LEVEL", "info"))
    tools = p.add_argument_group("tool calling and reasoning (vLLM's flags)")
    tools.add_argument(
        "--enable-auto-tool-choice",
        action=argparse.BooleanOptionalAction,
        default=False,
        help='parse tool calls out of the output (tool_choice "auto", '
        '"required", named); needs --tool-call-parser',
    )
    tools.add_argument(
        "--tool-call-parser",
        default=None,
        metavar="{" + ",".join(TOOL_PARSERS) + "}",
        help="the model's tool call format (used with --enable-auto-tool-choice)",
    )
    tools.add_argument(
        "--reasoning-parser",
        default=None,
        metavar="{" + ",".join(REASONING_PARSERS) + "}",
        help="split the model's reasoning from its answer (the `reasoning` "
        "field); same as --structured-outputs-config.reasoning_parser",
    )
    tools.add_argument(
        "--tool-strict-level",
        default="auto",
        choices=("auto", "function", "parameter"),
        help="the floor for constraining tool calls with the parser's structural tag: "
        "auto (from tool_choice and each tool's strict), function (the call's "
        "envelope for every request with tools), parameter (and every tool's "
        "arguments, as if strict)",
    )
    for kind in ("tool", "reasoning"):
        tools.add_argument(
            f"--{kind}-parser-plugin",
            default="",
            help=f"a module name or Python file that registers {kind} parsers with "
            f"frontend.parsers.plugins.{kind.title()}ParserManager.register_module "
            "(vLLM's decorator); imported before the parser names are checked",
        )
    so.add_arguments(p)
    multimodal_settings.add_arguments(p)
    flags.add_arguments(p)
    serving_flags.add_arguments(p)
    serving_flags.add_logging_arguments(p)
    vllm_flags.add_arguments(p)  # last: every vLLM flag not defined above
    return p


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Where the model's tokenizer and configs come from: vLLM's flags."""
    g = p.add_argument_group("model and tokenizer (vLLM's flags)")
    g.add_argument(
        "--model",
        default=None,
        help="a local Hugging Face model directory or a Hub id, resolved through "
        "the Hugging Face cache as vLLM does (HF_HOME, HF_HUB_OFFLINE, "
        "HF_TOKEN); the frontend reads its tokenizer and configs, not its "
        f"weights (default: MODEL, else {DEFAULT_MODEL}, as vLLM)",
    )
    g.add_argument(
        "--tokenizer", default=None, help="tokenizer directory or Hub id (default: the model)"
    )
    g.add_argument(
        "--tokenizer-mode",
        default="auto",
        type=str.lower,
        help="auto (default: mistral for a Mistral-format repository, else hf), "
        "hf (tokenizer.json, or a sentencepiece or tiktoken tokenizer.model "
        "converted at start), mistral (tekken.json via mistral_common)",
    )
    g.add_argument(
        "--trust-remote-code",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="allow a tokenizer_config.json that names custom tokenizer code "
        "(served from its tokenizer.json; the code itself is not run)",
    )
    g.add_argument(
        "--revision",
        default=None,
        type=_optional_str,
        help="Hub revision (branch, tag or commit) of the model",
    )
    g.add_argument(
        "--tokenizer-revision",
        default=None,
        type=_optional_str,
        help="Hub revision of the tokenizer (default: --revision)",
    )
    g.add_argument(
        "--download-dir",
        default=None,
        type=_optional_str,
        help="Hugging Face cache directory to use instead of the default",
    )
    g.add_argument(
        "--hf-token",
        nargs="?",
        const=True,
        default=None,
        help="token for the Hub (default: $HF_TOKEN or the stored login; bare "
        "flag: the stored login)",
    )
    g.add_argument(
        "--generation-config",
        default="auto",
        help="sampling defaults: auto (the model's generation_config.json), "
        "vllm (none), or a directory with a generation_config.json",
    )
    g.add_argument(
        "--override-generation-config",
        type=json_object,
        default={},
        metavar="JSON",
        help="sampling defaults over the generation config, e.g. '{\"temperature\": 0.5}'",
    )


def _optional_str(text: str) -> str | None:
    return None if text in ("", "None") else text


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` read as ``vllm serve`` reads it (``serve MODEL``, ``--config``,
    underscores, dotted JSON flags); a command line vLLM refuses exits 2."""
    try:
        argv = vllm_argv.rewrite(argv, parser._option_string_actions)
    except ValueError as e:
        parser.error(str(e))
    args = parser.parse_args(argv)
    args.model = args.model_tag or args.model or DEFAULT_MODEL  # vLLM: the positional wins
    if args.engine_addr is None:
        # vLLM's headless engine: --data-parallel-address, else --master-addr
        host = (
            args.data_parallel_address
            or vllm_flags.recorded(args).engine.get("master_addr")
            or "127.0.0.1"
        )
        args.engine_addr = f"tcp://{host}:{args.data_parallel_rpc_port or 29550}"
    return args


def runtime_lora_updating() -> bool:
    """vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING: "1" or "true", any case."""
    value = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0")
    return value.strip().lower() in ("1", "true")


def tooling_from_args(
    args: argparse.Namespace, model: ModelInfo
) -> tuple[so.StructuredOutputsConfig, ChatParsers | None]:
    """The structured-outputs config and the chat parsers, checked as vLLM checks
    them at start-up. Raises ValueError with a message for the command line."""
    # vLLM imports the plugins first: they may register the names asked for.
    load_plugin(args.tool_parser_plugin, "--tool-parser-plugin")
    load_plugin(args.reasoning_parser_plugin, "--reasoning-parser-plugin")
    config = so.config_from_args(args)
    if args.reasoning_parser:  # vLLM: --reasoning-parser sets the config's key
        config = dataclasses.replace(config, reasoning_parser=args.reasoning_parser)
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise ValueError("--enable-auto-tool-choice requires --tool-call-parser")
    # Without --enable-auto-tool-choice vLLM builds no tool parser at all.
    tool_parser = args.tool_call_parser if args.enable_auto_tool_choice else None
    if not tool_parser and not config.reasoning_parser:
        return config, None
    parsers = ChatParsers(
        ParserTokenizer.from_model(model),
        tool_parser=tool_parser,
        reasoning_parser=config.reasoning_parser or None,
        tool_strict_level=args.tool_strict_level,
        architecture=model.architecture,
    )
    return config, parsers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parse_args(parser, argv)
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
        log.warning(
            "the engine link listens beyond this host (%s): it has no "
            "authentication, so firewall these ports to the engine hosts (README: "
            "Network isolation); for engines on this host use ipc:// addresses",
            ", ".join(exposed),
        )
    if args.api_server_count > 1:
        from frontend.supervisor import Supervisor

        return Supervisor(argv, args, addresses, config.shutdown_timeout, worker_main).run()
    return serve(model, addresses, config)


def model_source(args: argparse.Namespace) -> ModelSource:
    return ModelSource(
        tokenizer_mode=args.tokenizer_mode,
        revision=args.revision,
        tokenizer_revision=args.tokenizer_revision,
        hub=HubOptions(download_dir=args.download_dir, token=args.hf_token),
        trust_remote_code=args.trust_remote_code,
        generation_config=args.generation_config,
        override_generation_config=args.override_generation_config,
    )


def announce(
    args: argparse.Namespace, ops_config: flags.OpsConfig, recorded: vllm_flags.RecordedFlags
) -> None:
    """The start-up lines about flags: once, by the process that was started."""
    if recorded.engine:
        log.info("engine flags: not used by the frontend: %s", recorded.describe(recorded.engine))
    if recorded.server:
        log.warning(
            "vllm serve flags this frontend does not implement (ignored): %s",
            recorded.describe(recorded.server),
        )
    if not ops_config.uds and not args.host.startswith(LOOPBACK) and not ops_config.api_keys:
        log.warning(
            "listening on %s:%d (%s) without --api-key: anyone who can reach this "
            "host can use the API (give --api-key, or --host 127.0.0.1)",
            args.host,
            args.port,
            "all interfaces" if args.host == ALL_INTERFACES else "beyond loopback",
        )


def prepare(args: argparse.Namespace, *, first: bool = True):
    """Flags -> (model facts, engine addresses, server config); ValueError/OSError
    for anything that must stop the start (exit status 2). ``first``: the
    process that was started (not one of its workers) logs the flag notes."""
    ops_config = flags.config_from_args(args)
    logs.setup(str(args.log_level).lower(), args.log_format, secrets=ops_config.api_keys)
    flags.validate(ops_config)
    serving_flags.check(args)
    recorded = vllm_flags.recorded(args)
    if args.host is None:
        args.host = ALL_INTERFACES  # vLLM binds all (IPv4) interfaces
    if first:
        announce(args, ops_config, recorded)
    lora_modules = parse_lora_modules(args.lora_modules)
    if args.api_server_count < 1:
        raise ValueError("--api-server-count must be at least 1")
    if args.api_server_count > 1 and runtime_lora_updating():
        # (each process would allocate its own adapter ids, as in vLLM, which
        # refuses the same combination)
        raise ValueError(
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING cannot be used with --api-server-count > 1"
        )
    addresses = derive_addresses(
        args.engine_addr,
        args.engine_input_addr,
        args.engine_output_addr,
        clients=args.api_server_count,
    )
    model = load_model_info(
        args.model,
        tokenizer_dir=args.tokenizer,
        served_names=args.served_model_name,
        chat_template_path=args.chat_template,
        source=model_source(args),
    )
    so_config, parsers = tooling_from_args(args, model)
    if args.data_parallel_size < 1:
        raise ValueError("--data-parallel-size must be at least 1")
    if args.data_parallel_size > 1 and model.num_experts:
        raise ValueError(
            f"{args.model} is a mixture-of-experts model ({model.num_experts} experts): "
            "its data-parallel ranks must step together in waves driven by vLLM's DP "
            "coordinator, which this frontend does not implement. Run it with "
            "--data-parallel-size 1 per frontend, or behind vLLM's own API server"
        )
    state_file = args.engine_state_file
    if state_file is None:
        safe = re.sub(r"[^A-Za-z0-9]+", "_", args.engine_addr).strip("_")
        state_file = os.path.join(
            os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(),
            f"vllm-frontend-{safe}.state",
        )
    config = ServerConfig(
        host=args.host,
        port=args.port,
        engine_ready_timeout=args.engine_ready_timeout,
        shutdown_timeout=args.shutdown_timeout,
        engine_state_file=state_file or None,
        max_request_body=args.max_request_body_size,
        data_parallel_size=args.data_parallel_size,
        dp_routing=args.dp_routing,
        engine_stall_timeout=max(args.engine_stall_timeout, 0.0),
        num_clients=args.api_server_count,
        serving=ServingConfig(
            max_logprobs=args.max_logprobs,
            force_include_usage=args.enable_force_include_usage,
            max_stream_buffer=args.max_stream_buffer,
            enable_debug_endpoints=args.enable_debug_endpoints,
            runtime_lora_updating=runtime_lora_updating(),
            trace_requests=bool(ops_config.otlp_traces_endpoint),
            structured_outputs=so_config,
            default_chat_template_kwargs=args.default_chat_template_kwargs,
            chat_template_content_format=args.chat_template_content_format,
            trust_request_chat_template=args.trust_request_chat_template,
            server_chat_template=args.chat_template is not None,
            trust_request_mm_kwargs=args.trust_request_mm_kwargs,
            response_role=args.response_role,
            return_tokens_as_token_ids=args.return_tokens_as_token_ids,
            enable_prompt_tokens_details=args.enable_prompt_tokens_details,
            exclude_tools_when_tool_choice_none=args.exclude_tools_when_tool_choice_none,
            sse_keep_alive_interval=args.sse_keep_alive_interval,
            root_path=(args.root_path or "").rstrip("/"),
            anthropic_disabled_thinking_effort=args.anthropic_disabled_thinking_effort,
            reasoning_config="reasoning_config" in recorded.engine,
            enable_log_requests=args.enable_log_requests,
            max_log_len=args.max_log_len,
            enable_log_outputs=args.enable_log_outputs,
            enable_log_deltas=args.enable_log_deltas,
            access_log=not args.disable_uvicorn_access_log,
            access_log_skip=serving_flags.endpoint_paths(args.disable_access_log_for_endpoints),
            log_error_stack=(
                args.log_error_stack
                if args.log_error_stack is not None
                else os.environ.get("VLLM_SERVER_DEV_MODE", "0") == "1"
            ),
        ),
        ops=ops_config,
        lora_modules=lora_modules,
        require_lora=args.enable_lora or bool(lora_modules),
        parsers=parsers,
        vllm_flags=recorded,
        multimodal=multimodal_settings.from_args(args, recorded.engine, model),
    )
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


def worker_main(spec: WorkerSpec) -> NoReturn:
    """One of ``--api-server-count`` frontend processes (started by the supervisor);
    exits with the status a single frontend would."""
    become_worker()
    model, addresses, config = prepare(parse_args(build_parser(), spec.argv), first=False)
    state_file = config.engine_state_file
    config = dataclasses.replace(
        config,
        client_index=spec.index,
        shared=spec.shared,
        handoff=spec.handoff,
        metrics_dir=spec.metrics_dir,
        engine_state_file=f"{state_file}.w{spec.index}" if state_file else None,
    )
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
