"""The chat parser path alone: one choice's engine steps -> parsed deltas, in process.

Usage::

    .venv/bin/python -m tools.bench.parser_path [--model DIR] [--pairs hermes,qwen3_coder+qwen3]
                                                [--rounds 20] [--repeats 5] [--instructions]

For each pair of ``--tool-call-parser`` and ``--reasoning-parser`` (``tool+reasoning``,
``+reasoning`` for a reasoning parser alone, ``none`` for neither), a fixed
model output in that pair's format (reasoning, a sentence, a tool call) is
tokenized with the model's tokenizer and fed to a fresh
:class:`~frontend.parsers.OutputParser` one token per engine step, as the
chat route does; ``--rounds`` outputs per measurement.  Before measuring,
the streamed tool calls are checked against the whole output's parse, so the
figures are of a parser that works.

Reported per output token: microseconds (best of ``--repeats``; moves with
the machine) and, with ``--instructions``, the instructions executed, counted
by callgrind (the same from run to run within a fraction of a percent, so a
few-percent change between two versions of a parser shows).  Each pair then
runs once more in a child process under callgrind that collects only inside
the measured window (tools/bench/callgrind.py).  Compare two versions of the code by
running this with ``PYTHONPATH`` pointing at each.
"""

from __future__ import annotations

import argparse
import operator
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from frontend.model import ModelInfo, load_model_info
from frontend.parsers import ChatParsers, ParserTokenizer
from harness.models import tiny_model_dir
from tools.bench.callgrind import operator_call_instructions

ROOT = Path(__file__).resolve().parents[2]
EOS_ID = 5  # the tiny model's <|im_end|>
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "note": {"type": "string"}}, "required": ["city"]}}}]
THOUGHT = ("The user wants the weather in Paris for the next three days, so I will "
           "call the weather tool with the city and the number of days.")
SENTENCE = "Let me look that up for you."
ARGS = '{"city": "Paris", "days": 3, "note": "include wind speed and the chance of rain"}'
XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n<parameter=note>\ninclude wind speed and "
            "the chance of rain\n</parameter>\n</function>\n</tool_call>")

# pair -> the model's output in that pair's format
OUTPUTS: dict[str, str] = {
    "none": f"{THOUGHT} {SENTENCE}",
    "hermes": f'{SENTENCE}\n<tool_call>\n{{"name": "get_weather", "arguments": {ARGS}}}\n'
              "</tool_call>",
    "hermes+qwen3": f'{THOUGHT}\n</think>\n\n<tool_call>\n{{"name": "get_weather", '
                    f'"arguments": {ARGS}}}\n</tool_call>',
    "llama3_json": f'{{"name": "get_weather", "parameters": {ARGS}}}',
    "pythonic": "[get_weather(city='Paris', days=3, note='include wind speed and the "
                "chance of rain')]",
    "mistral": f"{SENTENCE}[TOOL_CALLS]get_weather[ARGS]{ARGS}",
    "qwen3_coder+qwen3": f"<think>{THOUGHT}</think>\n{SENTENCE}\n{XML_CALL}",
    "+deepseek_r1": f"<think>{THOUGHT}</think>{SENTENCE}",
    "minicpm5": f'{SENTENCE}\n<function name="get_weather"><param name="city">Paris</param>'
                '<param name="days">3</param><param name="note">include wind speed and the '
                "chance of rain</param></function>",
}


def split_pair(pair: str) -> tuple[str | None, str | None]:
    """``tool+reasoning`` -> (tool parser, reasoning parser); ``none`` -> (None, None)."""
    if pair == "none":
        return None, None
    tool, _, reasoning = pair.partition("+")
    return tool or None, reasoning or None


