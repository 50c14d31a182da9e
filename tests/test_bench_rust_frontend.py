"""vLLM's Rust frontend as the benchmark's second reference (tools/bench/rust_frontend.py).

The acquisition tests are fast and need no network. The serving test starts
``VLLM_USE_RUST_FRONTEND=1 vllm serve`` on the mock engine exactly as
``tools.bench.run --reference rust`` does; it needs the ``vllm-rs`` binary
beside the installed vLLM, which only the 330 MB CUDA wheel has: an optional
benchmark reference, not a dependency of the product. So it runs only when
asked, ``RUST_FRONTEND_TESTS=1`` (CI does not download the wheel), and then
fails, in CI or not, until ``python -m tools.bench.rust_frontend`` has put
the binary there.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import procs
from tests.support.http_client import client
from tests.support.requirements import require_opt_in
from tools.bench import rust_frontend

FAKE_BINARY = b"#!/bin/sh\necho vllm-rs " + rust_frontend.VLLM_VERSION.encode() + b"\n"


def _acquire(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.bench.rust_frontend", *args],
                          cwd=procs.REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("offline", ["no index", "--no-download"])
def test_acquisition_skips_cleanly_without_the_wheel(tmp_path, offline):
    """No wheel in the cache and none to be had: exit 2, one clear line, no binary."""
    empty, pkg = tmp_path / "wheels", tmp_path / "vllm"
    empty.mkdir()
    pkg.mkdir()
    args = ["--wheel-dir", str(empty), "--vllm-dir", str(pkg)]
    if offline == "--no-download":
        out = _acquire(*args, "--no-download")
    else:  # pip with no index and nothing in its links: as offline as it gets
        out = _acquire(*args, env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty)})
    assert out.returncode == rust_frontend.EXIT_UNAVAILABLE, out.stderr
    assert "Rust frontend unavailable, skipped:" in out.stderr
    assert "vllm-0.32.0" in out.stderr or "vllm==0.32.0" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not (pkg / "vllm-rs").exists()


def _wheel(path: Path, binary: bytes, recorded: bytes | None = None) -> Path:
    """A wheel holding ``vllm/vllm-rs`` and a RECORD line for ``recorded`` (default:
    the binary itself)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded or binary).digest())
    record = f"vllm/vllm-rs,sha256={digest.rstrip(b'=').decode()},{len(binary)}\n"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("vllm/__init__.py", "")
        z.writestr("vllm/vllm-rs", binary)
        z.writestr(f"vllm-{rust_frontend.VLLM_VERSION}.dist-info/RECORD", record)
    return path


def test_acquisition_takes_only_the_binary_out_of_the_wheel(tmp_path):
    wheels, pkg = tmp_path / "wheels", tmp_path / "vllm"
    wheels.mkdir()
    pkg.mkdir()
    _wheel(wheels / f"vllm-{rust_frontend.VLLM_VERSION}-cp38-abi3-linux_x86_64.whl",
           FAKE_BINARY)
    out = _acquire("--wheel-dir", str(wheels), "--vllm-dir", str(pkg), "--no-download")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(pkg / "vllm-rs")
    assert (pkg / "vllm-rs").read_bytes() == FAKE_BINARY
    assert os.access(pkg / "vllm-rs", os.X_OK)
    assert sorted(p.name for p in pkg.iterdir()) == ["vllm-rs"]  # not the __init__.py
    assert rust_frontend.installed(pkg) == pkg / "vllm-rs"


def test_acquisition_refuses_a_binary_that_does_not_match_the_record(tmp_path):
    wheels, pkg = tmp_path / "wheels", tmp_path / "vllm"
    wheels.mkdir()
    pkg.mkdir()
    _wheel(wheels / f"vllm-{rust_frontend.VLLM_VERSION}-cp38-abi3-linux_x86_64.whl",
           FAKE_BINARY, recorded=b"something else")
    with pytest.raises(rust_frontend.Unavailable, match="does not match its RECORD"):
        rust_frontend.ensure(pkg, wheels, download=False)
    assert list(pkg.iterdir()) == []  # no partial file left behind


