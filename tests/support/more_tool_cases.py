"""Cases of the tool parsers whose markers the tiny model lacks (run with the
tokenizer of tests/support/marker_model.py): ``MORE_CASES[parser]``, compared
with vLLM's parser as ``CASES`` in tests/test_tool_parsers.py are."""

from __future__ import annotations

from tests.support import tool_cases_classic1
from tests.support import tool_cases_classic2
from tests.support import tool_cases_classic3
from tests.support import tool_cases_g3
from tests.support import tool_cases_g5
from tests.support import tool_cases_g1
from tests.support import tool_cases_g2
from tests.support import tool_cases_g6
from tests.support import tool_cases_g4
from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}

# DeepSeek markers.
CB, CE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
B, E, S = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def v3(name: str, args: str, kind: str = "function") -> str:
    return f"{B}{kind}{S}{name}\n```json\n{args}\n```{E}"


def v31(name: str, args: str) -> str:
    return f"{B}{name}{S}{args}{E}"


WA = '{"city": "Paris", "days": 3}'
SA = '{"query": "café ☕", "tags": ["a"]}'
ML = '{\n  "city": "Rome"\n}'
DA = '{"days": 3}'
UA = '{"query": "日本語 👍🏽 naïve"}'
BAD = '{"query": }'
QA = '{"query": "rain"}'

DEEPSEEK_V3 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{CB}{v3('get_weather', WA)}{CE}"),
    Case("text-before", f"Let me check.{CB}{v3('get_weather', WA)}{CE}"),
    Case("two-calls", f"{CB}{v3('get_weather', WA)}\n{v3('search', SA)}{CE}"),
    Case("two-calls-no-sep", f"{CB}{v3('get_weather', WA)}{v3('search', SA)}{CE}"),
    Case("text-after", f"{CB}{v3('get_weather', WA)}{CE} and more"),
    Case("truncated", f"{CB}{B}function{S}get_weather\n```json\n" + '{"city": "Pa'),
    Case("truncated-name", f"{CB}{B}function{S}get_wea"),
    Case("no-calls-end", f"{CB}{v3('get_weather', WA)}"),
    Case("multiline-args", f"{CB}{v3('get_weather', ML)}{CE}"),
    Case("other-type", f"{CB}{v3('get_weather', WA, 'tool')}{CE}"),
    Case("non-string-end", f"{CB}{v3('get_weather', DA)}{CE}"),
    Case("empty-args", f"{CB}{v3('search', '{}')}{CE}"),
    Case("string-end", f"{CB}{v3('search', QA)}{CE}"),
    Case("string-end-two", f"{CB}{v3('search', QA)}\n{v3('get_weather', QA)}{CE}ok"),
    Case("no-fence", f"{CB}{B}function{S}search{DA}{E}{CE}"),
    Case("calls-begin-only", f"Hi {CB}"),
    Case("unicode", f"{CB}{v3('search', UA)}{CE}"),
    Case("think-text", f"<think>hmm</think>{CB}{v3('search', SA)}{CE}"),
    Case("required", f"{CB}{v3('get_weather', WA)}{CE}", tool_choice="required"),
    Case("named", f"{CB}{v3('get_weather', WA)}{CE}", tool_choice=NAMED),
    Case("choice-none", f"{CB}{v3('get_weather', WA)}{CE}", tool_choice="none"),
    Case("no-tools", f"{CB}{v3('get_weather', WA)}{CE}", tools=None),
    Case("no-eos", f"ok{CB}{v3('get_weather', WA)}{CE}", eos=False),
]

