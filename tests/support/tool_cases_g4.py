"""Cases of group g4's tool parsers (kimi_k3, k2_horizon, muse_glimmer):
``CASES[parser]``, compared with vLLM's parser through MORE_CASES
(tests/support/more_tool_cases.py); ``WITH_REASONING``: (tool, reasoning,
case) for each family's pair (tests/test_parsers_g4.py); and the marker
tokens they need (tests/support/marker_model.py)."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}
OTHER = {"type": "function", "function": {"name": "search"}}

# Kimi K3's XTML (special tokens).
OP, CL, SP = "<|open|>", "<|close|>", "<|sep|>"


def k3_arg(key: str, value: str, kind: str = "string") -> str:
    return f'{OP}argument key="{key}" type="{kind}"{SP}{value}{CL}argument{SP}'


def k3_call(name: str, *args: str, index: int = 1) -> str:
    return f'{OP}call tool="{name}" index="{index}"{SP}{"".join(args)}{CL}call{SP}'


def k3_tools(*calls: str) -> str:
    return f"{OP}tools{SP}{''.join(calls)}{CL}tools{SP}"


def k3_response(text: str) -> str:
    return f"{OP}response{SP}{text}{CL}response{SP}"


K3W = k3_call("get_weather", k3_arg("city", "Paris"), k3_arg("days", "3", "number"))
K3S = k3_call("search", k3_arg("query", "café ☕"), k3_arg("tags", '["a"]', "array"), index=2)
K3_END = f"{CL}message{SP}"
KIMI_K3 = [
    Case("plain", "The weather is nice today."),
    Case("response", k3_response("Hello there.") + K3_END),
    Case("response-prefix-consumed", f"Hello there.{CL}response{SP}{K3_END}"),
    Case("response-unclosed", f"{OP}response{SP}Hello"),
    Case("one-call", k3_response("Let me check.") + k3_tools(K3W) + K3_END),
    Case("call-only", k3_tools(K3W)),
    Case("prefix-consumed-call", f"Checking.{CL}response{SP}" + k3_tools(K3W) + K3_END),
    Case("two-calls", k3_response("") + k3_tools(K3W, K3S) + K3_END),
    Case("typed-args", k3_tools(k3_call(
        "get_weather", k3_arg("metric", "true", "boolean"), k3_arg("options", '{"detail": 0.5}',
                                                                    "object"),
        k3_arg("days", "null", "null")))),
    Case("bad-json-arg", k3_tools(k3_call("get_weather", k3_arg("days", "three", "number")))),
    Case("raw-string-arg", k3_tools(k3_call("search", k3_arg("query", ' "quoted" <b>x</b>\n')))),
    Case("escaped-attrs", k3_tools(k3_call("search", k3_arg("a&quot;b&amp;c", "x")))),
    Case("no-tool-attr", k3_tools(f'{OP}call index="1"{SP}{k3_arg("q", "x")}{CL}call{SP}', K3W)),
    Case("no-args", k3_tools(k3_call("search"))),
    Case("truncated-call", k3_tools()[: -len(f"{CL}tools{SP}")] + K3W[:40]),
    Case("tools-unclosed", f"{OP}tools{SP}{K3W}"),
    Case("tools-empty", k3_tools()),
    Case("spaced-markers", f"{OP} response {SP}Hi{CL} response {SP}{OP} tools {SP}{K3W}"
         f"{CL} tools {SP}"),
    Case("text-after", k3_tools(K3W) + " trailing"),
    Case("lone-open", f"Hi {OP}"),
    Case("partial-marker", f"Hi {OP}respo"),
    Case("unicode", k3_response("日本語 👍🏽") + k3_tools(K3S)),
    Case("required", k3_tools(K3W), tool_choice="required"),
    Case("required-no-call", "Just text.", tool_choice="required"),
    Case("named", k3_tools(K3W), tool_choice=NAMED),
    Case("choice-none", k3_response("Hi") + k3_tools(K3W), tool_choice="none"),
    Case("no-tools", k3_response("Hi") + K3_END, tools=None),
    Case("no-eos", k3_response("ok") + k3_tools(K3W), eos=False),
]

# K2 Horizon's IFM group (special tokens).
GS, GE = "<ifm|tool_calls>", "</ifm|tool_calls>"
TS, TE = "<ifm|tool_call>", "</ifm|tool_call>"


def ifm_arg(key: str, value: str, kind: str | None = None) -> str:
    typed = f"<ifm|arg_type>{kind}</ifm|arg_type>" if kind is not None else ""
    return f"<ifm|arg_key>{key}</ifm|arg_key>{typed}<ifm|arg_value>{value}</ifm|arg_value>"


HW = f"{TS}get_weather\n{ifm_arg('city', 'Paris')}\n{ifm_arg('days', '3')}{TE}"
TAGS = '["a"]'
HS = f"{TS}search{ifm_arg('query', ' rain ')}{ifm_arg('tags', TAGS)}{TE}"
TYPED = {"tool_call_format": "xml_typed"}
JSON = {"tool_call_format": "json"}
DETAIL = '{"detail": 1}'
HJ = f'{TS}{{"name": "get_weather", "arguments": {{"city": "Paris", "days": "3"}}}}{TE}'
K2_HORIZON = [
    Case("plain", "The weather is nice today."),
    Case("whitespace", "  \n "),
    Case("one-call", f"{GS}{HW}{GE}"),
    Case("text-around", f"Let me check.\n{GS}{HW}{GE}\nDone."),
    Case("leading-space", f"\n\n{GS}{HW}{GE}"),
    Case("two-calls", f"{GS}{HW}\n{HS}{GE}"),
    Case("no-args", f"{GS}{TS}search{TE}{GE}"),
    Case("coerced", f"{GS}{TS}get_weather{ifm_arg('city', '7')}{ifm_arg('metric', 'true')}"
         f"{ifm_arg('options', DETAIL)}{TE}{GE}"),
    Case("unknown-tool", f"{GS}{TS}nope{ifm_arg('a', '1')}{TE}{GE}"),
    Case("bad-name", f"{GS}{TS}get weather{TE}{GE}"),
    Case("duplicate-arg", f"{GS}{TS}search{ifm_arg('query', 'a')}{ifm_arg('query', 'b')}{TE}{GE}"),
    Case("junk-between", f"{GS}{TS}search junk{ifm_arg('query', 'a')}x{TE}{GE}"),
    Case("junk-in-group", f"{GS}{HW} stray{GE}"),
    Case("type-in-xml", f"{GS}{TS}search{ifm_arg('query', 'a', 'string')}{TE}{GE}"),
    Case("typed", f"{GS}{TS}get_weather{ifm_arg('city', 'Oslo', 'string')}"
         f"{ifm_arg('days', '2', 'integer')}{TE}{GE}", chat_template_kwargs=TYPED),
    Case("typed-missing-type", f"{GS}{HW}{GE}", chat_template_kwargs=TYPED),
    Case("json", f"ok {GS}{HJ}{GE}", chat_template_kwargs=JSON),
    Case("json-bad", f'{GS}{TS}{{"name": "get_weather", "arguments": 3}}{TE}{GE}',
         chat_template_kwargs=JSON),
    Case("no-group-end", f"Hi {GS}{HW}"),
    Case("group-start-only", f"Hi {GS}"),
    Case("after-group", f"{GS}{HW}{GE}tail {GS}{HS}{GE}"),
    Case("required", f"{GS}{HW}{GE}", tool_choice="required"),
    Case("named", f"{GS}{HW}{GE}", tool_choice=NAMED),
    Case("named-other", f"{GS}{HW}{GE}", tool_choice=OTHER),
    Case("choice-none", f" {GS}{HW}{GE}", tool_choice="none"),
    Case("no-tools", f"{GS}{HW}{GE}", tools=None),
    Case("no-eos", f"ok {GS}{HW}{GE}", eos=False),
]

# MuseGlimmer's channels (special tokens) and ATEM calls (text).
MSG, EOM, EOT, START = "<|message|>", "<|eom|>", "<|eot|>", "<|start|>"


def atem(name: str, **params: str) -> str:
    body = "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>' for k, v in params.items())
    return f'<atem:function_calls>\n<atem:invoke name="{name}">{body}</atem:invoke>\n' \
           "</atem:function_calls>"


MW = atem("get_weather", city="Paris", days="3")
MUSE_GLIMMER = [
    Case("plain", "The weather is nice today."),
    Case("answer", f" to=self{MSG}plan{EOM}{START}assistant to=user{MSG}The answer.{EOT}"),
    Case("one-call", f" to=self{MSG}call it{EOM}{START}assistant to=get_weather{MSG}{MW}{EOM}"),
    Case("call-then-answer", f"{START}assistant to=get_weather{MSG}{MW}{EOM}"
         f"{START}assistant to=user{MSG}Sunny.{EOT}"),
    Case("two-calls", f"{START}assistant to=get_weather{MSG}{MW}{EOM}"
         f"{START}assistant to=search{MSG}{atem('search', query='x', tags='[1]')}{EOM}"),
    Case("doubled-name", f"{START}assistant to=get_weather{MSG}"
         f"{atem('get_weather.get_weather', city='Rome')}{EOM}"),
    Case("unknown-name", f" to=x{MSG}{atem('weather.get', city='Rome')}{EOM}"),
    Case("echo-in-reasoning", f" to=self{MSG}{MW}{EOM}{START}assistant to=user{MSG}no{EOT}"),
    Case("echo-in-answer", f" to=user{MSG}{MW}{EOT}"),
    Case("unframed-call", MW),
    Case("bare-header", f"{MSG}untagged{EOT}"),
    Case("unterminated-reasoning", f" to=self{MSG}planning{START}assistant to=search{MSG}"
         f"{atem('search', query='q')}{EOM}"),
    Case("truncated-call", f"{START}assistant to=search{MSG}<atem:function_calls>"
         '<atem:invoke name="search"><atem:parameter name="query">q'),
    Case("no-name", f" to=search{MSG}<atem:invoke>x</atem:invoke>{EOM}"),
    Case("held-tail", f" to=user{MSG}the answer is t{EOT[:3]}"),
    Case("open-to-tail", f" to=user{MSG}answer to=us"),
    Case("required", f" to=get_weather{MSG}{MW}{EOM}", tool_choice="required"),
    Case("named", f" to=get_weather{MSG}{MW}{EOM}", tool_choice=NAMED),
    Case("choice-none", f" to=get_weather{MSG}{MW}{EOM}", tool_choice="none"),
    Case("no-tools", f" to=user{MSG}hi{EOT}", tools=None),
    Case("no-eos", f" to=get_weather{MSG}{MW}{EOM}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "kimi_k3": KIMI_K3,
    "k2_horizon": K2_HORIZON,
    "muse_glimmer": MUSE_GLIMMER,
}

THINK_OPEN, THINK_CLOSE = f"{OP}think{SP}", f"{CL}think{SP}"
WITH_REASONING: list[tuple[str, str, Case]] = [
    ("kimi_k3", "kimi_k3", Case("k3-think-call", f"{THINK_OPEN}plan it{THINK_CLOSE}"
                                + k3_response("Checking.") + k3_tools(K3W) + K3_END)),
    ("kimi_k3", "kimi_k3", Case("k3-prefix-think", f"plan{THINK_CLOSE}" + k3_response("Hi")
                                + K3_END)),
    ("kimi_k3", "kimi_k3", Case("k3-choice-none", f"plan{THINK_CLOSE}" + k3_response("Hi")
                                + k3_tools(K3W), tool_choice="none")),
    ("kimi_k3", "kimi_k3", Case("k3-no-tools", f"plan{THINK_CLOSE}" + k3_response("Hi")
                                + K3_END, tools=None)),
    ("kimi_k3", "kimi_k3", Case("k3-no-thinking", k3_response("Hi") + k3_tools(K3W),
                                chat_template_kwargs={"thinking": False})),
    ("kimi_k3", "kimi_k3", Case("k3-cut", f"{THINK_OPEN}still thinking")),
    ("kimi_k3", "kimi_k3", Case("k3-prompt-opened", f"plan{THINK_CLOSE}" + k3_tools(K3W),
                                prompt_suffix=THINK_OPEN)),
    ("kimi_k3", "kimi_k3", Case("k3-prompt-closed", k3_response("Hi") + k3_tools(K3W),
                                prompt_suffix=f"{THINK_OPEN}{THINK_CLOSE}")),
    ("kimi_k3", "kimi_k3", Case("k3-required", f"p{THINK_CLOSE}" + k3_tools(K3W),
                                tool_choice="required")),
    ("kimi_k3", "kimi_k3", Case("k3-no-reasoning-sent", f"{THINK_OPEN}p{THINK_CLOSE}"
                                + k3_response("Hi") + k3_tools(K3W), include_reasoning=False)),
    ("kimi_k3", "kimi_k3", Case("k3-named", f"p{THINK_CLOSE}" + k3_tools(K3W),
                                tool_choice=NAMED)),
    ("hermes", "kimi_k3", Case("k3-hermes-none", f"p{THINK_CLOSE}" + k3_response("Hi"),
                               tool_choice="none")),
    ("hermes", "kimi_k3", Case("k3-hermes", f"plan{THINK_CLOSE}" + k3_response("Hi")
                               + '<tool_call>{"name": "search", "arguments": {}}</tool_call>')),
    ("k2_horizon", "k2_horizon", Case("horizon-think-call", f"<ifm|think>plan</ifm|think> {GS}{HW}"
                                      f"{GE}")),
    ("k2_horizon", "k2_horizon", Case("horizon-implicit-end", f"plan{GS}{HW}{GE} done")),
    ("k2_horizon", "k2_horizon", Case("horizon-none", f"<ifm|think>p</ifm|think>{GS}{HW}{GE}",
                                      tool_choice="none")),
    ("k2_horizon", "qwen3", Case("horizon-qwen3", f"plan</think>\n\nok {GS}{HW}{GE}")),
    ("k2_horizon", "qwen3", Case("horizon-qwen3-none", f"plan</think> {GS}{HW}{GE}",
                                 tool_choice="none")),
    ("kimi_k3", "qwen3", Case("k3-qwen3", "plan</think>" + k3_response("Hi") + k3_tools(K3W))),
    ("kimi_k3", "qwen3", Case("k3-qwen3-none", "plan</think>" + k3_response("Hi")
                              + k3_tools(K3W), tool_choice="none")),
    ("muse_glimmer", "muse_glimmer", Case(
        "muse-call", f"to=self{MSG}call it{EOM}{START}assistant to=get_weather{MSG}{MW}{EOM}")),
    ("muse_glimmer", "muse_glimmer", Case(
        "muse-answer", f"to=self{MSG}plan{EOM}{START}assistant to=user{MSG}The answer.{EOT}")),
]

# (text, special) of the markers above that the marker tokenizer lacks.
MARKERS: list[tuple[str, bool]] = [
    (OP, True), (CL, True), (SP, True),
    ("<ifm|think>", True), ("</ifm|think>", True),
    (GS, True), (GE, True), (TS, True), (TE, True),
    ("<ifm|arg_key>", True), ("</ifm|arg_key>", True),
    ("<ifm|arg_type>", True), ("</ifm|arg_type>", True),
    ("<ifm|arg_value>", True), ("</ifm|arg_value>", True),
    (MSG, True), (EOM, True), (EOT, True), (START, True),
]
