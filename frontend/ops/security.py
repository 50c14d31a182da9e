"""API keys, CORS, request-id headers and the TLS context, as vLLM 0.32 does them.

* API keys (``--api-key``, repeatable, else ``$VLLM_API_KEY``): requests under
  ``/v1``, ``/v2``, ``/inference`` and ``/cohere`` need
  ``Authorization: Bearer <key>`` matching one of the keys; ``OPTIONS`` is
  exempt (CORS preflights carry no credentials), and so is every other path
  (``/health``, ``/metrics``, ``/tokenize``, ``/ping``, ``/invocations``,
  the dev-mode routes...), exactly vLLM's rule. The Messages API's routes
  (``/v1/messages``, ``/v1/messages/count_tokens``) also take Anthropic's
  ``x-api-key: <key>`` header, which Anthropic's SDKs send (vLLM 0.32 reads
  only the bearer token there: a deliberate difference). A refusal is 401 with
  vLLM's body ``{"error":"Unauthorized"}``. Keys are compared as SHA-256
  digests with ``secrets.compare_digest`` against every key (no early exit),
  as ``vllm/entrypoints/serve/middleware/authenticate.py``; they are never
  logged (and ``frontend.logs`` masks them if anything tries).
* CORS (Starlette's ``CORSMiddleware`` with vLLM's defaults: no origin
  allowed, all methods, all headers, no credentials): preflights are answered
  here, actual responses get ``Access-Control-Allow-Origin`` for allowed
  origins.
* ``--enable-request-id-headers``: every response carries ``X-Request-Id``,
  the request's own or a new uuid4 hex; the new one is also handed to the
  handler, so it is the id in the response body too (``cmpl-<id>``).
"""

from __future__ import annotations

import hashlib
import secrets
import ssl
import uuid
from collections.abc import Iterable, Sequence

from aiohttp import web
from multidict import CIMultiDict

# vLLM's GUARDED_PREFIX: the OpenAI-style APIs. /tokenize, /health, /ping,
# /invocations, /load, the docs and the dev-mode routes are open, as in vLLM.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'
# Where Anthropic's x-api-key header is a credential too.
X_API_KEY_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})

ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY")
SAFELISTED_HEADERS = {"Accept", "Accept-Language", "Content-Language", "Content-Type"}
PREFLIGHT_VARY = (
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
    "Access-Control-Request-Private-Network"
)


# --------------------------------------------------------------------- API keys
class ApiKeys:
    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys if k]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __repr__(self) -> str:  # never the keys themselves
        return f"ApiKeys({len(self._digests)} keys)"

    def verify(self, authorization: str | None) -> bool:
        if not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return self.verify_key(token)

    def verify_key(self, token: str | None) -> bool:
        """A bare key (Anthropic's ``x-api-key``), against every key."""
        if token is None:
            return False
        digest = hashlib.sha256(token.encode()).digest()
        match = False
        for expected in self._digests:
            match |= secrets.compare_digest(digest, expected)
        return match


def authorized(keys: ApiKeys, request: web.Request) -> bool:
    headers = request.headers
    if keys.verify(headers.get("Authorization")):
        return True
    return request.path in X_API_KEY_PATHS and keys.verify_key(headers.get("x-api-key"))


def api_key_middleware(keys: ApiKeys, on_reject=None):
    @web.middleware
    async def authenticate(request: web.Request, handler):
        if (
            request.method != "OPTIONS"
            and request.path.startswith(GUARDED_PREFIXES)
            and not authorized(keys, request)
        ):
            if on_reject is not None:
                on_reject("unauthorized")
            return web.Response(status=401, body=UNAUTHORIZED_BODY, content_type="application/json")
        return await handler(request)

    return authenticate


