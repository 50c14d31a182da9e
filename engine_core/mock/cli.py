"""``engine-core --mock`` arguments, and the entry point that starts the ranks."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import zmq

from engine_core.mock.control import Control
from engine_core.mock.engine import MockEngine
from engine_core.mock.facts import load_model_facts
from engine_core.mock.ranks import control_addr, run_ranks
from engine_core.mock.scripts import Scripts

logger = logging.getLogger("engine_core.mock")

HANDSHAKE_TIMEOUT_MINS = 5
BLOCK_SIZE = 16


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="engine-core --mock",
        description="A protocol-faithful mock of a headless vLLM 0.32 EngineCore.",
    )
    p.add_argument(
        "--frontend-addr",
        required=True,
        help="the frontend's handshake ROUTER, e.g. tcp://127.0.0.1:13345",
    )
    p.add_argument("--model", type=Path, help="model directory: vocab size, special ids")
    p.add_argument("--vocab-size", type=int, default=1200, help="without --model")
    p.add_argument("--eos-token-id", type=int, default=2, help="without --model")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument(
        "--block-size",
        type=int,
        default=BLOCK_SIZE,
        help="KV cache block size: the prefix cache's granularity",
    )
    p.add_argument("--step-time", type=float, default=0.0, help="seconds per step")
    p.add_argument("--tokens-per-step", type=int, default=1)
    p.add_argument("--eos-rate", type=float, default=0.0)
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--control-addr", help="bind a REP control socket here")
    p.add_argument(
        "--script",
        type=Path,
        help="JSON file: a list of script entries (engine_core/mock/scripts.py)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--runner",
        choices=("generate", "pooling"),
        default="generate",
        help="pooling: serve pooling requests (vLLM's flag)",
    )
    p.add_argument(
        "--convert",
        choices=("embed", "classify"),
        default="embed",
        help="with --runner pooling: the model's pooling task (vLLM's flag)",
    )
    p.add_argument(
        "--enable-lora",
        action="store_true",
        help="serve LoRA adapters (add_lora; ADDs that name one)",
    )
    p.add_argument(
        "--max-loras",
        type=int,
        default=1,
        help="adapters per batch, reported in the ready response",
    )
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument(
        "--max-cpu-loras",
        type=int,
        default=None,
        help="adapters kept loaded (LRU; default --max-loras)",
    )
    p.add_argument(
        "--distributed-executor-backend",
        choices=("mp", "uni"),
        default="mp",
        help="vLLM's flag: mp (vLLM's default on CPU) reports worker errors wrapped, uni "
        "(engine-core's default on CPU) as they are",
    )
    p.add_argument(
        "--profiler-config",
        type=json.loads,
        default=None,
        help='vLLM\'s flag, e.g. \'{"profiler": "torch"}\': the profile utility works',
    )
    p.add_argument(
        "--handshake-timeout",
        type=float,
        default=HANDSHAKE_TIMEOUT_MINS * 60,
        help="seconds to wait for INIT after HELLO (vLLM: 5 minutes)",
    )
    p.add_argument(
        "--data-parallel-size",
        "-dp",
        type=int,
        default=1,
        help="dense data parallel: independent engine ranks 0..N-1",
    )
    p.add_argument(
        "--data-parallel-start-rank",
        "-dpr",
        type=int,
        default=0,
        help="the first rank this launcher runs",
    )
    p.add_argument(
        "--data-parallel-size-local",
        "-dpl",
        type=int,
        help="how many ranks this launcher runs, one process each "
        "(default: the start rank's to the last)",
    )
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if (
        args.max_model_len < 2
        or args.max_num_seqs < 1
        or args.tokens_per_step < 1
        or args.block_size < 1
    ):
        p.error(
            "--max-model-len must be >= 2, --max-num-seqs, --tokens-per-step and --block-size >= 1"
        )
    size, first = args.data_parallel_size, args.data_parallel_start_rank
    if args.data_parallel_size_local is None:
        args.data_parallel_size_local = size - first
    if not 0 <= first < size or not 1 <= args.data_parallel_size_local <= size - first:
        p.error(
            "data parallel ranks: need 0 <= --data-parallel-start-rank < "
            "--data-parallel-size and 1 <= --data-parallel-size-local <= the ranks left"
        )
    if args.data_parallel_size_local > 1 and args.control_addr:
        try:
            control_addr(args.control_addr, 0)
        except ValueError as e:
            p.error(str(e))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    several = args.data_parallel_size > 1
    tag = (
        f"mock-engine DP{args.data_parallel_start_rank}"
        if several and args.data_parallel_size_local == 1
        else "mock-engine"
    )
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(levelname)s %(asctime)s [{tag}] %(message)s",
    )
    facts = load_model_facts(args.model, args.vocab_size, args.eos_token_id)
    scripts = Scripts(facts.vocab_size)
    try:
        if args.script:
            scripts.add(json.loads(args.script.read_text()))
    except (OSError, ValueError) as e:
        logger.error("--script %s: %s", args.script, e)
        return 2
    if args.data_parallel_size_local > 1:
        return run_ranks(argv, args)
    logger.info(
        "mock EngineCore: vocab=%d eos=%d max_model_len=%d max_num_seqs=%d%s",
        facts.vocab_size,
        facts.eos_token_id,
        args.max_model_len,
        args.max_num_seqs,
        f" rank={args.data_parallel_start_rank}/{args.data_parallel_size}" if several else "",
    )
    engine = MockEngine(args, facts, scripts)
    if args.control_addr:
        try:
            engine.control = Control(engine, args.control_addr)
        except zmq.ZMQError as e:
            logger.error("EngineCore failed to start: cannot bind %s: %s", args.control_addr, e)
            return 1
    return engine.run()
