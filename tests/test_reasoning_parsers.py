"""Reasoning parsers against vLLM 0.32's own, output by output.

As in test_tool_parsers.py: each output goes through vLLM's parser stack and
ours; the non-streaming split, every streamed delta (token by token, in
chunks, whole), the reasoning token counts and whether the prompt already
ended reasoning must be identical.
"""

from __future__ import annotations

import dataclasses

import pytest

from frontend.model import load_model_info
from frontend.parsers import ChatParsers, ParserTokenizer
from tests.support import reasoning_cases_g3
from tests.support import tool_cases_g1
from tests.support import tool_cases_g6
from tests.support.marker_model import marker_tokenizer_dir
from tests.support import reasoning_cases_g4
from tests.support.parser_diff import CHUNKINGS, TOOLS, Case, Differ, tokenizer_dir

OFF = {"enable_thinking": False}
CLOSED = "<think>\n\n</think>\n\n"  # what the template adds for enable_thinking=false

COMMON = [
    Case("tags", "<think>Let me think. The user says hi.</think>Hello there!", tools=None),
    Case("no-start", "The user says hi.</think>\n\nHello!", tools=None),
    Case("no-end", "<think>still thinking about", tools=None),
    Case("no-markers", "Just an answer.", tools=None),
    Case("empty-reasoning", "<think></think>Answer", tools=None),
    Case("no-content", "<think>only reasoning</think>", tools=None),
    Case("newlines", "<think>\nstep one\nstep two\n</think>\n\nThe answer.", tools=None),
    Case("twice", "<think>a</think>b<think>c</think>d", tools=None),
    Case("end-twice", "a</think>b</think>c", tools=None),
    Case("unicode", "<think>日本語 👍🏽 naïve</think>café ☕", tools=None),
    Case("hidden", "<think>secret</think>visible", tools=None, include_reasoning=False),
    Case("hidden-no-end", "<think>secret forever", tools=None, include_reasoning=False),
    Case("no-eos", "<think>r</think>c", tools=None, eos=False),
    Case("prompt-opened", "the plan</think>Answer.", tools=None, prompt_suffix="<think>\n"),
    Case("prompt-closed", "Answer without thinking.", tools=None, prompt_suffix=CLOSED,
         chat_template_kwargs=OFF),
    Case("prompt-closed-kwargs-only", "Answer.</think>more", tools=None,
         chat_template_kwargs=OFF),
    Case("prompt-closed-tokens-only", "Answer.</think>more", tools=None, prompt_suffix=CLOSED),
    Case("special-token-text", "a<s>b</think>c</s>d", tools=None),
    Case("special-token-skipped", "a<s>b</think>c</s>d", tools=None, skip_special=True),
    Case("tool-markup", "plan <tool_call>\n{\"name\": \"x\"}\n</tool_call> after", tools=None),
    Case("partial-end-tag", "thinking </thi", tools=None),
    Case("trailing-space", "<think>a  \n</think>  b  ", tools=None),
]

ALL = [(parser, case) for parser in ("deepseek_r1", "qwen3") for case in COMMON]


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir))


@pytest.fixture(scope="module")
def differ(model, tiny_model_dir):
    from vllm.tokenizers import get_tokenizer

    return Differ(model, get_tokenizer(str(tiny_model_dir)))


@pytest.mark.parametrize("parser, case", ALL, ids=[f"{p}-{c}" for p, c in ALL])
def test_non_streaming_matches_vllm(differ, parser, case):
    differ.compare_whole(None, parser, case)


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("parser, case", ALL, ids=[f"{p}-{c}" for p, c in ALL])
def test_streaming_matches_vllm(differ, parser, case, chunking):
    differ.compare_stream(None, parser, case, chunking)


@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3"])
@pytest.mark.parametrize("suffix, kwargs", [("", None), ("<think>\n", None), (CLOSED, None),
                                            (CLOSED, OFF), ("", OFF)])
def test_prompt_reasoning_end_matches_vllm(differ, parser, suffix, kwargs):
    """What the engine request's ``reasoning_ended`` is set from."""
    case = Case("prompt", "", tools=None, prompt_suffix=suffix, chat_template_kwargs=kwargs)
    prompt = differ.prompt_ids(case)
    vparser, _ = differ.vllm_parser(None, parser, case)
    parsers = ChatParsers(differ.tokenizer, reasoning_parser=parser)
    ours = parsers.reasoning_ended(prompt, chat_template_kwargs=kwargs)
    assert ours == vparser.is_reasoning_end(prompt)
    assert parsers.reasoning_ended(prompt, include_reasoning=False) is True
    assert ChatParsers(differ.tokenizer, tool_parser="hermes").reasoning_ended(prompt) is None