DEEPSEEK_V31 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{CB}{v31('get_weather', WA)}{CE}"),
    Case("text-before", f"Let me check.{CB}{v31('get_weather', WA)}{CE}"),
    Case("two-calls", f"{CB}{v31('get_weather', WA)}{v31('search', SA)}{CE}"),
    Case("two-calls-newline", f"{CB}{v31('get_weather', WA)}\n{v31('search', SA)}{CE}"),
    Case("text-after", f"{CB}{v31('get_weather', WA)}{CE} done"),
    Case("truncated", f"{CB}{B}get_weather{S}" + '{"city": "Pa'),
    Case("truncated-name", f"{CB}{B}get_wea"),
    Case("no-calls-end", f"{CB}{v31('search', SA)}"),
    Case("multiline-args", f"{CB}{v31('get_weather', ML)}{CE}"),
    Case("non-string-end", f"{CB}{v31('get_weather', DA)}{CE}"),
    Case("empty-args", f"{CB}{v31('search', '{}')}{CE}"),
    Case("string-end", f"{CB}{v31('search', QA)}{CE}"),
    Case("string-end-two", f"{CB}{v31('search', QA)}{v31('get_weather', QA)}{CE}ok"),
    Case("malformed", f"{CB}{v31('search', BAD)}{CE}"),
    Case("unicode", f"{CB}{v31('search', UA)}{CE}"),
    Case("required", f"{CB}{v31('search', SA)}{CE}", tool_choice="required"),
    Case("named", f"{CB}{v31('get_weather', WA)}{CE}", tool_choice=NAMED),
    Case("choice-none", f"{CB}{v31('search', SA)}{CE}", tool_choice="none"),
]

LT, LE = "<longcat_tool_call>", "</longcat_tool_call>"
W = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'

LONGCAT = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{LT}\n{W}\n{LE}"),
    Case("text-before", f"Let me check.\n{LT}\n{W}\n{LE}"),
    Case("two-calls", f"{LT}\n{W}\n{LE}\n{LT}\n"
                      '{"name": "search", "arguments": {"query": "x", "tags": ["a"]}}'
                      f"\n{LE}"),
    Case("truncated", f'{LT}\n{{"name": "get_weather", "arguments": {{"city": "Pa'),
    Case("malformed", f'{LT}\n{{"name": "get_weather", "arguments": {{"city": }}\n{LE}'),
    Case("hermes-tags", f"<tool_call>\n{W}\n</tool_call>"),
    Case("partial-tag", "Checking <longcat_"),
    Case("required", f"{LT}\n{W}\n{LE}", tool_choice="required"),
]

KS, KE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def kimi(name: str, args: str, n: int = 0) -> str:
    return f"<|tool_call_begin|>functions.{name}:{n}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


KIMI_K2 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{KS}{kimi('get_weather', WA)}{KE}"),
    Case("text-before", f"Let me check. {KS}{kimi('get_weather', WA)}{KE}"),
    Case("ws-before", f"\n\n{KS}{kimi('get_weather', WA)}{KE}"),
    Case("two-calls", f"{KS}{kimi('get_weather', WA)}{kimi('search', SA, 1)}{KE}"),
    Case("newlines", f"{KS}\n{kimi('get_weather', WA)}\n{kimi('search', SA, 1)}\n{KE}"),
    Case("text-after", f"{KS}{kimi('get_weather', WA)}{KE} trailing text"),
    Case("truncated", f"{KS}<|tool_call_begin|>functions.get_weather:0"
                      '<|tool_call_argument_begin|>{"city": "Pa'),
    Case("truncated-header", f"{KS}<|tool_call_begin|>functions.get_wea"),
    Case("no-index", f"{KS}<|tool_call_begin|>get_weather<|tool_call_argument_begin|>{WA}"
                     f"<|tool_call_end|>{KE}"),
    Case("no-prefix", f"{KS}<|tool_call_begin|>search:3<|tool_call_argument_begin|>{SA}"
                      f"<|tool_call_end|>{KE}"),
    Case("section-end-in-args", f"{KS}<|tool_call_begin|>functions.search:0"
                                f"<|tool_call_argument_begin|>{SA}{KE}"),
    Case("empty-args", f"{KS}{kimi('search', '')}{KE}"),
    Case("malformed", f"{KS}{kimi('search', BAD)}{KE}"),
    Case("unicode", f"{KS}{kimi('search', UA)}{KE}"),
    Case("think-text", f"<think>hmm</think>{KS}{kimi('search', SA)}{KE}"),
    Case("think-text-no-thinking", f"<think>hmm</think>ok{KS}{kimi('search', SA)}{KE}",
         chat_template_kwargs={"thinking": False}),
    Case("required", f"{KS}{kimi('get_weather', WA)}{KE}", tool_choice="required"),
    Case("named", f"{KS}{kimi('get_weather', WA)}{KE}", tool_choice=NAMED),
    Case("choice-none", f"ok {KS}{kimi('get_weather', WA)}{KE}", tool_choice="none"),
    Case("no-tools", f"{KS}{kimi('get_weather', WA)}{KE}", tools=None),
    Case("skipped-special", f"{KS}{kimi('get_weather', WA)}{KE}", skip_special=True),
]

