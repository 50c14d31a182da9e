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

DS, DE = "<dots_function_call>", "</dots_function_call>"


def dots(name: str, params: dict[str, str], quote: str = '"') -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f"<invoke name={quote}{name}{quote}>\n{body}</invoke>\n"


DW = dots("get_weather", {"city": "Paris", "days": "3"})
DSEARCH = dots("search", {"query": "a b", "tags": '["x"]'})
TYPED_TOOLS = [{"type": "function", "function": {
    "name": "typed", "parameters": {
        "type": "object", "$defs": {"Loc": {"type": "object"}, "N": {"type": "number"}},
        "properties": {
            "s": {"type": "string"}, "i": {"type": "integer"}, "f": {"type": "number"},
            "b": {"type": "boolean"}, "o": {"$ref": "#/$defs/Loc"},
            "n": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/N"}]},
            "u": {"type": ["null", "integer"]}, "a": {"type": "array"},
            "x": {"oneOf": [{"type": "null"}, {"description": "no type"}]},
        }}}}]

DOTS = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{DS}\n{DW}{DE}"),
    Case("text-before", f"Let me check.\n{DS}\n{DW}{DE}"),
    Case("text-after", f"{DS}\n{DW}{DE}\nDone."),
    Case("two-invokes", f"{DS}\n{DW}{DSEARCH}{DE}"),
    Case("two-blocks", f"{DS}\n{DW}{DE}\n{DS}\n{DSEARCH}{DE}"),
    Case("quotes", f"{DS}{dots('search', {'query': 'x'}, quote=chr(39))}"
                   f"{dots('get_weather', {'city': 'y'}, quote='')}{DE}"),
    Case("typed", f"{DS}" + dots("get_weather", {
        "city": "Oslo", "days": "2.0", "metric": "1", "options": '{"detail": 2}'}) + DE),
    Case("typed-schema", f"{DS}" + dots("typed", {
        "s": " x ", "i": "7", "f": "2.5", "b": "True", "o": '{"k": 1}', "n": "4.0",
        "u": "9", "a": "[1, 2]", "x": "[1]", "extra": "null"}) + DE, tools=TYPED_TOOLS),
    Case("bad-numbers", f"{DS}" + dots("typed", {"i": "x", "f": "1e3", "a": "[1"}) + DE,
         tools=TYPED_TOOLS),
    Case("json-body", f'{DS}{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}{DE}'),
    Case("json-body-text",
         f'ok {DS}\n{{"name": "search", "parameters": {{"query": "q"}}}}\n{DE} x'),
    Case("json-then-invoke", f'{DS}{{"name": "search", "arguments": {{}}}}{DE}{DS}{DW}{DE}'),
    Case("json-no-args", f'{DS}{{"name": "search"}}{DE}'),
    Case("json-bad-args", f'{DS}{{"name": "search", "arguments": [1]}}{DE}'),
    Case("json-list", f'{DS}[{{"name": "search", "arguments": {{}}}}]{DE}'),
    Case("json-unclosed", f'{DS}{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}'),
    Case("unknown-tool", f"{DS}\n{dots('other', {'n': '5'})}{DE}"),
    Case("unknown-then-known", f"{DS}\n{dots('other', {'n': '5'})}{DW}{DE}"),
    Case("no-invoke", f"{DS}<invoke>{DE}"),
    Case("malformed", f"{DS}not json{DE} after"),
    Case("empty-block", f"a {DS}{DE} b"),
    Case("stray-end", f"text {DE} more"),
    Case("truncated", f'{DS}\n<invoke name="get_weather">\n<parameter name="city">Pa'),
    Case("partial-marker", "Checking <dots_func"),
    Case("unicode", f"{DS}{dots('search', {'query': '東京 👍🏽 é'})}{DE}"),
    Case("required", f"{DS}\n{DW}{DE}", tool_choice="required"),
    Case("named", f"{DS}\n{DW}{DE}", tool_choice=NAMED),
    Case("choice-none", f"ok {DS}\n{DW}{DE}", tool_choice="none"),
    Case("no-tools", f"{DS}\n{DW}{DE}", tools=None),
    Case("no-eos", f"ok {DS}\n{DW}{DSEARCH}{DE}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "xlam": XLAM,
    "apertus": APERTUS,
    "dots": DOTS,
}

# (text, special) the cases need in the tokenizer.
MARKERS: list[tuple[str, bool]] = [
    # Apertus (special tokens).
    ("<|tools_prefix|>", True),
    ("<|tools_suffix|>", True),
]
