"""hy_v3, hy_v4 and minicpm5 beyond the generic tables (tests/support/tool_cases_g5.py):
hy_v4 under its structural tag, and the Hunyuan markers' checkpoint suffixes,
each compared with vLLM's own parser."""

from __future__ import annotations

import json
import re

import pytest

from frontend.model import load_model_info
from frontend.parsers import UNSET, ParserTokenizer
from frontend.parsers.registry import tool_parser_class
from frontend.structured.structural_tag import structural_tag
from tests.support.marker_model import marker_tokenizer_dir
from tests.support.parser_diff import CHUNKINGS, TOOLS, Case, Differ, tokenizer_dir
from tests.support.tool_cases_g5 import CE, CS, NAMED, WP, hunyuan_cases, hy3, hy4


class TaggedDiffer(Differ):
    """vLLM's request after its ``adjust_request``, as the serving layer passes
    it to the parser: with tool_choice "required"/named it carries hy_v4's
    structural tag, which switches vLLM's parser to reading markers in the text."""

    def vllm_request(self, case: Case):
        request = super().vllm_request(case)
        cls = self._manager.get_parser(
            tool_parser_name="hy_v4",
            reasoning_parser_name=None,
            enable_auto_tools=True,
            tokenizer=self.vtok,
        )
        return cls(self.vtok, request.tools).adjust_request(request)


@pytest.fixture(scope="module")
def tagged_differ(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return TaggedDiffer(load_model_info(str(path)), get_tokenizer(str(path)))


ONE = hy4("get_weather", WP)
TAGGED = [
    Case("required", f"{CS}{ONE}{CE}", tool_choice="required"),
    Case("required-two", f"{CS}{ONE}{hy4('search', {'query': 'q'})}{CE}", tool_choice="required"),
    Case("required-text-first", f"ok <tool{CS}{ONE}{CE}", tool_choice="required"),
    Case("required-angle-end", "a <tool_c", tool_choice="required"),
    Case("required-truncated", f"{CS}{ONE[:-12]}", tool_choice="required"),
    Case("named", f"{CS}{ONE}{CE}", tool_choice=NAMED),
    Case("named-text-first", f"Sure: {CS}{ONE}{CE}", tool_choice=NAMED),
]


@pytest.mark.parametrize("case", TAGGED, ids=str)
def test_hy_v4_under_its_structural_tag_matches_vllm(tagged_differ, case):
    request = tagged_differ.vllm_request(case)
    assert request.structured_outputs.structural_tag  # vLLM's parser reads the text
    tagged_differ.compare_whole("hy_v4", None, case)
    for chunking in CHUNKINGS:
        tagged_differ.compare_stream("hy_v4", None, case, chunking)


# ---------------------------------------------------------------- suffixed markers

_MARKER_RE = re.compile(r"<(/?)(tool_calls|tool_call|tool_sep|arg_key|arg_value)>")


def suffixed(case: Case, suffix: str) -> Case:
    text = _MARKER_RE.sub(lambda m: f"<{m[1]}{m[2]}{suffix}>", case.text)
    return Case(
        case.id,
        text,
        tool_choice=case.tool_choice,
        tools=case.tools,
        skip_special=case.skip_special,
        eos=case.eos,
    )


HY3_SUFFIXED = [suffixed(c, ":hy") for c in hunyuan_cases(hy3)]


@pytest.fixture(scope="module")
def hy3_suffixed(tiny_model_dir, tmp_path_factory):
    """hy_v3 reads the suffix from the tokenizer config's token_suffix."""
    from vllm.tokenizers import get_tokenizer

    path = tokenizer_dir(
        tiny_model_dir,
        tmp_path_factory.mktemp("hy3"),
        {"<tool_calls:hy>": False, "</tool_calls:hy>": False},
        {"token_suffix": ":hy"},
    )
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("case", HY3_SUFFIXED, ids=str)
def test_hy_v3_suffixed_markers_match_vllm(hy3_suffixed, case):
    hy3_suffixed.compare_whole("hy_v3", None, case)
    for chunking in CHUNKINGS:
        hy3_suffixed.compare_stream("hy_v3", None, case, chunking)


def test_hy_v3_suffixed_markers_find_the_call(hy3_suffixed):
    case = next(c for c in HY3_SUFFIXED if c.id == "one-call")
    assert "<tool_calls:hy><tool_call:hy>get_weather<tool_sep:hy>" in case.text
    parsed = hy3_suffixed.our_parser("hy_v3", None, case).parse(case.text)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3})
    ]


