"""Pooling models on real engines, for our frontend and vLLM's, once per session.

Two models (``tools/make_tiny_pooling_models.py``), each served twice on real
engines with the same flags: our frontend on one engine, vLLM 0.32's own
``vllm serve`` API server on another:

* ``embed_servers``: the tiny Llama as an embedding model
  (``--runner pooling --convert embed``; Matryoshka dimensions, Cohere task
  instructions, the chat template);
* ``cross_encoder_servers``: the tiny BERT cross-encoder (``--runner pooling``;
  /classify, /score and /rerank with token type ids).

The four processes of a pair start together (about a minute on 2 cores) when
the fixture is first used and stop at the end of the session. Modules that use
them run on the same test worker (``SESSION_ENGINE_FIXTURES`` in conftest), so
each starts once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from harness.engines import RealEngine, stop_all
from harness.frontend import FrontendProcess
from harness.procs import REPO_ROOT
from harness.vllm_server import VllmFrontend
from tests.support.requirements import require_vllm

EMBED_ARGS = ("--runner", "pooling", "--convert", "embed")
CROSS_ENCODER_ARGS = ("--runner", "pooling")
BUILDER = REPO_ROOT / "tools" / "make_tiny_pooling_models.py"


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    (REPO_ROOT / "build").mkdir(exist_ok=True)
    with open(REPO_ROOT / "build" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _built(name: str, key_extra: str, build) -> Path:
    """A model directory under build/, rebuilt when the builder changes."""
    key = hashlib.sha256(BUILDER.read_bytes() + key_extra.encode()).hexdigest()[:12]
    target = REPO_ROOT / "build" / f"{name}-{key}"
    with _build_lock():
        if not (target / "config.json").exists():
            tmp = target.with_name(target.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            build(tmp)
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
    return target


@pytest.fixture(scope="session")
def tiny_embed_model_dir(tiny_model_dir) -> Path:
    from tools.make_tiny_pooling_models import build_embedder

    return _built("tiny-embed", tiny_model_dir.name,
                  lambda out: build_embedder(tiny_model_dir, out))


@pytest.fixture(scope="session")
def tiny_cross_encoder_dir() -> Path:
    from tools.make_tiny_pooling_models import build_cross_encoder

    return _built("tiny-cross-encoder", "", build_cross_encoder)


@dataclass
class ServerPair:
    """Our frontend and vLLM's API server, each on its own engine, same model."""

    ours: FrontendProcess
    vllm: VllmFrontend
    our_engine: RealEngine
    model_dir: Path

    def stop(self) -> None:
        self.ours.stop()
        self.vllm.stop()
        stop_all([self.our_engine, self.vllm.engine])


def start_pair(model_dir: Path, workdir: Path, engine_args: tuple[str, ...]) -> ServerPair:
    require_vllm()
    our_engine = RealEngine.launch(model_dir, workdir / "our-engine.log", *engine_args)
    vllm_engine = RealEngine.launch(model_dir, workdir / "vllm-engine.log", *engine_args)
    vllm = VllmFrontend(vllm_engine, model_dir, workdir / "vllm-serve.log", *engine_args)
    ours = FrontendProcess(our_engine.handshake_addr, model_dir, workdir)
    pair = ServerPair(ours, vllm, our_engine, model_dir)
    try:
        ours.wait_healthy()
        vllm.wait_ready()
    except Exception:
        pair.stop()
        raise
    return pair


@pytest.fixture(scope="session")
def embed_servers(tiny_embed_model_dir, tmp_path_factory) -> Iterator[ServerPair]:
    pair = start_pair(tiny_embed_model_dir, tmp_path_factory.mktemp("pool-embed"), EMBED_ARGS)
    yield pair
    pair.stop()


@pytest.fixture(scope="session")
def cross_encoder_servers(tiny_cross_encoder_dir, tmp_path_factory) -> Iterator[ServerPair]:
    pair = start_pair(tiny_cross_encoder_dir, tmp_path_factory.mktemp("pool-cross"),
                      CROSS_ENCODER_ARGS)
    yield pair
    pair.stop()
