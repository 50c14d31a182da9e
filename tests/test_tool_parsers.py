"""Tool-call parsers against vLLM 0.32's own, output by output.

Every case runs through vLLM's parser stack (``ParserManager``, as its chat
serving uses it) and ours with the tiny model's tokenizer: the non-streaming
result and every streamed delta must be identical (tool call ids aside), fed
token by token, in chunks, and all at once.  Also compared with vLLM: the
partial-JSON completion llama3_json streams with, the pythonic format's
gate, the forced-call JSON schema.  See tests/support/parser_diff.py.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.model import load_model_info
from frontend.parsers import ChatParsers, ParserTokenizer
from frontend.parsers.json_partial import PartialJSONError, loads_partial
from frontend.parsers.message import message_parts, stream_finish_reason
from frontend.parsers.registry import tool_parser_class
from frontend.parsers.tool.pythonic import looks_like_call_list
from frontend.structured.tool_choice import adjust_request
from frontend.structured.tool_schema import ToolSchemaError, json_schema_from_tools
from tests.support.marker_model import marker_tokenizer_dir
from tests.support.more_tool_cases import MORE_CASES, NO_STREAMED_CALLS, WHOLE_RAISES
from tests.support.parser_diff import CHUNKINGS, TOOLS, Case, Differ, assemble


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir))


@pytest.fixture(scope="module")
def differ(model, tiny_model_dir):
    from vllm.tokenizers import get_tokenizer

    return Differ(model, get_tokenizer(str(tiny_model_dir)))


@pytest.fixture(scope="module")
def marker_differ(tiny_model_dir, tmp_path_factory):
    """For MORE_CASES: the tiny tokenizer with more families' marker tokens."""
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


def differ_for(request, parser):
    return request.getfixturevalue("marker_differ" if parser in MORE_CASES else "differ")


NAMED = {"type": "function", "function": {"name": "get_weather"}}
W = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'

