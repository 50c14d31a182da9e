"""``engine-core``: an EngineCore for the frontend, a real vLLM one or the mock."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from engine_core import launcher

USAGE = """\
engine-core --model MODEL --frontend-addr tcp://HOST:PORT [vllm serve args ...]
       engine-core --mock [mock engine args ...]   (see engine-core --mock --help)"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engine-core",
        usage=USAGE,
        allow_abbrev=False,
        description="Start a headless vLLM 0.32 engine that connects to a frontend "
        "bound at --frontend-addr (the frontend's --engine-addr). It runs "
        "`vllm serve MODEL --headless --data-parallel-address HOST "
        "--data-parallel-rpc-port PORT`; on a CPU-only host it adds small "
        "CPU defaults unless given (--distributed-executor-backend uni "
        "--enforce-eager --kv-cache-memory-bytes 128M, OMP_NUM_THREADS=1, ...).",
        epilog="All other arguments are passed to `vllm serve` unchanged "
        "(e.g. --max-model-len 1024 --dtype float32 --disable-log-stats).",
    )
    parser.add_argument(
        "--model", required=True, help="model directory (or Hugging Face name) to serve"
    )
    parser.add_argument(
        "--frontend-addr",
        required=True,
        metavar="tcp://HOST:PORT",
        help="the frontend's handshake address; the engine connects to it",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--mock" in argv:
        from engine_core import mock  # lazily: the launcher path is standard library only

        return mock.main([a for a in argv if a != "--mock"])
    parser = build_parser()
    args, vllm_args = parser.parse_known_args(argv)
    if reserved := launcher.given_flags(vllm_args, launcher.RESERVED_FLAGS):
        parser.error(f"{', '.join(reserved)}: engine-core sets this from --frontend-addr")
    try:
        host, port = launcher.parse_frontend_addr(args.frontend_addr)
    except ValueError as e:
        parser.error(str(e))
    return launcher.launch(args.model, host, port, vllm_args)


if __name__ == "__main__":
    sys.exit(main())
