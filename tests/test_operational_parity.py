"""The operational routes against vLLM 0.32's own server: /ping, /invocations,
/load, /tokenizer_info, the docs pages, the dev-mode routes and profiling.

vLLM's API server and ours run with the same flags and VLLM_SERVER_DEV_MODE=1,
each on a mock engine (the same utility answers for both); every request of
CASES goes to both, in order (the engines' state moves the same way: pause,
sleep, weight version, weights reset), and the answers must be equal: status,
content type and body (JSON compared parsed; generation ids and timestamps
masked). Streams and /load under load are compared by what they show.
"""

from __future__ import annotations

import json
import threading

import pytest

from harness.waits import wait_for
from tests.support.http_client import RawRequest
from tests.support.operational import (
    DEV_MODE,
    Answer,
    call,
    ours_on_mock,
    sse_events,
    vllm_on_mock,
)
from tests.support.requirements import require_vllm
from tests.support.stream_chunks import match_coarsening

pytestmark = pytest.mark.vllm_frontend

PROFILER = {"profiler": "torch", "torch_profiler_dir": "/tmp/vllm-profile-unused",
            "ignore_frontend": True}
FLAGS = ("--enable-server-load-tracking", "--enable-tokenizer-info-endpoint",
         "--profiler-config", json.dumps(PROFILER))