CASES: dict[str, list[Case]] = {
    "hermes": [
        Case("plain", "The weather is nice today."),
        Case("one-call", f"<tool_call>\n{W}\n</tool_call>"),
        Case("text-before", f"Let me check.\n<tool_call>\n{W}\n</tool_call>"),
        Case("two-calls", f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n"
                          '{"name": "search", "arguments": {"query": "café ☕", "tags": ["a"]}}'
                          "\n</tool_call>"),
        Case("text-after", f"<tool_call>{W}</tool_call> and some more text"),
        Case("no-newlines", f"<tool_call>{W}</tool_call>"),
        Case("truncated", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'),
        Case("truncated-in-name", '<tool_call>\n{"name": "get_wea'),
        Case("no-end-tag", f"<tool_call>\n{W}"),
        Case("malformed-json", '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n'
                               "</tool_call>"),
        Case("missing-arguments", '<tool_call>\n{"name": "get_weather"}\n</tool_call>'),
        Case("missing-name", '<tool_call>\n{"arguments": {"city": "Rome"}}\n</tool_call>'),
        Case("number-name", '<tool_call>\n{"name": 7, "arguments": {}}\n</tool_call>'),
        Case("empty-call", "<tool_call></tool_call>"),
        Case("second-malformed", f"<tool_call>{W}</tool_call><tool_call>nope</tool_call>"),
        Case("partial-tag-at-end", "Checking <tool_"),
        Case("unicode-args", '<tool_call>\n{"name": "search", "arguments": {"query": "日本語 '
                             '👍🏽 naïve"}}\n</tool_call>'),
        Case("required", f"<tool_call>\n{W}\n</tool_call>", tool_choice="required"),
        Case("named", f"<tool_call>\n{W}\n</tool_call>", tool_choice=NAMED),
        Case("required-no-call", "I refuse.", tool_choice="required"),
        Case("choice-none", f"<tool_call>\n{W}\n</tool_call>", tool_choice="none"),
        Case("no-tools", f"<tool_call>\n{W}\n</tool_call>", tools=None),
        Case("no-eos", f"Sure<tool_call>{W}</tool_call>", eos=False),
        Case("think-text", f"<think>hmm</think>\n<tool_call>{W}</tool_call>"),
    ],
    "llama3_json": [
        Case("plain", "The weather is nice today."),
        Case("one-call", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'),
        Case("arguments-key", W),
        Case("python-tag", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}'),
        Case("python-tag-skipped", '<|python_tag|>{"name": "search", "parameters": {"query": "x"}}',
             skip_special=True),
        Case("two-calls", '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                          '{"name": "search", "parameters": {"query": "rain", '
                          '"tags": ["x", "y"]}}'),
        Case("nested", '{"name": "get_weather", "parameters": {"city": "Paris", "options": '
                       '{"detail": 0.5}, "metric": true}}'),
        Case("text-before", 'Sure! {"name": "get_weather", "parameters": {"city": "Paris"}}'),
        Case("truncated", '{"name": "get_weather", "parameters": {"city": "Par'),
        Case("truncated-name", '{"name": "get_we'),
        Case("no-name", '{"city": "Paris"}'),
        Case("both-keys", '{"name": "f", "arguments": {}, "parameters": {}}'),
        Case("malformed", '{"name": "get_weather", "parameters": {"city": Paris}}'),
        Case("brace-in-text", "Use {curly} braces"),
        Case("adjacent-objects", '{"name": "a", "parameters": {}}{"name": "b", "parameters": {}}'),
        Case("unicode", '{"name": "search", "parameters": {"query": "ñandú 東京 🚀"}}'),
        Case("numbers", '{"name": "get_weather", "parameters": {"days": 12, "x": -1.5e3, '
                        '"y": [1, 2.5, null, false]}}'),
        Case("named", '{"city": "Paris"}', tool_choice=NAMED),
        Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
             tool_choice="required"),
    ],
    "pythonic": [
        Case("plain", "The weather is nice today."),
        Case("one-call", "[get_weather(city='Paris', days=3)]"),
        Case("two-calls", "[get_weather(city='Paris'), search(query=\"rain\", tags=['a', 'b'])]"),
        Case("literals", "[get_weather(city=None, metric=true, days=-2, options={'detail': 1.5})]"),
        Case("no-args", "[search()]"),
        Case("no-args-two", "[search(), get_weather()]"),
        Case("dotted", "[weather.get_weather(city='Rome')]"),
        Case("positional", "[get_weather('Paris')]"),
        Case("expression", "[get_weather(city=x + 1)]"),
        Case("truncated", "[get_weather(city='Par"),
        Case("unclosed-list", "[get_weather(city='Paris')"),
        Case("text-before", "Sure: [get_weather(city='Paris')]"),
        Case("text-after", "[get_weather(city='Paris')] done"),
        Case("mismatched", "[get_weather(city='Paris']"),
        Case("unicode", "[search(query='café 東京 👍🏽')]"),
        Case("tuple-set", "[search(tags=('a', 'b'), query={'x'})]"),
        Case("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}, '
                         '{"name": "search", "parameters": {"query": "q"}}]',
             tool_choice="required"),
        Case("required-malformed", '[{"name": "get_weather", "parameters": {"city": ',
             tool_choice="required"),
        Case("required-bad-name", '[{"name": 5, "parameters": {}}]', tool_choice="required"),
        Case("named", '{"city": "Paris", "days": 2}', tool_choice=NAMED),
        Case("named-empty", "  ", tool_choice=NAMED),
        Case("choice-none", "[get_weather(city='Paris')]", tool_choice="none"),
    ],
    "qwen3_coder": [
        Case("plain", "The weather is nice today."),
        Case("one-call", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                         "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                         "</tool_call>"),
        Case("typed", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>"
                      "\n<parameter=metric>\ntrue\n</parameter>\n<parameter=options>\n"
                      '{"detail": "2.5"}\n</parameter>\n</function>\n</tool_call>'),
        Case("text-before", "Let me look.\n\n<tool_call>\n<function=search>\n<parameter=query>\n"
                            "rain\n</parameter>\n</function>\n</tool_call>"),
        Case("two-calls", "<tool_call>\n<function=search>\n<parameter=query>\na\n</parameter>\n"
                          "</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
                          "<parameter=city>\nLima\n</parameter>\n</function>\n</tool_call>"),
        Case("text-after", "<tool_call>\n<function=search>\n<parameter=query>\na\n</parameter>\n"
                           "</function>\n</tool_call>\nDone."),
        Case("truncated", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"),
        Case("no-close", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                         "</parameter>\n"),
        Case("bare-function", "<function=search>\n<parameter=query>\nx\n</parameter>\n</function>"),
        Case("unknown-tool", "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n"
                             "</function>\n</tool_call>"),
        Case("no-param-close", "<tool_call>\n<function=search>\n<parameter=query>\na\n"
                               "<parameter=tags>\n[\"x\"]\n</function>\n</tool_call>"),
        Case("empty-name", "<tool_call>\n<function=>\n</function>\n</tool_call>"),
        Case("unicode", "<tool_call>\n<function=search>\n<parameter=query>\n東京 👍🏽 é\n"
                        "</parameter>\n</function>\n</tool_call>"),
        Case("think-as-content", "<think>x</think>\n<tool_call>\n<function=search>\n"
                                 "<parameter=query>\nq\n</parameter>\n</function>\n</tool_call>"),
        Case("choice-none", "<tool_call>\n<function=search>\n<parameter=query>\nq\n</parameter>\n"
                            "</function>\n</tool_call>", tool_choice="none"),
        Case("no-tools", "hi <tool_call>\n<function=search>\n</function>\n</tool_call>",
             tools=None),
        Case("required", "<tool_call>\n<function=search>\n<parameter=query>\nq\n</parameter>\n"
                         "</function>\n</tool_call>", tool_choice="required"),
        Case("whitespace-only", "\n\n"),
        Case("angle-brackets", "a > b and <b>bold</b>"),
    ],
    "mistral": [
        Case("plain", "The weather is nice today."),
        Case("one-call", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'),
        Case("text-before", 'Sure.[TOOL_CALLS]search[ARGS]{"query": "rain"}'),
        Case("two-calls", '[TOOL_CALLS]search[ARGS]{"query": "a"}[TOOL_CALLS]get_weather[ARGS]'
                          '{"city": "Rome", "options": {"detail": 1}}'),
        Case("brace-form", '[TOOL_CALLS]get_weather{"city": "Paris"}'),
        Case("text-after-json", '[TOOL_CALLS]search[ARGS]{"query": "a"} and more'),
        Case("truncated", '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa'),
        Case("name-only", "[TOOL_CALLS]get_weather"),
        Case("empty-name", '[TOOL_CALLS][ARGS]{"query": "x"}'),
        Case("nested-strings", '[TOOL_CALLS]search[ARGS]{"query": "a } tricky \\" {", "tags": '
                               '["]"]}'),
        Case("unicode", '[TOOL_CALLS]search[ARGS]{"query": "naïve 東京 👍🏽"}'),
        Case("skipped-special", '[TOOL_CALLS]search[ARGS]{"query": "a"}', skip_special=True),
        Case("choice-none", '[TOOL_CALLS]search[ARGS]{"query": "a"}', tool_choice="none"),
        Case("required", '[TOOL_CALLS]search[ARGS]{"query": "a"}', tool_choice="required"),
        Case("whitespace-then-call", '\n\n[TOOL_CALLS]search[ARGS]{}'),
    ],
}

# Tool parsers under each reasoning parser: the reasoning comes first.
WITH_REASONING = [
    ("hermes", "qwen3", Case("qwen3-hermes", f"Let me think.\n</think>\n\n<tool_call>\n{W}\n"
                                             "</tool_call>")),
    ("hermes", "qwen3", Case("qwen3-hermes-implicit", f"thinking <tool_call>\n{W}\n</tool_call>")),
    ("hermes", "deepseek_r1", Case("r1-hermes", f"<think>plan</think>Okay.<tool_call>{W}"
                                                "</tool_call>")),
    ("hermes", "deepseek_r1", Case("r1-hermes-no-start", f"plan</think>\n<tool_call>{W}"
                                                         "</tool_call>")),
    ("hermes", "qwen3", Case("qwen3-hermes-no-thinking", f"<tool_call>\n{W}\n</tool_call>",
                             chat_template_kwargs={"enable_thinking": False},
                             prompt_suffix="<think>\n\n</think>\n\n")),
    ("hermes", "qwen3", Case("qwen3-hermes-hidden", f"plan</think><tool_call>{W}</tool_call>",
                             include_reasoning=False)),
    ("hermes", "qwen3", Case("qwen3-hermes-truncated-thinking", "still thinking about it")),
    ("qwen3_coder", "qwen3", Case(
        "qwen3-coder", "I need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                       "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
                       "</function>\n</tool_call>")),
    ("qwen3_coder", "qwen3", Case(
        "qwen3-coder-text", "hmm</think>\n\nHere you go: <tool_call>\n<function=search>\n"
                            "<parameter=query>\nq\n</parameter>\n</function>\n</tool_call>")),
    ("qwen3_coder", "qwen3", Case(
        "qwen3-coder-implicit", "hmm <tool_call>\n<function=search>\n<parameter=query>\nq\n"
                                "</parameter>\n</function>\n</tool_call>")),
    ("qwen3_coder", "qwen3", Case(
        "qwen3-coder-no-thinking", "<tool_call>\n<function=search>\n<parameter=query>\nq\n"
                                   "</parameter>\n</function>\n</tool_call>",
        chat_template_kwargs={"enable_thinking": False}, prompt_suffix="<think>\n\n</think>\n\n")),
    ("qwen3_coder", "deepseek_r1", Case(
        "r1-qwen3-coder", "<think>a</think>\n<tool_call>\n<function=search>\n<parameter=query>\n"
                          "q\n</parameter>\n</function>\n</tool_call>")),
    ("pythonic", "deepseek_r1", Case("r1-pythonic", "<think>a</think>[search(query='x')]")),
    ("llama3_json", "deepseek_r1", Case("r1-llama", '<think>a</think>{"name": "search", '
                                                    '"parameters": {"query": "x"}}')),
    ("mistral", "qwen3", Case("qwen3-mistral",
                              'think</think>[TOOL_CALLS]search[ARGS]{"query": 1}')),
    ("mistral", "deepseek_r1", Case("r1-mistral", '<think>t</think>ok[TOOL_CALLS]search[ARGS]{}')),
]

ALL = [(parser, case) for table in (CASES, MORE_CASES) for parser, cases in table.items()
       for case in cases]


@pytest.mark.parametrize("parser, case", ALL, ids=[f"{p}-{c}" for p, c in ALL])
def test_non_streaming_matches_vllm(request, parser, case):
    differ = differ_for(request, parser)
    if (parser, case.id) in WHOLE_RAISES:
        vparser, vrequest = differ.vllm_parser(parser, None, case)
        with pytest.raises(Exception):  # noqa: B017 (pydantic's, json's, ...)
            vparser.parse(case.text, vrequest, enable_auto_tools=True)
        with pytest.raises((ValueError, TypeError, KeyError)):
            differ.our_parser(parser, None, case).parse(case.text)
        return
    differ.compare_whole(parser, None, case)


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("parser, case", ALL, ids=[f"{p}-{c}" for p, c in ALL])
def test_streaming_matches_vllm(request, parser, case, chunking):
    differ_for(request, parser).compare_stream(parser, None, case, chunking)


@pytest.mark.parametrize("parser", sorted(MORE_CASES))
def test_more_cases_find_calls(marker_differ, parser):
    """The comparisons above are not vacuous: each parser finds its one call
    (whole and streamed), its markers being tokens of the tokenizer."""
    case = next(c for c in MORE_CASES[parser] if c.id == "one-call")
    parsed = marker_differ.our_parser(parser, None, case).parse(case.text)
    assert [c.name for c in parsed.tool_calls] == ["get_weather"], parsed
    calls = assemble(marker_differ.compare_stream(parser, None, case, "token"))["calls"]
    streamed = [] if parser in NO_STREAMED_CALLS else ["get_weather"]
    assert [c["name"] for c in calls.values()] == streamed


@pytest.mark.parametrize("tool, reasoning, case", WITH_REASONING,
                         ids=[c.id for _, _, c in WITH_REASONING])
def test_with_reasoning_matches_vllm(differ, tool, reasoning, case):
    differ.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        differ.compare_stream(tool, reasoning, case, chunking)


def test_streamed_calls_assemble_to_the_non_streaming_ones(differ):
    """The cases above pin equality with vLLM; this pins what that means."""
    case = CASES["hermes"][3]  # two calls
    deltas = differ.compare_stream("hermes", None, case, "token")
    calls = assemble(deltas)["calls"]
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "search"]
    parsed = differ.our_parser("hermes", None, case).parse(case.text)
    for i, call in enumerate(parsed.tool_calls):
        assert json.loads(calls[i]["arguments"]) == json.loads(call.arguments)
    first = next(d for d in deltas if d and d.get("tool_calls"))["tool_calls"][0]
    assert first == {"id": "<id>", "type": "function", "index": 0,
                     "function": {"name": "get_weather"}}


def test_tool_call_ids(model):
    parsers = ChatParsers(ParserTokenizer.from_model(model), tool_parser="hermes")
    parsed = parsers.new(tools=TOOLS, tool_choice="auto").parse(f"<tool_call>{W}</tool_call>")
    assert parsed.tool_calls[0].id.startswith("chatcmpl-tool-")
    assert len(parsed.tool_calls[0].id) == len("chatcmpl-tool-") + 16
    mistral = ChatParsers(ParserTokenizer.from_model(model), tool_parser="mistral")
    call = mistral.new(tools=TOOLS, tool_choice="auto").parse(
        '[TOOL_CALLS]search[ARGS]{"query": "x"}').tool_calls[0]
    assert len(call.id) == 9 and call.id.isalnum()


def test_unknown_names_and_missing_tokens(model):
    tok = ParserTokenizer.from_model(model)
    with pytest.raises(ValueError, match="unknown tool call parser 'nope'"):
        ChatParsers(tok, tool_parser="nope")
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        ChatParsers(tok, reasoning_parser="hermes")
    bare = ParserTokenizer({"a": 0}, {}, lambda ids: "a" * len(ids))
    for name in ("llama3_json", "mistral"):
        with pytest.raises(ValueError, match="needs"):
            ChatParsers(bare, tool_parser=name)
    with pytest.raises(ValueError, match="needs"):
        ChatParsers(bare, reasoning_parser="deepseek_r1")


# ---------------------------------------------------------------- partial JSON


def _vllm_partial(text, allow_str):
    from partial_json_parser.core.options import Allow
    from vllm.tool_parsers.utils import partial_json_loads

    try:
        return partial_json_loads(text, Allow.ALL if allow_str else Allow.ALL & ~Allow.STR)
    except Exception:
        return "error"


def _ours_partial(text, allow_str):
    try:
        return loads_partial(text, allow_str)
    except (PartialJSONError, RecursionError):
        return "error"


def _same(a, b):
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True,
                                                                    default=repr)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES, spaced=st.booleans(), allow_str=st.booleans(),
       suffix=st.sampled_from(["", "; ", '; {"a": 1', " tail", "}", "]"]))
def test_partial_json_prefixes_match_vllm(value, spaced, allow_str, suffix):
    text = json.dumps(value, ensure_ascii=False,
                      separators=(", ", ": ") if spaced else (",", ":")) + suffix
    for end in range(len(text) + 1):
        prefix = text[:end]
        assert _same(_ours_partial(prefix, allow_str), _vllm_partial(prefix, allow_str)), prefix


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='{}[]",:\\ 0123456789.-eEtrunlfasNI', max_size=24),
       allow_str=st.booleans())
def test_partial_json_garbage_matches_vllm(text, allow_str):
    assert _same(_ours_partial(text, allow_str), _vllm_partial(text, allow_str)), text


# ---------------------------------------------------------------- pythonic gate


def _gate_texts():
    """Every small list of calls: names, argument shapes, separators."""
    calls = [f"{name}({args}){sep}" for name in ("f", "a.b", "1x")
             for args in ("", "x=1", "x=", "1", "x=1,", "y = 'a)'")
             for sep in ("", ",", ", ", " ", " ,", ",\n")]
    bodies = [""] + calls + [a + b for a in calls for b in calls]
    return [head + body + tail for head in ("[", " [") for body in bodies
            for tail in ("]", "", " ]", "] t", ")")]


def test_pythonic_gate_is_vllms_regex():
    from vllm.tool_parsers.pythonic_tool_parser import PythonicToolParser

    regex = PythonicToolParser.TOOL_CALL_REGEX
    wrong = [t for t in _gate_texts() if looks_like_call_list(t) != (regex.match(t) is not None)]
    assert not wrong, wrong[:10]


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="[]() ,=ab1_'\n", max_size=16))
def test_pythonic_gate_on_garbage(text):
    from vllm.tool_parsers.pythonic_tool_parser import PythonicToolParser

    assert looks_like_call_list(text) == (PythonicToolParser.TOOL_CALL_REGEX.match(text)
                                          is not None), text