def test_reasoning_token_count(model):
    """<think>, </think> and what follows do not count; what is between does."""
    tok = ParserTokenizer.from_model(model)
    ids = model.encode("<think>one two</think>three", add_special_tokens=False)
    inner = len(model.encode("one two", add_special_tokens=False))
    for name in ("deepseek_r1", "qwen3"):
        parser = ChatParsers(tok, reasoning_parser=name).new()
        parser.parse(model.decode(ids))
        assert parser.count_reasoning_tokens(ids) == inner, name
        streamed = ChatParsers(tok, reasoning_parser=name).new()
        for i, token in enumerate(ids):
            streamed.feed(model.decode([token]), [token], finished=i == len(ids) - 1)
        assert streamed.count_reasoning_tokens(ids) == inner, name


# ---------------------------------------------------------------- Mistral [THINK]

MISTRAL = [
    Case("think-answer", "[THINK]Plan: check.[/THINK]The answer.", tools=None),
    Case("think-call", '[THINK]Plan.[/THINK][TOOL_CALLS]search[ARGS]{"query": "x"}'),
    Case("think-implicit-end", '[THINK]Plan.[TOOL_CALLS]search[ARGS]{"query": "x"}'),
    Case("no-think", 'Hello[TOOL_CALLS]search[ARGS]{"query": "x"}'),
    Case("unterminated", "[THINK]still planning", tools=None),
    Case("think-twice", "[THINK]a[/THINK]b[THINK]c[/THINK]d", tools=None),
    Case("trailing-space", "[THINK]a  \n[/THINK]  b", tools=None),
    Case("hidden", "[THINK]secret[/THINK]shown", tools=None, include_reasoning=False),
    Case("skipped-special", "[THINK]a[/THINK]b", tools=None, skip_special=True),
]
MISTRAL_STACKS = [(None, "mistral"), ("mistral", "mistral"), ("mistral", None),
                  ("hermes", "mistral")]


