"""The tiny test model and its LoRA adapters, built once and cached under build/.

A build's directory is named by one cache key: the builders' own source (and,
for the adapters, the model's directory name), so a changed builder rebuilds.
Concurrent builders (test workers, a tool) take turns under a file lock, and
each builds into a temporary directory renamed into place when complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

from harness import tiny_blip2, tiny_lora, tiny_model, tiny_vlm
from harness.procs import REPO_ROOT

BUILD_DIR = REPO_ROOT / "build"


def cache_key(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()[:12]


def _source(module) -> bytes:
    return Path(module.__file__).read_bytes()


def tiny_model_dir(log: Callable[[str], None] | None = None) -> Path:
    """The deterministic tiny Llama test model (``harness.tiny_model``)."""
    target = BUILD_DIR / f"tiny-model-{cache_key(_source(tiny_model))}"
    return _cached(target, "model.safetensors", tiny_model.build, log)


def tiny_lora_dirs(model_dir: Path, log: Callable[[str], None] | None = None
                   ) -> tuple[Path, Path]:
    """Two LoRA adapters (r=8, q_proj/v_proj, seeds 1 and 2) for ``model_dir``
    (``harness.tiny_lora``)."""
    target = BUILD_DIR / f"tiny-lora-{cache_key(_source(tiny_lora), model_dir.name.encode())}"

    def build(out: Path) -> None:
        tiny_lora.build(model_dir, out / "a", seed=1)
        tiny_lora.build(model_dir, out / "b", seed=2)

    _cached(target, "b/adapter_model.safetensors", build, log)
    return target / "a", target / "b"


def tiny_vlm_dir(log: Callable[[str], None] | None = None) -> Path:
    """The deterministic tiny Idefics3 VLM (``harness.tiny_vlm``), built in a
    subprocess (it needs torch and transformers; the caller stays without)."""
    key = cache_key(_source(tiny_vlm), _source(tiny_model))
    target = BUILD_DIR / f"tiny-vlm-{key}"

    def build(out: Path) -> None:
        subprocess.run([sys.executable, "-m", "tools.make_tiny_vlm", str(out)], cwd=REPO_ROOT,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    return _cached(target, "tokenizer_config.json", build, log)


def tiny_blip2_dir(log: Callable[[str], None] | None = None) -> Path:
    """The deterministic tiny BLIP-2 VLM (``harness.tiny_blip2``), built in a
    subprocess like ``tiny_vlm_dir``."""
    target = BUILD_DIR / f"tiny-blip2-{cache_key(_source(tiny_blip2), _source(tiny_model))}"

    def build(out: Path) -> None:
        subprocess.run([sys.executable, "-m", "tools.make_tiny_vlm", "--family", "blip2",
                        str(out)], cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    return _cached(target, "generation_config.json", build, log)


def _cached(target: Path, last_file: str, build: Callable[[Path], None],
            log: Callable[[str], None] | None) -> Path:
    """``target``, built by ``build(directory)`` unless ``last_file`` (what the
    builder writes last) is already there."""
    with _build_lock():
        if not (target / last_file).exists():
            if log is not None:
                log(f"building {target}")
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            build(tmp)
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
    return target


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One builder at a time (test workers and tools share build/)."""
    BUILD_DIR.mkdir(exist_ok=True)
    with open(BUILD_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