@pytest.mark.parametrize("text", ["[f()]", "[f(), g()]", "[f() g()]", "[f(),g(a=1)] x",
                                  "[f(a=1), g()]", "[f(1)]", "[f() , g()]", "[a.b(c=1)]",
                                  "[f(a=)]", "[f(a=1)", "[]", "[f()\n]"])
def test_pythonic_gate_examples(text):
    from vllm.tool_parsers.pythonic_tool_parser import PythonicToolParser

    assert looks_like_call_list(text) == (PythonicToolParser.TOOL_CALL_REGEX.match(text)
                                          is not None)


# ---------------------------------------------------------------- request adjustments

SCHEMA_TOOLS = [
    {"type": "function", "function": {"name": "a", "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/X"}},
        "$defs": {"X": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "b", "description": "no params"}},
    {"type": "function", "function": {"name": "c", "parameters": {}}},
    {"type": "function", "function": {"name": "d", "parameters": {
        "type": "object", "properties": {"y": {"$ref": "#/$defs/X"}},
        "$defs": {"X": {"type": "string"}}}, "strict": True}},
]


@pytest.mark.parametrize("tool_choice", ["required", "auto", "none",
                                         {"type": "function", "function": {"name": "a"}},
                                         {"type": "function", "function": {"name": "b"}}])