@pytest.fixture(scope="module")
def magistral_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model's tokenizer with Magistral's [THINK]/[/THINK] special tokens."""
    return tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("magistral"),
                         {"[THINK]": True, "[/THINK]": True})


@pytest.fixture(scope="module")
def magistral(magistral_dir):
    from vllm.tokenizers import get_tokenizer

    return Differ(load_model_info(str(magistral_dir)), get_tokenizer(str(magistral_dir)))


@pytest.mark.parametrize("tool, reasoning", MISTRAL_STACKS)
@pytest.mark.parametrize("case", MISTRAL, ids=str)
def test_mistral_think_matches_vllm(magistral, tool, reasoning, case):
    if tool is not None and case.tools is None:
        case = dataclasses.replace(case, tools=TOOLS)
    magistral.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        magistral.compare_stream(tool, reasoning, case, chunking)


@pytest.mark.parametrize("case", MISTRAL[:4], ids=str)
def test_mistral_without_think_token_matches_vllm(differ, case):
    """Without [THINK] in the vocabulary the mistral reasoning parser finds none."""
    differ.compare_whole("mistral", "mistral", case)
    for chunking in CHUNKINGS:
        differ.compare_stream("mistral", "mistral", case, chunking)


# ---------------------------------------------------------------- the <think> family
# Each parser over the common outputs and its own, under the chat template
# kwargs that switch its modes, on the tiny tokenizer with the extra marker
# tokens some of them key on.

FAMILY_TOKENS = {"<assistant>": False, "<response>": False, "</response>": False,
                 "<seed:think>": False, "</seed:think>": False, "<seed:tool_call>": False,
                 "</seed:tool_call>": False, "<|tool_calls_section_begin|>": True,
                 "<|tool_calls_section_end|>": True, "<|tool_call_begin|>": True,
                 "<|tool_call_end|>": True, "<|tool_call_argument_begin|>": True,
                 "<minimax:tool_call>": False, "</minimax:tool_call>": False,
                 "<ifm|think>": True, "</ifm|think>": True, "<ifm|think_fast>": True,
                 "</ifm|think_fast>": True, "<ifm|think_faster>": True,
                 "</ifm|think_faster>": True, "<ifm|tool_calls>": True,
                 "<mm:think>": False, "</mm:think>": False, "<|message|>": True,
                 "<|eom|>": True, "<|eot|>": True, "<|start|>": True}
FAMILY_TOKENS |= reasoning_cases_g4.TOKENS
ERNIE = [
    Case("response-block", "abc\n</think>\n\n<response>\ndef\n</response>\n", tools=None),
    Case("plain-after-end", "abc\n</think>\ndef", tools=None),
    Case("response-unclosed", "abc</think>\n<response>def", tools=None),
    Case("response-close-only", "abc</think>def</response>\n", tools=None),
    Case("response-reversed", "abc</think></response>x<response>y", tools=None),
]
POOLSIDE = [
    Case("prompt-old-end", "plan</think>Answer", tools=None, prompt_suffix="</think><assistant>"),
    Case("prompt-own-end", "Answer", tools=None, prompt_suffix="<assistant></think>"),
]
GLM = [
    Case("glm-call", "plan<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
         "</arg_value></tool_call>", tools=None),
    Case("glm-reopen", "a</think>b<think>c</think>d<tool_call>x</tool_call>", tools=None),
]
KIMI = [
    Case("kimi-section", "plan <|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
         '<|tool_call_argument_begin|>{"query": "x"}<|tool_call_end|><|tool_calls_section_end|>'
         " after", tools=None),
    Case("kimi-end-then-section", "plan\n</think>\n\nok<|tool_calls_section_begin|>x", tools=None),
]
MINIMAX = [
    Case("minimax-call", 'plan</think>\n<minimax:tool_call>\n<invoke name="search">\n'
         '<parameter name="query">x</parameter>\n</invoke>\n</minimax:tool_call>', tools=None),
    Case("minimax-implicit-end", 'plan<minimax:tool_call><invoke name="search"></invoke>'
         "</minimax:tool_call>tail", tools=None),
]
DSML = "｜DSML｜"
DEEPSEEK_V4 = [
    Case("dsml-call", f'plan</think>\n\n<{DSML}tool_calls>\n<{DSML}invoke name="search">\n'
         f'<{DSML}parameter name="query" string="true">x</{DSML}parameter>\n</{DSML}invoke>\n'
         f"</{DSML}tool_calls>tail", tools=None),
    Case("dsml-variant-implicit-end", f'plan<{DSML}toolcalls><{DSML}invoke name="x">'
         f"</{DSML}invoke></{DSML}tool_calls>", tools=None),
    Case("dsml41-implicit-end", f'plan<{DSML} calls><{DSML} invoke name="x"></{DSML} invoke>'
         f"</{DSML} calls>tail", tools=None),
    Case("reopen", "a</think>b<think>c</think>d", tools=None),
]
FORCE = {"force_nonempty_content": True}
NEMOTRON = [
    Case("newline-content", "<think>r\n</think>\n\nanswer\n", tools=None),
    Case("cut-in-reasoning", "only reasoning, cut", tools=None),
    Case("newlines-only-content", "r</think>\n\n", tools=None),
]
HORIZON = [
    Case("horizon-tags", "<ifm|think>plan it</ifm|think>the answer", tools=None),
    Case("horizon-no-start", "plan it</ifm|think>answer", tools=None),
    Case("horizon-tool", "<ifm|think>plan<ifm|tool_calls>[{}]", tools=None),
    Case("horizon-fast", "<ifm|think_fast>quick</ifm|think_fast>done", tools=None),
    Case("horizon-faster", "<ifm|think_faster>q</ifm|think_faster>d", tools=None),
    Case("horizon-partial-end", "plan </ifm|thi", tools=None),
    Case("horizon-start-text", "<ifm|thinking but not a marker", tools=None),
]
M3 = [
    Case("m3-tags", "<mm:think>plan it</mm:think>the answer", tools=None),
    Case("m3-content-around", "before <mm:think>plan</mm:think> after", tools=None),
    Case("m3-stray-end", "</mm:think>answer</mm:think>more", tools=None),
    Case("m3-no-start", "plan</mm:think>answer", tools=None),
    Case("m3-unclosed", "intro<mm:think>still", tools=None),
    Case("m3-partial", "text <mm:thi", tools=None),
    Case("m3-prompt-opened", "plan</mm:think>answer", tools=None, prompt_suffix="<mm:think>"),
]
GRANITE = [
    Case("granite-both", "Here is my thought process: plan it. Here is my response: The answer.",
         tools=None),
    Case("granite-contracted", "Here's my thought process:\nplan\nHere's my response:\nok",
         tools=None),
    Case("granite-no-response", "Here is my thought process: still thinking", tools=None),
    Case("granite-broken-start", "Here is my thoughts: not the phrase", tools=None),
    Case("granite-false-response", "Here is my thought process: Here is my plan: Here is "
         "my response: done", tools=None),
    Case("granite-plain", "Just an answer: no phrases.", tools=None),
]
MUSE = [
    Case("muse-answer", "to=self<|message|>plan it<|eom|>to=user<|message|>The answer.<|eot|>",
         tools=None),
    Case("muse-two-blocks", "to=self<|message|>a<|eom|>to=self<|message|>b<|eom|>"
         "to=user<|message|>c", tools=None),
    Case("muse-cut", "to=self<|message|>still planning to", tools=None),
    Case("muse-tool", "to=self<|message|>call it<|eom|>to=search<|message|>"
         "<atem:function_calls><atem:invoke name=\"search\">x</atem:invoke>", tools=None),
    Case("muse-no-channels", "plain text", tools=None),
    Case("muse-held-tail", "to=self<|message|>r<|eom|>to=user<|message|>the answer is t<|eo",
         tools=None),
]
APPEND = [Case("append-start", "reasoning here</think>answer", tools=None)]
THINKING = {"thinking": True}
FAMILY = {
    "deepseek_v3": ([None, THINKING, {"enable_thinking": True}, {"thinking": False}], []),
    "holo2": ([None, {"thinking": False}, {"enable_thinking": False}, THINKING], []),
    "poolside_v1": ([None, THINKING], POOLSIDE),
    "hy_v3": ([None, {"reasoning_effort": "high"}, {"reasoning_effort": "no_think"}], []),
    "ernie45": ([None], ERNIE),
    "step3": ([None], []),
    "minimax_m2_append_think": ([None], APPEND),
    "mimo": ([None, {"enable_thinking": True}], []),
    "step3p5": ([None], []),
    "glm45": ([None, {"thinking": False}, {"enable_thinking": True}], GLM),
    "glm47": ([None], GLM),
    "ling3": ([None, {"thinking": False}], GLM),
    "kimi_k2": ([None, {"thinking": False}, {"enable_thinking": False, "thinking": True}], KIMI),
    "minimax_m2": ([None], MINIMAX),
    "deepseek_v4": ([None, {"thinking": False}, {"reasoning_effort": "none"},
                     {"enable_thinking": True}], DEEPSEEK_V4),
    "nemotron_v3": ([None, OFF, FORCE], NEMOTRON),
    "granite_thinking_parser": ([None, OFF, FORCE], NEMOTRON),
    "k2_horizon": ([None, {"reasoning_effort": "medium"}, {"reasoning_effort": "low"}],
                   HORIZON),
    "minimax_m3": ([None, {"thinking_mode": "enabled"}], M3),
    "granite": ([None], GRANITE),
    "hy_v4": ([None, {"reasoning_effort": "low"}, {"reasoning_effort": "no_think"}], []),
    "muse_glimmer": ([None], MUSE),
    "deepseek_v41": ([None, {"thinking": False}], DEEPSEEK_V4),
    "kimi_k3": (reasoning_cases_g4.MODES, reasoning_cases_g4.KIMI_K3),
}
SEED = {"<think>": "<seed:think>", "</think>": "</seed:think>", "<tool_call>": "<seed:tool_call>",
        "</tool_call>": "</seed:tool_call>"}


def _seed(case: Case) -> Case:
    """The case with Seed-OSS's markers for Qwen3's."""
    def swap(text: str) -> str:
        for qwen, seed in SEED.items():
            text = text.replace(qwen, seed)
        return text
    return dataclasses.replace(case, text=swap(case.text), prompt_suffix=swap(case.prompt_suffix))


def _with_kwargs(case: Case, kwargs: dict | None) -> Case:
    if kwargs is None:
        return case
    merged = {**(case.chat_template_kwargs or {}), **kwargs}
    return dataclasses.replace(case, id=f"{case.id}-{'-'.join(map(str, kwargs.values()))}",
                               chat_template_kwargs=merged)


FAMILY_CASES = [(parser, _with_kwargs(case, kwargs))
                for parser, (modes, own) in FAMILY.items()
                for kwargs in modes for case in COMMON + own]
FAMILY_CASES += [("seed_oss", _seed(case)) for case in COMMON]


@pytest.fixture(scope="module")
def family(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("family"), FAMILY_TOKENS)
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("parser, case", FAMILY_CASES, ids=[f"{p}-{c}" for p, c in FAMILY_CASES])
def test_think_family_matches_vllm(family, parser, case):
    family.compare_whole(None, parser, case)
    for chunking in CHUNKINGS:
        family.compare_stream(None, parser, case, chunking)
    prompt = family.prompt_ids(case)
    vparser, _ = family.vllm_parser(None, parser, case)
    ours = ChatParsers(family.tokenizer, reasoning_parser=parser)
    # (granite's is vLLM's abstract method: None, read as false)
    assert ours.reasoning_ended(prompt, chat_template_kwargs=case.chat_template_kwargs) == bool(
        vparser.is_reasoning_end(prompt))


# ---------------------------------------------------------------- Olmo 3
# <think> as ordinary text: the tiny tokenizer with Olmo's "</", "think", ">"
# pieces (and without <think>/</think> as tokens of their own).

OLMO3 = [
    Case("olmo-split-end", "plan it\n</think>\nThe answer.", tools=None),
    Case("olmo-start-mid", "intro <think>plan</think> answer", tools=None),
    Case("olmo-lt", "a < b and c <th is not a tag</think>ok", tools=None),
    Case("olmo-prompt-end", "Answer.", tools=None, prompt_suffix="</think>"),
]


@pytest.fixture(scope="module")
def olmo(tiny_model_dir, tmp_path_factory):
    import json

    from vllm.tokenizers import get_tokenizer

    path = tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("olmo"),
                         {"Ġ</": False, "</": False, "think": False})
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"]
                                 if t["content"] not in ("<think>", "</think>")]
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {k: v for k, v in config["added_tokens_decoder"].items()
                                      if v["content"] not in ("<think>", "</think>")}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("case", COMMON + OLMO3, ids=str)
def test_olmo3_matches_vllm(olmo, case):
    assert "<think>" not in olmo.tokenizer.vocab  # the markers are plain text here
    olmo.compare_whole(None, "olmo3", case)
    for chunking in CHUNKINGS:
        olmo.compare_stream(None, "olmo3", case, chunking)
    prompt = olmo.prompt_ids(case)
    vparser, _ = olmo.vllm_parser(None, "olmo3", case)
    ours = ChatParsers(olmo.tokenizer, reasoning_parser="olmo3")
    assert ours.reasoning_ended(prompt) == vparser.is_reasoning_end(prompt)


# ---------------------------------------------------------------- Hunyuan-A13B
# Its stream matches the markers by Hunyuan's own token ids, one token a step:
# scripted (text, id) steps, the same for vLLM's parser and ours.

HUNYUAN_THINK = [(14023, "<"), (771, "think"), (397, ">\n")]
HUNYUAN_ANSWER = [(198, "\n"), (524, "</"), (27963, "think"), (397, ">\n"), (27, "<"),
                  (9399, "answer"), (397, ">\n")]
HUNYUAN_END = [(198, "\n"), (524, "</"), (9399, "answer"), (29, ">")]
HUNYUAN = {
    "full": HUNYUAN_THINK + [(50, "plan"), (51, " it")] + HUNYUAN_ANSWER
    + [(52, "The answer.")] + HUNYUAN_END,
    "fast-start": [(14023, "<"), (771, "think"), (1363, ">\n\n")] + HUNYUAN_ANSWER[1:]
    + [(52, "ok")],
    "broken-marker": HUNYUAN_THINK + [(50, "a"), (198, "\n"), (524, "</"), (53, "b")]
    + HUNYUAN_ANSWER + [(52, "c"), (198, "\n"), (54, "d")],
    "cut": HUNYUAN_THINK + [(50, "still")],
    "no-think": [(52, "plain"), (53, " answer")],
    "again": HUNYUAN_THINK + [(50, "r")] + HUNYUAN_ANSWER + [(52, "c")] + HUNYUAN_END
    + HUNYUAN_THINK + [(50, "r2")],
}


@pytest.mark.parametrize("script", sorted(HUNYUAN))
@pytest.mark.parametrize("include_reasoning", [True, False])
def test_hunyuan_a13b_matches_vllm(family, script, include_reasoning):
    steps = [(text, [token]) for token, text in HUNYUAN[script]]
    case = Case(script, "".join(text for text, _ in steps), tools=None,
                include_reasoning=include_reasoning)
    vparser, request = family.vllm_parser(None, "hunyuan_a13b", case)
    ours = family.our_parser(None, "hunyuan_a13b", case)
    v_reasoning, v_content, _ = vparser.parse(case.text, request)
    parsed = ours.parse(case.text)
    assert (parsed.reasoning, parsed.content) == (
        v_reasoning if include_reasoning else None, v_content)
    vparser, request = family.vllm_parser(None, "hunyuan_a13b", case)
    ours = family.our_parser(None, "hunyuan_a13b", case)
    prompt = family.prompt_ids(case)
    for k, (text, ids) in enumerate(steps):
        last = k == len(steps) - 1
        expected = vparser.parse_delta(text, ids, request, prompt, finished=last)
        actual = ours.feed(text, ids, finished=last)
        assert (None if actual is None else actual.to_dict()) == (
            None if expected is None else expected.model_dump(exclude_unset=True)), (k, text)


# ---------------------------------------------------------------- suffixed markers
# hy_v3 reads its markers' suffix from the tokenizer config (token_suffix).

HY_SUFFIXED = [Case(c.id, c.text.replace("think>", "think:hy>"), tools=None,
                    prompt_suffix=c.prompt_suffix.replace("think>", "think:hy>"),
                    chat_template_kwargs={**(c.chat_template_kwargs or {}),
                                          "reasoning_effort": "high"})
               for c in COMMON]


@pytest.fixture(scope="module")
def hy_suffixed(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("hy"),
                         {"<think:hy>": False, "</think:hy>": False}, {"token_suffix": ":hy"})
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("case", HY_SUFFIXED, ids=str)
def test_hy_v3_suffixed_markers_match_vllm(hy_suffixed, case):
    assert hy_suffixed.vtok.init_kwargs.get("token_suffix") == ":hy"
    hy_suffixed.compare_whole(None, "hy_v3", case)
    for chunking in CHUNKINGS:
        hy_suffixed.compare_stream(None, "hy_v3", case, chunking)


# The reasoning parsers compared with vLLM's here only, not in the end-to-end
# runs of test_parsers_e2e.py (most need marker tokens the tiny model lacks).
IN_PROCESS_ONLY = {*FAMILY, "seed_oss", "olmo3", "hunyuan_a13b", "hf", "cohere_command3",
                   "cohere_command4"}
IN_PROCESS_ONLY |= reasoning_cases_g3.PARSERS
IN_PROCESS_ONLY |= {reasoning for _, reasoning in tool_cases_g1.PAIR_CASES}


@pytest.mark.parametrize("kwargs", [{"add_generation_prompt": True}, {"thinking": False}, {}])
def test_holo2_sets_thinking_in_the_kwargs_as_vllm(family, kwargs):
    """vLLM's holo2 writes thinking/enable_thinking into the request's chat
    template kwargs (what the engine then gets as reasoning_parser_kwargs)."""
    theirs, ours = dict(kwargs), dict(kwargs)
    case = Case("kwargs", "", tools=None, chat_template_kwargs=theirs)
    family.vllm_parser(None, "holo2", case)
    ChatParsers(family.tokenizer, reasoning_parser="holo2").new(chat_template_kwargs=ours)
    assert ours == theirs


# ---------------------------------------------------------------- Gemma 4, Inkling, PLaMo 3, MiniCPM-V
# Special-token families, alone and with their own tool parser, on the marker
# tokenizer (tests/support/marker_model.py): the same ids for vLLM and us.
# PLaMo 3's markers are several tokens each there, as in its own tokenizer.

MARKER_PAIRS = [(tool, reasoning, case)
                for (tool, reasoning), cases in tool_cases_g1.PAIR_CASES.items()
                for case in cases] + list(reasoning_cases_g3.CASES)


@pytest.fixture(scope="module")
def markers(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("tool, reasoning, case", MARKER_PAIRS,
                         ids=[f"{t}-{r}-{c}" for t, r, c in MARKER_PAIRS])
def test_special_token_families_match_vllm(markers, tool, reasoning, case):
    markers.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        markers.compare_stream(tool, reasoning, case, chunking)
    prompt = markers.prompt_ids(case)
    vparser, _ = markers.vllm_parser(tool, reasoning, case)
    ours = ChatParsers(markers.tokenizer, reasoning_parser=reasoning)
    assert ours.reasoning_ended(prompt, chat_template_kwargs=case.chat_template_kwargs) == bool(
        vparser.is_reasoning_end(prompt))


ESCAPES = ["a\\nb\\r\\nc\\rd", "`x\\ny`\\n```\\n```\\n", "$a\\nb$ $$\\n$$\\n", "\\\\n \\\\\\n",
           "\\(x\\n\\) \\[y\\n\\]\\n", "end\\", "end\\r", "end\\r\\", "``", "$", "\\t\\n"]


@pytest.mark.parametrize("text", ESCAPES)
def test_escaped_newlines_split_anywhere_match_vllm(text):
    """MiniCPM-V's newline recovery, the text in two pieces at every point."""
    from vllm.parser.minicpmv import EscapedNewlineNormalizer as Theirs

    from frontend.parsers.escaped_newlines import EscapedNewlineNormalizer as Ours

    for cut in range(len(text) + 1):
        pieces = []
        for normalizer in (Theirs(), Ours()):
            pieces.append([normalizer.feed(text[:cut]), normalizer.feed(text[cut:], final=True)])
        assert pieces[0] == pieces[1], (text, cut)


