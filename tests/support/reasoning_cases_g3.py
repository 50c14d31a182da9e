"""Cases of the g3 group's reasoning parsers (plamo3, minicpmv): ``CASES`` as
(tool parser, reasoning parser, case), compared with vLLM's stack in
tests/test_reasoning_parsers.py on the marker tokenizer
(tests/support/marker_model.py)."""

from __future__ import annotations

import dataclasses

from tests.support.parser_diff import Case
from tests.support.tool_cases_g3 import EOT, ONE, SA, TE, TRE, TRS, TS, request

OFF = {"enable_thinking": False}
ON = {"enable_thinking": True}

PLAMO3 = [
    Case("tags", f"{TS}Let me think. The user says hi.{TE}Hello there!"),
    Case("no-start", f"The user says hi.{TE}\n\nHello!"),
    Case("no-end", f"{TS}still thinking about"),
    Case("no-markers", "Just an answer."),
    Case("empty-reasoning", f"{TS}{TE}Answer"),
    Case("twice", f"{TS}a{TE}b{TS}c{TE}d"),
    Case("end-twice", f"a{TE}b{TE}c"),
    Case("unicode", f"{TS}日本語 👍🏽 naïve{TE}café ☕"),
    Case("trailing-space", f"{TS}a  \n{TE}  b  "),
    Case("eot-ends", f"plan{EOT}answer"),
    Case("eot-in-content", f"plan{TE}answer{EOT}more"),
    Case("cut-end-marker", "plan <|plamo:end_thi"),  # (not the marker's first tokens)
    Case("cut-end-marker-tokens", "plan <|plamo:end_th"),
    Case("cut-marker-piece", "plan <|plamo:begin_"),
    Case("cut-content-marker", f"plan{TE}answer <|plamo:begin_tool_re"),
    Case("call-implicit-end", f"plan{ONE}"),
    Case("call-after", f"{TS}plan{TE}ok {ONE}"),
    Case("call-after-eot", f"plan{TE}{TRS}{request('search', SA)}{TRE}{EOT}"),
    Case("hidden", f"{TS}secret{TE}visible", include_reasoning=False),
    Case("no-eos", f"{TS}r{TE}c", eos=False),
    Case("prompt-opened", f"the plan{TE}Answer.", prompt_suffix=TS),
    Case("prompt-closed", "Answer without thinking.", prompt_suffix=f"{TS}{TE}"),
    Case("prompt-eot", "Answer.", prompt_suffix=EOT),
    Case("think-off", f"Answer.{TE}more{ONE}", chat_template_kwargs=OFF),
    Case("think-off-tags", f"{TS}a{TE}b", chat_template_kwargs=OFF),
    Case("think-on", f"plan{TE}ok", chat_template_kwargs=ON),
]

Q_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
          "</function>\n</tool_call>")
MINICPMV = [
    Case("tags", "<think>Let me think.</think>Hello there!"),
    Case("no-start", "The user says hi.</think>\n\nHello!"),
    Case("no-end", "<think>still thinking about"),
    Case("no-markers", "Just an answer."),
    Case("twice", "<think>a</think>b<think>c</think>d"),
    Case("escaped-newlines", "<think>step\\none\\r\\ntwo</think>Answer\\nline\\rthree"),
    Case(
        "escapes-kept",
        "<think>a</think>`x\\ny` ```\\n``` $a\\nb$ $$\\n$$ \\\\n \\(x\\n\\) \\[y\\n\\] \\t",
    ),
    Case("escape-at-reasoning-end", "<think>plan\\</think>nAnswer"),
    Case("escape-at-end", "<think>plan</think>Answer\\"),
    Case("im-end", "<think>a<|im_end|>b</think>c<|im_end|>d"),
    Case("reserved", "<think>r<reserved_12></think>a<reserved_14>b<|reserved_13|>c"),
    Case("unicode", "<think>日本語\\n👍🏽</think>café\\n☕"),
    Case("call", f"<think>plan\\nit</think>Sure\\n{Q_CALL}"),
    Case("call-implicit-end", f"plan{Q_CALL}"),
    Case(
        "call-escaped-arg",
        "<think>p</think><tool_call>\n<function=search>\n<parameter=query>\n"
        "a\\nb\n</parameter>\n</function>\n</tool_call>",
    ),
    Case("hidden", "<think>secret\\n</think>visible\\n", include_reasoning=False),
    Case("no-eos", "<think>r\\n</think>c\\n", eos=False),
    Case("prompt-opened", "the plan</think>Answer.", prompt_suffix="<think>\n"),
    Case("prompt-closed", "Answer.", prompt_suffix="<think>\n\n</think>\n\n"),
]


def _modes(cases: list[Case], modes: list[dict | None]) -> list[Case]:
    out = []
    for case in cases:
        for kwargs in modes:
            if kwargs is None or case.chat_template_kwargs is not None:
                out.append(case)
                if case.chat_template_kwargs is not None:
                    break
                continue
            out.append(
                dataclasses.replace(
                    case,
                    id=f"{case.id}-{'-'.join(map(str, kwargs.values()))}",
                    chat_template_kwargs=kwargs,
                )
            )
    return out


def _stacks(tool: str, reasoning: str, cases: list[Case]) -> list[tuple]:
    """Each case without tools through the reasoning parser alone, and with
    tools through the pair."""
    return [(None, reasoning, dataclasses.replace(case, tools=None)) for case in cases] + [
        (tool, reasoning, case) for case in cases
    ]


CASES = _stacks("plamo3", "plamo3", _modes(PLAMO3, [None])) + _stacks(
    "qwen3_coder", "minicpmv", _modes(MINICPMV, [None, OFF])
)
PARSERS = {"plamo3", "minicpmv"}

# For the end-to-end runs of tests/test_parsers_e2e.py (the MiniCPM-V grammar
# has no tool parser of its own): the reasoning parser alone.
E2E_RUNS = {"reasoning-minicpmv": [
    dataclasses.replace(case, tools=None) for case in MINICPMV
    if case.id in ("tags", "no-end", "escaped-newlines", "escapes-kept",
                   "escape-at-reasoning-end", "im-end", "hidden")]}