@pytest.mark.parametrize("parallel", [True, False, None])
def test_json_schema_from_tools_matches_vllm(tool_choice, parallel):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                    tools=json.loads(json.dumps(SCHEMA_TOOLS)),
                                    tool_choice=tool_choice, parallel_tool_calls=parallel)
    expected = get_json_schema_from_tools(request.tool_choice, request.tools, parallel)
    ours = json_schema_from_tools(tool_choice, json.loads(json.dumps(SCHEMA_TOOLS)), parallel)
    assert json.dumps(ours) == json.dumps(expected)  # same keys in the same order


def test_conflicting_defs_are_rejected():
    tools = json.loads(json.dumps(SCHEMA_TOOLS))
    tools[3]["function"]["parameters"]["$defs"]["X"] = {"type": "integer"}
    with pytest.raises(ValueError, match="'X' has multiple schemas"):
        json_schema_from_tools("required", tools)


STRICT_TOOLS = json.loads(json.dumps(TOOLS))
STRICT_TOOLS[1]["function"]["strict"] = True
STRICT_TOOLS.append({"type": "function", "function": {"name": "bare", "strict": True}})


# Every pair with a parser (without either, there is nothing to adjust).
@pytest.mark.parametrize("parser, reasoning", [
    (parser, reasoning)
    for reasoning in (None, "qwen3", "deepseek_r1", "mistral")
    for parser in ("hermes", "llama3_json", "pythonic", "qwen3_coder", "mistral", None)
    if parser or reasoning] + [(parser, None) for parser in MORE_CASES])
