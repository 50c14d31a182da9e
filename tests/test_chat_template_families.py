"""Every tool-call family's published chat template, rendered by us and by vLLM 0.32.

The templates are the models' published ones, kept verbatim under
``tests/data/chat_templates/`` (README.md there names each file's source).
Each is given as the server's chat template (``--chat-template FILE``) to
both sides, with the tiny test model's tokenizer, and the same request goes
through our chat preparation (``frontend.openai.chat.prepare``: message
parsing, the template's kwargs, tools as the request gives them) and through
vLLM's (its ``ChatCompletionRequest``, the tools as its chat serving dumps
them, ``build_chat_params``, ``parse_chat_messages`` with its tool-call
argument parsing, ``safe_apply_chat_template``, the prompt tokenized without
special tokens).  The prompt text and its token ids must be identical; where
vLLM's render fails, ours must fail with the same HTTP-visible error (a 400
with the template's message).

The conversations: a tool round trip (system, tools, user, an assistant tool
call with JSON-string arguments as OpenAI clients send them, the tool's
result, another user turn, a generation prompt), the same with the
assistant's answer to the tool result before the next user turn, the same
with the call turn's reasoning and a ``reasoning_effort``, the same with the
templates' thinking switches off (``chat_template_kwargs``), the same with
contents as content-part arrays, and a plain conversation with no tools.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from frontend.errors import ApiError
from frontend.model import load_model_info
from frontend.openai.chat import prepare
from frontend.openai.chat_request import ChatCompletionRequest
from frontend.parsers import ChatParsers, ParserTokenizer
from harness.state import make_state
from tests.support.parser_diff import TOOLS
from tests.support.requirements import require_vllm

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"

# family -> the vLLM 0.32 tool-call parser(s) its template's output is parsed by
FAMILIES = {
    "hermes": "hermes (Qwen2.5/Qwen3, Hermes 2/3)",
    "qwen3": "hermes (Qwen3's own template)",
    "qwen3_coder": "qwen3_coder, qwen3_xml",
    "llama3_json": "llama3_json",
    "llama33": "llama3_json (Llama 3.3's own template)",
    "llama4_pythonic": "llama4_pythonic",
    "llama4_json": "llama4_json",
    "pythonic_gemma3": "pythonic",
    "mistral": "mistral",
    "mistral_small31": "mistral (Mistral Small 3.1's own template)",
    "deepseek_v3": "deepseek_v3",
    "deepseek_v31": "deepseek_v31",
    "deepseek_v31_published": "deepseek_v31 (DeepSeek-V3.1's own template)",
    "granite": "granite",
    "granite_20b_fc": "granite-20b-fc",
    "internlm": "internlm",
    "xlam": "xlam",
    "phi4_mini_json": "phi4_mini_json",
    "hunyuan_a13b": "hunyuan_a13b",
    "olmo3": "olmo3",
    "minimax": "minimax (MiniMax-M1)",
    "cohere_command": "cohere_command3 (Command R7B)",
    "gemma4": "gemma4 (Gemma 4)",
    "glm45": "glm45 (GLM-4.5/4.6)",
    "kimi_k2": "kimi_k2 (Kimi K2)",
    "kimi_k2_thinking": "kimi_k2 (Kimi K2 Thinking)",
    "seed_oss": "seed_oss (Seed-OSS)",
    "muse_glimmer": "muse_glimmer",
    "hy_v3": "hy_v3 (Tencent Hy3)",
    "minimax_m2": "minimax_m2 (MiniMax-M2)",
    "lfm2": "lfm2 (LFM2.5)",
    "apertus": "apertus",
    "gigachat3": "gigachat3 (GigaChat 3)",
}

CALL_ID = "call_7f3a9c2e1b"
ARGUMENTS = json.dumps({"city": "Paris", "days": 2, "metric": True,
                        "options": {"detail": 0.5}})
SYSTEM = {"role": "system", "content": "You are a weather assistant."}
ASK = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": CALL_ID, "type": "function",
     "function": {"name": "get_weather", "arguments": ARGUMENTS}}]}
RESULT = {"role": "tool", "tool_call_id": CALL_ID, "content": '{"temperature": 21, "sky": "clear"}'}
ANSWER = {"role": "assistant", "content": "It is 21 degrees and clear in Paris."}
THOUGHT_CALL = {**CALL, "reasoning": "The user wants Paris; call get_weather."}


def parts(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with its text content as a one-part content array."""
    return {**message, "content": [{"type": "text", "text": message["content"]}]}


AGAIN = {"role": "user", "content": "And in Lyon?"}

CONVERSATIONS: dict[str, dict[str, Any]] = {
    "tool_round_trip": {"messages": [SYSTEM, ASK, CALL, RESULT, AGAIN], "tools": TOOLS},
    "tool_round_trip_answered": {"messages": [SYSTEM, ASK, CALL, RESULT, ANSWER, AGAIN],
                                 "tools": TOOLS},
    # reasoning on the call turn (interleaved thinking); reasoning_effort
    # also turns on enable_thinking for the template
    "tool_round_trip_reasoning": {"messages": [SYSTEM, ASK, THOUGHT_CALL, RESULT, AGAIN],
                                  "tools": TOOLS, "reasoning_effort": "low"},
    # the template's own switches, as clients pass them
    "tool_round_trip_no_thinking": {"messages": [SYSTEM, ASK, CALL, RESULT, ANSWER, AGAIN],
                                    "tools": TOOLS,
                                    "chat_template_kwargs": {"enable_thinking": False,
                                                             "thinking_budget": 0}},
    # content as OpenAI content-part arrays (as agent clients send tool results)
    "tool_round_trip_parts": {"messages": [SYSTEM, parts(ASK), CALL, parts(RESULT),
                                           parts(ANSWER), parts(AGAIN)], "tools": TOOLS},
    "plain": {"messages": [SYSTEM, {"role": "user", "content": "Hello!"},
                           {"role": "assistant", "content": "Hi, how can I help?"},
                           {"role": "user", "content": "Tell me a joke."}]},
}

