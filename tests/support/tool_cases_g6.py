"""Cases of the g6 group's parsers (hf: the checkpoint's ``response_template``;
cohere_command3/4: Cohere Command A through ``cohere_melody``):
``CASES[parser]``, compared with vLLM's parser through MORE_CASES
(tests/support/more_tool_cases.py), and what the marker tokenizer needs
(tests/support/marker_model.py): its ``response_template`` (CONFIG).

The template is Qwen3's format as a ``response_template`` would describe it:
``<think>`` reasoning, ``<tool_call>`` JSON calls, the rest content.
"""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}

RESPONSE_TEMPLATE = {
    "version": 1,
    "start_anchor": "<|im_start|>assistant\n",
    "defaults": {"role": "assistant"},
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "content": "json",
            "repeats": True,
            "transform": {"type": "function", "function": "{content}"},
        },
    },
}

# A second shape: regex delimiters with a captured tool name, XML-ish
# parameters (Qwen3-Coder's format), values cast by the tool's schema.
XML_TEMPLATE = {
    "start_anchor_pattern": r"<\|im_start\|>assistant\n",
    "fields": {
        "thinking": {"open_pattern": r"<think>\s*", "close": "</think>"},
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*<function=(?P<name>[\w.-]+)>",
            "close_pattern": r"</function>\s*</tool_call>",
            "content": "xml-inline",
            "content_args": {
                "tag_pattern": r"<parameter=(?P<key>\w+)>\n?(?P<value>.*?)\n?</parameter>",
            },
            "repeats": True,
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
    },
}