# --------------------------------------------------------------------- CORS
class Cors:
    """Starlette's CORSMiddleware (as vLLM configures it), for aiohttp."""

    def __init__(
        self,
        allow_origins: Sequence[str] = (),
        allow_methods: Sequence[str] = ("*",),
        allow_headers: Sequence[str] = ("*",),
        allow_credentials: bool = False,
        max_age: int = 600,
    ) -> None:
        if "*" in allow_methods:
            allow_methods = ALL_METHODS
        self.allow_origins = list(allow_origins)
        self.allow_methods = list(allow_methods)
        self.allow_all_origins = "*" in allow_origins
        self.allow_all_headers = "*" in allow_headers
        self.allow_credentials = allow_credentials
        self.explicit_origin = not self.allow_all_origins or allow_credentials
        headers = sorted(SAFELISTED_HEADERS | set(allow_headers))
        self.allow_headers = [h.lower() for h in headers]
        self.simple_headers: dict[str, str] = {}
        if self.allow_all_origins:
            self.simple_headers["Access-Control-Allow-Origin"] = "*"
        if allow_credentials:
            self.simple_headers["Access-Control-Allow-Credentials"] = "true"
        pre: dict[str, str] = {"Vary": PREFLIGHT_VARY}
        if not self.explicit_origin:
            pre["Access-Control-Allow-Origin"] = "*"
        pre["Access-Control-Allow-Methods"] = ", ".join(self.allow_methods)
        pre["Access-Control-Max-Age"] = str(max_age)
        if not self.allow_all_headers:
            pre["Access-Control-Allow-Headers"] = ", ".join(headers)
        if allow_credentials:
            pre["Access-Control-Allow-Credentials"] = "true"
        self.preflight_headers = pre

    def allowed(self, origin: str) -> bool:
        return self.allow_all_origins or origin in self.allow_origins

    def preflight(self, request: web.Request) -> web.Response:
        origin = request.headers["Origin"]
        method = request.headers["Access-Control-Request-Method"]
        requested = request.headers.get("Access-Control-Request-Headers")
        headers = dict(self.preflight_headers)
        failures = []
        if self.allowed(origin):
            if self.explicit_origin:
                headers["Access-Control-Allow-Origin"] = origin
        else:
            failures.append("origin")
        if method not in self.allow_methods:
            failures.append("method")
        if self.allow_all_headers and requested is not None:
            headers["Access-Control-Allow-Headers"] = requested
        elif requested is not None:
            if any(h.strip().lower() not in self.allow_headers for h in requested.split(",")):
                failures.append("headers")
        if request.headers.get("Access-Control-Request-Private-Network") is not None:
            failures.append("private-network")
        if failures:
            return web.Response(
                status=400, text="Disallowed CORS " + ", ".join(failures), headers=headers
            )
        return web.Response(status=200, text="OK", headers=headers)

    def middleware(self):
        @web.middleware
        async def cors(request: web.Request, handler):
            if (
                request.method == "OPTIONS"
                and "Origin" in request.headers
                and "Access-Control-Request-Method" in request.headers
            ):
                return self.preflight(request)
            return await handler(request)

        return cors

    def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin is None:
            return
        headers = response.headers
        if "Access-Control-Allow-Methods" in headers:  # a preflight answered above
            return
        headers.update(self.simple_headers)
        if (self.allow_all_origins and self.allow_credentials) or (
            not self.allow_all_origins and self.allowed(origin)
        ):
            headers["Access-Control-Allow-Origin"] = origin
        _add_vary(headers, "Origin")


def _add_vary(headers, value: str) -> None:
    existing = headers.get("Vary")
    headers["Vary"] = f"{existing}, {value}" if existing else value


# --------------------------------------------------------------------- request ids
def request_id_middleware():
    @web.middleware
    async def request_id(request: web.Request, handler):
        rid = request.headers.get("X-Request-Id")
        # Set before cloning: aiohttp prepares a returned web.Response with the
        # original request, a stream is prepared by the handler with the clone.
        request["ops.request_id"] = rid or uuid.uuid4().hex
        if not rid:
            headers = CIMultiDict(request.headers)
            headers["X-Request-Id"] = request["ops.request_id"]
            request = request.clone(headers=headers)
        return await handler(request)

    return request_id


def request_id_on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    rid = request.get("ops.request_id")
    if rid is not None and "X-Request-Id" not in response.headers:
        response.headers["X-Request-Id"] = rid


# --------------------------------------------------------------------- TLS
def ssl_context(
    certfile: str | None,
    keyfile: str | None,
    ca_certs: str | None = None,
    cert_reqs: int = ssl.CERT_NONE,
    ciphers: str | None = None,
) -> ssl.SSLContext | None:
    """The server context for --ssl-certfile/--ssl-keyfile (None without a cert).

    ``cert_reqs`` is ``ssl.CERT_NONE`` (0), ``CERT_OPTIONAL`` (1) or
    ``CERT_REQUIRED`` (2): with 2 a client must present a certificate signed by
    a CA in ``ca_certs`` (mutual TLS).
    """
    if not certfile:
        if keyfile or ca_certs:
            raise ValueError("--ssl-keyfile and --ssl-ca-certs need --ssl-certfile")
        return None
    if cert_reqs not in (ssl.CERT_NONE, ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED):
        raise ValueError(f"--ssl-cert-reqs must be 0, 1 or 2, got {cert_reqs}")
    if cert_reqs != ssl.CERT_NONE and not ca_certs:
        raise ValueError(
            "--ssl-cert-reqs 1 or 2 needs --ssl-ca-certs (the CA that signs client certificates)"
        )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(certfile, keyfile)
        if ca_certs:
            ctx.load_verify_locations(cafile=ca_certs)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"cannot load TLS files: {e}") from e
    ctx.verify_mode = ssl.VerifyMode(cert_reqs)
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx
