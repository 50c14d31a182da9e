"""The multimodal tests' servers: our frontend and vLLM's on the tiny VLM.

``mm_servers`` (module): two headless real engines on the tiny Idefics3 VLM
(``harness.tiny_vlm``), our frontend on one (with its processor worker) and
vLLM's own ``vllm serve`` API server on the other, both with the same media
flags: at most two images a prompt, local files under ``media_dir``. ``serve_pair``
starts the same four on another model (tests/test_multimodal_blip2.py). All four
start at once (~40 s of two cores), and stop at the end of the module.

``images``: deterministic PNG/JPEG bytes (PIL, no torch) as data: URLs, and as
files under ``media_dir`` for file:// URLs.
"""

from __future__ import annotations

import base64
import contextlib
import io
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.engines import RealEngine, stop_all
from harness.frontend import FrontendProcess
from harness.models import tiny_vlm_dir
from harness.vllm_server import VllmFrontend
from tests.support.requirements import require_vllm

LIMIT = '{"image": 2}'


def media_flags(media_dir: Path, limit: str = LIMIT) -> list[str]:
    return ["--limit-mm-per-prompt", limit, "--allowed-local-media-path", str(media_dir)]


def png(color: tuple[int, int, int], size: tuple[int, int] = (40, 24), fmt: str = "PNG") -> bytes:
    """An image with a color gradient (so that its pixels, not only its size, matter)."""
    from PIL import Image

    image = Image.new("RGB", size)
    r, g, b = color
    image.putdata([((r + 5 * x) % 256, (g + 7 * y) % 256, b) for y in range(size[1])
                   for x in range(size[0])])
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@dataclass
class MultimodalServers:
    ours: FrontendProcess
    vllm: VllmFrontend
    media_dir: Path


@pytest.fixture(scope="module")
def mm_model_dir() -> Path:
    require_vllm()
    return tiny_vlm_dir()


@pytest.fixture(scope="module")
def mm_servers(mm_model_dir, tmp_path_factory) -> Iterator[MultimodalServers]:
    with serve_pair(mm_model_dir, tmp_path_factory.mktemp("multimodal")) as servers:
        yield servers


@contextlib.contextmanager
def serve_pair(model_dir: Path, workdir: Path, *flags: str, limit: str = LIMIT,
               engine_flags: tuple[str, ...] = ()) -> Iterator[MultimodalServers]:
    """Our frontend and vLLM's server on two real engines on ``model_dir``, both
    given ``media_flags`` (with ``limit``) and ``flags``; the engines ``engine_flags``."""
    media_dir = workdir / "media"
    media_dir.mkdir()
    flags = (*media_flags(media_dir, limit), *flags)
    engines = [RealEngine.launch(model_dir, workdir / f"engine-{i}.log", "--limit-mm-per-prompt",
                                 limit, *engine_flags) for i in range(2)]
    vllm = VllmFrontend(engines[1], model_dir, workdir / "vllm-serve.log", *flags)
    ours = FrontendProcess(engines[0].handshake_addr, model_dir, workdir,
                           "--mm-processor-workers", "1", *flags)
    try:
        ours.wait_healthy()
        vllm.wait_ready()
        yield MultimodalServers(ours, vllm, media_dir)
    finally:
        ours.stop(signal.SIGTERM)
        vllm.stop()
        stop_all(engines)