def xml_call(name: str, params: dict[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


XW = xml_call("get_weather", {"city": "Paris", "days": "3", "metric": "true"})
XML_PAIR = [
    Case("plain", "The weather is nice today."),
    Case("one-call", XW),
    Case("reasoning-then-call", f"<think>\nweather</think>\n{XW}"),
    Case("two-calls", XW + "\n" + xml_call("search", {"query": "rain", "tags": '["a", "b"]'})),
    Case("object-value", xml_call("get_weather", {"city": "Oslo", "options": '{"detail": 2}'})),
    Case("bad-number", xml_call("get_weather", {"city": "Oslo", "days": "many"})),
    Case("truncated", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa"),
    Case("partial-open", "text <tool_call>\n<func"),
    Case("choice-none", XW, tool_choice="none"),
    Case("prefilled-think", f"plan</think>{XW}", prompt_suffix="<think>\n"),
]

# Merged into the marker tokenizer's tokenizer_config.json.
CONFIG = {"response_template": RESPONSE_TEMPLATE}
# Cohere Command A's special tokens.
COHERE_TOKENS = ("<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>",
                 "<|END_RESPONSE|>", "<|START_ACTION|>", "<|END_ACTION|>",
                 "<|START_TEXT|>", "<|END_TEXT|>", "<|CHATBOT_TOKEN|>")
MARKERS: list[tuple[str, bool]] = [(token, True) for token in COHERE_TOKENS]

TS, TE = "<tool_call>", "</tool_call>"
W = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
WS = '{"name": "get_weather", "arguments": {"city": "Paris", "days": "3", "metric": "true"}}'
S = '{"name": "search", "arguments": {"query": "café ☕", "tags": ["a"]}}'

HF = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{TS}\n{W}\n{TE}"),
    Case("text-before", f"Let me check.\n{TS}\n{W}\n{TE}"),
    Case("text-after", f"{TS}{W}{TE} and some more text"),
    Case("two-calls", f"{TS}\n{W}\n{TE}\n{TS}\n{S}\n{TE}"),
    Case("string-args-cast", f"{TS}{WS}{TE}"),  # cast to the tool's schema types
    Case("unknown-tool", f'{TS}{{"name": "nope", "arguments": {{"x": "1"}}}}{TE}'),
    Case("truncated", f'{TS}\n{{"name": "get_weather", "arguments": {{"city": "Pa'),
    Case("no-end-tag", f"{TS}\n{W}"),
    Case("malformed-json", f'{TS}{{"name": "get_weather", "arguments": {{"city": }}{TE}'),
    Case("missing-arguments", f'{TS}{{"name": "get_weather"}}{TE}'),
    Case("missing-name", f'{TS}{{"arguments": {{"city": "Rome"}}}}{TE}'),
    Case("string-arguments", f'{TS}{{"name": "search", "arguments": "{{}}"}}{TE}'),
    Case("empty-call", f"{TS}{TE}"),
    Case("second-malformed", f"{TS}{W}{TE}{TS}nope{TE}"),
    Case("partial-tag-at-end", "Checking <tool_"),
    Case("lone-close", f"text {TE} more"),
    Case("unicode-args", f'{TS}{{"name": "search", "arguments": {{"query": "日本語 👍🏽"}}}}{TE}'),
    Case("think-text", f"<think>hmm</think>\n{TS}{W}{TE}"),  # no reasoning parser: content
    Case("choice-none", f"{TS}\n{W}\n{TE}", tool_choice="none"),
    Case("no-tools", f"{TS}\n{W}\n{TE}", tools=None),
    Case("no-eos", f"Sure{TS}{W}{TE}", eos=False),
    Case("prefilled-think", f"hmm</think>ok{TS}{W}{TE}", prompt_suffix="<think>\n"),
]

# Cohere Command A (tokens above).
CT, CTE = "<|START_THINKING|>", "<|END_THINKING|>"
CR, CRE = "<|START_RESPONSE|>", "<|END_RESPONSE|>"
CA, CAE = "<|START_ACTION|>", "<|END_ACTION|>"
CW = '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'
CS = '{"tool_call_id": "1", "tool_name": "search", "parameters": {"query": "café ☕"}}'
COHERE = [
    Case("plain", "The weather is nice today."),
    Case("response", f"{CR}The weather is nice today.{CRE}"),
    Case("thinking-response", f"{CT}Let me think.{CTE}{CR}Sunny.{CRE}"),
    Case("one-call", f"{CT}I will call.{CTE}{CA}[{CW}]{CAE}"),
    Case("call-no-thinking", f"{CA}[\n    {CW}\n]{CAE}"),
    Case("two-calls", f"{CA}[{CW}, {CS}]{CAE}"),
    Case("truncated-call", f'{CA}[{{"tool_call_id": "0", "tool_name": "get_weather", "par'),
    Case("unclosed-thinking", f"{CT}still thinking about", eos=False),
    Case("unicode", f"{CR}日本語 👍🏽 naïve{CRE}"),
    Case("hidden-reasoning", f"{CT}secret{CTE}{CR}shown{CRE}", include_reasoning=False),
    Case("choice-none", f"{CA}[{CW}]{CAE}", tool_choice="none"),
    Case("no-tools", f"{CA}[{CW}]{CAE}", tools=None),
    Case("no-eos", f"{CR}ok{CRE}{CA}[{CW}]{CAE}", eos=False),
    Case("citations", f"{CT}It said <co>rain</co: 0:[0]>.{CTE}{CR}It is <co>sunny</co: 0:[0,1]>"
                      f" and <co>warm</co: 1:[0]>.{CRE}"),
]

CASES = {"hf": HF, "cohere_command3": COHERE, "cohere_command4": COHERE}

# --tool-call-parser hf with --reasoning-parser hf: one pass over the output.
PAIR = [
    Case("plain", "The weather is nice today."),
    Case("reasoning-then-content", "<think>Let me think.</think>\nIt is sunny."),
    Case("reasoning-then-call", f"<think>Weather tool.</think>\n{TS}\n{W}\n{TE}"),
    Case("reasoning-call-text", f"<think>a</think>x{TS}{W}{TE}y{TS}{S}{TE}z"),
    Case("reasoning-cut", "<think>I was thinking about", eos=False),
    Case("unclosed-reasoning", "<think>still thinking"),
    Case("prefilled-think", f"thinking</think>\n{TS}{W}{TE}", prompt_suffix="<think>\n"),
    Case("prefilled-cut", "thinking and", prompt_suffix="<think>\n"),
    Case("think-twice", "<think>a</think>b<think>c</think>d"),
    Case("hidden-reasoning", "<think>secret</think>shown", include_reasoning=False),
    Case("choice-none", f"<think>r</think>{TS}{W}{TE}", tool_choice="none"),
    Case("no-tools", f"<think>r</think>{TS}{W}{TE}", tools=None),
    Case("thinking-off", "no thoughts", chat_template_kwargs={"enable_thinking": False}),
]
