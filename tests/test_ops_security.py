"""--api-key / VLLM_API_KEY, CORS flags and --enable-request-id-headers over real HTTP."""

from __future__ import annotations

import json
import re

import aiohttp
import pytest

from frontend.ops.security import ApiKeys, Cors
from harness.frontend import SERVED_NAME
from tests.support.http_client import metric, parse_metrics
from tests.support.ops import read_stream, run
from tests.support.requirements import require_module

KEY1 = "sk-test-key-one-4f1c2b"
KEY2 = "sk-test-key-two-9d8e7a"
COMPLETION = {"model": SERVED_NAME, "prompt": "hi", "max_tokens": 2}


async def _status(session: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple:
    async with session.request(method, url, **kw) as r:
        return r.status, await r.read(), r.headers


def test_api_keys_from_flags(start_ops_stack):
    stack = start_ops_stack("--api-key", KEY1, "--api-key", KEY2)
    url = stack.url

    async def main():
        out = {}
        async with aiohttp.ClientSession() as s:
            for name, headers in {
                    "none": {}, "wrong": {"Authorization": "Bearer nope"},
                    "basic": {"Authorization": f"Basic {KEY1}"},
                    "key1": {"Authorization": f"Bearer {KEY1}"},
                    "key2": {"Authorization": f"bearer {KEY2}"},
                    "prefix": {"Authorization": f"Bearer {KEY1[:-1]}"}}.items():
                out[name] = await _status(s, "POST", url + "/v1/completions",
                                          json=COMPLETION, headers=headers)
            for path in ("/v1/models", "/tokenize", "/detokenize", "/inference/v1/generate"):
                out[path] = await _status(s, "POST" if path != "/v1/models" else "GET",
                                          url + path, json={})
            for path in ("/health", "/metrics", "/version"):
                out[path] = await _status(s, "GET", url + path)
            out["options"] = await _status(s, "OPTIONS", url + "/v1/completions")
            out["metrics"] = parse_metrics((await _status(s, "GET", url + "/metrics"))[1]
                                           .decode())
        return out

    out = run(main())
    for name in ("none", "wrong", "basic", "prefix"):
        status, body, headers = out[name]
        assert status == 401, name
        assert json.loads(body) == {"error": "Unauthorized"}
        assert headers["Content-Type"].startswith("application/json")
    assert out["key1"][0] == 200 and out["key2"][0] == 200
    for path in ("/v1/models", "/inference/v1/generate"):
        assert out[path][0] == 401, path
    for path in ("/tokenize", "/detokenize"):  # open, as in vLLM (only /v1, /v2, /inference, /cohere)
        assert out[path][0] != 401, path
    for path in ("/health", "/metrics", "/version"):
        assert out[path][0] == 200, path
    assert out["options"][0] != 401  # OPTIONS is exempt (405: no such route)
    assert metric(out["metrics"], "vllm_frontend_rejected_requests_total",
                  reason="unauthorized") == 6
    log = stack.frontend.log()
    assert KEY1 not in log and KEY2 not in log


def test_api_key_from_environment(start_ops_stack):
    stack = start_ops_stack(env={"VLLM_API_KEY": KEY1})

    async def main():
        async with aiohttp.ClientSession() as s:
            no = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION)
            yes = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION,
                                headers={"Authorization": f"Bearer {KEY1}"})
            return no[0], yes[0]

    assert run(main()) == (401, 200)
    assert KEY1 not in stack.frontend.log()


def test_api_key_flag_wins_over_environment(start_ops_stack):
    stack = start_ops_stack("--api-key", KEY2, env={"VLLM_API_KEY": KEY1})

    async def main():
        async with aiohttp.ClientSession() as s:
            env_key = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION,
                                    headers={"Authorization": f"Bearer {KEY1}"})
            flag_key = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION,
                                     headers={"Authorization": f"Bearer {KEY2}"})
            return env_key[0], flag_key[0]

    assert run(main()) == (401, 200)


