"""vLLM's own API server, once per set of parser flags, over one engine client.

``vllm serve`` takes one ``--tool-call-parser``/``--reasoning-parser`` per
process, and each process costs a vLLM import and an engine of its own. The
differential tests need vLLM's serving layer with many parser combinations,
so this script does what ``vllm serve``'s API server does (``vllm.entrypoints
.launchers``: parse the serve arguments, build the engine client, then
``build_app`` + ``init_app_state`` + uvicorn), unmodified, except that after
the one engine client it builds one app per flag set, each on its own port::

    python -m tests.support.vllm_multi_server BASE_ARGS_JSON CONFIGS_JSON

``BASE_ARGS_JSON``: ``vllm serve`` arguments (model, ``--data-parallel-*`` to
attach to a headless engine or the mock, ``--host``); ``CONFIGS_JSON``:
``[[port, [extra args]], ...]``. Each app is vLLM's server exactly as
``vllm serve BASE EXTRA --port PORT`` would build it on that engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys


def parse_serve_args(argv: list[str]):
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
    if args.model_tag is not None:  # as `vllm serve` does
        args.model = args.model_tag
    args.api_server_count = None  # a single API server
    # What AsyncEngineArgs.create_structured_outputs_config does for vllm serve:
    # the serving layer reads the reasoning parser from the config.
    args.structured_outputs_config = dataclasses.replace(
        args.structured_outputs_config, reasoning_parser=args.reasoning_parser or "")
    return args


async def serve(base_argv: list[str], configs: list[tuple[int, list[str]]]) -> None:
    import uvicorn
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.app import build_app

    base = parse_serve_args(base_argv)
    async with build_async_engine_client(base) as engine_client:
        tasks = await engine_client.get_supported_tasks()
        servers = []
        for port, extra in configs:
            args = parse_serve_args([*base_argv, *extra, "--port", str(port)])
            app = build_app(args, tasks, engine_client.model_config)
            await init_app_state(engine_client, app.state, args, tasks)
            servers.append(uvicorn.Server(uvicorn.Config(
                app, host=args.host, port=port, log_level="warning", access_log=False)))
        await asyncio.gather(*(server.serve() for server in servers))


def main() -> None:
    base_argv = json.loads(sys.argv[1])
    configs = [(int(port), list(extra)) for port, extra in json.loads(sys.argv[2])]
    import uvloop

    uvloop.run(serve(base_argv, configs))


if __name__ == "__main__":
    main()
