"""Cases of vLLM's ``xlam``, ``apertus`` and ``dots`` tool parsers, compared
with vLLM's own as ``MORE_CASES`` are (tests/support/more_tool_cases.py)."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}

W = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
S = '{"name": "search", "arguments": {"query": "café ☕", "tags": ["a"]}}'
E = '{"name": "search", "arguments": {}}'
N = '{"name": "get_weather", "arguments": {"city": "Oslo", "options": {"detail": 0.5}}}'
U = '{"name": "search", "arguments": {"query": "日本語 👍🏽 naïve"}}'

XLAM = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"[{W}]"),
    Case("two-calls", f"[{W}, {S}]"),
    Case("three-calls", f"[{S}, {W}, {N}]"),
    Case("ws-before", f"\n  [{W}]"),
    Case("text-after", f"[{W}] and more"),
    Case("fenced", f"```json\n[{W}]\n```"),
    Case("fenced-text", f"Sure, calling it.\n```json\n[{W}, {S}]\n```\nDone."),
    Case("fenced-bare", f"```\n[{W}]\n```"),
    Case("tool-calls-tag", f"[TOOL_CALLS][{W}]"),
    Case("tool-calls-tag-text", f"Ok.\n[TOOL_CALLS][{W}, {S}]\nbye"),
    Case("tool-call-tag", f"<tool_call>[{W}]</tool_call>"),
    Case("tool-call-tag-text", f"Let me check. <tool_call>[{S}]</tool_call>"),
    Case("think", f"<think>hmm</think>[{W}]"),
    Case("think-space", f"<think>hmm</think>\n[{W}, {S}]"),
    Case("think-fenced", f"I should look.</think>\n```json\n[{S}]\n```"),
    Case("think-text", "<think>hmm</think>Just text."),
    Case("empty-args", f"[{E}]"),
    Case("empty-args-second", f"[{W}, {E}]"),
    Case("empty-args-first", f"[{E}, {W}]"),
    Case("nested-args", f"[{N}]"),
    Case("deep-args", '[{"name": "search", "arguments": {"a": {"b": {"c": 1}}}}]'),
    Case("string-args", '[{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}]'),
    Case("list-args", '[{"name": "search", "arguments": [1, 2]}]'),
    Case("number-name", '[{"name": 5, "arguments": {}}]'),
    Case("missing-args", f'[{{"name": "search"}}, {W}]'),
    Case("object", W),
    Case("not-calls", "[1, 2, 3]"),
    Case("truncated", '[{"name": "get_weather", "arguments": {"city": "Pa'),
    Case("truncated-name", '[{"name": "get_wea'),
    Case("truncated-second", f'[{W}, {{"name": "search", "arguments": {{"query": "x'),
    Case("malformed", '[{"name": "search", "arguments": {"query": }}]'),
    Case("unicode", f"[{U}]"),
    Case("required", f"[{W}]", tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"[{W}]", tool_choice="none"),
    Case("no-tools", f"[{W}]", tools=None),
    Case("no-eos", f"[{W}, {S}]", eos=False),
]

CASES: dict[str, list[Case]] = {
    "xlam": XLAM,
}

# (text, special) the cases need in the tokenizer.
MARKERS: list[tuple[str, bool]] = []