@dataclass
class Workload:
    """One pair's parsers and its output as engine steps of one token."""

    pair: str
    parsers: ChatParsers
    text: str
    steps: list[tuple[str, list[int]]]

    def run(self, rounds: int) -> list:
        """Stream the output ``rounds`` times; the last round's deltas."""
        steps, last = self.steps, len(self.steps) - 1
        deltas: list = []
        for _ in range(rounds):
            parser = self.parsers.new(tools=TOOLS, tool_choice="auto")
            deltas = [parser.feed(text, ids, finished=k == last)
                      for k, (text, ids) in enumerate(steps)]
        return deltas

    def check(self) -> None:
        """The streamed tool calls are the whole output's."""
        expected = self.parsers.new(tools=TOOLS, tool_choice="auto").parse(self.text)
        calls: dict[int, list[str]] = {}
        for delta in self.run(1):
            for piece in delta.tool_calls if delta is not None else ():
                name, args = calls.setdefault(piece.index, ["", ""])
                calls[piece.index] = [name + (piece.name or ""), args + (piece.arguments or "")]
        streamed = [(name, args) for name, args in calls.values()]
        wanted = [(c.name, c.arguments) for c in expected.tool_calls or ()]
        if streamed != wanted or (self.parsers.tool_parser is not None and not wanted):
            raise AssertionError(f"{self.pair}: streamed {streamed}, parsed {wanted}")


def one_token_steps(model: ModelInfo, text: str) -> list[tuple[str, list[int]]]:
    """The output as the engine delivers it one token a step, EOS last."""
    ids = model.encode(text, add_special_tokens=False)
    steps, sent = [], ""
    for k in range(1, len(ids) + 1):
        so_far = model.decode(ids[:k])
        steps.append((so_far[len(sent):], [ids[k - 1]]))
        sent = so_far
    return [*steps, ("", [EOS_ID])]


def workload(model: ModelInfo, pair: str) -> Workload:
    tool, reasoning = split_pair(pair)
    parsers = ChatParsers(ParserTokenizer.from_model(model), tool_parser=tool,
                          reasoning_parser=reasoning)
    text = OUTPUTS[pair]
    return Workload(pair, parsers, text, one_token_steps(model, text))


def seconds_per_token(w: Workload, rounds: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        w.run(rounds)
        best = min(best, time.perf_counter() - t0)
    return best / (rounds * len(w.steps))


def instructions_per_token(model_dir: Path, pair: str, rounds: int, tokens: int) -> float:
    """Callgrind's count of the window, in a child process, per token."""
    count = operator_call_instructions("tools.bench.parser_path", "--model", str(model_dir),
                                       "--pairs", pair, "--rounds", str(rounds), "--window")
    return count / (rounds * tokens)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None,
                   help="model directory (default: the tiny test model, built if missing)")
    p.add_argument("--pairs", default=",".join(OUTPUTS),
                   help=f"comma-separated, of: {', '.join(OUTPUTS)}")
    p.add_argument("--rounds", type=int, default=20, help="outputs per measurement")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--instructions", action="store_true",
                   help="also count instructions per token under callgrind")
    p.add_argument("--window", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.model = args.model or tiny_model_dir()
    pairs = args.pairs.split(",")
    unknown = [pair for pair in pairs if pair not in OUTPUTS]
    if unknown:
        p.error(f"unknown pairs {unknown}; known: {', '.join(OUTPUTS)}")
    model = load_model_info(str(args.model))
    if args.window:  # the child under callgrind: warm, then the counted window
        w = workload(model, pairs[0])
        w.check()
        operator.call(w.run, args.rounds)
        return 0
    if args.instructions and not shutil.which("valgrind"):
        print("--instructions needs valgrind", file=sys.stderr)
        return 2
    print(f"{'pair':<20} {'tokens':>6} {'us/token':>9}"
          + (f" {'k instr/token':>14}" if args.instructions else ""))
    for pair in pairs:
        w = workload(model, pair)
        w.check()
        line = (f"{pair:<20} {len(w.steps):>6} "
                f"{seconds_per_token(w, args.rounds, args.repeats) * 1e6:>9.1f}")
        if args.instructions:
            count = instructions_per_token(args.model, pair, args.rounds, len(w.steps))
            line += f" {count / 1e3:>14.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
