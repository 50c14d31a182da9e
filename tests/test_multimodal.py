"""Multimodal chat (images) against real engines, in parity with vLLM's server.

Our frontend and vLLM 0.32's own ``vllm serve`` API server each run on a real
engine with the tiny Idefics3 VLM (``tests/support/multimodal.py``), with the
same flags (at most two images a prompt, local files under one directory).
Every shape goes to both, one at a time, and the answers must be equal the way
tests/test_chat_parity.py compares them: prompt token ids (``return_token_ids``:
the expanded image placeholders), output token ids, text, usage, logprobs,
streams chunk for chunk (up to vLLM's merging), errors with vLLM's 400 text.

Also: greedy output checked once against transformers on the same image bytes,
a client that hangs up while its image is still being fetched (nothing reaches
the engine, the worker is free at once), and a text-only model starts no worker.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from frontend.multimodal.detect import is_multimodal
from harness.procs import REPO_ROOT
from harness.waits import wait_for
from tests.support.multimodal import data_url, png, serve_pair
from tests.support.stacks import engine_requests
from tests.test_chat_parity import Shape, assert_same, send

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

CHAT = "/v1/chat/completions"
RED = png((200, 10, 10))
BLUE = png((10, 10, 200))
GREEN_JPEG = png((10, 180, 40), fmt="JPEG")
WIDE = png((90, 90, 20), size=(96, 40))
TALL = png((30, 120, 160), size=(20, 70))
FILES = {"red.png": RED, "green.jpg": GREEN_JPEG}
FILE = "file://{media_dir}/"  # completed per server (see _resolve)


def image(data: bytes | str, mime: str = "image/png", **extra: Any) -> dict:
    url = data if isinstance(data, str) else data_url(data, mime)
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def local(name: str) -> dict:
    return image(FILE + name)


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def user(*parts: Any) -> dict:
    return {"role": "user", "content": list(parts)}


ONE = [user(text("What is in this picture?"), image(RED))]
TWO = [user(text("Compare"), image(RED), text("with"), image(BLUE))]


def shape(id: str, messages: list, **body: Any) -> Shape:
    return Shape(id, {"model": "tiny", "messages": messages, "temperature": 0,
                      "max_tokens": 8, "return_token_ids": True, **body})


def tok(id: str, messages: list, **body: Any) -> Shape:
    return Shape(f"tokenize-{id}", {"model": "tiny", "messages": messages, **body}, "/tokenize")


SHAPES = [
    shape("one-image", ONE),
    shape("image-first", [user(image(RED), text("What is this?"))]),
    shape("image-only", [user(image(BLUE))]),
    shape("two-images", TWO),
    shape("same-image-twice", [user(image(RED), image(RED), text("twins?"))]),
    shape("jpeg", [user(text("and this?"), image(GREEN_JPEG, "image/jpeg"))]),
    shape("wide-image-resized", [user(image(WIDE), text("wide"))]),
    shape("tall-image-resized", [user(text("tall"), image(TALL))]),
    shape("detail-low", [user(text("low detail"), image(RED, detail="low"))]),
    shape("input-image-part", [user(text("responses style"),
                                    {"type": "input_image", "image_url": data_url(BLUE)})]),
    shape("part-with-uuid", [user(text("named"), {**image(RED), "uuid": "red-1"})]),
    shape("local-file", [user(text("from disk"), local("red.png"))]),
    shape("local-jpeg", [user(local("green.jpg"), text("from disk"))]),
    shape("file-and-data-url", [user(local("red.png"), image(BLUE), text("two sources"))]),
    shape("images-in-two-turns", [
        user(text("first"), image(RED)),
        {"role": "assistant", "content": "A red square."},
        user(text("and now"), image(BLUE))]),
    shape("system-and-image", [
        {"role": "system", "content": "You describe images."}, *ONE]),
    shape("string-content-turns", [
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}, *ONE]),
    shape("continue-final-message", [
        *ONE, {"role": "assistant", "content": "It shows"}],
        continue_final_message=True, add_generation_prompt=False),
    shape("no-generation-prompt", ONE, add_generation_prompt=False),
    shape("max-tokens-1", ONE, max_tokens=1),
    shape("max-completion-tokens", ONE, max_tokens=None, max_completion_tokens=5),
    shape("logprobs", ONE, logprobs=True, top_logprobs=2),
    shape("seeded-sampling", TWO, temperature=0.9, seed=7),
    shape("n-2-seeded", ONE, n=2, temperature=1.0, seed=11),
    shape("n-3-greedy", TWO, n=3),
    shape("stop-token", ONE, stop_token_ids=[204], max_tokens=16),
    shape("long-output", ONE, max_tokens=40),
    shape("stream-one-image", ONE, stream=True),
    shape("stream-two-images", TWO, stream=True),
    shape("stream-usage", ONE, stream=True, stream_options={"include_usage": True}),
    shape("stream-n-2", ONE, stream=True, n=2, temperature=1.0, seed=3),
    shape("stream-logprobs", [user(image(BLUE), text("?"))], stream=True, logprobs=True,
          top_logprobs=1),
    shape("stream-local-file", [user(local("green.jpg"))], stream=True),
    shape("error-three-images", [user(image(RED), image(BLUE), image(RED))]),
    shape("error-three-images-in-turns", [
        user(image(RED), image(BLUE)), {"role": "assistant", "content": "ok"},
        user(image(RED))]),
    shape("error-broken-image", [user(text("?"), image("data:image/png;base64,AAAA"))]),
    shape("error-not-an-image", [user(image(b"plain text, not pixels", "image/png"))]),
    shape("error-file-outside-allowed-dir", [user(image("file:///etc/hostname"))]),
    shape("error-missing-file", [user(local("absent.png"))]),
    shape("error-stream-broken-image", [user(image("data:image/png;base64,AAAA"))],
          stream=True),
    Shape("anthropic-image-block", {
        "model": "tiny", "max_tokens": 8, "temperature": 0, "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": data_url(RED).split(",", 1)[1]}}]}]},
          "/v1/messages"),
    tok("one-image", ONE),
    tok("two-images", TWO),
    tok("no-generation-prompt", TWO, add_generation_prompt=False),
    tok("local-file", [user(local("red.png"), text("x"))]),
    tok("error-three-images", [user(image(RED), image(RED), image(RED))]),
]


def _resolve(value: Any, media_dir: str) -> Any:
    if isinstance(value, str):
        return value.replace("{media_dir}", media_dir)
    if isinstance(value, list):
        return [_resolve(v, media_dir) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, media_dir) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def servers(mm_servers):
    for name, data in FILES.items():
        (mm_servers.media_dir / name).write_bytes(data)
    return mm_servers


def test_enough_shapes() -> None:
    ids = [s.id for s in SHAPES]
    assert len(ids) == len(set(ids)) and len(ids) >= 40


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_parity(s: Shape, servers) -> None:
    s = Shape(s.id, _resolve(s.body, str(servers.media_dir)), s.path)
    ours = send(servers.ours.url, s)
    theirs = send(servers.vllm.url, s)
    assert_same(s, ours, theirs)
    if s.path == CHAT and ours.status == 200 and not s.stream:
        prompt = ours.json()["prompt_token_ids"]
        assert prompt.count(IMAGE_TOKEN_ID) == 4 * _images(s.body["messages"])
    servers.ours.wait_idle()


IMAGE_TOKEN_ID = 1208  # <image> of the tiny VLM: 4 per image (32x32, patch 8, pixel shuffle 2)


def _images(messages: list) -> int:
    return sum(1 for m in messages if isinstance(m["content"], list)
               for p in m["content"] if p.get("type") in ("image_url", "input_image"))


# ------------------------------------------------------------------ transformers

def test_greedy_output_matches_transformers(servers, mm_model_dir, tmp_path) -> None:
    """The same image bytes through transformers' processor and model give the
    prompt ids and greedy tokens our frontend's engine produced."""
    ours = send(servers.ours.url, shape("hf", TWO, max_tokens=6)).json()
    image_paths = []
    for name, data in (("a.png", RED), ("b.png", BLUE)):
        (tmp_path / name).write_bytes(data)
        image_paths.append(str(tmp_path / name))
    script = tmp_path / "hf.py"
    script.write_text(HF_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), str(mm_model_dir), json.dumps(image_paths)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    hf = json.loads(result.stdout.strip().splitlines()[-1])
    assert ours["prompt_token_ids"] == hf["prompt"]
    assert ours["choices"][0]["token_ids"] == hf["generated"]