MS, ME = "<minimax:tool_call>", "</minimax:tool_call>"


def invoke(name: str, params: dict[str, str], quote: str = '"') -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f"<invoke name={quote}{name}{quote}>\n{body}</invoke>\n"


MW = invoke("get_weather", {"city": "Paris", "days": "3"})
MINIMAX_M2 = [
    Case("plain", "</think>The weather is nice today."),
    Case("one-call", f"</think>{MS}\n{MW}{ME}"),
    Case("think-first", f"I should check.</think>\n\n{MS}\n{MW}{ME}"),
    Case("no-think-end", f"{MS}\n{MW}{ME}"),
    Case("text-before", f"</think>Let me look.\n{MS}\n{MW}{ME}"),
    Case("two-calls", f"</think>{MS}\n{MW}{invoke('search', {'query': 'a b', 'tags': '[1]'})}{ME}"),
    Case("typed", f"</think>{MS}\n" + invoke("get_weather", {
        "city": "Oslo", "metric": "true", "options": '{"detail": 2}'}) + ME),
    Case("quotes", f"</think>{MS}\n{invoke('search', {'query': 'x'}, quote=chr(39))}"
                   f"{invoke('get_weather', {'city': 'y'}, quote='')}{ME}"),
    Case("text-after", f"</think>{MS}\n{MW}{ME}\nDone."),
    Case("truncated", f'</think>{MS}\n<invoke name="get_weather">\n<parameter name="city">Pa'),
    Case("unknown-tool", f"</think>{MS}\n{invoke('other', {'n': '5'})}{ME}"),
    Case("no-param-close", f'</think>{MS}\n<invoke name="search">\n<parameter name="query">a\n'
                           f'<parameter name="tags">["x"]\n</invoke>\n{ME}'),
    Case("unicode", f"</think>{MS}\n{invoke('search', {'query': '東京 👍🏽 é'})}{ME}"),
    Case("required", f"</think>\n{MS}\n{MW}{ME}", tool_choice="required"),
    Case("named", f"</think>\n{MS}\n{MW}{ME}", tool_choice=NAMED),
    Case("choice-none", f"</think>ok {MS}\n{MW}{ME}", tool_choice="none"),
    Case("no-tools", f"</think>{MS}\n{MW}{ME}", tools=None),
]

def glm(name: str, params: dict[str, str], sep: str = "") -> str:
    body = "".join(f"{sep}<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>"
                   for k, v in params.items())
    return f"<tool_call>{name}{body}{sep}</tool_call>"


GW = glm("get_weather", {"city": "Paris", "days": "3"})
GLM47 = [
    Case("plain", "</think>The weather is nice today."),
    Case("one-call", f"</think>{GW}"),
    Case("think-first", f"Let me check.</think>\n{GW}"),
    Case("think-open", f"<think>plan</think>ok {GW}"),
    Case("no-think-end", GW),
    Case("text-before", f"</think>Sure.\n{GW}"),
    Case("two-calls", f"</think>{GW}\n" + glm("search", {"query": "a b", "tags": '["x"]'})),
    Case("newlines", "</think>" + glm("get_weather", {"city": "Oslo", "metric": "true"}, "\n")),
    Case("typed", "</think>" + glm("get_weather", {"city": "Rome", "days": "2",
                                                  "options": '{"detail": 0.5}'})),
    Case("no-args", "</think><tool_call>search</tool_call>"),
    Case("name-newline", "</think><tool_call>search\n<arg_key>query</arg_key><arg_value>q"
                         "</arg_value></tool_call>"),
    Case("text-after", f"</think>{GW} and then"),
    Case("truncated", "</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa"),
    Case("truncated-key", "</think><tool_call>get_weather<arg_key>ci"),
    Case("unknown-tool", f"</think>{glm('other', {'n': '5'})}"),
    Case("unicode", f"</think>{glm('search', {'query': '東京 👍🏽 é'})}"),
    Case("no-thinking", f"ok {GW}", chat_template_kwargs={"enable_thinking": False}),
    Case("required", f"</think>{GW}", tool_choice="required"),
    Case("named", f"</think>{GW}", tool_choice=NAMED),
    Case("choice-none", f"</think>ok {GW}", tool_choice="none"),
    Case("no-tools", f"</think>{GW}", tools=None),
]

