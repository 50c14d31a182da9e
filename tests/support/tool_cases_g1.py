"""Cases of group g1's parsers (gemma4, inkling): tool cases ``CASES[parser]``,
compared with vLLM's parser through MORE_CASES (tests/support/more_tool_cases.py),
tool+reasoning cases ``PAIR_CASES[name]`` (tests/test_reasoning_parsers.py), and
the marker tokens they need (tests/support/marker_model.py)."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}
THINKING = {"enable_thinking": True}

# Gemma 4 (special tokens in its tokenizer).
CS, CE, TS, TE, Q = "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>'
GW = f"{TS}call:get_weather{{city:{Q}Paris{Q},days:3}}{TE}"
GS = f"{TS}call:search{{query:{Q}rain, {{or}} snow{Q},tags:[{Q}a{Q},{Q}b{Q}]}}{TE}"
GEMMA4 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", GW),
    Case("text-before", f"Let me check. {GW}"),
    Case("text-after", f"{GW}Done."),
    Case("text-around", f"Sure.\n{GW}\nDone."),
    Case("malformed", f"{TS}call:get_weather{{city:Paris,,days:}}{TE}"),
    Case("no-brace", f"{TS}call get_weather city=Paris{TE}"),
    Case("two-calls", f"{GW}{GS}"),
    Case("nested", f"{TS}call:get_weather{{city:{Q}Rome{Q},options:{{detail:0.5}},"
                   f"metric:true}}{TE}"),
    Case("floats", f"{TS}call:get_weather{{city:{Q}Oslo{Q},days:108.25}}{TE}"),
    Case("no-args", f"{TS}call:search{{}}{TE}"),
    Case("paren-args", f"{TS}call:search(query:{Q}x{Q}){TE}"),
    Case("bare-colon", f"{TS}:search{{query:{Q}x{Q}}}{TE}"),
    Case("name-only", f"{TS}call:search{TE}"),
    Case("unknown-tool", f"{TS}call:lookup{{q:{Q}x{Q}}}{TE}"),
    Case("truncated", f"{TS}call:get_weather{{city:{Q}Par"),
    Case("truncated-bool", f"{TS}call:get_weather{{city:{Q}Paris{Q},metric:tr"),
    Case("no-end", f"{TS}call:get_weather{{city:{Q}Paris{Q}}}"),
    Case("unicode", f"{TS}call:search{{query:{Q}東京 👍🏽 naïve{Q}}}{TE}"),
    Case("channel-text", f"{CS}thought\nplan{CE}Answer."),
    Case("stray-end", f"ok{TE}{CE}fine"),
    Case("turn-token", "Hi<|turn>there"),
    Case("no-special", GW, skip_special=True),
    Case("required", GW, tool_choice="required"),
    Case("named", GW, tool_choice=NAMED),
    Case("choice-none", GW, tool_choice="none"),
    Case("no-tools", GW, tools=None),
    Case("no-eos", f"ok {GW}", eos=False),
]

# Inkling (special tokens).
MM, TXT, THK = "<|message_model|>", "<|content_text|>", "<|content_thinking|>"
TJ, TT, ERR = "<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>", \
    "<|content_tool_error|>"
ENDS, END = "<|content_model_end_sampling|>", "<|end_message|>"
IW = f'{TJ}{{"name": "get_weather", "args": {{"city": "Paris", "days": 3}}}}{END}'
IS = f'{TJ}{{"name":"search","args":{{"query":"a {{b}} \\"c\\"","tags":["x"]}}}}{END}'
INKLING = [
    Case("plain", f"{TXT}The weather is nice today.{END}"),
    Case("bare-text", "The weather is nice today."),
    Case("one-call", IW),
    Case("text-then-call", f"{TXT}Let me check.{END}{MM}{IW}"),
    Case("call-then-text", f"{IW}{MM}{TXT}Done.{END}"),
    Case("text-around", f"{TXT}Sure.\n{END}{MM}{IW}{MM}{TXT}\nDone.{END}"),
    Case("malformed", f'{TJ}{{"name": "search", "args": {{"query": }}}}{END}'),
    Case("not-json", f"{TJ}search(query='x'){END}"),
    Case("two-calls", f"{IW}{MM}{IS}"),
    Case("header-name", f"{MM}get_weather{IW}"),
    Case("header-no-kind", f"{MM}orphan{END}after"),
    Case("arguments-key", f'{TJ}{{"name": "search", "arguments": {{"query": "x"}}}}{END}'),
    Case("no-args", f'{TJ}{{"name": "search"}}{END}'),
    Case("args-not-object", f'{TJ}{{"name": "search", "args": [1]}}{END}'),
    Case("end-sampling", f"{TXT}partial{ENDS}"),
    Case("tool-text", f"{TT}raw call{END}{ERR}error text{END}"),
    Case("truncated", f'{TJ}{{"name": "get_weather", "args": {{"city": "Pa'),
    Case("unicode", f'{TJ}{{"name":"search","args":{{"query":"東京 👍🏽"}}}}{END}'),
    Case("no-special", IW, skip_special=True),
    Case("required", IW, tool_choice="required"),
    Case("named", IW, tool_choice=NAMED),
    Case("choice-none", IW, tool_choice="none"),
    Case("no-tools", IW, tools=None),
    Case("no-eos", f"{TXT}ok{END}{MM}{IW}", eos=False),
]

CASES: dict[str, list[Case]] = {
    "gemma4": GEMMA4,
    "inkling": INKLING,
}

# Reasoning and tool calls together: (tool parser or None, reasoning parser) -> cases.
GEMMA4_REASONING = [
    Case("channel", f"{CS}thought\nplan it{CE}The answer.", tools=None),
    Case("channel-call", f"{CS}thought\nplan{CE}{GW}"),
    Case("call-ends-reasoning", f"{CS}thought\nplan{GW}"),
    Case("no-channel", "Just an answer.", tools=None),
    Case("thought-only", f"{CS}thought\n{CE}Answer", tools=None),
    Case("thought-word", f"{CS}thoughtful{CE}x", tools=None),
    Case("implied-channel", "thought\nplan it<channel|>The answer.", tools=None),
    Case("implied-by-end", f"plan{CE}answer", tools=None),
    Case("unclosed", f"{CS}thought\nstill", tools=None),
    Case("cut-at-thought", f"{CS}thought", tools=None),
    Case("cut-in-prefix", f"{CS}thou", tools=None),
    Case("choice-none", f"{CS}thought\nplan{CE}{GW}", tool_choice="none"),
    Case("hidden-call", f"{CS}thought\nplan{CE}{GW}", include_reasoning=False),
    Case("trailing-space", f"{CS}thought\na  \n{CE}  b", tools=None),
    Case("hidden", f"{CS}thought\nsecret{CE}shown", tools=None, include_reasoning=False),
    Case("thinking-on", f"{CS}thought\nplan{CE}ok", chat_template_kwargs=THINKING),
    Case("thinking-silent", "Answer with no channel.", tools=None,
         chat_template_kwargs=THINKING),
    Case("prompt-open", "more plan<channel|>Answer", tools=None,
         prompt_suffix=f"{CS}thought\n"),
    Case("prompt-open-call", f"plan{GW}", prompt_suffix=f"{CS}thought\n",
         chat_template_kwargs=THINKING),
    Case("prompt-closed", "Answer", tools=None, prompt_suffix=f"{CS}thought\n{CE}",
         chat_template_kwargs=THINKING),
    Case("unicode", f"{CS}thought\n日本語 👍🏽{CE}café", tools=None),
    Case("after-tool-response", "It is sunny.", chat_template_kwargs=THINKING,
         prompt_suffix=f"{CS}thought\nplan{CE}{GW}<|tool_response>response:get_weather"
                       f"{{sky:{Q}sun{Q}}}<tool_response|>"),
    Case("after-tool-response-channel", f"{CS}thought\nok{CE}It is sunny.",
         chat_template_kwargs=THINKING,
         prompt_suffix=f"{GW}<|tool_response>response:get_weather{{}}<tool_response|>"),
]
INKLING_REASONING = [
    Case("think-text", f"{THK}plan it{END}{MM}{TXT}The answer.{END}", tools=None),
    Case("think-call", f"{THK}plan{END}{MM}{IW}"),
    Case("think-header-call", f"{THK}plan{END}{MM}get_weather{IW}"),
    Case("call-in-think", f"{THK}plan{IW}"),
    Case("text-only", f"{TXT}Just text.{END}", tools=None),
    Case("bare", "no markers at all", tools=None),
    Case("unclosed", f"{THK}still planning", tools=None),
    Case("choice-none", f"{THK}plan{END}{MM}{IW}", tool_choice="none"),
    Case("hidden-call", f"{THK}plan{END}{MM}{IW}", include_reasoning=False),
    Case("think-twice", f"{THK}a{END}{MM}{THK}b{END}{MM}{TXT}c", tools=None),
    Case("end-sampling", f"{THK}cut{ENDS}{MM}{TXT}x", tools=None),
    Case("trailing-space", f"{THK}a  \n{END}{MM}{TXT}  b", tools=None),
    Case("hidden", f"{THK}secret{END}{MM}{TXT}shown{END}", tools=None, include_reasoning=False),
    Case("prompt-thinking", f"plan{END}{MM}{TXT}ok", tools=None, prompt_suffix=f"{MM}{THK}"),
    Case("prompt-text", f"visible{END}", tools=None, prompt_suffix=f"{MM}{TXT}"),
    Case("prompt-model", f"{THK}r{END}{MM}{TXT}c", tools=None, prompt_suffix=MM),
    Case("unicode", f"{THK}日本語{END}{MM}{TXT}café", tools=None),
]
PAIR_CASES: dict[tuple[str | None, str], list[Case]] = {
    (None, "gemma4"): GEMMA4_REASONING,
    ("gemma4", "gemma4"): GEMMA4_REASONING + GEMMA4,
    (None, "inkling"): INKLING_REASONING,
    ("inkling", "inkling"): INKLING_REASONING + INKLING,
}

# (text, special) of the markers above that the marker tokenizer lacks.
MARKERS: list[tuple[str, bool]] = [
    *((t, True) for t in (CS, CE, TS, TE, Q, "<|turn>", "<turn|>", "<|tool_response>",
                          "<tool_response|>")),
    *((t, True) for t in (MM, TXT, THK, TJ, TT, ERR, ENDS, END)),
]