@pytest.mark.parametrize("kwargs", [None, tool_cases_g1.THINKING])
@pytest.mark.parametrize("tool", [None, "gemma4"])
@pytest.mark.parametrize("first", ["thought", "thought\n", "thought\nplan"])
def test_gemma4_output_opening_with_thought_matches_vllm(markers, tool, first, kwargs):
    """A first step of just ``thought`` (one token in Gemma's vocabulary) or
    ``thought\\n...`` opens the channel the prompt left implied."""
    texts = [first, "\n" if first == "thought" else "", "plan", "<channel|>", "The answer."]
    steps = [(text, markers.model.encode(text, add_special_tokens=False))
             for text in texts if text]
    case = Case("thought-step", "".join(texts), tools=None if tool is None else TOOLS,
                chat_template_kwargs=kwargs)
    vparser, request = markers.vllm_parser(tool, "gemma4", case)
    ours = markers.our_parser(tool, "gemma4", case)
    prompt = markers.prompt_ids(case)
    for k, (text, ids) in enumerate(steps):
        last = k == len(steps) - 1
        expected = vparser.parse_delta(text, ids, request, prompt, finished=last)
        actual = ours.feed(text, ids, finished=last)
        assert (None if actual is None else actual.to_dict()) == (
            None if expected is None else expected.model_dump(exclude_unset=True)), (k, text)