IP = "<|action_start|><|plugin|>"
IW = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'
INTERNLM = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{IP}\n{IW}<|action_end|>"),
    Case("text-before", f"Let me check.{IP}\n{IW}<|action_end|>"),
    Case("arguments-key", f'{IP}{{"name": "search", "arguments": {{"query": "rain"}}}}'
                          "<|action_end|>"),
    Case("nested", f'{IP}{{"name": "get_weather", "parameters": {{"city": "Rome", '
                   '"options": {"detail": 1.5}, "metric": true}}<|action_end|>'),
    Case("no-end", f"{IP}\n{IW}"),
    Case("truncated", f'{IP}\n{{"name": "get_weather", "parameters": {{"city": "Pa'),
    Case("no-args", f'{IP}{{"name": "search"}}<|action_end|>'),
    Case("unknown-tool", f'{IP}{{"name": "other", "parameters": {{}}}}<|action_end|>'),
    Case("number-name", f'{IP}{{"name": 7, "parameters": {{}}}}<|action_end|>'),
    Case("action-only", "ok <|action_start|> then text"),
    Case("unicode", f'{IP}{{"name": "search", "parameters": {{"query": "東京 👍🏽"}}}}'
                    "<|action_end|>"),
    Case("text-after", f"{IP}{IW}<|action_end|> more"),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"{IP}{IW}<|action_end|>", tool_choice="none"),
]

PF = 'functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]'
PHI4 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", PF),
    Case("text-before", f"Sure: {PF}"),
    Case("two-calls", 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                      '{"name": "search", "parameters": {"query": "q"}}]'),
    Case("bracket-in-args", 'functools[{"name": "search", "arguments": {"tags": ["a"]}}]'),
    Case("not-json", "functools[get_weather(city='Paris')]"),
    Case("no-args", 'functools[{"name": "search"}]'),
    Case("number-name", 'functools[{"name": 5, "arguments": {}}]'),
    Case("unclosed", 'functools[{"name": "search", "arguments": {}}'),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
]

PS, PE = "<|python_start|>", "<|python_end|>"
LLAMA4_PYTHONIC = [
    Case("plain", "The weather is nice today."),
    Case("one-call", "[get_weather(city='Paris', days=3)]"),
    Case("python-tags", f"{PS}[get_weather(city='Paris', days=3)]{PE}"),
    Case("two-calls", f"{PS}[get_weather(city='Paris'), search(query=\"rain\", tags=['a'])]{PE}"),
    Case("end-only", f"[search(query='x')]{PE}"),
    Case("start-only", f"{PS}[search(query='x')]"),
    Case("text-after", f"{PS}[search(query='x')]{PE} done"),
    Case("truncated", f"{PS}[get_weather(city='Par"),
    Case("not-a-call", f"{PS}print('hi'){PE}"),
    Case("skipped-special", f"{PS}[search(query='x')]{PE}", skip_special=True),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
]

FC, FE = "<function_calls>", "</function_calls>"
OLMO3 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f'{FC}get_weather(city="Paris", days=3){FE}'),
    Case("two-calls", f'{FC}get_weather(city="Paris")\nsearch(query="rain", tags=["a"]){FE}'),
    Case("blank-lines", f'{FC}\nget_weather(city="Paris")\n\nsearch(query="x")\n{FE}'),
    Case("json-literals", f"{FC}get_weather(city=null, metric=true, days=-1){FE}"),
    Case("no-tags", 'get_weather(city="Paris")'),
    Case("text-before", f'Sure. {FC}get_weather(city="Paris"){FE}'),
    Case("text-after", f'{FC}get_weather(city="Paris"){FE} done'),
    Case("truncated", f'{FC}get_weather(city="Par'),
    Case("truncated-second", f'{FC}get_weather(city="Paris")\nsearch(que'),
    Case("not-a-call", f"{FC}x = 1{FE}"),
    Case("angle-text", "<b>bold</b> text"),
    Case("unicode", f'{FC}search(query="東京 👍🏽"){FE}'),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
]

