"""What no route answers: unknown paths and wrong methods, as vLLM 0.32's server.

vLLM's API server answers them with Starlette's default: ``{"detail": "Not
Found"}`` (404) and ``{"detail": "Method Not Allowed"}`` (405, with an
``Allow`` header). Its own exception handler is registered for FastAPI's
``HTTPException`` only, which the router's 404/405 are not. aiohttp's own
answer would be plain text.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

UNMATCHED = [
    ("GET", "/nope", 404),
    ("POST", "/v1/nope", 404),
    ("DELETE", "/v1/nope/deeper", 404),
    ("GET", "/v1/completions", 405),
    ("PUT", "/v1/completions", 405),
    ("DELETE", "/v1/chat/completions", 405),
    ("POST", "/health", 405),
    ("POST", "/v1/models", 405),
]
PHRASES = {404: "Not Found", 405: "Method Not Allowed"}


def request(url: str, method: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def answer(url: str, method: str, path: str) -> tuple:
    """What a client can tell apart: status, body, content type, allowed methods."""
    status, headers, body = request(url + path, method)
    allow = headers.get("allow")
    return (status, body, headers.get("content-type"),
            None if allow is None else sorted(m.strip() for m in allow.split(",")))


@pytest.fixture(scope="module")
def url(tiny_model_dir, tmp_path_factory):
    from harness.frontend import launch_mock_stack

    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("routes"))
    yield stack.url
    stack.stop()


@pytest.mark.parametrize("method,path,status", UNMATCHED)
def test_unmatched_requests_get_starlettes_json(url, method, path, status):
    code, headers, body = request(url + path, method)
    assert code == status
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"detail": PHRASES[status]}
    if status == 405:
        assert headers.get("allow")  # which methods would do


@pytest.mark.real_engine
@pytest.mark.vllm_frontend
def test_unmatched_requests_equal_vllms(vllm_frontend, url):
    """Byte for byte, with the same content type and Allow methods."""
    theirs = {(m, p): answer(vllm_frontend.url, m, p) for m, p, _ in UNMATCHED}
    ours = {(m, p): answer(url, m, p) for m, p, _ in UNMATCHED}
    assert ours == theirs
    assert {key: a[0] for key, a in theirs.items()} == {(m, p): s for m, p, s in UNMATCHED}
