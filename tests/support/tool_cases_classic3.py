"""Cases of the classic3 group's tool parsers (lfm2, ...): ``CASES[parser]``,
compared with vLLM's parser through MORE_CASES (tests/support/more_tool_cases.py),
and the marker tokens they need (tests/support/marker_model.py)."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}

# LFM2 / LFM2.5 (special tokens in their tokenizer).
LS, LE = "<|tool_call_start|>", "<|tool_call_end|>"
LW = "[get_weather(city='Paris', days=3)]"
LFM2 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", f"{LS}{LW}{LE}"),
    Case("text-before", f"Let me check. {LS}{LW}{LE}"),
    Case("text-after", f"{LS}{LW}{LE}The weather in Paris is sunny."),
    Case("text-around", f"Sure.\n{LS}{LW}{LE}\nDone."),
    Case("space-inside", f"{LS} \n{LW}\n{LE}"),
    Case("two-calls", f"{LS}[get_weather(city=\"Paris\"), search(query='rain', tags=['a'])]{LE}"),
    Case("dotted-name", f"{LS}[tools.search(query='x')]{LE}"),
    Case("no-args", f"{LS}[search()]{LE}"),
    Case("json-literals", f"{LS}[get_weather(city=null, metric=true, days=-1)]{LE}"),
    Case("nested", f"{LS}[get_weather(city='Rome', options={{'detail': 0.5}})]{LE}"),
    Case("echo", f"{LS}{LW}{LE}{LW}{LE}The weather is sunny."),
    Case("echo-unfinished", f"{LS}{LW}{LE}[get_weather(city='Paris'"),
    Case("angle-after", f"{LS}{LW}{LE}<b>bold</b>"),
    Case("no-end", f"{LS}{LW}"),
    Case("truncated", f"{LS}[get_weather(city='Par"),
    Case("truncated-second", f"{LS}[get_weather(city='Paris'), sear"),
    Case("empty-list", f"{LS}[]{LE}"),
    Case("not-a-list", f"{LS}get_weather(city='Paris'){LE}"),
    Case("not-a-call", f"{LS}[1, 2]{LE}"),
    Case("malformed", f"{LS}[get_weather(city=)]{LE}"),
    Case("mismatched", f"{LS}[get_weather(city='x'])]{LE}"),
    Case("positional", f"{LS}[search('x')]{LE}"),
    Case("newline-in-string", f"{LS}[search(query='line1\nline2')]{LE}"),
    Case("tab-in-string", f"{LS}[search(query='a\tb')]{LE}"),
    Case("leading-zero", f"{LS}[get_weather(city='Oslo', days=07)]{LE}"),
    Case("reserved-kwarg", f"{LS}[search(query='q', from=1)]{LE}"),
    Case("reserved-kwarg-newline", f"{LS}[search(from=1, query='a\nb')]{LE}"),
    Case("nested-quotes", f"{LS}[search(query='sed -n '1,9p' f.py')]{LE}"),
    Case("nested-quotes-ambiguous", f"{LS}[search(query='a 'b' c', tags=['d' 'e'])]{LE}"),
    Case("escaped-quote", f"{LS}[search(query='it\\'s')]{LE}"),
    Case("bracket-in-string", f"{LS}[search(query='grep -F \"]\"')]{LE}"),
    Case("tuple-set", f"{LS}[search(tags=('a', 'b'), query={{'x'}})]{LE}"),
    Case("fstring", f"{LS}[search(query=f'hi')]{LE}"),
    Case("unicode", f"{LS}[search(query='東京 👍🏽 naïve')]{LE}"),
    Case("start-only", f"Hi {LS}"),
    Case("end-only", f"Hi {LE} there"),
    Case("no-special", f"{LS}{LW}{LE}", skip_special=True),
    Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
         tool_choice="required"),
    Case("named", '{"city": "Paris"}', tool_choice=NAMED),
    Case("choice-none", f"{LS}{LW}{LE}", tool_choice="none"),
    Case("no-tools", f"{LS}{LW}{LE}", tools=None),
    Case("no-eos", f"ok {LS}{LW}{LE}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "lfm2": LFM2,
}

# (text, special) of the markers above that the marker tokenizer lacks.
MARKERS: list[tuple[str, bool]] = [
    ("<|tool_call_start|>", True),  # LFM2 (its <|tool_call_end|> is Kimi K2's, special too)
]