DS_FC, DS_FE = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"


def dsml(name: str, params: list[tuple[str, str | None, str]]) -> str:
    body = "".join(
        f'<｜DSML｜parameter name="{k}"' + (f' string="{s}"' if s is not None else "")
        + f">{v}</｜DSML｜parameter>\n" for k, s, v in params)
    return f'<｜DSML｜invoke name="{name}">\n{body}</｜DSML｜invoke>\n'


DW = dsml("get_weather", [("city", "true", "杭州"), ("days", "false", "5")])
DEEPSEEK_V32 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{DS_FC}\n{DW}{DS_FE}"),
    Case("text-before", f"Let me check.\n\n{DS_FC}\n{DW}{DS_FE}"),
    Case("two-calls", f"{DS_FC}\n{DW}" + dsml("search", [("query", "true", "a > b"),
                                                          ("tags", "false", '["x"]')]) + DS_FE),
    Case("no-string-attr", f"{DS_FC}\n" + dsml("get_weather", [("city", None, "Oslo"),
                                                                ("metric", None, "true")])
                           + DS_FE),
    Case("not-json", f"{DS_FC}\n" + dsml("get_weather", [("days", "false", "many")]) + DS_FE),
    Case("wrapped", f"{DS_FC}\n" + dsml("search", [("arguments", "false",
                                                     '{"query": "q"}')]) + DS_FE),
    Case("text-after", f"{DS_FC}\n{DW}{DS_FE}\nDone."),
    Case("truncated", f'{DS_FC}\n<｜DSML｜invoke name="get_weather">\n'
                      '<｜DSML｜parameter name="city" string="true">Pa'),
    Case("bare-invoke", DW),
    Case("unicode", f"{DS_FC}\n" + dsml("search", [("query", "true", "東京 👍🏽")]) + DS_FE),
    Case("think-text", f"<think>x</think>{DS_FC}\n{DW}{DS_FE}"),
    Case("required", f"\n\n{DS_FC}\n{DW}{DS_FE}", tool_choice="required"),
    Case("named", f"\n\n{DS_FC}\n{DW}{DS_FE}", tool_choice=NAMED),
    Case("choice-none", f"ok {DS_FC}\n{DW}{DS_FE}", tool_choice="none"),
    Case("no-tools", f"{DS_FC}\n{DW}{DS_FE}", tools=None),
]

def qwen_xml(name: str, params: dict[str, str], start: str = "<tool_call>",
             end: str = "</tool_call>", nl: str = "\n") -> str:
    body = "".join(f"<parameter={k}>{nl}{v}{nl}</parameter>{nl}" for k, v in params.items())
    return f"{start}{nl}<function={name}>{nl}{body}</function>{nl}{end}"


def qwen_variant_cases(start: str, end: str, think_end: str) -> list[Case]:
    one = qwen_xml("get_weather", {"city": "Paris", "days": "3"}, start, end)
    return [
        Case("plain", "The weather is nice today."),
        Case("one-call", one),
        Case("thinking", f"hmm{think_end}\n\n{one}"),
        Case("text-before", f"Let me look.\n\n{one}"),
        Case("two-calls", one + "\n" + qwen_xml("search", {"query": "a", "tags": '["x"]'},
                                                 start, end)),
        Case("compact", qwen_xml("search", {"query": " spaced "}, start, end, nl="")),
        Case("typed", qwen_xml("get_weather", {"city": "Oslo", "metric": "true",
                                               "options": '{"detail": 1}'}, start, end)),
        Case("truncated", f"{start}\n<function=get_weather>\n<parameter=city>\nPar"),
        Case("text-after", one + "\nDone."),
        Case("no-thinking", f"ok {one}", chat_template_kwargs={"enable_thinking": False}),
        Case("required", one, tool_choice="required"),
        Case("named", one, tool_choice=NAMED),
        Case("choice-none", f"ok {one}", tool_choice="none"),
    ]


