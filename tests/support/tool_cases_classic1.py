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

P, X = "<|tools_prefix|>", "<|tools_suffix|>"
AW = '{"get_weather": {"city": "Paris", "days": 3}}'
AS = '{"search": {"query": "café ☕", "tags": ["a"]}}'
AN = '{"get_weather": {"city": "Oslo", "options": {"detail": 0.5}}}'

APERTUS = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{P}[{AW}]{X}"),
    Case("text-before", f"I will check. {P}[{AW}]{X}"),
    Case("text-after", f"{P}[{AW}]{X} Done."),
    Case("text-around", f"Sure.\n{P}[{AW}, {AS}]{X}\nDone."),
    Case("two-calls", f"{P}[{AW}, {AS}]{X}"),
    Case("three-calls", f"{P}[{AS}, {AN}, {AW}]{X}"),
    Case("newlines", f"{P}\n[{AW},\n {AS}]\n{X}"),
    Case("no-suffix", f"{P}[{AW}]"),
    Case("no-suffix-text-after", f"{P}[{AW}] and then some"),
    Case("trailing-in-block", f"{P}[{AW}] oops{X}"),
    Case("two-blocks", f"{P}[{AW}]{X} then {P}[{AS}]{X}"),
    Case("truncated", f'{P}[{{"get_weather": {{"city": "Pa'),
    Case("truncated-name", f'{P}[{{"get_wea'),
    Case("truncated-second", f'{P}[{AW}, {{"search": {{"query": "x'),
    Case("empty-array", f"{P}[]{X}"),
    Case("object", f"{P}{AW}{X}"),
    Case("empty-args", f'{P}[{{"search": {{}}}}]{X}'),
    Case("null-args", f'{P}[{{"search": null}}, {AW}]{X}'),
    Case("string-args", f'{P}[{{"search": "rain"}}]{X}'),
    Case("nested-args", f"{P}[{AN}]{X}"),
    Case("two-keys", f'{P}[{{"search": {{"query": "a"}}, "get_weather": {{}}}}]{X}'),
    Case("not-objects", f"{P}[1, {AW}]{X}"),
    Case("malformed", f'{P}[{{"search": {{"query": }}}}]{X}'),
    Case("garbage", f"{P}not json{X}"),
    Case("prefix-only", f"Hi {P}"),
    Case("partial-marker", "Checking <|tools_"),
    Case("not-a-marker", "a <|tool b"),
    Case("unicode", f'{P}[{{"search": {{"query": "日本語 👍🏽 naïve"}}}}]{X}'),
    Case("required", f"{P}[{AW}]{X}", tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"ok {P}[{AW}]{X}", tool_choice="none"),
    Case("no-tools", f"{P}[{AW}]{X}", tools=None),
    Case("skipped-special", f"ok {P}[{AW}]{X}", skip_special=True),
    Case("no-eos", f"ok {P}[{AW}, {AS}]{X}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "xlam": XLAM,
    "apertus": APERTUS,
}

# (text, special) the cases need in the tokenizer.
MARKERS: list[tuple[str, bool]] = [
    # Apertus (special tokens).
    ("<|tools_prefix|>", True),
    ("<|tools_suffix|>", True),
]
