"""Cases of the g5 group's tool parsers (hy_v3, hy_v4, minicpm5): ``CASES[parser]``,
compared with vLLM's parser through MORE_CASES (tests/support/more_tool_cases.py).

Their markers need no new tokens: ``<tool_calls>``/``</tool_calls>`` (the
ids hy_v3 and hy_v4 look up) are Jamba's, ``<tool_call>``/``</tool_call>``
the tiny model's; the others (``<tool_sep>``, ``<arg_key>``, ...,
``<function``) stay text, split at every chunking, which the parsers read
from the text anyway.
"""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}
CS, CE = "<tool_calls>", "</tool_calls>"
TS, TE = "<tool_call>", "</tool_call>"


def _pairs(params: dict[str, str], between: str = "") -> str:
    return "".join(
        f"{between}<arg_key>{k}</arg_key>{between}<arg_value>{v}</arg_value>"
        for k, v in params.items()
    )


def hy3(name: str, params: dict[str, str], between: str = "") -> str:
    return f"{TS}{name}<tool_sep>{_pairs(params, between)}{TE}"


def hy4(name: str, params: dict[str, str], between: str = "") -> str:
    return f"{TS}{name}{_pairs(params, between)}{TE}"


WP = {"city": "Paris", "days": "3"}
TYPED = {"city": "Rome", "days": "-2", "metric": "True", "options": '{"detail": 0.5}'}
TRICKY = {"query": 'say "hi"\n\tback\\slash 東京 👍🏽', "tags": "['a', 'b']"}


def hunyuan_cases(call) -> list[Case]:
    """The cases hy_v3 and hy_v4 share, in ``call``'s format."""
    one = call("get_weather", WP)
    return [
        Case("plain", "The weather is nice today."),
        Case("angle-text", "a < b and <tool_call> is text here"),
        Case("one-call", f"{CS}{one}{CE}"),
        Case("text-before", f"Let me check.\n{CS}{one}{CE}"),
        Case("newlines", f"{CS}\n{call('get_weather', WP, between=chr(10))}\n{CE}"),
        Case("two-calls", f"{CS}{one}{call('search', {'query': 'rain'})}{CE}"),
        Case("two-calls-newline", f"{CS}{one}\n{call('search', {'query': 'rain'})}\n{CE}"),
        Case("three-calls", f"{CS}{one}{one}{call('search', {'query': 'x'})}{CE}"),
        Case("typed", f"{CS}{call('get_weather', TYPED)}{CE}"),
        Case("bad-types", f"{CS}{call('get_weather', {'days': '3.5', 'metric': 'yes'})}{CE}"),
        Case("tricky-strings", f"{CS}{call('search', TRICKY)}{CE}"),
        Case("unknown-tool", f"{CS}{call('lookup', {'id': '7', 'x': '[1, 2]'})}{CE}"),
        Case("no-args", f"{CS}{call('search', {})}{CE}"),
        Case("empty-value", f"{CS}{call('search', {'query': ''})}{CE}"),
        Case("text-after", f"{CS}{one}{CE} That is all."),
        Case("truncated", CS + call("get_weather", {"city": "Par"})[: -len("</arg_value>" + TE)]),
        Case("truncated-key", f"{CS}{one[: -len(TE)]}<arg_key>da"),
        Case("truncated-name", f"{CS}{TS}get_wea"),
        Case("no-call-end", f"{CS}{one[: -len(TE)]}"),
        Case("no-calls-end", f"{CS}{one}"),
        Case("calls-start-only", f"Hi {CS}"),
        Case(
            "unclosed-value", f"{CS}{one[: -len(TE)]}<arg_key>query</arg_key><arg_value>x{TE}{CE}"
        ),
        Case(
            "stray-text",
            f"{CS}{TS}search<tool_sep>junk<arg_key>query</arg_key><arg_value>q</arg_value>{TE}{CE}",
        ),
        Case("think-text", f"<think>hmm</think>{CS}{one}{CE}"),
        Case("no-special", f"{CS}{one}{CE}", skip_special=True),
        Case("required", f"{CS}{one}{CE}", tool_choice="required"),
        Case("required-text-first", f"ok <tool{CS}{one}{CE}", tool_choice="required"),
        Case("named", f"{CS}{one}{CE}", tool_choice=NAMED),
        Case("choice-none", f"{CS}{one}{CE}", tool_choice="none"),
        Case("no-tools", f"{CS}{one}{CE}", tools=None),
        Case("no-eos", f"ok {CS}{one}{CE}", eos=False),
    ]