# Templates that print the current time (strftime_now): the two renders can
# fall on either side of a second; rendered again until they agree on it.
CLOCK = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


def body(conversation: str) -> dict[str, Any]:
    return {"model": "tiny", "add_generation_prompt": True,
            **json.loads(json.dumps(CONVERSATIONS[conversation]))}


@pytest.fixture(scope="module")
def vllm_side(tiny_model_dir):
    """vLLM's model config and tokenizer for the tiny model, as its server loads them."""
    require_vllm()
    from vllm.config import ModelConfig
    from vllm.tokenizers import get_tokenizer

    config = ModelConfig(model=str(tiny_model_dir), tokenizer=str(tiny_model_dir))
    return config, get_tokenizer(str(tiny_model_dir))


def vllm_render(vllm_side: tuple, template: str, request: dict[str, Any]) -> tuple:
    """("ok", prompt text, token ids) or ("error", status, message), as vLLM's
    chat serving renders ``request`` with ``--chat-template`` = ``template``."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionRequest as VllmRequest,
    )
    from vllm.exceptions import VLLMValidationError
    from vllm.renderers.chat_utils import parse_chat_messages
    from vllm.renderers.hf import resolve_chat_template_content_format, safe_apply_chat_template

    config, tokenizer = vllm_side
    req = VllmRequest(**request)
    # OnlineRenderer.render_chat: the tools as dumped; preprocess_chat: tokenize=False
    tools = None if req.tools is None else [tool.model_dump() for tool in req.tools]
    params = req.build_chat_params(template, "auto").with_defaults(
        {"tools": tools, "tokenize": False})
    try:
        content_format = resolve_chat_template_content_format(
            chat_template=params.chat_template,
            tools=params.chat_template_kwargs.get("tools"),
            given_format=params.chat_template_content_format,
            tokenizer=tokenizer, model_config=config)
        conversation, _, _ = parse_chat_messages(req.messages, config,
                                                 content_format=content_format)
        text = safe_apply_chat_template(config, tokenizer, conversation,
                                        **params.get_apply_chat_template_kwargs())
    except VLLMValidationError as e:  # the server's 400 with this message
        return ("error", 400, str(e))
    return ("ok", text, tokenizer.encode(text, add_special_tokens=False))


def our_render(model, request: dict[str, Any]) -> tuple:
    """("ok", prompt text, token ids) or ("error", status, message) from our
    chat route's preparation."""
    state = make_state(model, max_model_len=32768)  # Cohere's long preamble, tiny tokens
    # --enable-auto-tool-choice: "auto" needs a tool parser; which one does not
    # change the prompt (hermes: its markers are in the tiny tokenizer).
    state.parsers = ChatParsers(ParserTokenizer.from_model(model), tool_parser="hermes")
    state.config = dataclasses.replace(state.config, server_chat_template=True)  # --chat-template
    req = msgspec.json.decode(json.dumps(request).encode(), type=ChatCompletionRequest,
                              strict=False)
    try:
        prepared = asyncio.run(prepare(state, req, engine_checks=False))
    except ApiError as e:
        return ("error", e.status, e.message)
    return ("ok", prepared.rendered.text, prepared.rendered.token_ids)


@pytest.fixture(scope="module")
def models(tiny_model_dir):
    """family -> our model info with the family's template as --chat-template."""
    return {family: load_model_info(str(tiny_model_dir), served_names=["tiny"],
                                    chat_template_path=str(TEMPLATES / f"{family}.jinja"))
            for family in FAMILIES}


def test_every_family_has_its_template_and_source():
    files = {p.stem for p in TEMPLATES.glob("*.jinja")}
    assert files == set(FAMILIES)
    readme = (TEMPLATES / "README.md").read_text(encoding="utf-8")
    for family in FAMILIES:
        assert f"`{family}.jinja`" in readme, family


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_family_template_renders_as_vllm(family, conversation, models, vllm_side):
    from vllm.renderers.chat_utils import load_chat_template

    template = load_chat_template(str(TEMPLATES / f"{family}.jinja"))  # as --chat-template
    request = body(conversation)
    for _ in range(3):
        theirs = vllm_render(vllm_side, template, request)
        ours = our_render(models[family], request)
        if ours == theirs or theirs[0] != "ok" or not CLOCK.search(theirs[1]):
            break
    if theirs[0] == "error":
        assert ours[0] == "error", f"vLLM refused it ({theirs}); we rendered {ours[1]!r}"
        assert ours[1:] == theirs[1:]
        return
    assert ours[0] == "ok", f"we refused it ({ours}); vLLM rendered {theirs[1]!r}"
    assert ours[1] == theirs[1]
    assert ours[2] == theirs[2]