ENGINE = ("--profiler-config", json.dumps(PROFILER), "--step-time", "0.005")
COMPLETION = {"prompt": "Hello there", "max_tokens": 4, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
TEXT = {"Content-Type": "text/plain"}
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n" \
           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
OFFLINE = {"HF_HUB_OFFLINE": "1"}  # as vLLM's server runs here (/tokenizer_info shows it)

# (method, path, body, headers): sent to both servers, in this order.
CASES = [
    ("GET", "/ping", None, None),
    ("POST", "/ping", None, None),
    ("GET", "/load", None, None),
    ("GET", "/tokenizer_info", None, None),
    ("GET", "/docs", None, None),
    ("GET", "/redoc", None, None),
    ("GET", "/docs/oauth2-redirect", None, None),
    # SageMaker's /invocations
    ("POST", "/invocations", COMPLETION, None),
    ("POST", "/invocations", CHAT, None),
    ("POST", "/invocations", {**COMPLETION, "model": "not-served"}, None),  # model := null
    ("POST", "/invocations", COMPLETION, {"X-Amzn-SageMaker-Adapter-Identifier": "nope"}),
    ("POST", "/invocations", {"prompt": 5}, None),
    ("POST", "/invocations", {"prompt": "hi", "max_tokens": "many"}, None),
    ("POST", "/invocations", {}, None),
    ("POST", "/invocations", {"messages": "not a list", "max_tokens": 2}, None),
    ("POST", "/invocations", {**CHAT, "temperature": "hot"}, None),
    ("POST", "/invocations", {**CHAT, "n": 2, "seed": 3, "temperature": 1.0}, None),
    ("POST", "/invocations", [1], None),
    ("POST", "/invocations", "text", None),
    ("POST", "/invocations", 5, None),
    ("POST", "/invocations", b"null", None),
    ("POST", "/invocations", b"{bad", None),
    ("POST", "/invocations", b"", None),
    ("POST", "/invocations", COMPLETION, TEXT),
    ("POST", "/invocations", {"requestType": "NEW_SESSION"}, None),
    ("POST", "/invocations", {"requestType": "X", "prompt": "hi"}, None),
    ("POST", "/invocations", COMPLETION, {"X-Amzn-SageMaker-Session-Id": "s1"}),
    # caches, world size, server info
    ("POST", "/reset_prefix_cache", None, None),
    ("POST", "/reset_prefix_cache?reset_running_requests=true&reset_external=1", None, None),
    ("POST", "/reset_prefix_cache?reset_external=maybe", None, None),
    ("POST", "/reset_mm_cache", None, None),
    ("POST", "/reset_encoder_cache", None, None),
    ("GET", "/get_world_size", None, None),
    ("GET", "/get_world_size?include_dp=false", None, None),
    ("GET", "/get_world_size?include_dp=perhaps", None, None),
    ("GET", "/server_info?config_format=yaml", None, None),
    # collective_rpc
    ("POST", "/collective_rpc", {"method": "check_health"}, None),
    ("POST", "/collective_rpc", {"method": "no_such_method"}, None),
    ("POST", "/collective_rpc", {"args": []}, None),
    ("POST", "/collective_rpc", [1], None),
    ("POST", "/collective_rpc", b"{bad", None),
    ("POST", "/collective_rpc", {"method": "check_health", "args": 5}, None),
    # sleep and pause
    ("GET", "/is_sleeping", None, None),
    ("GET", "/is_paused", None, None),
    ("POST", "/sleep?level=3", None, None),
    ("POST", "/sleep?level=two", None, None),
    ("POST", "/sleep?level=-1&mode=later", None, None),
    ("POST", "/pause?mode=later", None, None),
    ("POST", "/pause?clear_cache=perhaps", None, None),
    ("POST", "/release_kv_cache_memory", None, None),  # not paused
    ("POST", "/pause?mode=keep", None, None),
    ("GET", "/is_paused", None, None),
    ("GET", "/is_sleeping", None, None),
    ("POST", "/release_kv_cache_memory", None, None),  # the CPU worker refuses to discard
    ("GET", "/is_sleeping", None, None),
    ("POST", "/wake_up?tags=weights", None, None),
    ("POST", "/wake_up", None, None),
    ("GET", "/is_paused", None, None),
    ("POST", "/sleep", None, None),
    ("GET", "/is_sleeping", None, None),
    ("POST", "/wake_up?tags=scheduling", None, None),
    ("POST", "/wake_up?tags=weights&tags=kv_cache", None, None),
    ("POST", "/sleep?level=0&mode=wait", None, None),
    ("POST", "/wake_up?tags=scheduling", None, None),
    ("POST", "/pause?mode=wait&clear_cache=false", None, None),
    ("POST", "/resume", None, None),
    ("GET", "/is_paused", None, None),
    # weights
    ("GET", "/weight_info", None, None),
    ("POST", "/update_weight_version", None, None),
    ("POST", "/update_weight_version", {"new_version": 5}, None),
    ("POST", "/update_weight_version", {"new_version": "v2"}, TEXT),
    ("POST", "/update_weight_version", {"new_version": "v2"}, None),
    ("GET", "/weight_info", None, None),
    ("POST", "/init_weight_transfer_engine", {}, None),
    ("POST", "/init_weight_transfer_engine", {"init_info": 5}, None),
    ("POST", "/init_weight_transfer_engine", {"init_info": None}, None),
    ("POST", "/init_weight_transfer_engine", [{"init_info": {}}], None),
    ("POST", "/init_weight_transfer_engine", b"{bad", None),
    ("POST", "/init_weight_transfer_engine", {"init_info": {}}, None),
    ("POST", "/start_weight_update", None, None),
    ("POST", "/start_draft_weight_update", None, None),
    ("POST", "/update_weights", {"update_info": "x"}, None),
    ("POST", "/update_weights", {"update_info": [1, {}]}, None),
    ("POST", "/update_weights", {"update_info": [{}]}, None),
    ("POST", "/finish_weight_update", {"weight_version": 5}, None),
    ("POST", "/finish_weight_update", None, None),
    ("POST", "/shutdown_weight_transfer_engine", None, None),
    ("POST", "/weight_checker", {}, None),
    ("POST", "/weight_checker", {"action": "weigh"}, None),
    ("POST", "/weight_checker", {"action": "compare"}, None),
    ("POST", "/weight_checker", {"action": "compare", "baseline": {"a": 1}}, None),
    ("POST", "/weight_checker", {"action": "checksum"}, None),
    ("POST", "/weight_checker", {"action": "compare", "baseline": {"a": "b"}}, None),
    ("POST", "/weight_checker", {"action": "reset"}, None),
    ("POST", "/weight_checker", {"action": "checksum"}, None),
    # RL abort
    ("POST", "/abort_requests", b"{bad", None),
    ("POST", "/abort_requests", [1], None),
    ("POST", "/abort_requests", {}, None),
    ("POST", "/abort_requests", {"request_ids": ["chatcmpl-x"]}, None),
    ("POST", "/abort_requests", {"request_ids": "abc"}, None),
    # profiling
    ("POST", "/start_profile", {"profile_prefix": "no spaces"}, None),
    ("POST", "/start_profile", {"profile_prefix": 5}, None),
    ("POST", "/start_profile", {"delay_iterations": -1}, None),
    ("POST", "/start_profile", {"max_iterations": True}, None),
    ("POST", "/start_profile", {"profile_prefix": "run-1", "max_iterations": 3}, None),
    ("POST", "/start_profile", {}, None),  # 409: one session at a time
    ("POST", "/stop_profile", None, None),
    ("POST", "/start_profile", None, None),
    ("POST", "/stop_profile", None, None),
]
MASKED = ("id", "created", "system_fingerprint")


@pytest.fixture(scope="module")
def servers(tiny_model_dir, tmp_path_factory):
    """(ours, vLLM's), each on its own mock engine; vLLM's starts first (slower).
    A --chat-template: /tokenizer_info shows its text (and chat renders with it)."""
    require_vllm()
    template = tmp_path_factory.mktemp("template") / "chat.jinja"
    template.write_text(TEMPLATE)
    flags = (*FLAGS, "--chat-template", str(template))
    theirs = vllm_on_mock(tiny_model_dir, tmp_path_factory.mktemp("vllm-ops"), *flags,
                          engine_args=ENGINE, env=DEV_MODE)
    ours = None
    try:
        ours = ours_on_mock(tiny_model_dir, tmp_path_factory.mktemp("ours-ops"), *flags,
                            engine_args=ENGINE, env={**DEV_MODE, **OFFLINE})
        theirs.frontend.wait_ready()
        yield ours, theirs
    finally:
        if ours is not None:
            ours.stop()
        theirs.stop()


def comparable(answer: Answer):
    value = answer.value
    if isinstance(value, dict):
        value = {k: ("<masked>" if k in MASKED else v) for k, v in value.items()}
    return answer.status, answer.content_type.split(";")[0], value


@pytest.mark.parametrize("method,path,body,headers", CASES,
                         ids=[f"{i}-{c[0]}{c[1]}" for i, c in enumerate(CASES)])
def test_same_answer_as_vllm(servers, method, path, body, headers):
    ours, theirs = servers
    o = call(ours.url, method, path, body, headers=headers)
    t = call(theirs.url, method, path, body, headers=headers)
    assert comparable(o) == comparable(t), (o.body[:1500], t.body[:1500])


def test_server_info_has_vllms_sections(servers):
    """/server_info is approximate (no VllmConfig here): the same three keys,
    a text config, a JSON config of VllmConfig's section names, the
    VLLM_SERVER_DEV_MODE setting among the environment."""
    ours, theirs = servers
    for config_format, kind in (("text", str), ("json", dict)):
        o = call(ours.url, "GET", f"/server_info?config_format={config_format}").value
        t = call(theirs.url, "GET", f"/server_info?config_format={config_format}").value
        assert set(o) == set(t) == {"vllm_config", "vllm_env", "system_env"}
        assert isinstance(o["vllm_config"], kind) and isinstance(t["vllm_config"], kind)
        if kind is dict:
            assert set(o["vllm_config"]) <= set(t["vllm_config"]), o["vllm_config"]
        assert str(o["vllm_env"]["VLLM_SERVER_DEV_MODE"]).lower() in ("1", "true")
        assert str(t["vllm_env"]["VLLM_SERVER_DEV_MODE"]).lower() in ("1", "true")


def _open_stream(url: str, path: str, body: dict) -> RawRequest:
    raw = RawRequest(url, path, {**body, "stream": True})
    raw.read_until(b"data: ", count=2)  # the stream is running: a few tokens are out
    return raw


LONG = {"prompt": "Hello", "max_tokens": 1000, "ignore_eos": True, "temperature": 0}


def test_load_counts_streams_until_they_end(servers):
    """Both: /load counts an open stream (and /invocations' one) until it is closed."""
    for server in servers:
        assert call(server.url, "GET", "/load").value == {"server_load": 0}
        first = _open_stream(server.url, "/v1/completions", {"model": "tiny", **LONG})
        second = _open_stream(server.url, "/invocations", LONG)
        assert call(server.url, "GET", "/load").value == {"server_load": 2}
        ids = [sse_events(r.received)[0]["id"] for r in (first, second)]
        call(server.url, "POST", "/abort_requests",
             {"request_ids": [f"{i}-0" for i in ids]})
        for r in (first, second):
            r.read_all()
            events = sse_events(r.received)
            assert events[-1] == "[DONE]", events[-3:]
            assert events[-2]["choices"][0]["finish_reason"] == "abort", events[-3:]
            r.close()
        wait_for(lambda: call(server.url, "GET", "/load").value == {"server_load": 0}, 30)


def test_pause_abort_ends_open_streams_as_vllm_does(servers):
    """/pause (abort): the engine aborts what it runs; each stream's last chunk
    says finish_reason "abort", then [DONE], on both servers."""
    finals = []
    for server in servers:
        raw = _open_stream(server.url, "/v1/chat/completions",
                           {"model": "tiny", "messages": CHAT["messages"], "max_tokens": 1000,
                            "ignore_eos": True})
        assert b"[DONE]" not in raw.received  # open when the pause comes
        done = threading.Event()
        threading.Thread(target=lambda: (raw.read_all(), done.set()), daemon=True).start()
        assert call(server.url, "POST", "/pause?mode=abort").value == {"status": "paused"}
        assert done.wait(30)
        events = sse_events(raw.received)
        assert events[-1] == "[DONE]", events[-3:]
        last = events[-2]
        # (its text may hold the last tokens, when the abort came with them)
        finals.append((last["choices"][0]["finish_reason"], set(last["choices"][0]["delta"])))
        raw.close()
        assert call(server.url, "POST", "/resume").value == {"status": "resumed"}
    assert finals[0] == finals[1] and finals[0][0] == "abort", finals


def test_invocations_streams_as_vllm(servers):
    """A streamed /invocations completion: the same chunks (ids and times
    aside; consecutive steps merged into one chunk where either server's
    client side lagged), then the usage chunk and [DONE]."""
    body = {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}}
    runs = []
    for server in servers:
        raw = RawRequest(server.url, "/invocations", body)
        raw.read_all()
        raw.close()
        runs.append([e if e == "[DONE]" else {k: v for k, v in e.items() if k not in MASKED}
                     for e in sse_events(raw.received)])
    ours, theirs = runs
    assert ours[-2:] == theirs[-2:] and ours[-1] == "[DONE]" and not ours[-2]["choices"], runs
    assert match_coarsening(ours[:-2], theirs[:-2]), runs