def fn(name: str, params: dict[str, str], quote: str = '"') -> str:
    body = "".join(f"<param name={quote}{k}{quote}>{v}</param>" for k, v in params.items())
    return f"<function name={quote}{name}{quote}>{body}</function>"


MW = fn("get_weather", {"city": "Paris", "days": "3"})
MINICPM5 = [
    Case("plain", "The weather is nice today."),
    Case("angle-text", "if a < b then <b>bold</b> <func"),
    Case("one-call", MW),
    Case("text-before", f"Let me check.\n{MW}"),
    Case("text-after", f"{MW}\nDone."),
    Case("two-calls", MW + "\n" + fn("search", {"query": "rain", "tags": '["a"]'})),
    Case("single-quotes", fn("get_weather", {"city": "Oslo"}, quote="'")),
    Case(
        "typed",
        fn(
            "get_weather",
            {"city": "Rome", "days": "7", "metric": "true", "options": "{'detail': 0.5}"},
        ),
    ),
    Case("string-json", fn("search", {"query": "[1, 2]", "tags": "x"})),
    Case(
        "newline-values",
        '<function name="search">\n<param name="query">\n  rain  \n</param>\n</function>',
    ),
    Case(
        "cdata",
        '<function name="search"><param name="query"><![CDATA[a < b & c]]></param></function>',
    ),
    Case("not-xml", '<function name="search"><param name="query">a < b & c</param></function>'),
    Case("unknown-tool", fn("lookup", {"id": "7"})),
    Case("unknown-param", fn("get_weather", {"city": "Paris", "color": "red"})),
    Case("missing-required", fn("get_weather", {"days": "3"})),
    Case(
        "duplicate-param",
        fn("get_weather", {"city": "Paris"})[: -len("</function>")]
        + '<param name="city">Rome</param></function>',
    ),
    Case("unnamed-param", '<function name="search"><param>q</param></function>'),
    Case("wrapper", fn("get_weather", {"arguments": '{"city": "Paris", "days": 2, "x": 1}'})),
    Case("wrapper-bad", fn("get_weather", {"arguments": "[1]"})),
    Case(
        "arguments-node",
        '<function name="search"><arguments><param name="query">q</param></arguments></function>',
    ),
    Case(
        "byte-level", '<functionname="search"><paramname="query">a\u0120b\u010ac</param></function>'
    ),
    Case("think", f"<think>I should call it</think>\n\n{MW}"),
    Case("think-only", "<think>hmm</think>\n\n  The answer is 4.  "),
    Case(
        "truncated",
        '<function name="get_weather"><param name="city">Paris</param><param name="days">3',
    ),
    Case("truncated-name", '<function name="get_wea'),
    Case("bad-then-good", f"{fn('lookup', {'id': '7'})} then {MW}"),
    Case("unclosed-then-good", f'<function name="x"><param name="y">1</param> {MW}'),
    Case("no-special", MW, skip_special=True),
    Case("required", MW, tool_choice="required"),
    Case(
        "required-json",
        '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
        tool_choice="required",
    ),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", MW, tool_choice="none"),
    Case("no-tools", MW, tools=None),
    Case("no-eos", f"ok {MW}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "hy_v3": hunyuan_cases(hy3),
    # Forced calls carry hy_v4's structural tag, which changes how vLLM's parser
    # reads the text: compared under it in tests/test_tool_parsers_g5.py.
    "hy_v4": [c for c in hunyuan_cases(hy4) if c.tool_choice in ("auto", "none")],
    "minicpm5": MINICPM5,
}
