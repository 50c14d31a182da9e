"""What no route answers: unknown paths and wrong methods, in vLLM 0.32's JSON shape.

vLLM's exception handler turns FastAPI's 404/405 into
``{"error": {"message": <status phrase>, "type": <status phrase>, "param": null,
"code": <status>}}``; aiohttp's own answer would be plain text.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def request(url: str, method: str) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture(scope="module")
def url(tiny_model_dir, tmp_path_factory):
    from tests.support.frontend import launch_mock_stack

    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("routes"))
    yield stack.url
    stack.stop()


@pytest.mark.parametrize("method,path,status,phrase", [
    ("GET", "/nope", 404, "Not Found"),
    ("POST", "/v1/nope", 404, "Not Found"),
    ("GET", "/v1/completions", 405, "Method Not Allowed"),
    ("DELETE", "/v1/chat/completions", 405, "Method Not Allowed"),
    ("POST", "/health", 405, "Method Not Allowed"),
])
def test_unmatched_requests_get_vllms_json_error(url, method, path, status, phrase):
    code, headers, body = request(url + path, method)
    assert code == status
    assert headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {"error": {"message": phrase, "type": phrase, "param": None,
                                          "code": status}}
    if status == 405:
        assert headers.get("Allow")  # which methods would do