def test_pause_keep_freezes_and_resume_continues(servers):
    """/pause (keep): the stream stays open and paused; after /resume it gets
    tokens again; /abort_requests (all in flight) ends it with "abort"."""
    for server in servers:
        raw = _open_stream(server.url, "/v1/completions", {"model": "tiny", **LONG})
        assert call(server.url, "POST", "/pause?mode=keep&clear_cache=false").value == {
            "status": "paused"}
        assert call(server.url, "GET", "/is_paused").value == {"is_paused": True}
        assert b"[DONE]" not in raw.received
        seen = raw.received.count(b"data: ")
        assert call(server.url, "POST", "/resume").value == {"status": "resumed"}
        raw.read_until(b"data: ", count=seen + 2)  # it runs again
        answer = call(server.url, "POST", "/abort_requests", {})
        assert answer.value == {"status": "aborted", "aborted": 1}
        raw.read_all()
        raw.close()
        events = sse_events(raw.received)
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "abort"


def test_pause_wait_returns_once_running_requests_finish(servers):
    """/pause (wait): the answer comes when the stream has finished by itself."""
    for server in servers:
        raw = _open_stream(server.url, "/v1/completions",
                           {"model": "tiny", **LONG, "max_tokens": 60})
        assert call(server.url, "POST", "/pause?mode=wait").value == {"status": "paused"}
        if server is servers[0]:  # ours: its table says the request is over
            assert server.frontend.debug_state()["table"] == 0
        raw.read_all()
        raw.close()
        events = sse_events(raw.received)
        assert events[-2]["choices"][0]["finish_reason"] == "length", events[-3:]
        assert call(server.url, "POST", "/resume").value == {"status": "resumed"}


def test_tokenizer_info_shows_the_chat_template_flag(servers):
    for server in servers:
        info = call(server.url, "GET", "/tokenizer_info").value
        assert info["chat_template"] == TEMPLATE
        assert info["tokenizer_class"] == "TokenizerPoolCachedTokenizersBackend"


# A P/D-style round trip: the request asks its (mock) prefill engine for a
# remote decode; the engine's KV connector answers on the finishing output
# with where to pull the KV cache from, and both servers return that in the
# non-streaming response (a stream never carries it, in vLLM either).
KV_ASK = {"do_remote_decode": True, "do_remote_prefill": False}
KV_BODIES = {
    "/v1/completions": {"model": "tiny", "prompt": ["Hello", "World"], "max_tokens": 3,
                        "kv_transfer_params": KV_ASK},
    "/v1/chat/completions": {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
                             "max_tokens": 3, "kv_transfer_params": KV_ASK},
    "/inference/v1/generate": {"token_ids": [1, 2, 3, 4], "sampling_params": {"max_tokens": 3},
                               "kv_transfer_params": KV_ASK},
}


@pytest.mark.parametrize("path", list(KV_BODIES))
def test_kv_transfer_params_round_trip_as_vllm(servers, path):
    ours, theirs = servers
    o = call(ours.url, "POST", path, KV_BODIES[path])
    t = call(theirs.url, "POST", path, KV_BODIES[path])
    assert o.status == t.status == 200, (o.body[:500], t.body[:500])
    returned = o.value["kv_transfer_params"]
    assert returned is not None and returned["do_remote_prefill"] is True  # the engine's answer
    assert returned == t.value["kv_transfer_params"]
    assert o.value["ec_transfer_params"] is t.value["ec_transfer_params"] is None
    streamed = {**KV_BODIES[path], "stream": True}
    o, t = call(ours.url, "POST", path, streamed), call(theirs.url, "POST", path, streamed)
    assert b"kv_transfer_params" not in o.body and b"kv_transfer_params" not in t.body