@pytest.fixture(scope="module")
def gemma_named(tiny_model_dir, tmp_path_factory):
    """Gemma's markers as the tokenizer's extra special tokens: the ones the
    grammar does not name (``<|turn>``) are dropped, ``<|"|>`` is kept."""
    from vllm.tokenizers import get_tokenizer

    markers = [text for text, _ in tool_cases_g1.MARKERS if "content" not in text
               and "message" not in text]
    path = tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("gemma"),
                         dict.fromkeys(markers, True), {"extra_special_tokens": markers})
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


GEMMA_NAMED = [(tool, case) for tool in (None, "gemma4")
               for case in tool_cases_g1.GEMMA4_REASONING + tool_cases_g1.GEMMA4]


@pytest.mark.parametrize("tool, case", GEMMA_NAMED, ids=[f"{t}-{c}" for t, c in GEMMA_NAMED])
def test_gemma4_with_named_special_tokens_matches_vllm(gemma_named, tool, case):
    assert '<|"|>' in gemma_named.tokenizer.special_tokens
    gemma_named.compare_whole(tool, "gemma4", case)
    for chunking in CHUNKINGS:
        gemma_named.compare_stream(tool, "gemma4", case, chunking)


# ---------------------------------------------------------------- hf (response_template)
# The marker tokenizer carries tool_cases_g6's response_template (Qwen3's format).