HF_SCRIPT = r"""
import json, sys
import torch
from PIL import Image
from transformers import AutoProcessor, Idefics3ForConditionalGeneration
model_dir, paths = sys.argv[1], json.loads(sys.argv[2])
processor = AutoProcessor.from_pretrained(model_dir)
model = Idefics3ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
messages = [{"role": "user", "content": [{"type": "text", "text": "Compare"}, {"type": "image"},
            {"type": "text", "text": "with"}, {"type": "image"}]}]
text = processor.apply_chat_template(messages, add_generation_prompt=True)
images = [Image.open(p).convert("RGB") for p in paths]
inputs = processor(text=text, images=[images], return_tensors="pt", add_special_tokens=False)
out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
prompt = inputs["input_ids"][0].tolist()
print(json.dumps({"prompt": prompt, "generated": out[0][len(prompt):].tolist()}))
"""


# ------------------------------------------------------------------ hang-up

class SlowImage(BaseHTTPRequestHandler):
    """Serves a PNG after ``delay`` seconds: ``started`` is set when asked,
    ``done`` once it tried."""

    delay = 8.0
    started = threading.Event()
    done = threading.Event()

    def do_GET(self) -> None:
        self.started.set()
        time.sleep(self.delay)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(RED)))
            self.end_headers()
            self.wfile.write(RED)
        except OSError:  # (the worker's fetch is gone)
            pass
        finally:
            self.done.set()

    def log_message(self, *args: Any) -> None:
        pass