def test_api_keys_unit():
    keys = ApiKeys(["a", "bb"])
    assert keys.verify("Bearer a") and keys.verify("BEARER bb")
    assert not keys.verify("Bearer b") and not keys.verify("Bearer") and not keys.verify("")
    assert not keys.verify(None) and not keys.verify("Token a")
    assert "a" not in repr(keys)
    assert not ApiKeys([]) and not ApiKeys([""])
    # Anthropic's x-api-key: a bare key
    assert keys.verify_key("bb") and not keys.verify_key("Bearer bb")
    assert not keys.verify_key("") and not keys.verify_key(None)


# ------------------------------------------------------------------------ CORS
def _preflight(origin: str, method: str = "POST", headers: str | None = "content-type, x-foo"):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers is not None:
        h["Access-Control-Request-Headers"] = headers
    return h


def test_cors_default_denies_cross_origin(start_ops_stack):
    stack = start_ops_stack()

    async def main():
        async with aiohttp.ClientSession() as s:
            pre = await _status(s, "OPTIONS", stack.url + "/v1/completions",
                                headers=_preflight("https://evil.example"))
            simple = await _status(s, "GET", stack.url + "/v1/models",
                                   headers={"Origin": "https://evil.example"})
            return pre, simple

    (status, body, headers), (s2, _, h2) = run(main())
    assert status == 400 and body == b"Disallowed CORS origin"
    assert "Access-Control-Allow-Origin" not in headers
    assert s2 == 200 and "Access-Control-Allow-Origin" not in h2
    assert h2["Vary"] == "Origin"


def test_cors_allowed_origins(start_ops_stack):
    stack = start_ops_stack("--allowed-origins", '["https://app.example"]',
                            "--allowed-methods", '["GET", "POST"]',
                            "--allowed-headers", '["Content-Type", "Authorization"]',
                            "--api-key", KEY1)
    app = "https://app.example"

    async def main():
        async with aiohttp.ClientSession() as s:
            ok = await _status(s, "OPTIONS", stack.url + "/v1/completions",
                               headers=_preflight(app, headers="content-type, authorization"))
            bad_method = await _status(s, "OPTIONS", stack.url + "/v1/completions",
                                       headers=_preflight(app, "DELETE", None))
            bad_header = await _status(s, "OPTIONS", stack.url + "/v1/completions",
                                       headers=_preflight(app, headers="x-secret"))
            other = await _status(s, "OPTIONS", stack.url + "/v1/completions",
                                  headers=_preflight("https://other.example",
                                                     headers="content-type"))
            actual = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION,
                                   headers={"Origin": app,
                                            "Authorization": f"Bearer {KEY1}"})
            async with s.post(stack.url + "/v1/completions", json={**COMPLETION, "stream": True},
                              headers={"Origin": app, "Authorization": f"Bearer {KEY1}"}) as r:
                await read_stream(r)
                stream_headers = r.headers
            return ok, bad_method, bad_header, other, actual, stream_headers

    ok, bad_method, bad_header, other, actual, stream_headers = run(main())
    status, body, h = ok
    assert status == 200 and body == b"OK"
    assert h["Access-Control-Allow-Origin"] == app
    assert h["Access-Control-Allow-Methods"] == "GET, POST"
    assert h["Access-Control-Allow-Headers"] == \
        "Accept, Accept-Language, Authorization, Content-Language, Content-Type"
    assert h["Access-Control-Max-Age"] == "600"
    assert "Access-Control-Allow-Credentials" not in h
    assert bad_method[:2] == (400, b"Disallowed CORS method")
    assert bad_header[:2] == (400, b"Disallowed CORS headers")
    assert other[:2] == (400, b"Disallowed CORS origin")
    assert actual[0] == 200
    assert actual[2]["Access-Control-Allow-Origin"] == app
    assert "Origin" in actual[2]["Vary"]
    assert stream_headers["Access-Control-Allow-Origin"] == app


