"""LoRA adapters through our frontend, against the mock engine (``--enable-lora``).

The mock checks adapters as the real engine does (``add_lora`` answers, ADDs
that name an adapter, an engine that dies on an ADD it could not serve) and
writes different tokens under each adapter, so these tests see what a user
sees: ``--lora-modules`` in both forms, ``model`` selecting an adapter on
every generation route (batch, n>1, streaming), /v1/models, the runtime
load/unload endpoints with vLLM's answers, the adapter ids the engine gets,
and adapters surviving an engine restart. Parity of the outputs with vLLM's
own server on a real engine: tests/test_parity_lora_beam.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from typing import Iterator

import pytest

from frontend.lora import LoRAModulePath, parse_lora_modules
from harness.frontend import MockStack, launch_mock_stack
from harness.procs import BIN_DIR
from harness.waits import wait_for
from tests.support.http_client import completion, get, post, stream

ENGINE_ARGS = ("--enable-lora", "--max-loras", "2", "--step-time", "0.002")
LOAD, UNLOAD = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"


@pytest.fixture(scope="module")
def lora_stack(tiny_model_dir, tiny_lora_dirs, tmp_path_factory) -> Iterator[MockStack]:
    """Adapter ``a`` as name=path, ``b`` in the JSON form; runtime loading on."""
    a, b = tiny_lora_dirs
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
        stack = launch_mock_stack(
            tiny_model_dir, tmp_path_factory.mktemp("lora"), "--lora-modules", f"a={a}",
            json.dumps({"name": "b", "path": str(b), "base_model_name": "tiny"}),
            engine_args=ENGINE_ARGS)
    yield stack
    stack.stop()


@pytest.fixture
def mock(lora_stack: MockStack) -> Iterator[MockStack]:
    yield lora_stack
    lora_stack.frontend.wait_idle()
    stats = lora_stack.control().stats()
    assert stats["input_alive"] and stats["aborts_unknown"] == 0, stats


def greedy(url: str, model: str, prompt="Hello", **extra) -> dict:
    return completion(url, {"model": model, "prompt": prompt, "max_tokens": 8,
                            "temperature": 0, **extra})


# ---------------------------------------------------------------- flags

def test_lora_modules_both_forms_and_vllms_errors():
    assert parse_lora_modules(["a=/x", '{"name": "b", "path": "/y", "base_model_name": "t"}',
                               ""]) == [LoRAModulePath("a", "/x"),
                                        LoRAModulePath("b", "/y", "t")]
    assert parse_lora_modules(["a=/x=y"]) == [LoRAModulePath("a", "/x=y")]
    with pytest.raises(ValueError, match=r"^Invalid JSON format for --lora-modules: bad$"):
        parse_lora_modules(["bad"])
    with pytest.raises(ValueError, match=r"^Invalid JSON format for --lora-modules: a=/x,y$"):
        parse_lora_modules(["a=/x,y"])  # a comma: taken as JSON, as vLLM does
    with pytest.raises(ValueError, match=r"Invalid fields for --lora-modules: .* missing 1 "
                                         r"required positional argument: 'path'"):
        parse_lora_modules(['{"name": "b"}'])
    with pytest.raises(ValueError, match="unexpected keyword argument 'foo'"):
        parse_lora_modules(['{"name": "b", "path": "/y", "foo": 1}'])
    with pytest.raises(ValueError, match="must be a mapping, not list"):
        parse_lora_modules(['[{"name": "b", "path": "/y"}]'])


def test_bad_lora_modules_flag_exits_2(tiny_model_dir):
    proc = subprocess.run(
        [str(BIN_DIR / "frontend"), "--engine-addr", "tcp://127.0.0.1:1", "--model",
         str(tiny_model_dir), "--lora-modules", "bad"], capture_output=True, text=True,
        timeout=60)
    assert proc.returncode == 2
    assert "error: Invalid JSON format for --lora-modules: bad" in proc.stderr


@pytest.mark.parametrize("engine_args, module, message", [
    ((), "a={a}", "--lora-modules: the engine does not support LoRA"),
    (("--enable-lora",), "x=/nonexistent/adapter",
     "Loading lora x failed: No adapter found for /nonexistent/adapter"),
], ids=["engine-without-lora", "bad-adapter-path"])
def test_start_up_refused(tiny_model_dir, tiny_lora_dirs, tmp_path, engine_args, module,
                          message):
    """An engine without LoRA, or an adapter it cannot load: exit 1, saying why."""
    with pytest.raises(RuntimeError, match="frontend exited with 1") as failed:
        launch_mock_stack(tiny_model_dir, tmp_path, "--lora-modules",
                          module.format(a=tiny_lora_dirs[0]), engine_args=engine_args)
    assert message in str(failed.value)


def test_admin_routes_only_with_the_environment_switch(tiny_model_dir):
    from frontend.model import load_model_info
    from frontend.openai.routes import openai_routes
    from harness.state import make_state

    state = make_state(load_model_info(str(tiny_model_dir), served_names=["tiny"]))
    paths = {r.path for r in openai_routes(state)}
    assert not paths & {LOAD, UNLOAD}
    state.config = dataclasses.replace(state.config, runtime_lora_updating=True)
    assert {LOAD, UNLOAD} <= {r.path for r in openai_routes(state)}


# ---------------------------------------------------------------- serving

def test_models_lists_adapters_with_their_parent(mock, tiny_lora_dirs):
    data = get(mock.url, "/v1/models").json["data"]
    assert [(m["id"], m["root"], m["parent"], m["max_model_len"]) for m in data][1:] == [
        ("a", str(tiny_lora_dirs[0]), "tiny", None), ("b", str(tiny_lora_dirs[1]), "tiny", None)]
    assert data[0]["id"] == "tiny" and data[0]["parent"] is None


def test_model_selects_the_adapter(mock):
    before = mock.control().stats()["lora_adds"]
    base, a, b = (greedy(mock.url, m) for m in ("tiny", "a", "b"))
    assert [r["model"] for r in (base, a, b)] == ["tiny", "a", "b"]
    texts = [r["choices"][0]["text"] for r in (base, a, b)]
    assert len(set(texts)) == 3, texts
    assert greedy(mock.url, "a")["choices"][0]["text"] == texts[1]  # repeatable
    assert mock.control().stats()["lora_adds"] == before + 3


def test_adapter_with_batch_n_and_streaming(mock):
    """Every engine request of a batch x n request carries the adapter."""
    before = mock.control().stats()["lora_adds"]
    body = {"model": "a", "prompt": ["Hello", "World"], "n": 2, "max_tokens": 6,
            "temperature": 1, "seed": 5}
    whole = completion(mock.url, body)
    streamed = stream(mock.url, "/v1/completions", {**body, "stream": True})
    streamed.check_framing()
    texts: dict[int, str] = {}
    for chunk in streamed.chunks:
        assert chunk["model"] == "a"
        for ch in chunk["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
    assert texts == {c["index"]: c["text"] for c in whole["choices"]}
    base = completion(mock.url, {**body, "model": "tiny"})
    assert [c["text"] for c in base["choices"]] != [c["text"] for c in whole["choices"]]
    assert mock.control().stats()["lora_adds"] == before + 8


def test_lora_requests_info_lists_the_adapters_in_flight(mock):
    """vLLM's vllm:lora_requests_info: max_lora and the adapters with requests
    waiting or running (the same list in both labels), the time last seen."""
    import time

    from tests.support.http_client import RawRequest

    streams = []
    started = time.time()
    # Both streams run at once: slow steps, so that a's 1000 tokens outlast
    # loading b (the first use of an adapter loads it into the engine).
    mock.control().configure(step_time=0.02)
    try:
        for model in ("a", "b"):
            req = RawRequest(mock.url, "/v1/completions", {
                "model": model, "prompt": "x", "max_tokens": 1000, "ignore_eos": True,
                "stream": True})
            req.read_until(b"data:")
            streams.append(req)
        samples = wait_for_metric(mock.url, lambda s: any(
            name == "vllm:lora_requests_info" and dict(labels)["running_lora_adapters"]
            == "a,b" for (name, labels) in s))
        info = {dict(labels)["running_lora_adapters"]: value
                for (name, labels), value in samples.items()
                if name == "vllm:lora_requests_info"}
        [labels] = [dict(labels) for (name, labels) in samples
                    if name == "vllm:lora_requests_info"
                    and dict(labels)["running_lora_adapters"] == "a,b"]
        assert labels == {"max_lora": "2", "waiting_lora_adapters": "a,b",
                          "running_lora_adapters": "a,b"}
        assert started - 1 <= info["a,b"] <= time.time() + 1  # (clock rounding)
    finally:
        for req in streams:
            req.hang_up()
        mock.control().configure(step_time=float(ENGINE_ARGS[-1]))
    mock.frontend.wait_idle()
    samples = wait_for_metric(mock.url, lambda s: any(
        name == "vllm:lora_requests_info" and dict(labels)["running_lora_adapters"] == ""
        for (name, labels) in s))
    assert any(dict(labels)["running_lora_adapters"] == "a,b" for (name, labels) in samples
               if name == "vllm:lora_requests_info")  # old series stay, as in vLLM


def wait_for_metric(url: str, ready) -> dict:
    from harness.waits import wait_for
    from tests.support.http_client import scrape

    samples: dict = {}

    def check() -> bool:
        nonlocal samples
        samples = scrape(url)
        return ready(samples)
    wait_for(check, 20, message=lambda: str([k for k in samples if "lora" in k[0]]))
    return samples


def test_adapter_on_chat_generate_and_tokenize(mock):
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
            "temperature": 0}
    replies = {m: post(mock.url, "/v1/chat/completions", {**chat, "model": m}).json
               for m in ("tiny", "b")}
    assert replies["b"]["model"] == "b"
    assert (replies["b"]["choices"][0]["message"]["content"]
            != replies["tiny"]["choices"][0]["message"]["content"])
    chunks = stream(mock.url, "/v1/chat/completions", {**chat, "model": "b", "stream": True})
    chunks.check_framing()
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks.chunks
                   if c["choices"]) == replies["b"]["choices"][0]["message"]["content"]
    gen = {"token_ids": [1, 468, 995], "sampling_params": {"max_tokens": 5, "temperature": 0}}
    outs = {m: post(mock.url, "/inference/v1/generate", {**gen, "model": m}).json
            for m in ("tiny", "a")}
    assert outs["a"]["choices"][0]["token_ids"] != outs["tiny"]["choices"][0]["token_ids"]
    assert post(mock.url, "/tokenize", {"model": "a", "prompt": "Hi"}).status == 200


def test_unknown_model_is_404(mock):
    reply = post(mock.url, "/v1/completions", {"model": "zzz", "prompt": "Hi"})
    assert reply.status == 404
    assert reply.error == {"message": "The model `zzz` does not exist. Valid aliases: tiny.",
                           "type": "NotFoundError", "param": "model", "code": 404}


# ---------------------------------------------------------------- runtime load / unload

def invalid(message: str) -> dict:
    return {"message": message, "type": "InvalidUserInput", "param": None, "code": 400}


def test_runtime_load_and_unload(mock, tiny_lora_dirs, tmp_path):
    a = str(tiny_lora_dirs[0])
    too_big = tmp_path / "r32"
    shutil.copytree(tiny_lora_dirs[0], too_big)
    config = json.loads((too_big / "adapter_config.json").read_text())
    (too_big / "adapter_config.json").write_text(json.dumps({**config, "r": 32}))

    reply = post(mock.url, LOAD, {"lora_name": "dyn", "lora_path": a})
    assert (reply.status, reply.body) == (200, b"Success: LoRA adapter 'dyn' added successfully.")
    assert greedy(mock.url, "dyn")["model"] == "dyn"
    checks = [
        ({"lora_name": "dyn", "lora_path": a}, 400, invalid(
            "The lora adapter 'dyn' has already been loaded. If you want to load the adapter "
            "in place, set 'load_inplace' to True.")),
        ({"lora_name": "tiny", "lora_path": a}, 400, invalid(
            "The lora adapter 'tiny' conflicts with a served base model.")),
        ({"lora_name": "", "lora_path": a}, 400, invalid(
            "Both 'lora_name' and 'lora_path' must be provided.")),
        ({"lora_name": "x", "lora_path": "/nonexistent/adapter"}, 404, {
            "message": "Loading lora x failed: No adapter found for /nonexistent/adapter",
            "type": "NotFoundError", "param": None, "code": 404}),
        ({"lora_name": "big", "lora_path": str(too_big)}, 500, {
            "message": "Call to add_lora method failed: LoRA rank 32 is greater than "
                       "max_lora_rank 16.",
            "type": "InternalServerError", "param": None, "code": 500}),
    ]
    for body, status, error in checks:
        reply = post(mock.url, LOAD, body)
        assert (reply.status, reply.error) == (status, error), body
    reply = post(mock.url, LOAD, {"lora_name": "dyn", "lora_path": a, "load_inplace": True})
    assert reply.status == 200

    assert post(mock.url, UNLOAD, {"lora_name": "dyn"}).body == \
        b"Success: LoRA adapter 'dyn' removed successfully."
    reply = post(mock.url, UNLOAD, {"lora_name": "dyn"})
    assert (reply.status, reply.error) == (404, {
        "message": "The lora adapter 'dyn' cannot be found.", "type": "NotFoundError",
        "param": None, "code": 404})
    reply = post(mock.url, UNLOAD, {"lora_name": ""})
    assert (reply.status, reply.error) == (400, invalid(
        "'lora_name' needs to be provided to unload a LoRA adapter."))
    assert post(mock.url, "/v1/completions", {"model": "dyn", "prompt": "Hi"}).status == 404
    assert "dyn" not in [m["id"] for m in get(mock.url, "/v1/models").json["data"]]


def test_runtime_endpoints_want_a_json_body(mock):
    reply = post(mock.url, LOAD, b"lora_name=x", headers={"Content-Type": "text/plain"})
    assert (reply.status, reply.error) == (400, {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' "
                   "is allowed", "type": "Bad Request", "param": None, "code": 400})
    reply = post(mock.url, LOAD, {"lora_name": "x"})
    assert (reply.status, reply.error["param"]) == (400, "body.lora_path")


def test_adapter_ids_as_vllm_allocates_them(tiny_model_dir, tiny_lora_dirs, tmp_path,
                                            monkeypatch):
    """Ids count from 1 in load order; a failed load uses one up; an unload only
    forgets the name (the engine keeps the adapter, as with vLLM), and loading
    the name again takes a new id."""
    a, b = (str(p) for p in tiny_lora_dirs)
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1")
    stack = launch_mock_stack(tiny_model_dir, tmp_path, "--lora-modules", f"s={a}",
                              engine_args=("--enable-lora", "--max-cpu-loras", "8"))
    try:
        control = stack.control()
        assert control.stats()["loras"] == [1]
        assert post(stack.url, LOAD, {"lora_name": "x", "lora_path": b}).status == 200
        assert post(stack.url, LOAD, {"lora_name": "y", "lora_path": "/nope/y"}).status == 404
        assert post(stack.url, LOAD, {"lora_name": "z", "lora_path": b}).status == 200
        assert control.stats()["loras"] == [1, 2, 4]
        assert post(stack.url, UNLOAD, {"lora_name": "x"}).status == 200
        assert control.stats()["loras"] == [1, 2, 4]
        assert post(stack.url, LOAD, {"lora_name": "x", "lora_path": b}).status == 200
        assert control.stats()["loras"] == [1, 2, 4, 5]
    finally:
        stack.stop()


def test_adapters_survive_an_engine_restart(tiny_model_dir, tiny_lora_dirs, tmp_path):
    """A new engine knows no adapters: the frontend adds them again before an
    ADD could name one it never loaded (which would kill the engine)."""
    stack = launch_mock_stack(tiny_model_dir, tmp_path, "--lora-modules",
                              f"a={tiny_lora_dirs[0]}", engine_args=("--enable-lora",))
    try:
        before = greedy(stack.url, "a")["choices"][0]["text"]
        stack.control().crash()
        wait_for(lambda: get(stack.url, "/health").status == 503, 10)
        stack.start_engine("--enable-lora")
        wait_for(lambda: get(stack.url, "/health").status == 200, 30)
        wait_for(lambda: stack.control().stats()["loras"] == [1], 10)
        assert greedy(stack.url, "a")["choices"][0]["text"] == before
        assert stack.control().stats()["input_alive"]
    finally:
        stack.stop()


def test_mock_engine_dies_on_an_adapter_it_cannot_load(tmp_path):
    """What the frontend guards against: the mock, like the real engine's step,
    fails on an ADD whose adapter does not load."""
    from engine_core.mock.errors import EngineDead
    from engine_core.mock.loras import Loras
    from protocol.lora import LoRARequest

    with pytest.raises(EngineDead):
        Loras(False, 1, 16, None).on_add(LoRARequest("a", 1, str(tmp_path)))
    with pytest.raises(EngineDead):
        Loras(True, 1, 16, None).on_add(LoRARequest("a", 1, str(tmp_path / "missing")))
