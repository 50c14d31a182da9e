"""POST /v1/chat/completions (and the chat form of /tokenize) through our frontend.

Three layers:

* chat-template rendering in process (``frontend.chat_template``): output equal
  to transformers' ``apply_chat_template`` on a set of templates, Hugging Face's
  Jinja environment (sandbox, ``tojson``, ``raise_exception``, ...), vLLM's
  message parsing;
* the route against the session's real vLLM engine (``real``) and a mock engine
  (``mock``, fast): the ``openai`` client, the SSE chunk sequence, n, logprobs,
  stop strings, multi-turn prompts, errors, client disconnects. After every test
  nothing may be left in flight (table empty, engine idle);
* mock-only fault injection (an engine ERROR mid-stream) and a frontend whose
  model has no chat template.

The tiny model's chat template is ChatML with a BOS prefix; its tokens often
split UTF-8 characters, so "" deltas and U+FFFD are normal.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from frontend import chat_template as ct
from harness.frontend import launch_mock_stack
from harness.waits import wait_for
from tests.support.http_client import MODEL, RawRequest, Stream, client, post, stream
from tests.support.requirements import require_module
from tests.support.stacks import MOCK_STEP_TIME

MAX_MODEL_LEN = 1024
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
HI = [{"role": "user", "content": "Hi there"}]
MULTI_TURN = [SYSTEM, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello! How can I help?"},
              {"role": "user", "content": "Tell me a joke"}]
RESPONSE_KEYS = {"id", "object", "created", "model", "choices", "service_tier",
                 "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids",
                 "prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics"}
CHOICE_KEYS = {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "routed_experts"}
MESSAGE = {"refusal": None, "annotations": None, "audio": None, "function_call": None,
           "reasoning": None}
TINY_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] not in ['system', "
    "'user', 'assistant'] %}{{ raise_exception('Unsupported role: ' + message['role'] + "
    "'. Only system, user and assistant are allowed.') }}{% endif %}{{ '<|im_start|>' + "
    "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


# ================================================================ rendering (in process)

# Templates in the styles real models use: string content, content loops
# ("openai" format), macros, namespaces, loop controls, tojson, generation tags.
TEMPLATES = {
    "tiny-chatml": TINY_TEMPLATE,
    "content-loop": (
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{% for p in m['content'] %}"
        "{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}</{{ m.role }}>\n"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"),
    "macro-content": (
        "{% macro render(content) %}{% for c in content %}[{{ c.text }}]{% endfor %}"
        "{% endmacro %}{% for message in messages %}{{ message.role }}:"
        "{{ render(message.content) }}\n{% endfor %}"),
    "tojson": (
        "{% for m in messages %}{{ m | tojson }}\n{{ m | tojson(indent=2) }}\n{% endfor %}"
        "{{ extra | default('none') }}{% if add_generation_prompt %}GEN{% endif %}"),
    "trim-loopcontrols": (
        "{%- for message in messages %}\n  {%- if loop.index > 3 %}{% break %}{% endif %}\n"
        "  {{- message['role'] }}: {{ message['content'] | trim }}\n{%- endfor %}\n"
        "{%- if add_generation_prompt %}\nassistant:{% endif %}"),
    "namespace-system": (
        "{% set ns = namespace(sys='') %}{% for message in messages %}{% if message.role == "
        "'system' %}{% set ns.sys = message.content %}{% endif %}{% endfor %}[{{ ns.sys }}]"
        "{% for message in messages %}{% if message.role != 'system' %}{{ message.role }}="
        "{{ message.content }};{% endif %}{% endfor %}{{ eos_token }}"),
    "generation-tag": (
        "{% for message in messages %}{% if message.role == 'assistant' %}{% generation %}"
        "{{ message.content }}{% endgeneration %}{% else %}{{ message.content }}{% endif %}"
        "|{% endfor %}"),
    "llama3-like": (
        "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system_message = "
        "messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set "
        "system_message = '' %}{%- endif %}{{- '<|start_header_id|>system<|end_header_id|>"
        "\\n\\n' }}{{- system_message }}{{- '<|eot_id|>' }}{%- for message in messages %}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
        "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if "
        "add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' "
        "}}{%- endif %}"),
}
CONVERSATIONS = {
    "one-user": HI,
    "system-user": [SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
    "multi-turn": MULTI_TURN,
    "text-parts": [{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                {"type": "text", "text": "world"}]}],
    "prefill": [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Once upon a time  "}],
    "unicode": [{"role": "user", "content": "héllo 你好 — \"quotes\" <b>&amp;</b>"}],
}


def _hf_tokenizer():
    transformers = require_module("transformers", "it comes with vLLM")
    vocab = __import__("tokenizers").Tokenizer.from_str(
        '{"version":"1.0","model":{"type":"WordLevel","vocab":{"<unk>":0},"unk_token":"<unk>"}}')
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=vocab, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>")


@pytest.mark.parametrize("template_id", TEMPLATES)
def test_rendering_equals_transformers(template_id):
    """Same text as transformers' apply_chat_template (what vLLM calls), for every
    conversation, with and without the generation prompt, and continuing the final
    message where the template allows it."""
    tok = _hf_tokenizer()
    source = TEMPLATES[template_id]
    template = ct.ChatTemplate(source, SPECIAL)
    for conv_id, messages in CONVERSATIONS.items():
        conversation = template.parse_messages(messages, "tiny")
        for agp, cfm, kwargs in [(True, False, {}), (False, False, {"extra": "X"}),
                                 (False, True, {})]:
            try:
                ours = template.render(conversation, add_generation_prompt=agp,
                                       continue_final_message=cfm, kwargs=kwargs)
            except ct.ChatTemplateError as e:
                ours = f"error: {e.message[:60]}"
            try:
                theirs = tok.apply_chat_template(
                    json.loads(json.dumps(conversation)), chat_template=source,
                    tokenize=False, add_generation_prompt=agp, continue_final_message=cfm,
                    **kwargs)
            except Exception as e:
                theirs = f"error: {str(e)[:60]}"
            assert ours == theirs, (template_id, conv_id, agp, cfm)


@pytest.mark.parametrize("template_id, expected", [
    ("tiny-chatml", "string"), ("content-loop", "openai"), ("macro-content", "openai"),
    ("tojson", "string"), ("namespace-system", "string"), ("llama3-like", "string"),
])
def test_content_format_detection(template_id, expected):
    """vLLM's AST rule: a loop over a message's content means "openai" parts."""
    template = ct.ChatTemplate(TEMPLATES[template_id], SPECIAL)
    assert template.content_format == expected
    parts = CONVERSATIONS["text-parts"]
    content = template.parse_messages(parts, "tiny")[0]["content"]
    if expected == "string":
        assert content == "Hello\nworld"  # text parts joined like vLLM does
    else:
        assert content == [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]


def render(source: str, messages: list | None = None, **kw: Any) -> str:
    template = ct.ChatTemplate(source, SPECIAL)
    return template.render(template.parse_messages(HI if messages is None else messages, "tiny"),
                           **kw)


def test_hugging_face_environment():
    # tojson: no HTML escaping, no ASCII escaping, keys in order, indent supported
    assert render("{{ {'b': '<&>', 'a': 'é'} | tojson }}") == '{"b": "<&>", "a": "é"}'
    assert render("{{ [1] | tojson(indent=2) }}") == "[\n  1\n]"
    # trim_blocks / lstrip_blocks
    assert render("  {% if true %}\nx\n  {% endif %}\ny") == "x\ny"
    assert len(render("{{ strftime_now('%Y-%m-%d') }}")) == 10
    with pytest.raises(ct.ChatTemplateError, match="^no system role$"):
        render("{{ raise_exception('no system role') }}")
    # undefined attribute access, syntax errors, sandbox escapes: all 400s
    with pytest.raises(ct.ChatTemplateError, match="undefined"):
        render("{{ nothing.here }}")
    with pytest.raises(ct.ChatTemplateError):
        render("{% for x in %}")
    with pytest.raises(ct.ChatTemplateError, match="unsafe|access"):
        render("{{ ''.__class__.__mro__ }}")
    with pytest.raises(ct.ChatTemplateError, match="immutable|unsafe|not safely"):
        render("{{ messages.append(1) }}")
    # special tokens and chat_template_kwargs (which win over them)
    assert render("{{ bos_token }}|{{ eos_token }}|{{ flag }}", kwargs={"flag": 1}) \
        == "<s>|</s>|1"
    assert render("{{ bos_token }}", kwargs={"bos_token": "B"}) == "B"


def test_continue_final_message_and_generation_prompt():
    prefill = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Once"}]
    text = render(TINY_TEMPLATE, prefill, add_generation_prompt=False,
                  continue_final_message=True)
    assert text.endswith("<|im_start|>assistant\nOnce")  # no <|im_end|>: continue it
    with pytest.raises(ct.ChatTemplateError, match="not compatible"):
        render(TINY_TEMPLATE, prefill, add_generation_prompt=True, continue_final_message=True)
    with pytest.raises(ct.ChatTemplateError, match="empty conversation"):
        render(TINY_TEMPLATE, [])
    assert render(TINY_TEMPLATE, add_generation_prompt=False).endswith("<|im_end|>\n")


def test_special_tokens_map():
    config = {"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>",
              "image_token": "<img>", "add_bos_token": True, "mask_token": None,
              "extra_special_tokens": {"audio_token": "<aud>"}}
    assert ct.special_tokens_map(config, {"unk_token": "<unk>", "eos_token": "X"}) == {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "image_token": "<img>", "audio_token": "<aud>"}


def test_message_parsing_like_vllm():
    template = ct.ChatTemplate("{{ messages | tojson }}", SPECIAL)
    conv = template.parse_messages([
        {"role": "system", "content": [{"type": "text",
                                        "text": "x-anthropic-billing-header: cch=1\nBe brief"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, "b",
                                     {"type": "text", "text": None}], "name": "bob"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function",
             "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "1"},
    ], "tiny")
    assert conv == [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": "a\nb", "name": "bob"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "42", "tool_call_id": "1"},
    ]
    # developer messages become system ones for templates without that role
    out = template.render(template.parse_messages(
        [{"role": "system", "content": "s"}, {"role": "developer", "content": "d"},
         {"role": "user", "content": "u"}], "tiny"))
    assert json.loads(out) == [{"role": "system", "content": "s\n\nd"},
                               {"role": "user", "content": "u"}]
    for part in ({"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                 {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
                 {"image_url": {"url": "http://x/y.png"}}):
        with pytest.raises(ct.ChatTemplateError, match="not a multimodal model"):
            template.parse_messages([{"role": "user", "content": [part]}], "tiny")
    with pytest.raises(ct.ChatTemplateError, match="Unsupported chat content part type"):
        template.parse_messages([{"role": "user", "content": [{"type": "x"}]}], "tiny")


def test_no_template_and_override(tiny_model_dir, tmp_path):
    from frontend.model import load_model_info

    tok_dir = tokenizer_without_template(tiny_model_dir, tmp_path / "tok")
    model = load_model_info(str(tiny_model_dir), tokenizer_dir=str(tok_dir))
    # No template: the chat route answers 400 with this message (see
    # test_model_without_template_says_how_to_fix).
    assert ct.build(model) is None
    assert "--chat-template" in ct.NO_TEMPLATE_MESSAGE
    custom = tmp_path / "custom.jinja"
    custom.write_text("{% for m in messages %}{{ m.role }}> {{ m.content }}\n{% endfor %}")
    model = load_model_info(str(tiny_model_dir), tokenizer_dir=str(tok_dir),
                            chat_template_path=str(custom))
    template = ct.build(model)
    assert template.render(template.parse_messages(HI, "tiny")) == "user> Hi there\n"


def tokenizer_without_template(model_dir: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    target.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "special_tokens_map.json"):
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, target / name)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    return target


# ================================================================ the route
# (the ``stack`` and ``real`` fixtures: tests/support/stacks.py)

def chat(url: str, body: dict, status: int = 200) -> dict:
    reply = post(url, "/v1/chat/completions", {"model": MODEL, **body})
    assert reply.status == status, (reply.status, reply.body[:2000])
    return reply.json if status == 200 else reply.error


def chat_stream(url: str, body: dict) -> Stream:
    s = stream(url, "/v1/chat/completions", {"model": MODEL, "stream": True, **body})
    s.check_framing()
    return s


def greedy(url: str, messages: list, max_tokens: int = 8, **extra: Any) -> dict:
    return chat(url, {"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                      **extra})


def tokenize_chat(url: str, messages: list, **extra: Any) -> list[int]:
    reply = post(url, "/tokenize", {"model": MODEL, "messages": messages, **extra})
    assert reply.status == 200, reply.body
    return reply.json["tokens"]


@dataclass
class Folded:
    """A chat stream per choice index: role chunks, text, tokens, logprobs, finish."""

    roles: dict[int, dict]
    text: dict[int, str]
    token_ids: dict[int, list[int]]
    logprobs: dict[int, list[dict]]
    finals: dict[int, dict]
    order: list[tuple[str, int]]


def fold(s: Stream) -> Folded:
    f = Folded({}, {}, {}, {}, {}, [])
    for c in s.choice_chunks:
        assert c["object"] == "chat.completion.chunk" and len(c["choices"]) == 1, c
        ch = c["choices"][0]
        i = ch["index"]
        if "role" in ch["delta"]:
            assert i not in f.roles, "two role chunks"
            f.roles[i] = c
            f.order.append(("role", i))
            continue
        assert i in f.roles, "content before the role chunk"
        assert i not in f.finals, "a chunk after the finish chunk"
        f.order.append(("content", i))
        f.text[i] = f.text.get(i, "") + ch["delta"]["content"]
        f.token_ids.setdefault(i, []).extend(ch.get("token_ids") or [])
        if ch["logprobs"] is not None:
            f.logprobs.setdefault(i, []).extend(ch["logprobs"]["content"])
        if ch["finish_reason"] is not None:
            f.finals[i] = ch
    return f


# ---------------------------------------------------------------- basics

def test_plain_with_openai_client(stack):
    c = client(stack.url)
    r = c.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=0)
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length"
    prompt = tokenize_chat(stack.url, HI)
    assert prompt[0] == 1  # the template's BOS, not a second one from the tokenizer
    assert r.usage.prompt_tokens == len(prompt) == 12
    assert r.usage.completion_tokens == 6 and r.usage.total_tokens == 18
    raw = greedy(stack.url, HI, 6)
    assert set(raw) == RESPONSE_KEYS
    (choice,) = raw["choices"]
    assert set(choice) == CHOICE_KEYS
    assert choice["message"] == {"role": "assistant", "content": r.choices[0].message.content,
                                 **MESSAGE}  # no tool_calls key, like vLLM
    assert raw["prompt_token_ids"] is None and raw["prompt_text"] is None
    assert raw["usage"]["prompt_tokens_details"] is None


def test_streaming_chunk_sequence(stack):
    full = greedy(stack.url, HI, 8, return_token_ids=True)
    s = chat_stream(stack.url, {"messages": HI, "max_tokens": 8, "temperature": 0,
                                "stream_options": {"include_usage": True}})
    f = fold(s)
    first = s.chunks[0]
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}]
    assert first["prompt_token_ids"] is None and first["prompt_text"] is None
    assert "usage" not in first
    for c in s.choice_chunks[1:]:
        ch = c["choices"][0]
        assert set(c) == {"id", "object", "created", "model", "choices"}
        assert set(ch["delta"]) == {"content"}
        keys = {"index", "delta", "logprobs", "finish_reason", "token_ids"}
        assert set(ch) == (keys | {"stop_reason"} if ch["finish_reason"] else keys)
        assert c["id"] == first["id"] and c["created"] == first["created"]
    assert f.text[0] == full["choices"][0]["message"]["content"]
    assert f.finals[0]["finish_reason"] == "length" and f.finals[0]["stop_reason"] is None
    (usage,) = s.usage_chunks
    assert s.chunks[-1] == usage
    assert usage["usage"] == {"prompt_tokens": 12, "total_tokens": 20, "completion_tokens": 8}
    assert set(usage) == {"id", "object", "created", "model", "choices", "usage",
                          "system_fingerprint"}
    # without include_usage the terminal chunk carries the fingerprint
    s = chat_stream(stack.url, {"messages": HI, "max_tokens": 3})
    assert not s.usage_chunks and "system_fingerprint" in s.chunks[-1]
    assert s.chunks[-1]["choices"][0]["finish_reason"] is not None


def test_openai_client_streaming(stack):
    c = client(stack.url)
    events = list(c.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert events[0].choices[0].delta.role == "assistant"
    assert events[-1].choices == [] and events[-1].usage.completion_tokens == 5
    text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    assert text == greedy(stack.url, HI, 5)["choices"][0]["message"]["content"]


def test_return_token_ids_and_prompt_text(stack):
    prompt = tokenize_chat(stack.url, HI)
    full = greedy(stack.url, HI, 6, return_token_ids=True, return_prompt_text=True)
    assert full["prompt_token_ids"] == prompt
    assert full["prompt_text"] == "<s><|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    assert len(full["choices"][0]["token_ids"]) == 6
    s = chat_stream(stack.url, {"messages": HI, "max_tokens": 6, "temperature": 0,
                                "return_token_ids": True, "return_prompt_text": True})
    f = fold(s)
    assert f.roles[0]["prompt_token_ids"] == prompt
    assert f.roles[0]["prompt_text"] == full["prompt_text"]
    assert f.token_ids[0] == full["choices"][0]["token_ids"]
    assert f.text[0] == full["choices"][0]["message"]["content"]


def test_continuous_usage_stats(stack):
    s = chat_stream(stack.url, {"messages": HI, "max_tokens": 5, "temperature": 0,
                                "ignore_eos": True, "stream_options": {
                                    "include_usage": True, "continuous_usage_stats": True}})
    role = s.chunks[0]
    assert role["usage"] == {"prompt_tokens": 12, "total_tokens": 12, "completion_tokens": 0,
                             "completion_tokens_details": None}
    seen = 0
    for c in s.choice_chunks[1:]:
        assert c["usage"]["completion_tokens"] >= seen
        seen = c["usage"]["completion_tokens"]
    assert seen == 5
    assert s.usage_chunks[0]["usage"]["completion_tokens"] == 5


# ---------------------------------------------------------------- n

def test_n3_non_streaming(stack):
    body = {"messages": HI, "max_tokens": 6, "temperature": 1.0, "seed": 11, "n": 3,
            "ignore_eos": True}
    r = chat(stack.url, body)
    assert [ch["index"] for ch in r["choices"]] == [0, 1, 2]
    assert r["usage"] == {"prompt_tokens": 12, "completion_tokens": 18, "total_tokens": 30,
                          "prompt_tokens_details": None, "completion_tokens_details": None}
    texts = [ch["message"]["content"] for ch in r["choices"]]
    assert len(set(texts)) > 1  # seed + j per choice
    assert [ch["message"]["content"] for ch in chat(stack.url, body)["choices"]] == texts
    c = client(stack.url)
    o = c.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=1.0,
                                  seed=11, n=3, extra_body={"ignore_eos": True})
    assert [ch.message.content for ch in o.choices] == texts


def test_n3_streaming(stack):
    body = {"messages": HI, "max_tokens": 6, "temperature": 1.0, "seed": 11, "n": 3,
            "ignore_eos": True}
    full = chat(stack.url, body)
    s = chat_stream(stack.url, {**body, "stream_options": {"include_usage": True}})
    f = fold(s)
    # vLLM sends every choice's role chunk at once, on the first engine output
    assert f.order[:3] == [("role", 0), ("role", 1), ("role", 2)]
    assert f.text == {ch["index"]: ch["message"]["content"] for ch in full["choices"]}
    assert sorted(f.finals) == [0, 1, 2]
    (usage,) = s.usage_chunks
    assert usage["usage"]["completion_tokens"] == 18


def test_greedy_n_is_rejected(stack):
    err = chat(stack.url, {"messages": HI, "n": 2, "temperature": 0}, 400)
    assert err["message"].startswith("n must be 1 when using greedy sampling")


# ---------------------------------------------------------------- logprobs

def check_logprobs(content: list[dict], k: int) -> None:
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["bytes"] == list(entry["token"].encode())
        assert entry["logprob"] <= 0
        top = entry["top_logprobs"]
        assert len(top) == k  # the first k entries of the position (sampled token first)
        if k:
            assert top[0]["token"] == entry["token"] and top[0]["logprob"] == entry["logprob"]
        for alt in top:
            assert set(alt) == {"token", "logprob", "bytes"}
            assert alt["bytes"] == list(alt["token"].encode())


@pytest.mark.parametrize("k", [0, 3])
def test_logprobs_streaming_equals_non_streaming(stack, k):
    body = {"messages": HI, "max_tokens": 6, "temperature": 0, "logprobs": True,
            "top_logprobs": k}
    full = chat(stack.url, body)
    content = full["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    check_logprobs(content, k)
    f = fold(chat_stream(stack.url, body))
    assert f.logprobs[0] == content
    c = client(stack.url)
    r = c.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=0,
                                  logprobs=True, top_logprobs=k)
    assert [t.token for t in r.choices[0].logprobs.content] == [e["token"] for e in content]


@pytest.mark.real_engine
def test_partial_utf8_token_has_empty_text(real):
    """The tiny model splits characters: such tokens are "" with no bytes."""
    r = greedy(real.url, [{"role": "user", "content": "héllo 你好"}], 40, logprobs=True,
               top_logprobs=2, ignore_eos=True)
    content = r["choices"][0]["logprobs"]["content"]
    entries = content + [t for e in content for t in e["top_logprobs"]]
    empty = [e for e in entries if e["token"] == ""]
    assert empty and all(e["bytes"] == [] for e in empty)


@pytest.mark.parametrize("body, param, message", [
    ({"top_logprobs": 2}, "top_logprobs", "when using `top_logprobs`, `logprobs` must be set"),
    ({"logprobs": True, "top_logprobs": -2}, "top_logprobs", "must be a positive value or -1"),
    ({"logprobs": True, "top_logprobs": "2"}, "top_logprobs", "must be an integer"),
    ({"logprobs": True, "top_logprobs": 21}, "logprobs", "greater than max allowed: 20"),
    ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs", "not available when"),
])
def test_logprobs_validation(stack, body, param, message):
    err = chat(stack.url, {"messages": HI, "max_tokens": 2, **body}, 400)
    assert err["type"] == "BadRequestError" and err["param"] == param
    assert message in err["message"]


# ---------------------------------------------------------------- stop, max tokens, prompts

@pytest.mark.parametrize("include", [False, True], ids=["cut", "included"])
def test_stop_strings(stack, include):
    base = greedy(stack.url, HI, 16, ignore_eos=True)
    text = base["choices"][0]["message"]["content"]
    # a stop string that starts in the middle of the greedy text
    stop = next(text[i:i + 3] for i in range(2, len(text) // 2)
                if "\ufffd" not in text[i:i + 3] and text.find(text[i:i + 3]) == i)
    cut = text.index(stop)
    body = {"messages": HI, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
            "stop": ["never-there", stop], "include_stop_str_in_output": include}
    r = chat(stack.url, body)
    (choice,) = r["choices"]
    expected = text[:cut + len(stop)] if include else text[:cut]
    assert choice["message"]["content"] == expected
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert r["usage"]["completion_tokens"] <= 16
    f = fold(chat_stream(stack.url, body))
    assert f.text[0] == expected
    assert (f.finals[0]["finish_reason"], f.finals[0]["stop_reason"]) == ("stop", stop)


def test_stop_token_ids(stack):
    base = greedy(stack.url, HI, 10, ignore_eos=True, return_token_ids=True)
    ids = base["choices"][0]["token_ids"]
    stop_id = ids[3]
    r = greedy(stack.url, HI, 10, ignore_eos=True, return_token_ids=True,
               stop_token_ids=[stop_id])
    (choice,) = r["choices"]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop_id
    assert choice["token_ids"][-1] == stop_id
    if stack.kind == "real":  # the mock places stop tokens by its own rule
        assert len(choice["token_ids"]) == ids.index(stop_id) + 1
    # the stop token is not detokenized (skip_special_tokens or not)
    assert len(choice["message"]["content"]) <= len(base["choices"][0]["message"]["content"])


@pytest.mark.real_engine
def test_generation_config_eos(real):
    """<|im_end|> (id 5) is an EOS of generation_config.json: finish "stop", its id as
    stop_reason, counted and returned but not detokenized (unless asked)."""
    eos = [{"role": "user", "content": "no"}]  # greedy ends with <|im_end|>
    r = greedy(real.url, eos, 40, return_token_ids=True)
    (choice,) = r["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", 5)
    assert choice["token_ids"][-1] == 5 and r["usage"]["completion_tokens"] < 40
    assert "<|im_end|>" not in choice["message"]["content"]
    kept = greedy(real.url, eos, 40, include_stop_str_in_output=True, skip_special_tokens=False)
    assert kept["choices"][0]["message"]["content"].endswith("<|im_end|>")
    ignored = greedy(real.url, eos, 40, ignore_eos=True)
    assert ignored["choices"][0]["finish_reason"] == "length"


def test_max_tokens_fields(stack):
    r = greedy(stack.url, HI, max_tokens=9, max_completion_tokens=3, ignore_eos=True)
    assert r["usage"]["completion_tokens"] == 3  # max_completion_tokens wins
    for field in ("max_tokens", "max_completion_tokens"):
        err = chat(stack.url, {"messages": HI, field: 5000}, 400)
        assert err["param"] == field
        assert err["message"] == (f"{field}=5000 cannot be greater than max_model_len=1024. "
                                  f"Please request fewer output tokens. (parameter={field}, "
                                  "value=5000)")


def test_default_max_tokens_is_rest_of_context(stack):
    # no max_tokens: up to max_model_len - prompt_len tokens (a handful here)
    def prompt_for(words: int) -> tuple[list, int]:
        messages = [{"role": "user", "content": "word " * words}]
        return messages, len(tokenize_chat(stack.url, messages))

    _, at100 = prompt_for(100)
    _, at200 = prompt_for(200)
    per_word = (at200 - at100) / 100
    words = int(100 + (MAX_MODEL_LEN - 8 - at100) / per_word)
    messages, prompt_len = prompt_for(words)
    while prompt_len > MAX_MODEL_LEN - 3:
        words -= 1
        messages, prompt_len = prompt_for(words)
    assert MAX_MODEL_LEN - 40 < prompt_len <= MAX_MODEL_LEN - 3
    r = chat(stack.url, {"messages": messages, "temperature": 0, "ignore_eos": True})
    assert r["usage"]["prompt_tokens"] == prompt_len
    assert r["usage"]["completion_tokens"] == MAX_MODEL_LEN - prompt_len
    assert r["choices"][0]["finish_reason"] == "length"


def test_prompt_too_long(stack):
    err = chat(stack.url, {"messages": [{"role": "user", "content": "word " * 1100}]}, 400)
    assert err["param"] == "input_tokens"
    assert "maximum context length is 1024 tokens" in err["message"]


def test_multi_turn_prompt(stack):
    prompt = tokenize_chat(stack.url, MULTI_TURN)
    r = greedy(stack.url, MULTI_TURN, 4, return_token_ids=True, return_prompt_text=True)
    assert r["prompt_token_ids"] == prompt
    assert r["prompt_text"] == (
        "<s><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?"
        "<|im_end|>\n<|im_start|>user\nTell me a joke<|im_end|>\n<|im_start|>assistant\n")
    # text parts and names render like plain strings for this (string-format) template
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                          {"type": "text", "text": "there"}], "name": "x"}]
    assert tokenize_chat(stack.url, parts) == tokenize_chat(
        stack.url, [{"role": "user", "content": "Hi\nthere"}])


def test_tokenize_chat_form(stack):
    for extra in ({}, {"add_generation_prompt": False},
                  {"add_generation_prompt": False, "continue_final_message": True}):
        messages = MULTI_TURN[:3]
        ids = tokenize_chat(stack.url, messages, **extra)
        r = greedy(stack.url, messages, 2, return_token_ids=True, **extra)
        assert r["prompt_token_ids"] == ids, extra
    reply = post(stack.url, "/tokenize", {"messages": HI, "add_special_tokens": True,
                                          "return_token_strs": True})
    assert reply.json["tokens"][:2] == [1, 1]  # the tokenizer's BOS on top of the template's
    assert reply.json["token_strs"][:2] == ["<s>", "<s>"]
    assert reply.json["count"] == len(reply.json["tokens"])
    bad = post(stack.url, "/tokenize", {"messages": [{"role": "narrator", "content": "x"}]})
    assert bad.status == 400 and "Unsupported role: narrator" in bad.error["message"]


def test_echo_and_continue_final_message(stack):
    prefill = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Once"}]
    body = {"messages": prefill, "max_tokens": 4, "temperature": 0,
            "add_generation_prompt": False, "continue_final_message": True}
    plain = chat(stack.url, body)["choices"][0]["message"]["content"]
    echoed = chat(stack.url, {**body, "echo": True})
    assert echoed["choices"][0]["message"]["content"] == "Once" + plain
    assert echoed["prompt_logprobs"] is not None  # echo asks the engine for them, like vLLM
    f = fold(chat_stream(stack.url, {**body, "echo": True}))
    assert f.order[:2] == [("role", 0), ("content", 0)]
    assert f.text[0] == "Once" + plain
    # without a generation prompt the response takes the last message's role
    assert f.roles[0]["choices"][0]["delta"]["role"] == "assistant"
    r = greedy(stack.url, HI, 2, add_generation_prompt=False)
    assert r["choices"][0]["message"]["role"] == "user"
    # echo with a generation prompt: the last message is the user's, nothing to echo
    r = greedy(stack.url, HI, 3, echo=True)
    assert r["choices"][0]["message"]["content"] == greedy(stack.url, HI, 3)[
        "choices"][0]["message"]["content"]
    err = chat(stack.url, {**body, "add_generation_prompt": True}, 400)
    assert "Cannot set both" in err["message"]
    err = chat(stack.url, {"messages": prefill, "continue_final_message": True}, 400)
    assert "not compatible" in err["message"]  # add_generation_prompt defaults to true


def test_long_conversation_renders_off_the_loop(stack):
    """> 8 k characters: rendered and tokenized in a worker thread, same result."""
    messages = [SYSTEM] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "abc " * 60}
        for i in range(40)] + [{"role": "user", "content": "end"}]
    ids = tokenize_chat(stack.url, messages)
    assert len(ids) > 1024  # /tokenize has no length limit
    text = "<s>" + "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                           for m in messages) + "<|im_start|>assistant\n"
    plain = post(stack.url, "/tokenize", {"model": MODEL, "prompt": text,
                                          "add_special_tokens": False})
    assert plain.json["tokens"] == ids
    err = chat(stack.url, {"messages": messages, "max_tokens": 2}, 400)
    assert err["param"] == "input_tokens" and "at least 1025 input tokens" in err["message"]
    short = messages[:1] + messages[-5:]
    r = greedy(stack.url, short, 2, return_token_ids=True)
    assert r["prompt_token_ids"] == tokenize_chat(stack.url, short)


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("messages, message", [
    ([{"role": "narrator", "content": "x"}],
     "Unsupported role: narrator. Only system, user, assistant and tool are allowed."),
    ([], "Cannot apply chat template to an empty conversation. Provide at least one message."),
], ids=["raise_exception", "empty"])
def test_template_errors(stack, messages, message):
    for streaming in (False, True):
        err = chat(stack.url, {"messages": messages, "stream": streaming}, 400)
        assert err == {"message": message, "type": "BadRequestError", "param": None,
                       "code": 400}
    with pytest.raises(openai.BadRequestError, match="Unsupported role|empty conversation"):
        client(stack.url).chat.completions.create(model=MODEL, messages=messages)


@pytest.mark.parametrize("body, fragment", [
    ({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]},
     "not a multimodal model"),
    ({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]},
     "not a multimodal model"),
    ({"messages": [{"role": "user", "content": [{"type": "video", "x": 1}]}]},
     "Unsupported chat content part type: 'video'"),
    ({"messages": HI, "tools": [{"type": "function", "function": {"name": "f"}}]},
     '"auto" tool choice requires --enable-auto-tool-choice'),
    ({"messages": HI, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": "required"}, 'tool_choice="required" requires --tool-call-parser'),
    ({"messages": HI, "tool_choice": "auto"}, "When using `tool_choice`, `tools` must be set"),
    ({"messages": HI, "functions": [{"name": "f"}]}, "`functions` and `function_call`"),
    ({"messages": HI, "chat_template": "{{ 1 }}"}, "--trust-request-chat-template"),
], ids=["image", "audio", "unknown-part", "tools-auto", "tools-required",
        "tool-choice-alone", "functions", "request-template"])
def test_unsupported_features_are_400(stack, body, fragment):
    err = chat(stack.url, {**body, "max_tokens": 2}, 400)
    assert fragment in err["message"]
    assert err["type"] == "BadRequestError"


@pytest.mark.parametrize("body, param", [
    ({}, "body.messages"),
    ({"messages": "hello"}, "body.messages"),
    ({"messages": [{"content": "no role"}]}, "body.messages.0.role"),
    ({"messages": [{"role": "user", "content": 5}]}, "body.messages.0.content"),
    ({"messages": HI, "stop": ["a", "b", "c", "d", "e"]}, "body.stop"),
    ({"messages": HI, "temperature": "hot"}, "body.temperature"),
])
def test_schema_errors(stack, body, param):
    reply = post(stack.url, "/v1/chat/completions", {"model": MODEL, **body})
    assert reply.status == 400
    assert reply.error["type"] == "Bad Request" and reply.error["param"] == param


def test_unknown_model_and_lax_fields(stack):
    err = chat(stack.url, {"messages": HI, "model": "nope"}, 404)
    assert err["message"] == "The model `nope` does not exist. Valid aliases: tiny."
    # lax parsing like vLLM's pydantic models; unknown fields are ignored
    r = chat(stack.url, {"messages": HI, "max_tokens": "3", "temperature": "0",
                         "stream": "false", "user": "u", "no_such_field": 1,
                         "request_id": "my-id"})
    assert r["usage"]["completion_tokens"] == 3 and r["id"] == "chatcmpl-my-id"


# ---------------------------------------------------------------- cancellation

@pytest.mark.parametrize("n", [1, 3])
def test_client_disconnect_mid_stream(stack, n):
    body = {"model": MODEL, "messages": HI, "max_tokens": 1000, "ignore_eos": True,
            "temperature": 1.0 if n > 1 else 0, "n": n, "stream": True}
    with stack.mock_step_time(0.01):
        aborted, finished = stack.engine_requests()
        req = RawRequest(stack.url, "/v1/chat/completions", body)
        try:
            req.read_until(b'"delta":{"content"', count=2 * n)
            assert req.status == 200
            assert req.received.count(b'"role":"assistant"') == n
        finally:
            req.hang_up()
        wait_for(lambda: stack.frontend.debug_state()["table"] == 0, timeout=30,
                 message="table not empty after the client left")
        state = stack.frontend.wait_idle(timeout=30)
        assert state["engine_has_work"] is False
        # The frontend aborted every choice; the engine finished none by itself
        # (however fast it is, 1000 tokens with ignore_eos were still running).
        assert stack.engine_requests() == (aborted + n, finished)


def test_non_streaming_disconnect_aborts(stack):
    """A client that leaves before the reply: both engine requests are aborted."""
    with stack.mock_step_time(0.01):
        aborted, finished = stack.engine_requests()
        mock_aborted = stack.stats()["aborted"] if stack.mock else None
        req = RawRequest(stack.url, "/v1/chat/completions", {
            "model": MODEL, "messages": HI, "n": 2, "temperature": 1, "max_tokens": 1000,
            "ignore_eos": True})
        try:
            # Both choices are in the table: their ADDs went to the engine.
            wait_for(lambda: stack.frontend.debug_state()["table"] == 2, timeout=10,
                     message="the request's choices never reached the table")
        finally:
            req.hang_up()
        wait_for(lambda: stack.frontend.debug_state()["table"] == 0, timeout=30,
                 message="table not empty after the client left")
        stack.frontend.wait_idle(timeout=30)
        # The frontend aborted both, and the engine finished neither by itself.
        assert stack.engine_requests() == (aborted + 2, finished)
        if stack.mock:
            assert stack.stats()["aborted"] == mock_aborted + 2


# ---------------------------------------------------------------- mock-only faults

def test_engine_error_mid_stream_and_not(module_mock_stack):
    mock = module_mock_stack
    mock.control().configure(step_time=0.01)
    try:
        mock.control().error_next(1)
        r = post(mock.url, "/v1/chat/completions", {"model": MODEL, "messages": HI,
                                                    "max_tokens": 50, "ignore_eos": True})
        assert r.status == 500
        assert r.error == {"message": "Internal server error", "type": "InternalServerError",
                           "param": None, "code": 500}
        mock.control().error_next(1)
        s = chat_stream(mock.url, {"messages": HI, "max_tokens": 50, "n": 3, "temperature": 1,
                                   "ignore_eos": True, "stream_options": {"include_usage": True}})
        assert s.errors == [{"message": "Internal server error", "type": "InternalServerError",
                             "param": None, "code": 500}]
        assert s.events[-2].startswith('{"error"') and not s.usage_chunks
        mock.frontend.wait_idle()
    finally:
        mock.control().configure(step_time=MOCK_STEP_TIME)


def test_model_without_template_says_how_to_fix(tiny_model_dir, tmp_path):
    tok_dir = tokenizer_without_template(tiny_model_dir, tmp_path / "tok")
    stack = launch_mock_stack(tiny_model_dir, tmp_path, "--tokenizer", str(tok_dir))
    try:
        for streaming in (False, True):
            err = chat(stack.url, {"messages": HI, "stream": streaming}, 400)
            assert err["type"] == "BadRequestError"
            assert "must provide a chat template" in err["message"]
            assert "--chat-template" in err["message"]
        reply = post(stack.url, "/tokenize", {"model": MODEL, "messages": HI})
        assert reply.status == 400 and "--chat-template" in reply.error["message"]
        # completions still work
        assert post(stack.url, "/v1/completions", {"model": MODEL, "prompt": "Hi",
                                                   "max_tokens": 2}).status == 200
    finally:
        stack.stop()


@pytest.mark.real_engine
def test_frontend_start_up_under_a_second(real):
    """The start-up budget, from the frontend's own log line: the CPU time it
    takes from the engine's ready response to serving (its wall time also
    counts whatever else a loaded host runs meanwhile)."""
    import re

    lines = [l for l in real.frontend.log().splitlines() if "after the engine was ready" in l]
    assert lines, "no start-up line in the frontend log"
    cpu = float(re.search(r"after the engine was ready, of which ([\d.]+) s CPU",
                          lines[-1]).group(1))
    assert cpu < 1.0, lines[-1]
