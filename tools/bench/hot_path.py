"""The output hot path alone: engine message bytes -> SSE chunk bytes, in process.

Usage::

    .venv/bin/python -m tools.bench.hot_path [--streams 256] [--tokens 128] [--repeats 5]
                                             [--route completions|chat]

No sockets, no HTTP, no engine: ``--streams`` streaming /v1/completions groups
(the shipped Table, detokenizer, metrics observer and CompletionView; with
``--route chat``, /v1/chat/completions groups and ChatView) are fed
pre-encoded engine messages, and the time of ``decode_step`` + ``on_outputs``
(what the engine reader does per wake-up) is reported per output token, best
of ``--repeats``. Deterministic, so it can compare two versions of the code
where the end-to-end benchmark (tools/bench/run.py) is too noisy to.

Two shapes of engine traffic:

* ``batched``: every message holds one token of every stream, one message per
  wake-up (a real engine at a few ms per step, with a frontend that keeps up);
* ``ahead``: ``--ahead-outputs`` streams running at a time, ``--ahead-messages``
  messages per wake-up (a step-time-0 mock engine running far ahead of a
  saturated frontend, whose requests mostly wait in the frontend and the
  client: what the side-by-side benchmark's mock points measure).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from frontend import structured as so
from frontend.choices import Group
from frontend.model import load_model_info
from frontend.openai import tooling
from frontend.openai.chat import ChatCompletionRequest
from frontend.openai.chat_view import ChatView
from frontend.openai.completions import CompletionRequest, CompletionView
from frontend.openai.sampling import build_sampling_params
from frontend.ops.stats_recorder import StatsRecorder
from frontend.render import RenderedChat
from harness.models import tiny_model_dir
from harness.state import SCHEDULER_STATS, make_state
from protocol import wire
from tools.bench.prompts import make_prompts


def setup(model, prompts: list[str], streams: int, max_tokens: int, route: str = "completions"):
    state = make_state(model, observer=StatsRecorder(lambda: 4096))
    table = state.table
    sent = [0]

    def sink(view):
        def push(deltas):
            sent[0] += len(view._render(deltas))
            return 0, False
        return push

    ids_by_group = []
    for i in range(streams):
        prompt = prompts[i % len(prompts)]
        if route == "chat":
            req = ChatCompletionRequest(model="tiny", messages=[{"role": "user",
                                                                 "content": prompt}],
                                        max_tokens=max_tokens, temperature=0.0, stream=True,
                                        ignore_eos=True)
            group = Group(f"chatcmpl-{i}", stream=True)
        else:
            req = CompletionRequest(model="tiny", prompt=prompt, max_tokens=max_tokens,
                                    temperature=0.0, stream=True, ignore_eos=True)
            group = Group(f"cmpl-{i}", stream=True)
        ids = model.encode(prompt)
        params = build_sampling_params(model, req.to_sampling_fields(), max_tokens=max_tokens,
                                       stream=True)
        choice = table.add_choice(group, index=0, prompt_index=0, prompt_token_ids=ids,
                                  params=params)
        table.submit(group)
        if route == "chat":  # a chat request without tools, reasoning or constraints
            plan = tooling.plan(None, tools=None, tool_choice="none", parallel_tool_calls=True,
                                include_reasoning=True, response_format=None,
                                structured_outputs=None, constraints=so.parse(None, None),
                                template_kwargs={}, prompt_token_ids=ids)
            view = ChatView(state, req, group, "tiny", RenderedChat([], prompt, ids), True,
                            plan)
        else:
            view = CompletionView(state, req, group, "tiny", [(ids, req.prompt)])
        view.start_stream()
        group.sink = sink(view)
        ids_by_group.append((choice.engine_id, ids))
    return table, ids_by_group, sent


def messages(ids_by_group, max_tokens: int, per_message: int) -> list[list[bytes]]:
    """Every stream's ``max_tokens`` outputs (its own prompt's tokens, cycled, so
    the text is real). Streams run in cohorts of ``per_message``: one message
    per step of a cohort, as an engine with that many requests running sends."""
    frames = []
    for c in range(0, len(ids_by_group), per_message):
        cohort = [(eid, itertools.cycle(ids)) for eid, ids in ids_by_group[c:c + per_message]]
        for step in range(max_tokens):
            outs = []
            for eid, toks in cohort:
                out = wire.EngineCoreOutput(eid, [next(toks)])
                if step == 0:
                    out.prefill_stats = {"num_prompt_tokens": 128, "num_cached_tokens": 0}
                if step == max_tokens - 1:
                    out.finish_reason = wire.FinishReason.LENGTH
                outs.append(out)
            # (vLLM's EngineCore names its weights' version in every message)
            frames.append(wire.encode_outputs(wire.EngineCoreOutputs(
                outputs=outs, scheduler_stats=SCHEDULER_STATS, timestamp=time.monotonic(),
                weight_version="default")))
    return frames


def run_once(model, prompts, args, shape: str) -> tuple[float, int]:
    table, ids_by_group, sent = setup(model, prompts, args.streams, args.tokens, args.route)
    if shape == "batched":
        per_message, per_wakeup = args.streams, 1
    else:
        per_message, per_wakeup = args.ahead_outputs, args.ahead_messages
    frames = messages(ids_by_group, args.tokens, per_message)
    decode, on_outputs = wire.decode_step, table.on_outputs
    t0 = time.perf_counter()
    for i in range(0, len(frames), per_wakeup):
        on_outputs([decode(f) for f in frames[i:i + per_wakeup]])
    elapsed = time.perf_counter() - t0
    assert not table.entries, "every stream must have finished"
    return elapsed / (args.streams * args.tokens), sent[0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None,
                   help="model directory (default: the tiny test model, built if missing)")
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--ahead-outputs", type=int, default=6)
    p.add_argument("--ahead-messages", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--route", choices=("completions", "chat"), default="completions")
    args = p.parse_args(argv)
    args.model = args.model or tiny_model_dir()
    model = load_model_info(str(args.model), served_names=["tiny"])
    prompts = make_prompts(args.model, 64, 128)
    for shape in ("batched", "ahead"):
        results = [run_once(model, prompts, args, shape) for _ in range(args.repeats)]
        best = min(r[0] for r in results)
        print(f"{shape:8s} {best * 1e6:6.2f} us per output token "
              f"(best of {args.repeats}; {results[0][1] / (args.streams * args.tokens):.0f} "
              f"SSE bytes per token)")


if __name__ == "__main__":
    main()
