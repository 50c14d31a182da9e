"""Cases of the tool parsers ported by group classic2 (hunyuan_a13b, ...),
compared with vLLM's parsers as ``MORE_CASES`` are (hooked into
tests/support/more_tool_cases.py); ``MARKERS``: the marker tokens they need
beyond those already in tests/support/marker_model.py."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}

# Hunyuan-A13B: a JSON array in <tool_calls> (tokens shared with Jamba's).
HW = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
HS = '{"name": "search", "arguments": {"query": "rain", "tags": ["a"]}}'
HE = '{"name": "search", "arguments": {}}'


def hy(*calls: str, sep: str = ", ") -> str:
    return "<tool_calls>[" + sep.join(calls) + "]</tool_calls>"


HUNYUAN_A13B = [
    Case("plain", "The weather is nice today."),
    Case("assistant-prefix", "助手：The weather is nice."),
    Case("one-call", hy(HW)),
    Case("bare-array", f"[{HW}]"),
    Case("space-before", f"  {hy(HW)}"),
    Case("text-before", f"Let me check. {hy(HW)}"),
    Case("text-after", f"{hy(HW)} done"),
    Case("two-calls", hy(HW, HS)),
    Case("two-calls-tight", hy(HW, HS, sep=",")),
    Case("empty-args", hy(HE)),
    Case("empty-args-second", hy(HW, HE, sep=",")),
    Case("empty-args-first", hy(HE, HW, sep=",")),
    Case("nested", hy('{"name": "get_weather", "arguments": {"options": {"detail": 0.5}, '
                      '"metric": true}}')),
    Case("string-args", hy('{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}')),
    Case("bad-name", hy('{"name": 5, "arguments": {}}')),
    Case("not-a-list", f"<tool_calls>{HW}</tool_calls>"),
    Case("no-args", hy('{"name": "search"}')),
    Case("malformed", '<tool_calls>[{"name": "search", "arguments": {"q": }}]</tool_calls>'),
    Case("in-think", f"<think>{hy(HW)}</think> ok"),
    Case("truncated", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa'),
    Case("truncated-name", '<tool_calls>[{"name": "get_wea'),
    Case("no-end", f"<tool_calls>[{HW}]"),
    Case("unicode", hy('{"name": "search", "arguments": {"query": "東京 👍🏽"}}')),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", hy(HW), tool_choice="none"),
    Case("no-tools", hy(HW), tools=None),
    Case("no-eos", hy(HW), eos=False),
]

# FunctionGemma (special tokens in its tokenizer).
GS, GE, ESC = "<start_function_call>", "<end_function_call>", "<escape>"


def fg(name: str, args: dict[str, str], end: bool = True) -> str:
    body = ",".join(f"{k}:{ESC}{v}{ESC}" for k, v in args.items())
    return f"{GS}call:{name}{{{body}" + ("}" + GE if end else "")


FUNCTIONGEMMA = [
    Case("plain", "The weather is nice today."),
    Case("one-call", fg("get_weather", {"city": "Paris"})),
    Case("two-args", fg("get_weather", {"city": "Paris", "days": "3"})),
    Case("text-before", "Let me check. " + fg("get_weather", {"city": "Paris"})),
    Case("text-after", fg("get_weather", {"city": "Paris"}) + " done"),
    Case("two-calls", fg("get_weather", {"city": "Paris"}) + fg("search", {"query": "rain"})),
    Case("two-calls-text", fg("get_weather", {"city": "Paris"}) + "\nand\n"
         + fg("search", {"query": "rain"})),
    Case("bare-number", f"{GS}call:get_weather{{city:{ESC}Rome{ESC},days:3}}{GE}"),
    Case("json-values", fg("get_weather", {"metric": "true", "options": '{"detail": 0.5}'})),
    Case("no-args", f"{GS}call:search{{}}{GE}"),
    Case("braces-in-value", fg("search", {"query": "a{b}c"})),
    Case("multiline", fg("search", {"query": "line one\nline two"})),
    Case("unclosed", fg("get_weather", {"city": "Paris"}, end=False)),
    Case("unclosed-then-call", fg("get_weather", {"city": "Paris"}, end=False)
         + fg("search", {"query": "rain"})),
    Case("truncated-value", f"{GS}call:get_weather{{city:{ESC}Par"),
    Case("truncated-name", f"{GS}call:get_wea"),
    Case("start-only", f"Hi {GS}"),
    Case("no-call-prefix", f"{GS}get_weather{{city:{ESC}Paris{ESC}}}{GE}"),
    Case("lookalike-text", "a <start_func b <end_ c <"),
    Case("unicode", fg("search", {"query": "東京 👍🏽 naïve"})),
    Case("unicode-name", fg("café", {"query": "x"})),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", fg("get_weather", {"city": "Paris"}), tool_choice="none"),
    Case("no-tools", fg("get_weather", {"city": "Paris"}), tools=None),
    Case("skip-special", fg("get_weather", {"city": "Paris"}), skip_special=True),
    Case("no-eos", fg("get_weather", {"city": "Paris"}), eos=False),
]

# Poolside (Laguna): GLM-4 style XML in <tool_call> (tokens of the tiny model).


def ps(name: str, args: dict[str, str], sep: str = "\n", end: bool = True) -> str:
    body = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>{sep}"
                   for k, v in args.items())
    return f"<tool_call>{name}{sep}{body}" + ("</tool_call>" if end else "")


PW = {"city": "Paris", "days": "3"}
POOLSIDE_V1 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", ps("get_weather", PW)),
    Case("no-newlines", ps("get_weather", PW, sep="")),
    Case("text-before", "Let me check. " + ps("get_weather", PW)),
    Case("text-after", ps("get_weather", PW) + " done"),
    Case("text-between", ps("get_weather", PW) + " and " + ps("search", {"query": "rain"})),
    Case("two-calls", ps("get_weather", PW) + "\n" + ps("search", {"query": "rain"})),
    Case("string-verbatim", ps("search", {"query": "  two  spaces\n"})),
    Case("string-escapes", ps("search", {"query": 'say "hi" \\ <b> \t'})),
    Case("typed-values", ps("get_weather", {"days": " 3 ", "metric": "true",
                                            "options": '{"detail": 0.5}'})),
    Case("python-literal", ps("get_weather", {"metric": "True", "options": "{'detail': 1}"})),
    Case("unknown-key-text", ps("get_weather", {"city": "Paris", "note": "not json"})),
    Case("repeated-key", ps("search", {"query": "a"}) [:-len("</tool_call>")]
         + "<arg_key>query</arg_key><arg_value>b</arg_value></tool_call>"),
    Case("repeated-typed-key", "<tool_call>get_weather\n<arg_key>days</arg_key><arg_value>1"
         "</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"),
    Case("no-args", "<tool_call>search\n</tool_call>"),
    Case("name-only", "<tool_call>search</tool_call>"),
    Case("empty-call", "<tool_call></tool_call>ok"),
    Case("empty-then-call", "<tool_call></tool_call>" + ps("search", {"query": "q"})),
    Case("blank-name", "<tool_call>\n<arg_key>query</arg_key><arg_value>q</arg_value>"
         "</tool_call>"),
    Case("unknown-tool", ps("other", {"n": "5", "s": "x"})),
    Case("truncated-string", "<tool_call>search\n<arg_key>query</arg_key><arg_value>rai"),
    Case("truncated-typed", "<tool_call>get_weather\n<arg_key>days</arg_key><arg_value>3"),
    Case("truncated-key", "<tool_call>get_weather\n<arg_key>ci"),
    Case("truncated-name", "<tool_call>get_wea"),
    Case("no-end", ps("get_weather", PW, end=False)),
    Case("start-only", "Hi <tool_call>"),
    Case("lookalike-text", "a <tool b </arg_ c <"),
    Case("unicode", ps("search", {"query": "東京 👍🏽 naïve"})),
    Case("required", ps("get_weather", PW), tool_choice="required"),
    Case("named", ps("get_weather", PW), tool_choice=NAMED),
    Case("choice-none", ps("get_weather", PW), tool_choice="none"),
    Case("no-tools", ps("get_weather", PW), tools=None),
    Case("no-eos", ps("get_weather", PW), eos=False),
]

CASES: dict[str, list[Case]] = {
    "hunyuan_a13b": HUNYUAN_A13B,
    "functiongemma": FUNCTIONGEMMA,
    "poolside_v1": POOLSIDE_V1,
}

MARKERS: list[tuple[str, bool]] = [
    # FunctionGemma.
    (GS, True),
    (GE, True),
    (ESC, True),
]