# hy_v4 reads the suffix from the vocabulary; vLLM's extractor takes the vocab
# and suffix as they are, so it runs here on the same made-up vocabulary.
HY4_SUFFIX = ":6124c78e"
HY4_VOCAB = {
    f"<{m}{HY4_SUFFIX}>": i
    for i, m in enumerate(
        (
            "tool_calls",
            "/tool_calls",
            "tool_call",
            "/tool_call",
            "arg_key",
            "/arg_key",
            "arg_value",
            "/arg_value",
            "think",
            "/think",
        ),
        start=100,
    )
}


def _hy4_tokenizer() -> ParserTokenizer:
    return ParserTokenizer(HY4_VOCAB, {}, lambda ids: "")


HY4_SUFFIXED = [
    suffixed(c, HY4_SUFFIX)
    for c in hunyuan_cases(hy4)
    if c.tools is not None and c.tool_choice == "auto"
]


def _steps(text: str) -> list[tuple[str, list[int]]]:
    """The text in pieces of at most 3 characters, each marker one token."""
    steps: list[tuple[str, list[int]]] = []
    for piece in re.split(r"(<[^<>]+>)", text):
        if piece in HY4_VOCAB:
            steps.append((piece, [HY4_VOCAB[piece]]))
        else:
            steps += [(piece[i : i + 3], [1]) for i in range(0, len(piece), 3)]
    return steps


@pytest.mark.parametrize("case", HY4_SUFFIXED, ids=str)
def test_hy_v4_suffixed_markers_match_vllms_extractor(case):
    from vllm.tool_parsers.hy_v4_tool_parser import HYV4ToolExtractor

    plain_tools = [
        {"name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in TOOLS
    ]
    ours_cls = tool_parser_class("hy_v4")
    tokenizer = _hy4_tokenizer()
    assert ours_cls.structural_tag_suffix(tokenizer) == HY4_SUFFIX
    ours = ours_cls(tokenizer, TOOLS, "auto")
    theirs = HYV4ToolExtractor(HY4_VOCAB, HY4_SUFFIX, strict=True)
    whole = theirs.extract_tool_calls(case.text, plain_tools)
    parsed = ours.extract(case.text)
    assert (
        parsed.tools_called,
        parsed.content,
        [(c.name, c.arguments) for c in parsed.tool_calls],
    ) == (
        whole["tools_called"],
        whole["content"],
        [(c["name"], c["arguments"]) for c in whole["tool_calls"]],
    )
    ours = ours_cls(tokenizer, TOOLS, "auto")
    theirs = HYV4ToolExtractor(HY4_VOCAB, HY4_SUFFIX, strict=True)
    previous, previous_ids = "", []
    for text, ids in _steps(case.text):
        current, current_ids = previous + text, previous_ids + ids
        expected = theirs.extract_tool_calls_streaming(
            previous, current, text, previous_ids, current_ids, ids, plain_tools
        )
        actual = ours.extract_streaming(previous, current, text, previous_ids, current_ids, ids)
        assert _plain(actual) == expected, (case, text)
        previous, previous_ids = current, current_ids


def _plain(delta):
    """Our delta in the extractor's shape."""
    if delta is None:
        return None

    def value(field):
        return None if field is UNSET else field

    return {
        "content": value(delta.content),
        "tool_calls": [
            {
                "index": c.index,
                "new": c.id is not UNSET,
                "name": value(c.name),
                "arguments": value(c.arguments),
            }
            for c in delta.tool_calls
        ],
    }


@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_hy_v4_suffixed_structural_tag_matches_vllm(tool_choice):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag

    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS, tool_choice=tool_choice
    )
    theirs = get_model_structural_tag(
        "hy_v4", request.tools, request.tool_choice, reasoning=False, token_suffix=HY4_SUFFIX
    )
    ours = structural_tag("hy_v4", TOOLS, tool_choice, token_suffix=HY4_SUFFIX)
    assert json.dumps(ours) == json.dumps(theirs.model_dump())