@pytest.fixture(scope="module")
def templated(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("templated"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


HF_CASES = [(None, "hf", case) for case in COMMON] + [
    ("hf", "hf", case) for case in tool_cases_g6.PAIR]


@pytest.mark.parametrize("tool, reasoning, case", HF_CASES,
                         ids=[f"{t or '-'}+{r}-{c}" for t, r, c in HF_CASES])
def test_hf_matches_vllm(templated, tool, reasoning, case):
    templated.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        templated.compare_stream(tool, reasoning, case, chunking)


@pytest.fixture(scope="module")
def xml_templated(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    config = {"response_template": tool_cases_g6.XML_TEMPLATE}
    path = tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("xml"), {}, config)
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


XML_CASES = [(tool, reasoning, case) for tool, reasoning in [("hf", "hf"), ("hf", None)]
             for case in tool_cases_g6.XML_PAIR]


@pytest.mark.parametrize("tool, reasoning, case", XML_CASES,
                         ids=[f"{t}+{r or '-'}-{c}" for t, r, c in XML_CASES])
def test_hf_xml_template_matches_vllm(xml_templated, tool, reasoning, case):
    xml_templated.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        xml_templated.compare_stream(tool, reasoning, case, chunking)
    if case.id == "one-call":
        calls = xml_templated.our_parser(tool, reasoning, case).parse(case.text).tool_calls
        assert [(c.name, c.arguments) for c in calls] == [
            ("get_weather", '{"city": "Paris", "days": 3, "metric": true}')]


def test_hf_cases_are_not_vacuous(templated):
    case = next(c for c in tool_cases_g6.PAIR if c.id == "reasoning-then-call")
    parsed = templated.our_parser("hf", "hf", case).parse(case.text)
    assert parsed.reasoning == "Weather tool."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("get_weather", '{"city": "Paris", "days": 3}')]


@pytest.mark.parametrize("suffix, kwargs", [("", None), ("<think>\n", None), (CLOSED, None),
                                            (CLOSED, OFF), ("", OFF), ("<think>", None)])
def test_hf_prompt_reasoning_end_matches_vllm(templated, suffix, kwargs):
    case = Case("prompt", "", tools=None, prompt_suffix=suffix, chat_template_kwargs=kwargs)
    prompt = templated.prompt_ids(case)
    vparser, _ = templated.vllm_parser(None, "hf", case)
    parsers = ChatParsers(templated.tokenizer, reasoning_parser="hf")
    assert parsers.reasoning_ended(prompt, chat_template_kwargs=kwargs) == (
        vparser.is_reasoning_end(prompt))


@pytest.mark.parametrize("tool, reasoning", [("hf", None), (None, "hf"), ("hf", "hf")])
def test_hf_needs_a_response_template_as_vllm(differ, templated, tool, reasoning):
    """The tiny tokenizer has none: both refuse to start, with one message."""
    from vllm.parser import ParserManager

    with pytest.raises(TypeError) as theirs:
        ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                 enable_auto_tools=True, tokenizer=differ.vtok)
    with pytest.raises(ValueError) as ours:
        ChatParsers(differ.tokenizer, tool_parser=tool, reasoning_parser=reasoning)
    assert str(ours.value) == str(theirs.value)
    ChatParsers(templated.tokenizer, tool_parser=tool, reasoning_parser=reasoning)


