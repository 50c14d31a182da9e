"""Cases of the g3 group's tool parser (plamo3): ``CASES[parser]``, compared with
vLLM's parser through MORE_CASES (tests/support/more_tool_cases.py), and the
marker tokens it needs (tests/support/marker_model.py)."""

from __future__ import annotations

from tests.support.parser_diff import Case

NAMED = {"type": "function", "function": {"name": "get_weather"}}


def plamo(name: str) -> str:
    return f"<|plamo:{name}:plamo|>"


# PLaMo 3's markers are several tokens: "<|plamo:begin_", the name, ":plamo|>".
TRS, TRE = plamo("begin_tool_requests"), plamo("end_tool_requests")
RS, RE = plamo("begin_tool_request"), plamo("end_tool_request")
NS, NE = plamo("begin_tool_name"), plamo("end_tool_name")
AS = plamo("begin_tool_arguments") + "<|plamo:constrain|>json<|plamo:msg|>"
AE = plamo("end_tool_arguments")
TS, TE = plamo("begin_think"), plamo("end_think")
EOT = "<|plamo:tag|>"


def request(name: str, args: str) -> str:
    return f"{RS}{NS}{name}{NE}{AS}{args}{AE}{RE}"


WA = '{"city": "Paris", "days": 3}'
SA = '{"query": "café ☕", "tags": ["a"]}'
NESTED = '{"options": {"detail": 1.5}}'
BAD = '{"query": }'
UA = '{"query": "日本語 👍🏽"}'
MARKER_TEXT = '{"query": "<|plamo:x"}'
ML = "\n" + WA + "\n"
ONE = f"{TRS}{request('get_weather', WA)}{TRE}"
PLAMO3 = [
    Case("plain", "The weather is nice today."),
    Case("one-call", ONE),
    Case("text-before", f"Let me check. {ONE}"),
    Case("ws-before", f"\n\n{ONE}"),
    Case("text-after", f"{ONE} done"),
    Case("eot-after", f"{ONE}{EOT}"),
    Case("two-calls", f"{TRS}{request('get_weather', WA)}{request('search', SA)}{TRE}"),
    Case("two-blocks", f"{ONE}\n{TRS}{request('search', SA)}{TRE}"),
    Case("multiline-args", f"{TRS}{request('get_weather', ML)}{TRE}"),
    Case("empty-args", f"{TRS}{request('search', '')}{TRE}"),
    Case("nested-args", f"{TRS}{request('get_weather', NESTED)}{TRE}"),
    Case("malformed", f"{TRS}{request('search', BAD)}{TRE}"),
    Case("unicode", f"{TRS}{request('search', UA)}{TRE}"),
    Case("truncated", f'{TRS}{RS}{NS}get_weather{NE}{AS}{{"city": "Pa'),
    Case("truncated-name", f"{TRS}{RS}{NS}get_wea"),
    Case("cut-in-name-end", f"{TRS}{RS}{NS}get_weather<|plamo:end_tool"),
    Case("cut-in-args-end", f"{TRS}{RS}{NS}search{NE}{AS}{SA}<|plamo:end_tool_argu"),
    Case("cut-in-marker", "Answer <|plamo:begin_tool_req"),
    Case("no-block-end", f"{TRS}{request('get_weather', WA)}"),
    Case("no-request-end", f"{TRS}{RS}{NS}search{NE}{AS}{SA}{AE}"),
    Case("eot-in-args", f'{TRS}{RS}{NS}search{NE}{AS}{{"query": "x"{EOT}'),
    Case("marker-text-in-args", f"{TRS}{request('search', MARKER_TEXT)}{TRE}"),
    Case("think-text", f"{TS}hmm{TE}{ONE}"),
    Case("required", ONE, tool_choice="required"),
    Case("named", ONE, tool_choice=NAMED),
    Case("choice-none", f"ok {ONE}", tool_choice="none"),
    Case("no-tools", ONE, tools=None),
    Case("no-eos", f"ok {ONE}", eos=False),
]

CASES: dict[str, list[Case]] = {"plamo3": PLAMO3}

MARKERS: list[tuple[str, bool]] = [
    # PLaMo 3: the pieces of its markers, and its end of turn (special tokens).
    ("<|plamo:begin_", True),
    ("<|plamo:end_", True),
    (":plamo|>", True),
    ("<|plamo:tag|>", True),
    ("<|plamo:constrain|>", False),
    ("<|plamo:msg|>", False),
    # MiniCPM-V's reserved marker tokens (its reasoning parser passes over them).
    ("<|reserved_12|>", True),
    ("<|reserved_13|>", True),
]
