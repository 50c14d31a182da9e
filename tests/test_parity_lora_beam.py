"""Parity with vLLM's own server for LoRA adapters and beam search.

Both servers run on engines started with ``--enable-lora --max-lora-rank 8
--max-loras 2 --max-logprobs 40`` (one engine each; a headless engine
handshakes with one frontend), serve the tiny model as ``tiny`` and two
adapters built by harness/tiny_lora.py: ``sql`` given as ``name=path`` and
``json`` given in vLLM's JSON form, and allow runtime loading
(``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``). Every shape goes to vLLM's
``vllm serve`` and to our frontend, one at a time, and the answers must be
equal as parsed JSON (the comparison of tests/test_parity_completions.py and,
for chat, tests/test_chat_parity.py): greedy base and adapter outputs, beam
search texts, token ids, logprobs, finish reasons and order.

The runtime load/unload sequence is compared step by step; a successful
load/unload answers with the same text, but ours has a ``text/plain`` media
type where vLLM's has none (README, differences).
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest

from harness.engines import stop_all
from harness.frontend import FrontendProcess
from harness.vllm_server import VllmFrontend
from tests import test_chat_parity as chat_parity
from tests import test_parity_completions as cmpl_parity

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

MAX_LOGPROBS = 40
ENGINE_ARGS = ("--enable-lora", "--max-lora-rank", "8", "--max-loras", "2",
               "--max-logprobs", str(MAX_LOGPROBS))
RUNTIME_LORA = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
HELLO = cmpl_parity.HELLO
EOS_PROMPT = cmpl_parity.EOS_PROMPT
# Beam search reaches the tokenizer's EOS (</s>) only with many beams on the
# tiny model: these complete some of the returned sequences with it.
EOS_CHAT = [{"role": "user", "content": "What is 2+2?"}]
ENDS_WITH_EOS = {"completions-beam-eos", "completions-beam-eos-include-stop",
                 "chat-beam-eos", "chat-beam-eos-stream"}


class Servers:
    def __init__(self, ours: FrontendProcess, theirs: VllmFrontend,
                 adapters: tuple[str, str]) -> None:
        self.ours = ours
        self.theirs = theirs
        self.adapters = adapters


@pytest.fixture(scope="module")
def servers(start_real_engine, tiny_model_dir, tiny_lora_dirs, tmp_path_factory
            ) -> Iterator[Servers]:
    workdir = tmp_path_factory.mktemp("lora-beam")
    a, b = (str(p) for p in tiny_lora_dirs)
    modules = ("--lora-modules", f"sql={a}",
               json.dumps({"name": "json", "path": b, "base_model_name": "tiny"}))
    their_engine = start_real_engine(*ENGINE_ARGS)
    our_engine = start_real_engine(*ENGINE_ARGS)
    theirs = VllmFrontend(their_engine, tiny_model_dir, workdir / "vllm-serve.log",
                          *ENGINE_ARGS, *modules, env=RUNTIME_LORA)
    ours = FrontendProcess(our_engine.handshake_addr, tiny_model_dir, workdir,
                           "--max-logprobs", str(MAX_LOGPROBS), *modules, env=RUNTIME_LORA)
    try:
        ours.wait_healthy()
        theirs.wait_ready()
        yield Servers(ours, theirs, (a, b))
    finally:
        ours.stop()
        theirs.stop()
        stop_all([our_engine, their_engine])


@pytest.fixture
def both(servers: Servers) -> Iterator[Servers]:
    yield servers
    servers.ours.wait_idle()  # every engine request (beam steps too) finished or aborted


def cmpl(id: str, **body: Any) -> cmpl_parity.Shape:
    return cmpl_parity.cmpl(id, **body)


def beam(id: str, **body: Any) -> cmpl_parity.Shape:
    return cmpl_parity.cmpl(f"beam-{id}", use_beam_search=True, **body)


def chat(id: str, **body: Any) -> chat_parity.Shape:
    return chat_parity.shape(f"chat-{id}", **body)


SHAPES: list[Any] = [
    # ------------------------------------------------------------ LoRA
    cmpl("base", prompt=HELLO, max_tokens=10, return_token_ids=True),
    cmpl("lora", prompt=HELLO, max_tokens=10, return_token_ids=True, model="sql"),
    cmpl("lora-json-form", prompt=HELLO, max_tokens=10, return_token_ids=True, model="json"),
    cmpl("lora-batch", prompt=["Hello", "The quick brown fox"], max_tokens=6, model="sql"),
    cmpl("lora-n2-seed", prompt=HELLO, max_tokens=6, n=2, temperature=1.0, seed=7,
         model="sql"),
    cmpl("lora-logprobs", prompt=HELLO, max_tokens=5, logprobs=2, model="json"),
    cmpl("lora-stream", prompt=HELLO, max_tokens=8, model="sql", stream=True,
         stream_options={"include_usage": True}),
    cmpl("lora-stream-batch-n2", prompt=["Hi", "World"], max_tokens=5, n=2, seed=3,
         temperature=0.8, model="json", stream=True, return_token_ids=True),
    cmpl("lora-unknown", prompt=HELLO, max_tokens=4, model="no-such-adapter"),
    cmpl_parity.gen("lora", model="sql", sampling_params={"max_tokens": 6}),
    cmpl_parity.raw("lora-tokenize", "/tokenize", {"model": "sql", "prompt": HELLO}),
    cmpl_parity.raw("lora-models", "/v1/models", None, method="GET",
                    normalize=cmpl_parity._normalize_models),
    chat("lora", model="sql"),
    chat("lora-stream", model="json", stream=True,
         stream_options={"include_usage": True, "continuous_usage_stats": True}),
    # ------------------------------------------------------------ beam search
    beam("n2", prompt=HELLO, max_tokens=4, n=2),
    beam("n3-no-length-penalty", prompt=HELLO, max_tokens=8, n=3, length_penalty=0.0),
    beam("n4-logprobs", prompt=HELLO, max_tokens=6, n=4, length_penalty=2.0, logprobs=2,
         return_token_ids=True),
    beam("eos", prompt=EOS_PROMPT, max_tokens=16, n=16, return_token_ids=True),
    beam("eos-include-stop", prompt=EOS_PROMPT, max_tokens=16, n=16, logprobs=1,
         include_stop_str_in_output=True, return_token_ids=True),
    beam("ignore-eos", prompt=EOS_PROMPT, max_tokens=16, n=16, ignore_eos=True,
         return_token_ids=True),
    beam("batch", prompt=["Hello", "The quick brown fox"], max_tokens=5, n=2,
         return_token_ids=True),
    beam("echo", prompt=HELLO, max_tokens=4, n=2, echo=True),
    beam("n8", prompt=[1, 468, 995], max_tokens=6, n=8, length_penalty=0.5),
    beam("ignored-fields", prompt=HELLO, max_tokens=5, n=2, best_of=3, early_stopping=True,
         stop=["a"], top_p=0.5, seed=1),
    beam("lora", prompt=HELLO, max_tokens=6, n=3, model="sql", return_token_ids=True),
    beam("error-stream", prompt=HELLO, max_tokens=4, n=2, stream=True),
    beam("error-logprob-token-ids", prompt=HELLO, max_tokens=4, n=2, logprobs=1,
         logprob_token_ids=[5]),
    beam("error-echo-logprobs", prompt=HELLO, max_tokens=4, n=2, echo=True, logprobs=1),
    beam("error-too-wide", prompt=HELLO, max_tokens=4, n=MAX_LOGPROBS // 2 + 1),
    chat("beam-n2-logprobs", use_beam_search=True, n=2, logprobs=True, top_logprobs=2),
    chat("beam-eos", messages=EOS_CHAT, use_beam_search=True, n=10, max_tokens=16),
    chat("beam-eos-stream", messages=EOS_CHAT, use_beam_search=True, n=10, max_tokens=16,
         stream=True, stream_options={"include_usage": True}),
    chat("beam-lora-stream", model="sql", use_beam_search=True, n=2, stream=True,
         logprobs=True, top_logprobs=1,
         stream_options={"include_usage": True, "continuous_usage_stats": True}),
]


def shape_id(s: Any) -> str:
    return s.id


def send(url: str, s: Any):
    module = chat_parity if isinstance(s, chat_parity.Shape) else cmpl_parity
    return module.send(url, s)


def assert_same(s: Any, ours, theirs) -> None:
    module = chat_parity if isinstance(s, chat_parity.Shape) else cmpl_parity
    module.assert_same(s, ours, theirs)


def test_enough_shapes() -> None:
    ids = [s.id for s in SHAPES]
    assert len(ids) == len(set(ids))
    assert len(SHAPES) >= 20


@pytest.mark.timeout(900)
@pytest.mark.parametrize("s", SHAPES, ids=shape_id)
def test_parity(s: Any, both: Servers) -> None:
    theirs = send(both.theirs.url, s)
    ours = send(both.ours.url, s)
    assert_same(s, ours, theirs)
    if "error" not in s.id and "unknown" not in s.id:
        assert ours.status == 200, ours.body[:1000]
    if s.id in ENDS_WITH_EOS:  # not vacuous: the EOS rules were exercised
        assert b'"finish_reason":"stop","stop_reason":2' in ours.body, ours.body[:3000]


def test_adapter_output_differs_from_base(both: Servers) -> None:
    """Not vacuous: the adapters change the greedy output (and differ from each other)."""
    texts = {}
    for model in ("tiny", "sql", "json"):
        reply = cmpl_parity.send(both.ours.url, cmpl(f"x-{model}", prompt=HELLO, max_tokens=10,
                                                     model=model))
        texts[model] = reply.json()["choices"][0]["text"]
    assert len(set(texts.values())) == 3, texts


# ------------------------------------------------------------------ runtime load/unload

def post(url: str, path: str, body: bytes, content_type: str = "application/json"
         ) -> tuple[int, str, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def test_runtime_load_unload_sequence(both: Servers, tmp_path) -> None:
    """The admin endpoints step by step, then requests naming the adapter."""
    a, _ = both.adapters
    load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    steps = [
        (load, {"lora_name": "dyn", "lora_path": a}),
        (load, {"lora_name": "dyn", "lora_path": a}),           # already loaded
        (load, {"lora_name": "dyn", "lora_path": a, "load_inplace": True}),
        (load, {"lora_name": "tiny", "lora_path": a}),          # a served base name
        (load, {"lora_name": "", "lora_path": a}),
        (load, {"lora_name": "bad", "lora_path": "/nonexistent/adapter"}),
        (load, {"lora_name": "rel", "lora_path": "nonexistent-rel"}),
        (unload, {"lora_name": ""}),
        (unload, {"lora_name": "nope"}),
    ]
    for path, body in steps:
        ours = post(both.ours.url, path, json.dumps(body).encode())
        theirs = post(both.theirs.url, path, json.dumps(body).encode())
        assert ours[0] == theirs[0], (path, body, ours, theirs)
        if ours[0] == 200:
            assert ours[2] == theirs[2] and ours[1].startswith("text/plain")
        else:
            assert json.loads(ours[2]) == json.loads(theirs[2]), (path, body)

    # Served, listed, then gone after the unload (and listed no more).
    request = cmpl("dyn", prompt=HELLO, max_tokens=8, model="dyn", return_token_ids=True)
    models = cmpl_parity.raw("models", "/v1/models", None, method="GET",
                             normalize=cmpl_parity._normalize_models)
    for s in (request, models):
        cmpl_parity.assert_same(s, cmpl_parity.send(both.ours.url, s),
                                cmpl_parity.send(both.theirs.url, s))
    for url in (both.ours.url, both.theirs.url):
        assert post(url, unload, b'{"lora_name": "dyn"}')[0] == 200
        assert post(url, unload, b'{"lora_name": "dyn"}')[0] == 404
    for s in (request, models):
        cmpl_parity.assert_same(s, cmpl_parity.send(both.ours.url, s),
                                cmpl_parity.send(both.theirs.url, s))

    # Not JSON: refused before the body is read, by both.
    ours = post(both.ours.url, load, b"lora_name=x", "text/plain")
    theirs = post(both.theirs.url, load, b"lora_name=x", "text/plain")
    assert ours[0] == theirs[0] == 400
    assert json.loads(ours[2]) == json.loads(theirs[2])
    # A missing field: the same status, type and param (pydantic words it longer).
    ours = json.loads(post(both.ours.url, load, b'{"lora_name": "x"}')[2])["error"]
    theirs = json.loads(post(both.theirs.url, load, b'{"lora_name": "x"}')[2])["error"]
    assert (ours["type"], ours["param"], ours["code"]) == \
        (theirs["type"], theirs["param"], theirs["code"]) == ("Bad Request", "body.lora_path", 400)