@pytest.mark.parametrize("tool_choice", ["auto", "none", "required", NAMED])
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("strict", [False, True])
def test_adjust_request_matches_vllm(request, parser, reasoning, tool_choice, parallel, strict):
    """skip_special_tokens, the forced-call schema and the structural tag, as
    vLLM's renderer leaves them."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.exceptions import VLLMValidationError

    differ = differ_for(request, parser)

    tools = json.loads(json.dumps(STRICT_TOOLS if strict else TOOLS))
    vrequest = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                     tools=tools, tool_choice=tool_choice,
                                     parallel_tool_calls=parallel)
    parser_cls = differ._manager.get_parser(tool_parser_name=parser,
                                            reasoning_parser_name=reasoning,
                                            enable_auto_tools=True, tokenizer=differ.vtok)
    ours_args = (tool_parser_class(parser) if parser else None, differ_reasoning(reasoning))
    ours_kwargs = dict(tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel)
    # The renderer's condition for calling adjust_request.
    if (parser_cls.always_adjust_request or parser_cls.reasoning_parser_cls is not None
            or tool_choice != "none"):
        try:
            vrequest = parser_cls(differ.vtok, vrequest.tools).adjust_request(vrequest)
        except VLLMValidationError as error:  # hf: a 400 for what it cannot guarantee
            with pytest.raises(ToolSchemaError) as ours_error:
                adjust_request(*ours_args, **ours_kwargs)
            assert f"{ours_error.value} (parameter={ours_error.value.param})" == str(error)
            return
    ours = adjust_request(*ours_args, **ours_kwargs)
    assert (ours.skip_special_tokens is False) == (vrequest.skip_special_tokens is False)
    so = vrequest.structured_outputs
    if ours.structural_tag_model is not None:
        assert so is not None and so.structural_tag == ours.structural_tag
        assert vrequest.response_format is None
    elif ours.json_schema is not None:
        assert so is not None and json.dumps(so.json) == json.dumps(ours.json_schema)
    else:
        assert so is None


def differ_reasoning(name):
    from frontend.parsers.registry import reasoning_parser_class

    return reasoning_parser_class(name) if name else None


# ---------------------------------------------------------------- message shape


def test_message_and_finish_reason():
    from frontend.parsers.composite import ParsedOutput
    from frontend.parsers.types import ToolCall

    calls = [ToolCall("a", "{}"), ToolCall("b", "{}", "mine")]
    parts = message_parts(ParsedOutput(None, None, calls), tool_choice="auto",
                          has_tool_parser=True, has_tools=True, finish_reason="stop")
    assert parts.finish_reason == "tool_calls" and parts.content is None
    assert parts.tool_calls[0].id.startswith("chatcmpl-tool-") and parts.tool_calls[1].id == "mine"
    parts = message_parts(ParsedOutput(None, None, calls), tool_choice="auto",
                          has_tool_parser=True, has_tools=True, finish_reason="length",
                          parallel_tool_calls=False)
    assert parts.finish_reason == "tool_calls" and len(parts.tool_calls) == 1
    parts = message_parts(ParsedOutput(None, None, []), tool_choice=NAMED, has_tool_parser=True,
                          has_tools=True, finish_reason="stop")
    assert (parts.content, parts.tool_calls, parts.finish_reason) == ("", [], "stop")
    parts = message_parts(ParsedOutput("r", "hi", None), tool_choice="required",
                          has_tool_parser=True, has_tools=True, finish_reason="stop")
    assert (parts.content, parts.tool_calls, parts.finish_reason) == ("hi", [], "tool_calls")
    parts = message_parts(ParsedOutput("r", "hi", None), tool_choice="none",
                          has_tool_parser=True, has_tools=True, finish_reason="length")
    assert (parts.tool_calls, parts.finish_reason) == (None, "length")
    assert stream_finish_reason(True, "auto", "stop") == "tool_calls"
    assert stream_finish_reason(True, NAMED, "stop") == "stop"
    assert stream_finish_reason(True, "required", "length") == "length"
    assert stream_finish_reason(False, "auto", None) == "stop"


def test_random_chunkings_agree(differ):
    """Many random step sizes over one busy output."""
    case = Case("busy", f"plan</think>Checking.<tool_call>\n{W}\n</tool_call><tool_call>"
                        '{"name": "search", "arguments": {"query": "x \\" }"}}</tool_call>')
    rng = random.Random(7)
    for i in range(20):
        case.id = f"busy-{rng.random()}"
        differ.compare_stream("hermes", "qwen3", case, "random")


@pytest.mark.parametrize("extra", [None, ["<|im_start|>", "[ARGS]"]])
def test_special_tokens_are_transformers(tiny_model_dir, tmp_path, extra):
    """The engine-based parsers drop the tokenizer's special tokens from content:
    the same set as transformers' all_special_tokens."""
    import shutil

    from transformers import AutoTokenizer

    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(tiny_model_dir / name, tmp_path / name)
    if extra is not None:
        config = json.loads((tmp_path / "tokenizer_config.json").read_text())
        config["additional_special_tokens"] = extra
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    ours = ParserTokenizer.from_model(load_model_info(str(tmp_path)))
    assert ours.special_tokens == dict(zip(hf.all_special_tokens, hf.all_special_ids))
    assert ours.token_text(1204) == hf.decode([1204]) == "[TOOL_CALLS]"