GT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>'
GRANITE4 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", GT),
    Case("text-around", f"Let me check. {GT} Back soon."),
    Case("two-calls", GT + '\n<tool_call>{"name": "search", "arguments": {"query": "x"}}'
                           "</tool_call>"),
    Case("string-args", '<tool_call>{"name": "search", "arguments": "{\\"q\\": 1}"}</tool_call>'),
    Case("null-args", '<tool_call>{"name": "search", "arguments": null}</tool_call>'),
    Case("no-args", '<tool_call>{"name": "search"}</tool_call>'),
    Case("unclosed", '<tool_call>{"name": "search", "arguments": {}}'),
    Case("empty-call", "a<tool_call></tool_call>b"),
    Case("two-starts", "<tool_call><tool_call>{}</tool_call>"),
    Case("end-only", "x</tool_call>y"),
    Case("not-json", "<tool_call>search(q=1)</tool_call>"),
    Case("partial-tag", "Checking <tool_"),
    Case("lt-text", "a < b and c <tool d"),
    Case("unicode", '<tool_call>{"name": "search", "arguments": {"query": "東京 👍🏽"}}</tool_call>'),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", GT, tool_choice="none"),
]

EW = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
ERNIE45 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", EW),
    Case("text-before", f"Let me check.\n\n{EW}\n"),
    Case("two-calls", EW + '\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}'
                           "\n</tool_call>\n"),
    Case("text-after", f"{EW}\nAnd after."),
    Case("response", "\n<response>The answer.</response>"),
    Case("response-then-call", f"<response>Sure</response>\n{EW}"),
    Case("newlines-first", "\n\nHello"),
    Case("no-args", '<tool_call>{"name": "search"}</tool_call>'),
    Case("no-name", '<tool_call>{"arguments": {"q": 1}}</tool_call>'),
    Case("number-name", '<tool_call>{"name": 3}</tool_call>'),
    Case("not-json", "<tool_call>{nope}</tool_call>"),
    Case("truncated", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'),
    Case("nested", '<tool_call>{"name": "get_weather", "arguments": {"options": {"detail": 1}}}'
                   "</tool_call>"),
    Case("unicode", '<tool_call>{"name": "search", "arguments": {"query": "東京 👍🏽"}}</tool_call>'),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
]

GC = "<|message_sep|>function call<|role_sep|>\n"
GJ = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
GIGACHAT3 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", GC + GJ),
    Case("text-before", "Let me check." + GC + GJ),
    Case("function-call-token", "<|function_call|>" + GJ),
    Case("eos-text", GC + GJ + "</s>"),
    Case("string-end", GC + '{"name": "search", "arguments": {"query": "rain"}}'),
    Case("nested", GC + '{"name": "get_weather", "arguments": {"options": {"detail": 1}}}'),
    Case("string-args", GC + '{"name": "search", "arguments": "q"}'),
    Case("no-args", GC + '{"name": "search"}'),
    Case("truncated", GC + '{"name": "get_weather", "arguments": {"city": "Pa'),
    Case("not-json", GC + "search(q)"),
    Case("message-sep-only", "Hello<|message_sep|>more"),
    Case("unicode", GC + '{"name": "search", "arguments": {"query": "東京 👍🏽"}}'),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
]

JW = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
JAMBA = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"<tool_calls>[{JW}]</tool_calls>"),
    Case("text-before", f"Let me check. <tool_calls>[{JW}]</tool_calls>"),
    Case("space-before", f" <tool_calls>[{JW}]</tool_calls>"),
    Case("two-calls", f'<tool_calls>[{JW}, {{"name": "search", "arguments": {{"query": "rain", '
                      '"tags": ["a"]}}]</tool_calls>'),
    Case("nested", '<tool_calls>[{"name": "get_weather", "arguments": {"options": '
                   '{"detail": 0.5}, "metric": true}}]</tool_calls>'),
    Case("truncated", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa'),
    Case("no-end", f"<tool_calls>[{JW}]"),
    Case("not-a-list", f"<tool_calls>{JW}</tool_calls>"),
    Case("no-args", '<tool_calls>[{"name": "search"}]</tool_calls>'),
    Case("malformed", '<tool_calls>[{"name": "search", "arguments": {"q": }}]</tool_calls>'),
    Case("unicode", '<tool_calls>[{"name": "search", "arguments": {"query": "東京 👍🏽"}}]'
                    "</tool_calls>"),
    Case("text-after", f"<tool_calls>[{JW}]</tool_calls> done"),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"<tool_calls>[{JW}]</tool_calls>", tool_choice="none"),
]