@pytest.mark.parametrize("own", [None, {"type": "json_object"}], ids=["alone", "json_object"])
def test_hy_v4_auto_is_tagged_only_with_the_requests_own_constraint(marker_differ_g5, own):
    """vLLM's hy_v4 builds no tag for "auto" (strict tools or not), except
    through the "required" tag it ORs with the request's own constraint."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from frontend.structured.request import parse
    from frontend.structured.tool_choice import adjust_chat_request

    tools = json.loads(json.dumps(TOOLS))
    tools[0]["function"]["strict"] = True
    extra = {"response_format": own} if own else {}
    request = ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "x"}],
        tools=tools,
        tool_choice="auto",
        **extra,
    )
    d = marker_differ_g5
    cls = d._manager.get_parser(tool_parser_name="hy_v4", enable_auto_tools=True, tokenizer=d.vtok)
    request = cls(d.vtok, request.tools).adjust_request(request)
    constraints, _, _ = adjust_chat_request(
        tool_parser_class("hy_v4"),
        None,
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=True,
        response_format=own,
        structured_outputs=None,
        constraints=parse(own, None),
    )
    so = request.structured_outputs
    if own is None:
        assert so is None and constraints.structured_outputs is None
    else:
        assert so.structural_tag is not None
        assert constraints.structured_outputs == {"structural_tag": so.structural_tag}


@pytest.fixture(scope="module")
def marker_differ_g5(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


# The pairs these models are served with: the tool parser reads what the
# reasoning parser leaves as content.
HIGH = {"reasoning_effort": "high"}
PAIRS = [
    (
        "hy_v3",
        "hy_v3",
        Case(
            "hy3-think-call",
            f"<think>hmm</think>\n{CS}{hy3('search', {'query': 'q'})}{CE}",
            chat_template_kwargs=HIGH,
        ),
    ),
    (
        "hy_v3",
        "hy_v3",
        Case(
            "hy3-no-think",
            f"ok {CS}{hy3('search', {'query': 'q'})}{CE}",
            chat_template_kwargs={"reasoning_effort": "no_think"},
        ),
    ),
    ("hy_v3", "hy_v3", Case("hy3-cut", "<think>still thinking", chat_template_kwargs=HIGH)),
    (
        "hy_v4",
        "hy_v4",
        Case(
            "hy4-think-call",
            f"hmm</think>\n{CS}{ONE}{CE}",
            prompt_suffix="<think>",
            chat_template_kwargs=HIGH,
        ),
    ),
    (
        "hy_v4",
        "hy_v4",
        Case(
            "hy4-no-think",
            f"Sure. {CS}{ONE}{CE}",
            chat_template_kwargs={"reasoning_effort": "no_think"},
        ),
    ),
    (
        "minicpm5",
        "deepseek_r1",
        Case(
            "minicpm5-r1",
            '<think>a</think>\n<function name="search"><param name="query">q</param></function>',
        ),
    ),
]


@pytest.mark.parametrize("tool, reasoning, case", PAIRS, ids=[c.id for _, _, c in PAIRS])
def test_with_the_reasoning_parser_matches_vllm(marker_differ_g5, tool, reasoning, case):
    marker_differ_g5.compare_whole(tool, reasoning, case)
    parsed = marker_differ_g5.our_parser(tool, reasoning, case).parse(case.text)
    calls = [c.name for c in parsed.tool_calls or ()]
    assert calls == (
        [] if case.id.endswith("-cut") else ["search" if "search" in case.text else "get_weather"]
    ), parsed
    for chunking in CHUNKINGS:
        marker_differ_g5.compare_stream(tool, reasoning, case, chunking)