def test_cors_wildcard_and_credentials(start_ops_stack):
    star = start_ops_stack("--allowed-origins", '["*"]')
    creds = start_ops_stack("--allowed-origins", '["*"]', "--allow-credentials")
    origin = "https://any.example"

    async def main():
        async with aiohttp.ClientSession() as s:
            return [
                await _status(s, "OPTIONS", star.url + "/v1/completions",
                              headers=_preflight(origin)),
                await _status(s, "GET", star.url + "/v1/models", headers={"Origin": origin}),
                await _status(s, "OPTIONS", creds.url + "/v1/completions",
                              headers=_preflight(origin)),
                await _status(s, "GET", creds.url + "/v1/models", headers={"Origin": origin}),
            ]

    star_pre, star_get, creds_pre, creds_get = run(main())
    assert star_pre[0] == 200
    assert star_pre[2]["Access-Control-Allow-Origin"] == "*"
    # All headers allowed: the requested ones are mirrored back.
    assert star_pre[2]["Access-Control-Allow-Headers"] == "content-type, x-foo"
    assert "DELETE" in star_pre[2]["Access-Control-Allow-Methods"]
    assert star_get[2]["Access-Control-Allow-Origin"] == "*"
    assert creds_pre[2]["Access-Control-Allow-Origin"] == origin
    assert creds_pre[2]["Access-Control-Allow-Credentials"] == "true"
    assert creds_get[2]["Access-Control-Allow-Origin"] == origin
    assert creds_get[2]["Access-Control-Allow-Credentials"] == "true"


def test_cors_unit_matches_starlette():
    """Same decisions and headers as Starlette's CORSMiddleware, which vLLM uses."""
    starlette = require_module("starlette.middleware.cors", "it comes with vLLM")
    for kwargs in ({"allow_origins": ["https://a.example"]},
                   {"allow_origins": ["*"], "allow_credentials": True},
                   {"allow_origins": ["*"], "allow_methods": ["GET"], "allow_headers": ["X-A"]}):
        ours = Cors(kwargs.get("allow_origins", ()), kwargs.get("allow_methods", ("*",)),
                    kwargs.get("allow_headers", ("*",)), kwargs.get("allow_credentials", False))
        theirs = starlette.CORSMiddleware(
            None, allow_origins=kwargs.get("allow_origins", ()),
            allow_methods=kwargs.get("allow_methods", ("*",)),
            allow_headers=kwargs.get("allow_headers", ("*",)),
            allow_credentials=kwargs.get("allow_credentials", False))
        assert ours.preflight_headers == theirs.preflight_headers
        assert ours.simple_headers == theirs.simple_headers


# ------------------------------------------------------------------------ request ids
def test_request_id_headers(start_ops_stack):
    stack = start_ops_stack("--enable-request-id-headers")

    async def main():
        async with aiohttp.ClientSession() as s:
            given = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION,
                                  headers={"X-Request-Id": "my-req-42"})
            fresh = await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION)
            async with s.post(stack.url + "/v1/completions",
                              json={**COMPLETION, "stream": True},
                              headers={"X-Request-Id": "streamed-7"}) as r:
                events = await read_stream(r)
                stream_rid = r.headers.get("X-Request-Id")
            health = await _status(s, "GET", stack.url + "/health")
            missing = await _status(s, "GET", stack.url + "/nope")
            return given, fresh, events, stream_rid, health, missing

    given, fresh, events, stream_rid, health, missing = run(main())
    assert given[2]["X-Request-Id"] == "my-req-42"
    assert json.loads(given[1])["id"] == "cmpl-my-req-42"
    rid = fresh[2]["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert json.loads(fresh[1])["id"] == f"cmpl-{rid}"
    assert stream_rid == "streamed-7"
    assert events[0]["id"] == "cmpl-streamed-7"
    assert re.fullmatch(r"[0-9a-f]{32}", health[2]["X-Request-Id"])
    assert missing[0] == 404 and "X-Request-Id" in missing[2]


def test_no_request_id_header_by_default(start_ops_stack):
    stack = start_ops_stack()

    async def main():
        async with aiohttp.ClientSession() as s:
            return await _status(s, "POST", stack.url + "/v1/completions", json=COMPLETION,
                                 headers={"X-Request-Id": "abc"})

    status, body, headers = run(main())
    assert status == 200 and "X-Request-Id" not in headers
    assert json.loads(body)["id"] == "cmpl-abc"  # the body id still follows the header
