"""The parser-path benchmark (tools/bench/parser_path.py) measures parsers that work.

Engine-free: the tiny model's tokenizer and the frontend's own parsers.
"""

from __future__ import annotations

import pytest

from frontend.model import load_model_info
from tests.support.requirements import require_tool
from tools.bench import parser_path


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir))


def _rows(text: str) -> dict[str, list[float]]:
    rows = {}
    for line in text.splitlines()[1:]:
        pair, *numbers = line.split()
        rows[pair] = [float(n) for n in numbers]
    return rows


def test_every_pair_streams_its_tool_calls_and_is_reported(tiny_model_dir, capsys):
    assert parser_path.main(["--model", str(tiny_model_dir), "--rounds", "1",
                             "--repeats", "1"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == list(parser_path.OUTPUTS)
    for pair, (tokens, us_per_token) in rows.items():
        assert tokens > 10 and us_per_token > 0, pair


def test_each_output_is_in_its_pairs_format(model):
    """A tool parser finds one get_weather call in its pair's output; the
    reasoning parser finds the thought; without parsers the text is content."""
    for pair in parser_path.OUTPUTS:
        w = parser_path.workload(model, pair)
        parsed = w.parsers.new(tools=parser_path.TOOLS, tool_choice="auto").parse(w.text)
        tool, reasoning = parser_path.split_pair(pair)
        calls = [c.name for c in parsed.tool_calls or ()]
        assert calls == (["get_weather"] if tool else []), pair
        thought = (parsed.reasoning or "").strip() == parser_path.THOUGHT
        assert thought == (reasoning is not None), pair
        assert sum(len(ids) for _, ids in w.steps) == len(w.steps)  # one token a step


def test_the_check_refuses_a_parser_that_streams_no_call(model):
    w = parser_path.workload(model, "hermes")
    w.text = parser_path.OUTPUTS["pythonic"]
    w.steps = parser_path.one_token_steps(model, w.text)
    with pytest.raises(AssertionError, match="hermes"):
        w.check()


def test_unknown_pairs_are_refused(tiny_model_dir):
    with pytest.raises(SystemExit):
        parser_path.main(["--model", str(tiny_model_dir), "--pairs", "hermes,nope"])


def test_instructions_are_counted_inside_the_window_only(tiny_model_dir):
    """Twice the rounds, the same count per round: the count is the window's,
    not the start-up's (which is many times larger and would halve it)."""
    require_tool("valgrind", "apt-get install valgrind: the instruction counts need it")
    one = parser_path.instructions_per_token(tiny_model_dir, "+deepseek_r1", 1, 1)
    two = parser_path.instructions_per_token(tiny_model_dir, "+deepseek_r1", 2, 1)
    assert 0.9 < two / one < 1.1, (one, two)
    tokens = len(parser_path.workload(load_model_info(str(tiny_model_dir)),
                                      "+deepseek_r1").steps)
    # A few ten thousand per token; Python's start-up alone would be millions.
    assert one / tokens < 2e5, one / tokens