@pytest.mark.parametrize("tool, reasoning", [("hf", "qwen3"), ("hermes", "hf")])
def test_hf_pairs_only_with_itself_as_vllm(templated, tool, reasoning):
    from vllm.parser import ParserManager

    with pytest.raises(TypeError) as theirs:
        ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                 enable_auto_tools=True, tokenizer=templated.vtok)
    with pytest.raises(ValueError) as ours:
        ChatParsers(templated.tokenizer, tool_parser=tool, reasoning_parser=reasoning)
    assert str(ours.value) == str(theirs.value)


# ---------------------------------------------------------------- cohere_command3/4 (melody)
# The marker tokenizer carries Command A's special tokens (tool_cases_g6.COHERE_TOKENS).
COHERE_CASES = [(tool, reasoning, case)
                for tool, reasoning in [(None, "cohere_command3"), (None, "cohere_command4"),
                                        ("cohere_command4", "cohere_command4"),
                                        ("cohere_command3", "cohere_command3")]
                for case in tool_cases_g6.COHERE]


@pytest.mark.parametrize("tool, reasoning, case", COHERE_CASES,
                         ids=[f"{t or '-'}+{r}-{c}" for t, r, c in COHERE_CASES])
def test_cohere_matches_vllm(templated, tool, reasoning, case):
    templated.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        templated.compare_stream(tool, reasoning, case, chunking)