@pytest.mark.parametrize("parser", ["pythonic", "hermes", "mistral"])
# (vLLM rejects structured outputs with a named tool: no "json" with NAMED)
@pytest.mark.parametrize("tool_choice, own", [
    (tool_choice, own) for own in ("json", "structural_tag", "response_format")
    for tool_choice in ("auto", "required", NAMED)
    if not (own == "json" and tool_choice == NAMED)])
def test_adjust_request_with_the_requests_own_constraint(differ, parser, tool_choice, own):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tools = json.loads(json.dumps(TOOLS))
    extra = {
        "json": {"structured_outputs": {"json": {"type": "object"}}},
        "structural_tag": {"structured_outputs": {"structural_tag": json.dumps(
            {"type": "structural_tag", "format": {"type": "any_text"}})}},
        "response_format": {"response_format": {"type": "json_object"}},
    }[own]
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                    tools=tools, tool_choice=tool_choice, **extra)
    parser_cls = differ._manager.get_parser(tool_parser_name=parser, enable_auto_tools=True,
                                            tokenizer=differ.vtok)
    request = parser_cls(differ.vtok, request.tools).adjust_request(request)
    ours = adjust_request(tool_parser_class(parser), None, tools=tools, tool_choice=tool_choice,
                          has_structured_outputs=own != "response_format",
                          response_format_type="json_object" if own == "response_format" else None,
                          structured_outputs_tag=own == "structural_tag")
    so = request.structured_outputs
    if ours.structural_tag is not None:
        assert so.structural_tag == ours.structural_tag and request.response_format is None
    elif ours.json_schema is not None:
        assert json.dumps(so.json) == json.dumps(ours.json_schema)
        assert request.response_format is None
    elif ours.structural_tag_model is None:  # the request's own constraint stays
        assert (so, request.response_format) == (
            (None, request.response_format) if own == "response_format" else (so, None))
        assert so is None or so.json == {"type": "object"} or so.structural_tag
