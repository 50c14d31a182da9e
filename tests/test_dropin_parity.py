"""Started like ``vllm serve``: each start-up serves chat as vLLM's server does.

Our frontend re-attaches to the session's real engine with each command line;
vLLM's unmodified ``vllm serve`` API server answers the same requests on a
real engine of its own with the same model. Compared: whole chat responses
(greedy; ids and times masked), with ``return_token_ids`` so that the
rendered prompt ids are part of the comparison, and a stream's text.

* the tiny model as a Hub id from a Hugging Face cache built here (offline);
* ``--config`` YAML (flat keys and a nested mapping) naming the model;
* a deployment's ``vllm serve`` command line copied unchanged (``vllm``
  replaced by ``frontend``), the model by its Hub id;
  these three against the session's ``vllm_frontend`` (same files);
* each tokenizer layout (``--tokenizer-mode`` hf on a sentencepiece and on a
  tiktoken ``tokenizer.model``, mistral on ``tekken.json``) against a vLLM
  server started on that layout: three more vLLM servers, one at a time.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from harness.ports import HOST
from harness.vllm_server import VllmFrontend
from tests.support import model_layouts
from tests.support.http_client import get, post
from tests.support.parser_diff import masked

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

HUB_ID = "acme/tiny-chat"
CHAT = "/v1/chat/completions"
REQUESTS = [
    {"model": "tiny", "messages": [{"role": "user", "content": "Hi there"}],
     "max_tokens": 12, "temperature": 0, "return_token_ids": True},
    {"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "Tell me a story, ünïcode 日本"}],
     "max_tokens": 16, "temperature": 0, "return_token_ids": True, "logprobs": True,
     "top_logprobs": 2},
]


def chat(url: str, body: dict) -> dict:
    reply = post(url, CHAT, body)
    assert reply.status == 200, reply.body[:2000]
    return masked(reply.json)


def stream_text(url: str, body: dict) -> str:
    reply = post(url, CHAT, {**body, "stream": True})
    assert reply.status == 200, reply.body[:2000]
    text = ""
    for line in reply.body.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                text += choice["delta"].get("content") or ""
    return text


def assert_same_chat(ours_url: str, theirs_url: str, *, root: str | None = None) -> None:
    """``root``: our /v1/models root where vLLM's server was given the model's
    directory instead (it is the model as given: a Hub id stays one)."""
    models = [masked(get(url, "/v1/models").json) for url in (ours_url, theirs_url)]
    for mine, listing in enumerate(models):
        for card in listing["data"]:
            card.pop("created", None)
            if root is not None:
                assert mine or card.pop("root") == root
                card.pop("root", None)
    assert models[0] == models[1]
    for body in REQUESTS:
        ours, theirs = chat(ours_url, body), chat(theirs_url, body)
        assert ours == theirs, body
        assert ours["prompt_token_ids"]  # the rendered prompt was compared
        plain = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
        assert stream_text(ours_url, plain) == theirs["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def hf_home(tiny_model_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("hf-home")
    model_layouts.hub_cache(tiny_model_dir, home, HUB_ID)
    return home


@pytest.fixture
def offline(hf_home) -> dict[str, str]:
    return {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}


def test_a_hub_id_from_the_cache_serves_as_vllm(vllm_frontend, real_stack, offline):
    with real_stack.restarted("--model", HUB_ID, env=offline) as fe:
        assert_same_chat(fe.url, vllm_frontend.url, root=HUB_ID)
        assert "resolving acme/tiny-chat through the Hugging Face cache (offline)" in fe.log()


def test_a_config_file_serves_as_vllm(vllm_frontend, real_stack, offline, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text(f"""\
model: {HUB_ID}
served_model_name: tiny
max-model-len: 1024
dtype: float32
gpu-memory-utilization: 0.85
enable-prefix-caching: true
enforce-eager: false
generation-config: vllm
compilation-config:
  mode: 0
  cudagraph_capture_sizes: [1, 2, 4]
""")
    # The stack's own command line names --model and the name; the file's are
    # placed before them (command line > file), so the stack's line is left
    # out here: a frontend started from the file alone.
    argv = ["--config", str(config), "--host", HOST,
            "--engine-addr", real_stack.engine.handshake_addr,
            "--engine-state-file", str(real_stack.state_file), "--enable-debug-endpoints"]
    with real_stack.restarted(argv=argv, env=offline) as fe:
        assert_same_chat(fe.url, vllm_frontend.url, root=HUB_ID)
        log = fe.log()
        assert "engine flags: not used by the frontend: --max-model-len 1024 --dtype float32 " \
               "--gpu-memory-utilization 0.85 --enable-prefix-caching --no-enforce-eager " \
               '--compilation-config {"mode": 0, "cudagraph_capture_sizes": [1, 2, 4]}' in log
        assert "resolving acme/tiny-chat" in log


def test_a_deployments_vllm_serve_line_serves_as_vllm(vllm_frontend, real_stack, offline,
                                                       tmp_path):
    """The line a deployment runs, with `vllm` replaced by `frontend`: the model
    by Hub id, engine and server flags mixed, the engine's address given the
    way a multi-node vLLM deployment gives it. The state file is where the
    frontend looks by default for that address, so nothing is added."""
    port = real_stack.engine.handshake_addr.rsplit(":", 1)[1]
    line = (f"serve {HUB_ID} --served-model-name tiny --host {HOST} "
            "--tensor-parallel-size 1 --pipeline-parallel-size 1 --max-model-len 1024 "
            "--dtype float32 --gpu-memory-utilization 0.90 --enable-prefix-caching "
            "--max-num-seqs 64 --max-num-batched-tokens 8192 --kv-cache-dtype auto "
            "--enable-chunked-prefill --trust-remote-code --uvicorn-log-level warning "
            "--disable-uvicorn-access-log --max-log-len 100 "
            f"--data-parallel-address {HOST} --data-parallel-rpc-port {port}")
    runtime = tmp_path / "run"
    runtime.mkdir()
    safe = re.sub(r"[^A-Za-z0-9]+", "_", f"tcp://{HOST}:{port}").strip("_")
    shutil.copy(real_stack.state_file, runtime / f"vllm-frontend-{safe}.state")
    with real_stack.restarted(argv=line.split(),
                              env={**offline, "XDG_RUNTIME_DIR": str(runtime)}) as fe:
        assert_same_chat(fe.url, vllm_frontend.url, root=HUB_ID)
        log = fe.log()
        assert "engine flags: not used by the frontend: --tensor-parallel-size 1" in log
        assert ("vllm serve flags this frontend does not implement (ignored): "
                "--uvicorn-log-level warning\n") in log
        assert "without --api-key" not in log  # loopback only


LAYOUTS = {
    "sentencepiece": (model_layouts.sentencepiece_layout, "hf"),
    "tiktoken": (model_layouts.tiktoken_layout, "hf"),
    "tekken": (model_layouts.tekken_layout, "mistral"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_tokenizer_layout_serves_as_vllm(layout, start_real_engine, real_stack,
                                              tiny_model_dir, tmp_path):
    build, mode = LAYOUTS[layout]
    model_dir = build(tiny_model_dir, tmp_path / layout)
    engine = start_real_engine()
    theirs = VllmFrontend(engine, model_dir, tmp_path / "vllm-serve.log",
                          "--tokenizer-mode", mode)
    try:
        with real_stack.restarted("--model", str(model_dir), "--tokenizer-mode", mode) as fe:
            assert_same_chat(fe.url, theirs.url)
            assert f"(tokenizer mode {mode})" in fe.log()
    finally:
        theirs.stop()
        engine.stop()
