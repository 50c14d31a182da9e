"""Cases of the g2 group's tool parsers (deepseek_v4, deepseek_v41, granite,
ling3, minimax_m3): ``CASES[parser]``, compared with vLLM's parser through
MORE_CASES (tests/support/more_tool_cases.py), and the marker tokens they need
(tests/support/marker_model.py)."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}


# DeepSeek V4 / V4.1: DSML tags (plain text), V4.1 spelled with a space.
def dsml_cases(v41: bool) -> list[Case]:
    sp = " " if v41 else ""
    d = "｜DSML｜" + sp
    tc, tce = (f"<{d}calls>", f"</{d}calls>") if v41 else (f"<{d}tool_calls>", f"</{d}tool_calls>")

    def invoke(name: str, params: list[tuple[str, str | None, str]]) -> str:
        body = "".join(f'<{d}parameter name="{k}"' + (f' string="{s}"' if s is not None else "")
                       + f">{v}</{d}parameter>\n" for k, s, v in params)
        return f'<{d}invoke name="{name}">\n{body}</{d}invoke>\n'

    w = invoke("get_weather", [("city", "true", "杭州"), ("days", "false", "5")])
    s = invoke("search", [("query", "true", "a > b"), ("tags", "false", '["x"]')])
    cases = [
        Case("plain", "The weather is nice today."),
        Case("one-call", f"{tc}\n{w}{tce}"),
        Case("text-before", f"Let me check.\n\n{tc}\n{w}{tce}"),
        Case("text-around", f"Sure.\n{tc}\n{w}{tce}\nDone."),
        Case("two-calls", f"{tc}\n{w}{s}{tce}"),
        Case("no-string-attr", f"{tc}\n" + invoke("get_weather", [("city", None, "Oslo"),
                                                                  ("metric", None, "true")])
             + tce),
        Case("malformed", f"{tc}\n" + invoke("get_weather", [("days", "false", "many")]) + tce),
        Case("wrapped", f"{tc}\n" + invoke("search", [("arguments", "false", '{"query": "q"}')])
             + tce),
        Case("typed", f"{tc}\n" + invoke("get_weather", [("city", "false", "7"),
                                                         ("options", "false", '{"detail": 2}')])
             + tce),
        Case("truncated", f'{tc}\n<{d}invoke name="get_weather">\n'
                          f'<{d}parameter name="city" string="true">Pa'),
        Case("truncated-name", f'{tc}\n<{d}invoke name="get_we'),
        Case("no-block-end", f"{tc}\n{w}"),
        Case("bare-invoke", w),
        Case("unicode", f"{tc}\n" + invoke("search", [("query", "true", "東京 👍🏽")]) + tce),
        Case("think-text", f"<think>x</think>{tc}\n{w}{tce}"),
        Case("think-end-text", f"plan</think>\n\n{tc}\n{w}{tce}"),
        Case("no-thinking", f"ok {tc}\n{w}{tce}", chat_template_kwargs={"thinking": False}),
        Case("required", f"\n\n{tc}\n{w}{tce}", tool_choice="required"),
        Case("named", f"\n\n{tc}\n{w}{tce}", tool_choice=NAMED),
        Case("choice-none", f"ok {tc}\n{w}{tce}", tool_choice="none"),
        Case("no-tools", f"{tc}\n{w}{tce}", tools=None),
        Case("no-eos", f"ok {tc}\n{w}{tce}", eos=False),
        # The other version's spelling is text.
        Case("other-dialect", f"<｜DSML｜tool_calls>\n{w}</｜DSML｜tool_calls>" if v41
             else f"<｜DSML｜ calls>\n{w}</｜DSML｜ calls>"),
    ]
    if not v41:
        cases += [
            Case("variant-toolcalls", f"<{d}toolcalls>\n{w}{tce}"),
            Case("variant-tool", f"<{d}tool>\n{w}{tce}"),
        ]
    return cases


# Granite 3.0 (<|tool_call|>, a special token) and 3.1 (<tool_call>, text).
GT = "<|tool_call|>"
GW = '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]'
GS = '{"name": "search", "arguments": {"query": "café ☕ }", "tags": ["a"]}}'
GRANITE = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{GT}{GW}"),
    Case("one-call-text-marker", f"<tool_call>{GW}"),
    Case("text-before", f"Let me check. {GT} {GW}"),
    Case("text-around", f"Sure.\n{GT}{GW}\nDone."),
    Case("two-calls", f'{GT}[{GW[1:-1]}, {GS}]'),
    Case("nested", f'{GT}[{{"name": "get_weather", "arguments": {{"city": "Rome", '
                   '"options": {"detail": 0.5}, "metric": true}}]'),
    Case("name-after-arguments", f'{GT}[{{"arguments": {{"query": "x"}}, "name": "search"}}]'),
    Case("no-arguments", f'{GT}[{{"name": "search"}}]'),
    Case("arguments-not-object", f'{GT}[{{"name": "search", "arguments": "q"}}]'),
    Case("typed", f'{GT}[{{"name": "get_weather", "arguments": {{"city": 7, "days": "2"}}}}]'),
    Case("truncated", f'{GT}[{{"name": "get_weather", "arguments": {{"city": "Pa'),
    Case("truncated-second", f'{GT}[{GW[1:-1]}, {{"name": "sea'),
    Case("no-close", f"{GT}[{GW[1:-1]}"),
    Case("malformed", f"{GT}[1, 2]"),
    Case("not-an-array", f'{GT} {{"name": "search", "arguments": {{}}}}'),
    Case("empty-array", f"{GT}[] ok"),
    Case("unicode", f'{GT}[{{"name": "search", "arguments": {{"query": "東京 👍🏽 naïve"}}}}]'),
    Case("escapes", f'{GT}[{{"name": "search", "arguments": {{"query": "a \\"}}\\" b"}}}}]'),
    Case("marker-only", f"Hi {GT}"),
    Case("no-special", f"{GT}{GW}", skip_special=True),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"{GT}{GW}", tool_choice="none"),
    Case("no-tools", f"{GT}{GW}", tools=None),
    Case("no-eos", f"ok {GT}{GW}", eos=False),
]


# Ling 3: GLM's XML calls; thinking on unless turned off.
def glm(name: str, args: dict[str, str], sep: str = "") -> str:
    body = "".join(f"{sep}<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>"
                   for k, v in args.items())
    return f"<tool_call>{name}{body}{sep}</tool_call>"


LW = glm("get_weather", {"city": "Paris", "days": "3"})
LING3 = [
    Case("plain", "</think>The weather is nice today."),
    Case("one-call", f"</think>{LW}"),
    Case("think-first", f"Let me check.</think>\n{LW}"),
    Case("text-before", f"</think>Sure.\n{LW}"),
    Case("text-around", f"</think>Sure.\n{LW}\nDone."),
    Case("two-calls", f"</think>{LW}\n" + glm("search", {"query": "a b", "tags": '["x"]'})),
    Case("typed", "</think>" + glm("get_weather", {"city": "Rome", "days": "2",
                                                  "options": '{"detail": 0.5}'}, "\n")),
    Case("truncated", "</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa"),
    Case("malformed", "</think><tool_call>get_weather<arg_value>x</arg_key></tool_call>"),
    Case("unknown-tool", f"</think>{glm('other', {'n': '5'})}"),
    Case("unicode", f"</think>{glm('search', {'query': '東京 👍🏽 é'})}"),
    Case("no-thinking", f"ok {LW}", chat_template_kwargs={"thinking": False}),
    Case("no-enable-thinking", f"ok {LW}", chat_template_kwargs={"enable_thinking": False}),
    Case("required", f"</think>{LW}", tool_choice="required"),
    Case("named", f"</think>{LW}", tool_choice=NAMED),
    Case("choice-none", f"</think>ok {LW}", tool_choice="none"),
    Case("no-tools", f"</think>{LW}", tools=None),
]


# MiniMax M3: every tag behind the ]<]minimax[>[ namespace marker.
NS = "]<]minimax[>["


def m3_call(name: str, params: str, quote: str = '"') -> str:
    return f"{NS}<invoke name={quote}{name}{quote}>\n{params}{NS}</invoke>\n"


def el(name: str, value: str) -> str:
    return f"{NS}<{name}>{value}{NS}</{name}>"


def m3(*calls: str) -> str:
    return f"{NS}<tool_call>\n{''.join(calls)}{NS}</tool_call>"


MW = m3_call("get_weather", el("city", "Paris") + "\n" + el("days", "3") + "\n")
MS = m3_call("search", el("query", "a < b") + el("tags", el("item", "x") + el("item", "y")))
MINIMAX_M3 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", m3(MW)),
    Case("text-before", f"Let me check.\n{m3(MW)}"),
    Case("text-around", f"Sure.\n{m3(MW)}\nDone."),
    Case("two-calls", m3(MW, MS)),
    Case("nested-object", m3(m3_call("get_weather", el("city", "Rome")
                                     + el("options", el("detail", "0.5"))))),
    Case("typed", m3(m3_call("get_weather", el("city", "Oslo") + el("metric", "true")
                             + el("days", "x")))),
    Case("empty-list", m3(m3_call("search", el("tags", "")))),
    Case("repeated-name", m3(m3_call("search", el("query", "a") + el("query", "b")
                                     + el("query", "c")))),
    Case("mixed-text", m3(m3_call("search", el("query", "hi " + el("x", "1"))))),
    Case("unknown-tool", m3(m3_call("other", el("n", "5") + el("m", el("k", "v"))))),
    Case("single-quotes", m3(m3_call("get_weather", el("city", "Lima"), "'"))),
    Case("unquoted", m3(m3_call("get_weather", el("city", "Lima"), ""))),
    Case("truncated", f"{NS}<tool_call>\n{NS}<invoke name=\"get_weather\">\n{NS}<city>Pa"),
    Case("malformed", m3(m3_call("get_weather", el("city", "Paris") + f"{NS}<days>3"))),
    Case("no-block-end", f"{NS}<tool_call>\n{MW}"),
    Case("unicode", m3(m3_call("search", el("query", "東京 👍🏽 é")))),
    Case("angle-text", "a > b and <b>bold</b>"),
    Case("required", m3(MW), tool_choice="required"),
    Case("named", m3(MW), tool_choice=NAMED),
    Case("choice-none", f"ok {m3(MW)}", tool_choice="none"),
    Case("no-tools", m3(MW), tools=None),
    Case("no-eos", f"ok {m3(MW)}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "deepseek_v4": dsml_cases(v41=False),
    "deepseek_v41": dsml_cases(v41=True),
    "granite": GRANITE,
    "ling3": LING3,
    "minimax_m3": MINIMAX_M3,
}

# (text, special) of the markers above that the marker tokenizer lacks.
MARKERS: list[tuple[str, bool]] = [
    ("<|tool_call|>", True),  # Granite 3.0
    ("]<]minimax[>[", False),  # MiniMax M3 (a plain added token)
    ("<mm:think>", False),  # MiniMax M3's reasoning markers
    ("</mm:think>", False),
]

# Each tool parser under its family's reasoning parser: (tool, reasoning, case).
_V4 = dsml_cases(v41=False)[1].text  # one call
_V41 = dsml_cases(v41=True)[1].text
PAIRS: list[tuple[str, str, Case]] = [
    *(("deepseek_v4", "deepseek_v4", case) for case in [
        Case("v4-think-call", f"plan</think>\n\n{_V4}"),
        Case("v4-implicit-end", f"plan{_V4}"),
        Case("v4-think-open", f"<think>plan</think>ok{_V4}"),
        Case("v4-no-thinking", f"ok {_V4}", chat_template_kwargs={"thinking": False}),
        Case("v4-effort-none", _V4, chat_template_kwargs={"reasoning_effort": "none"}),
        Case("v4-truncated-thinking", "still thinking"),
        Case("v4-hidden", f"plan</think>{_V4}", include_reasoning=False),
    ]),
    *(("deepseek_v41", "deepseek_v41", case) for case in [
        Case("v41-think-call", f"plan</think>\n\n{_V41}"),
        Case("v41-implicit-end", f"plan{_V41}"),
        Case("v41-no-thinking", f"ok {_V41}", chat_template_kwargs={"thinking": False}),
    ]),
    *(("ling3", "ling3", case) for case in [
        Case("ling3-think-call", f"plan</think>\n{LW}"),
        Case("ling3-implicit-end", f"plan{LW}"),
        Case("ling3-no-thinking", f"ok {LW}", chat_template_kwargs={"thinking": False}),
        Case("ling3-truncated-thinking", "still thinking"),
    ]),
    *(("minimax_m3", "minimax_m3", case) for case in [
        Case("m3-think-call", f"<mm:think>plan</mm:think>\n{m3(MW)}"),
        Case("m3-no-think", f"Sure.\n{m3(MW, MS)}"),
        Case("m3-thinking-mode", f"plan</mm:think>{m3(MW)}",
             chat_template_kwargs={"thinking_mode": "enabled"}, prompt_suffix="<mm:think>"),
        Case("m3-unclosed-think", "<mm:think>still"),
    ]),
]
