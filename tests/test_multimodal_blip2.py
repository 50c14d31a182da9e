"""A second multimodal family, BLIP-2, against real engines in parity with vLLM's server.

The tiny BLIP-2 (``harness.tiny_blip2``) differs from the Idefics3 of
tests/test_multimodal.py where a frontend can go wrong: its chat template has
no image placeholder (vLLM's processor inserts the 4 query tokens at the start
of the prompt), it takes one image a prompt, and it has no chat template of its
own (both servers get the same ``--chat-template``). One pair of engines for
the module (``serve_pair``), a handful of shapes compared as
tests/test_multimodal.py compares them, and greedy output checked once against
transformers on the same image bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import tiny_blip2
from harness.models import tiny_blip2_dir
from harness.procs import REPO_ROOT
from tests.support.multimodal import serve_pair
from tests.support.requirements import require_vllm
from tests.test_chat_parity import Shape, assert_same, send
from tests.test_multimodal import (
    BLUE,
    CHAT,
    GENERATE_FIELDS,
    GREEN_JPEG,
    RED,
    _resolve,
    check_generate,
    image,
    local,
    shape,
    text,
    tok,
    user,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

ONE = [user(text("What is this?"), image(RED))]
IMAGE_TOKEN_ID = 1207  # <image>, added after the tiny Llama's vocabulary

SHAPES = [
    shape("one-image", ONE),
    shape("image-only", [user(image(BLUE))]),
    shape("jpeg-data-url", [user(image(GREEN_JPEG, "image/jpeg"), text("and this?"))]),
    shape("local-file", [user(text("from disk"), local("red.png"))]),
    shape(
        "image-in-an-earlier-turn",
        [
            user(text("first"), image(BLUE)),
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "and now?"},
        ],
    ),
    shape("n-2-seeded", ONE, n=2, temperature=1.0, seed=5),
    shape("system-and-image", [{"role": "system", "content": "Describe images."}, *ONE]),
    shape("logprobs", ONE, logprobs=True, top_logprobs=2),
    shape("stream", ONE, stream=True, stream_options={"include_usage": True}),
    shape(
        "stream-local-file-n-2", [user(local("red.png"))], stream=True, n=2, temperature=1.0, seed=9
    ),
    shape("error-two-images", [user(image(RED), text("and"), image(BLUE))]),
    shape(
        "error-images-in-two-turns",
        [user(image(RED)), {"role": "assistant", "content": "ok"}, user(image(BLUE))],
    ),
    shape("error-broken-image", [user(image("data:image/png;base64,AAAA"))]),
    tok("one-image", ONE),
    tok(
        "local-file-no-generation-prompt",
        [user(local("red.png"), text("x"))],
        add_generation_prompt=False,
    ),
    tok("error-two-images", [user(image(RED), image(RED))]),
]


@pytest.fixture(scope="module")
def model_dir():
    require_vllm()
    return tiny_blip2_dir()


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory):
    template = str(model_dir / tiny_blip2.CHAT_TEMPLATE_FILE)
    with serve_pair(
        model_dir,
        tmp_path_factory.mktemp("blip2"),
        "--chat-template",
        template,
        limit='{"image": 1}',
    ) as pair:
        (pair.media_dir / "red.png").write_bytes(RED)
        yield pair


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_parity(s: Shape, servers) -> None:
    s = Shape(s.id, _resolve(s.body, str(servers.media_dir)), s.path)
    ours = send(servers.ours.url, s)
    theirs = send(servers.vllm.url, s)
    assert_same(s, ours, theirs)
    if s.path == CHAT and ours.status == 200 and not s.stream:
        prompt = ours.json()["prompt_token_ids"]
        assert prompt[: tiny_blip2.NUM_QUERY_TOKENS] == [IMAGE_TOKEN_ID] * 4  # before the text
        assert prompt.count(IMAGE_TOKEN_ID) == tiny_blip2.NUM_QUERY_TOKENS
    servers.ours.wait_idle()


def test_greedy_output_matches_transformers(servers, model_dir, tmp_path) -> None:
    """The same image bytes through transformers' Blip2Processor and model give
    the prompt ids and greedy tokens our frontend's engine produced."""
    ours = send(servers.ours.url, shape("hf", ONE)).json()
    path = tmp_path / "red.png"
    path.write_bytes(RED)
    script = tmp_path / "hf.py"
    script.write_text(HF_SCRIPT)
    prompt = "What is this?\nAnswer:"  # CHAT_TEMPLATE on ONE
    result = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(path), prompt],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hf = json.loads(result.stdout.strip().splitlines()[-1])
    assert ours["prompt_token_ids"] == hf["prompt"]
    assert ours["choices"][0]["token_ids"] == hf["generated"]


HF_SCRIPT = r"""
import json, sys
import torch
from PIL import Image
from transformers import AutoProcessor, Blip2ForConditionalGeneration
model_dir, path, text = sys.argv[1:]
processor = AutoProcessor.from_pretrained(model_dir)
model = Blip2ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
inputs = processor(images=Image.open(path).convert("RGB"), text=text, return_tensors="pt",
                   add_special_tokens=False)
out = model.generate(**inputs, max_new_tokens=8, do_sample=False)[0].tolist()
prompt = inputs["input_ids"][0].tolist()
print(json.dumps({"prompt": prompt, "generated": out[len(prompt):] if out[:len(prompt)] == prompt
                  else out}))
"""


@pytest.mark.parametrize("id", list(GENERATE_FIELDS))
def test_generate_with_features(id: str, servers) -> None:
    """/inference/v1/generate with /render's features: BLIP-2's placeholders
    are dense (its query tokens only), so they run on vLLM's server too."""
    check_generate(servers, ONE, GENERATE_FIELDS[id])