def test_reference_flag_picks_the_frontends_and_the_rust_points():
    from tools.bench import run
    from tools.bench.loadgen import Workload

    assert run.parse_args([]).frontends == ["ours", "vllm"]
    assert run.parse_args(["--reference", "rust,python"]).frontends == ["ours", "rust", "vllm"]
    assert run.parse_args(["--reference", "rust"]).frontends == ["ours", "rust"]
    assert run.parse_args(["--frontends", "vllm", "--reference", "rust"]).frontends == ["rust"]
    with pytest.raises(SystemExit):
        run.parse_args(["--reference", "go"])
    assert run.supports("rust", Workload("s", 4)) and run.supports("vllm", Workload("b", 4, n=4))
    assert not run.supports("rust", Workload("n", 4, n=4))
    assert not run.supports("rust", Workload("b", 4, prompts_per_request=8))


def test_benchmark_runs_on_without_the_rust_frontend(monkeypatch):
    from tools.bench import run

    def unavailable(*_a, **_k):
        raise rust_frontend.Unavailable("no wheel here")

    monkeypatch.setattr(rust_frontend, "ensure", unavailable)
    args = run.parse_args(["--reference", "python,rust"])
    assert run.rust_available(args) == "no wheel here"
    assert args.frontends == ["ours", "vllm"]


# Set to 1 to run the serving test (README: Performance).
OPT_IN = "RUST_FRONTEND_TESTS"


@pytest.fixture
def rust_binary() -> Path:
    require_opt_in(OPT_IN, "the serving test of vLLM's Rust frontend needs vllm-rs out of "
                           "the 330 MB CUDA wheel")
    path = rust_frontend.installed()
    if path is None:
        pytest.fail(f"{OPT_IN}=1, but vllm-rs is not beside the installed vLLM: run "
                    ".venv/bin/python -m tools.bench.rust_frontend (downloads the 330 MB "
                    "CUDA wheel once)", pytrace=False)
    return path


@pytest.mark.vllm_frontend
def test_rust_frontend_serves_completions_and_chat_on_the_mock_engine(
        rust_binary, tiny_model_dir, tmp_path):
    from tools.bench import run

    cpu = str(min(os.sched_getaffinity(0)))
    args = run.parse_args(["--model", str(tiny_model_dir), "--frontend-cpu", cpu,
                           "--other-cpu", cpu, "--start-timeout", "300"])
    stack = run.Stack("rust", "mock", args, tmp_path, "rust-mock")
    try:
        stack.start()
        # It is the binary that serves, not vLLM's Python server in its place.
        assert procs.pids_named(stack.frontend.pids(), "vllm-rs"), stack.frontend.log_tail()
        assert stack.startup["rss_idle_binary_mb"] > 0
        api = client(stack.url)
        body = dict(model=run.SERVED, prompt="Hello there", max_tokens=8, temperature=0,
                    extra_body={"ignore_eos": True})
        plain = api.completions.create(**body)
        assert plain.choices[0].finish_reason == "length"
        assert plain.usage.completion_tokens == 8 and plain.choices[0].text
        events = list(api.completions.create(**body, stream=True,
                                             stream_options={"include_usage": True}))
        assert "".join(e.choices[0].text for e in events if e.choices) == plain.choices[0].text
        assert events[-1].usage.completion_tokens == plain.usage.completion_tokens

        chat = dict(model=run.SERVED, max_tokens=6, temperature=0,
                    messages=[{"role": "user", "content": "Hi"}])
        reply = api.chat.completions.create(**chat)
        assert reply.choices[0].message.role == "assistant"
        deltas = list(api.chat.completions.create(**chat, stream=True))
        assert "".join(d.choices[0].delta.content or "" for d in deltas if d.choices) \
            == reply.choices[0].message.content
        assert deltas[-1].choices[0].finish_reason == reply.choices[0].finish_reason
    finally:
        stack.stop()