def test_cohere_cases_are_not_vacuous(templated):
    case = next(c for c in tool_cases_g6.COHERE if c.id == "one-call")
    parsed = templated.our_parser("cohere_command4", "cohere_command4", case).parse(case.text)
    assert parsed.reasoning == "I will call."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("get_weather", '{"city": "Paris", "days": 3}')]
    ids = templated.output_ids(case)
    assert templated.our_parser(None, "cohere_command4", case).count_reasoning_tokens(ids) > 0


@pytest.mark.parametrize("parser", ["cohere_command3", "cohere_command4"])
@pytest.mark.parametrize("suffix", ["", "<|START_THINKING|>", "<|START_THINKING|>x<|END_THINKING|>",
                                    "<|START_THINKING|>x<|END_THINKING|><|CHATBOT_TOKEN|>",
                                    "<|END_THINKING|>"])
def test_cohere_prompt_reasoning_end_matches_vllm(templated, parser, suffix):
    case = Case("prompt", "", tools=None, prompt_suffix=suffix)
    prompt = templated.prompt_ids(case)
    vparser, _ = templated.vllm_parser(None, parser, case)
    assert ChatParsers(templated.tokenizer, reasoning_parser=parser).reasoning_ended(prompt) == (
        vparser.is_reasoning_end(prompt))