FW = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
GRANITE_20B_FC = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"<function_call> {FW}"),
    Case("two-calls", f'<function_call> {FW}\n<function_call> {{"name": "search", '
                      '"arguments": {"query": "rain", "tags": ["a"]}}'),
    Case("text-before", f"Sure. <function_call> {FW}"),
    Case("text-after", f"<function_call> {FW} trailing"),
    Case("nested", '<function_call>{"name": "get_weather", "arguments": {"options": '
                   '{"detail": 0.5}, "metric": true}}'),
    Case("truncated", '<function_call> {"name": "get_weather", "arguments": {"city": "Pa'),
    Case("partial-tag", "<function_ca"),
    Case("no-args", '<function_call> {"name": "search"}'),
    Case("not-json", "<function_call> search(q)"),
    Case("unicode", '<function_call> {"name": "search", "arguments": {"query": "東京 👍🏽"}}'),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
]

SB, SE = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"


def step(name: str, params: dict[str, str], kind: str = "function") -> str:
    body = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>'
                   for k, v in params.items())
    return (f'<｜tool_call_begin｜>{kind}<｜tool_sep｜><steptml:invoke name="{name}">{body}'
            "</steptml:invoke><｜tool_call_end｜>")


SW = step("get_weather", {"city": " Paris ", "days": "3", "metric": "True"})
STEP3 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{SB}{SW}{SE}"),
    Case("text-around", f"Let me check. {SB}{SW}{SE} Done."),
    Case("two-calls", f"{SB}{SW}\n{step('search', {'query': 'rain'})}{SE}"),
    Case("typed", f"{SB}" + step("get_weather", {"days": "x3", "metric": "maybe",
                                                 "options": "{}"}) + SE),
    Case("no-params", f"{SB}{step('search', {})}{SE}"),
    Case("other-kind", f"{SB}{step('search', {'query': 'q'}, kind='tool')}{SE}"),
    Case("no-block-end", f"{SB}{SW}"),
    Case("truncated", f'{SB}<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_we'),
    Case("unknown-tool", f"{SB}{step('other', {'n': '5'})}{SE}"),
    Case("unicode", f"{SB}{step('search', {'query': '東京 👍🏽'})}{SE}"),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"{SB}{SW}{SE}", tool_choice="none"),
]

# Outputs vLLM's non-streaming parse raises on (the request fails): ours must too.
WHOLE_RAISES = {("internlm", "truncated"), ("internlm", "number-name")}
# Parsers that stream no tool calls at all (vLLM's return None).
NO_STREAMED_CALLS = {"phi4_mini_json"}

MORE_CASES: dict[str, list[Case]] = {
    "deepseek_v3": DEEPSEEK_V3,
    "deepseek_v31": DEEPSEEK_V31,
    "deepseek_v32": DEEPSEEK_V32,
    "ernie45": ERNIE45,
    "gigachat3": GIGACHAT3,
    "glm45": GLM47,
    "granite-20b-fc": GRANITE_20B_FC,
    "granite4": GRANITE4,
    "glm47": GLM47,
    "internlm": INTERNLM,
    "jamba": JAMBA,
    "kimi_k2": KIMI_K2,
    "llama4_pythonic": LLAMA4_PYTHONIC,
    "longcat": LONGCAT,
    "mimo": qwen_variant_cases("<tool_call>", "</tool_call>", "</think>"),
    "minimax_m2": MINIMAX_M2,
    "olmo3": OLMO3,
    "phi4_mini_json": PHI4,
    "seed_oss": qwen_variant_cases("<seed:tool_call>", "</seed:tool_call>", "</seed:think>"),
    "step3": STEP3,
    "step3p5": qwen_variant_cases("<tool_call>", "</tool_call>", "</think>"),
}
MORE_CASES.update(tool_cases_classic1.CASES)
MORE_CASES.update(tool_cases_classic2.CASES)
MORE_CASES.update(tool_cases_classic3.CASES)
MORE_CASES.update(tool_cases_g3.CASES)
MORE_CASES.update(tool_cases_g5.CASES)
MORE_CASES.update(tool_cases_g1.CASES)
MORE_CASES.update(tool_cases_g2.CASES)
MORE_CASES.update(tool_cases_g6.CASES)
MORE_CASES.update(tool_cases_g4.CASES)