def test_hang_up_while_the_image_is_fetched(servers) -> None:
    """The client leaves while the worker fetches its image: the fetch is
    cancelled (the worker is free long before the image would have come),
    nothing reaches the engine, and the next request is served."""
    slow = ThreadingHTTPServer(("127.0.0.1", 0), SlowImage)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{slow.server_address[1]}/slow.png"
        before = engine_requests(servers.ours.url)
        body = json.dumps({"model": "tiny", "messages": [user(text("slow"), image(url))],
                           "max_tokens": 4, "stream": True}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", servers.ours.port, timeout=30)
        conn.request("POST", CHAT, body=body, headers={"Content-Type": "application/json"})
        assert SlowImage.started.wait(60), "the worker never fetched the image"
        assert servers.ours.debug_state()["mm_processing"] == 1
        left_at = time.monotonic()
        conn.close()  # the client hangs up
        wait_for(lambda: servers.ours.debug_state()["mm_processing"] == 0, 10, interval=0.02,
                 message="the worker is still busy with a request whose client left")
        assert time.monotonic() - left_at < SlowImage.delay / 2  # not freed by the image
        assert SlowImage.done.wait(SlowImage.delay * 2)  # the image would have come by now
        state = servers.ours.wait_idle()
        assert state["table"] == 0
        assert engine_requests(servers.ours.url) == before  # no ADD, hence no abort
        ok = send(servers.ours.url, shape("after-hang-up", ONE))
        assert ok.status == 200, ok.body
    finally:
        slow.shutdown()


def test_only_multimodal_models_start_workers(tiny_model_dir, mm_model_dir) -> None:
    assert is_multimodal(str(mm_model_dir))
    assert not is_multimodal(str(tiny_model_dir))  # the text model's RSS and start-up stay


def test_a_dead_worker_is_not_asked_again(mm_model_dir) -> None:
    """The pool on its own (no engine): a worker renders a request with vLLM's
    code, answers a bad one with vLLM's 400, and once its process is gone the
    pool answers 503 instead of waiting on it."""
    from frontend.errors import ApiError
    from frontend.multimodal.chat import render
    from frontend.multimodal.pool import ProcessorPool, Settings
    from frontend.openai.chat_request import ChatCompletionRequest

    async def run() -> None:
        engine_args = {"model": str(mm_model_dir), "limit_mm_per_prompt": {"image": 2}}
        renderer = {"chat_template": None, "chat_template_content_format": "auto"}
        pool = ProcessorPool(Settings(engine_args, renderer, workers=1))
        await pool.spawn()
        try:
            await pool.configure(1024, "float32")
            prompt = await render(pool, ChatCompletionRequest(messages=ONE), None)
            assert prompt.token_ids.count(IMAGE_TOKEN_ID) == 4 and len(prompt.features) == 3
            with pytest.raises(ApiError) as refused:
                await render(pool, ChatCompletionRequest(messages=[user(*[image(RED)] * 3)]),
                             None)
            assert refused.value.status == 400 and refused.value.param == "image"
            pool.workers[0].proc.kill()
            await pool.workers[0].reader
            with pytest.raises(ApiError) as gone:
                await render(pool, ChatCompletionRequest(messages=ONE), None)
            assert gone.value.status == 503
        finally:
            await pool.close()

    asyncio.run(run())


# ------------------------------------------------------------------ content forms

SOUND = "data:audio/wav;base64,UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="
HIDDEN = 64  # the tiny VLM's text hidden size: an image's embeddings are (4, 64)


def embeds(rows: int, cols: int) -> dict:
    """An ``image_embeds`` part: a torch-saved tensor, base64 (as vLLM's clients send it)."""
    import base64
    import io

    import torch

    out = io.BytesIO()
    torch.save(torch.linspace(-1, 1, steps=rows * cols).reshape(rows, cols), out)
    return {"type": "image_embeds", "image_embeds": base64.b64encode(out.getvalue()).decode()}


# On the default servers: the forms vLLM refuses without --enable-mm-embeds or
# --trust-request-mm-kwargs, and modalities the image-only model lacks.
DEFAULT_FLAG_FORMS = [
    shape("error-image-embeds-not-enabled", [user(text("x"), embeds(4, HIDDEN))]),
    shape("error-mm-processor-kwargs-untrusted", ONE,
          mm_processor_kwargs={"do_image_splitting": False}),
    shape("error-media-io-kwargs-untrusted", ONE, media_io_kwargs={"image": {"mode": "RGB"}}),
    shape("empty-mm-processor-kwargs", ONE, mm_processor_kwargs={}),
    shape("error-audio-url-part", [user(text("hear"),
                                        {"type": "audio_url", "audio_url": {"url": SOUND}})]),
    shape("error-input-audio-part", [user({"type": "input_audio", "input_audio": {
        "data": SOUND.split(",", 1)[1], "format": "wav"}})]),
    shape("error-video-url-part", [user(text("watch"), {
        "type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}})]),
    shape("error-unknown-part-type", [user(text("x"), {"type": "hologram", "hologram": {}})]),
    tok("error-audio-url", [user({"type": "audio_url", "audio_url": {"url": SOUND}})]),
]


@pytest.mark.parametrize("s", DEFAULT_FLAG_FORMS, ids=[s.id for s in DEFAULT_FLAG_FORMS])
def test_default_flag_forms(s: Shape, servers) -> None:
    test_parity(s, servers)


# Both servers with the "string" content format, trusted request kwargs and
# image embeddings (the engines too): the forms that need these flags.
TRUSTED_FLAGS = ("--chat-template-content-format", "string", "--trust-request-mm-kwargs",
                 "--enable-mm-embeds")

TRUSTED_FORMS = [
    shape("string-format-one-image", ONE),
    shape("string-format-two-images", TWO),
    shape("string-format-stream", [user(image(BLUE), text("?"))], stream=True),
    shape("string-format-turns", [
        user(text("first"), image(RED)), {"role": "assistant", "content": "red"},
        user(text("then"), image(BLUE))]),
    tok("string-format-one-image", ONE),
    shape("mm-processor-kwargs-trusted", ONE, mm_processor_kwargs={"do_image_splitting": False}),
    shape("media-io-kwargs-trusted", ONE, media_io_kwargs={"image": {"image_mode": "L"}}),
    shape("uuid-with-trusted-kwargs", [user({**image(RED), "uuid": "red-2"}, text("x"))]),
    shape("image-embeds", [user(text("embedded"), embeds(4, HIDDEN))]),
    shape("image-embeds-and-image", [user(embeds(4, HIDDEN), image(RED), text("both"))]),
    shape("error-image-embeds-wrong-hidden-size", [user(embeds(4, HIDDEN + 1))]),
    shape("error-image-embeds-not-a-tensor", [user({"type": "image_embeds",
                                                    "image_embeds": "bm90IGEgdGVuc29y"})]),
]


@pytest.fixture(scope="module")
def trusted_servers(mm_model_dir, tmp_path_factory):
    with serve_pair(mm_model_dir, tmp_path_factory.mktemp("mm-trusted"), *TRUSTED_FLAGS,
                    engine_flags=("--enable-mm-embeds",)) as pair:
        yield pair


@pytest.mark.parametrize("s", TRUSTED_FORMS, ids=[s.id for s in TRUSTED_FORMS])
def test_trusted_forms(s: Shape, trusted_servers) -> None:
    assert_same(s, send(trusted_servers.ours.url, s), send(trusted_servers.vllm.url, s))
    trusted_servers.ours.wait_idle()


# ------------------------------------------------------------------ /inference/v1/generate

GENERATE = "/inference/v1/generate"


def rendered(servers, messages: list) -> dict:
    """vLLM's /v1/chat/completions/render of ``messages``: token ids and features."""
    reply = send(servers.vllm.url, Shape("render", {"model": "tiny", "messages": messages},
                                         "/v1/chat/completions/render"))
    assert reply.status == 200, reply.body[:2000]
    return reply.json()


# Run on the dense BLIP-2 (tests/test_multimodal_blip2.py), not here: Idefics3's
# placeholder ranges hold its wrapper tokens too (7 tokens, 4 embeddings) and
# /render's features carry no is_embed mask (a TODO in vLLM's protocol), so the
# engine fails such a request, behind vLLM's server as behind ours.
GENERATE_FIELDS = {  # id -> generate request fields
    "greedy": {},
    "no-return-token-ids": {"return_token_ids": False},
    "stream": {"stream": True},
    "n-2-seeded": {"sampling_params": {"n": 2, "temperature": 1.0, "seed": 5, "max_tokens": 6}},
    "text-mode": {"output_mode": "text"},
}


def check_generate(servers, messages: list, fields: dict) -> None:
    """/render's features (from vLLM's server) sent to both servers' generate
    route: the same prompt, placeholders and tokens."""
    r = rendered(servers, messages)
    assert r["features"]["mm_placeholders"]["image"]
    body = {"model": "tiny", "token_ids": r["token_ids"], "features": r["features"],
            "sampling_params": {"max_tokens": 8, "temperature": 0},
            "return_token_ids": True, **fields}
    s = Shape("generate", body, GENERATE)
    ours, theirs = send(servers.ours.url, s), send(servers.vllm.url, s)
    assert ours.status == theirs.status == 200, (ours.body[:2000], theirs.body[:2000])
    assert _generated(ours) == _generated(theirs)
    if not s.stream and body["return_token_ids"]:
        assert ours.json()["mm_placeholders"] == r["features"]["mm_placeholders"]
    servers.ours.wait_idle()


def _generated(reply) -> Any:
    """A generate answer without its request id and creation time (each
    server's own clock second); a stream as its tokens per choice, the fields
    sent once (prompt ids, placeholders) and the last usage."""
    if reply.events is None:
        answer = reply.json()
        assert isinstance(answer.pop("created"), int)
        return {k: v for k, v in answer.items() if k != "request_id"}
    tokens: dict[int, list] = {}
    once, usage = [], None
    for event in reply.events[:-1]:
        for choice in event["choices"]:
            tokens.setdefault(choice["index"], []).extend(choice.get("token_ids") or [])
        once += [(k, event[k]) for k in ("prompt_token_ids", "mm_placeholders") if k in event]
        usage = event.get("usage") or usage
    return tokens, once, usage
