"""--uds, TLS (--ssl-certfile/--ssl-keyfile, client certificates) and keep-alive."""

from __future__ import annotations

import datetime
import socket
import ssl
import time
from pathlib import Path

import aiohttp
import pytest

from harness.frontend import SERVED_NAME
from tests.support.ops import (
    read_stream,
    run,
    tls_client_context,
)

COMPLETION = {"model": SERVED_NAME, "prompt": "hello", "max_tokens": 3,
              "return_token_ids": True}


# ------------------------------------------------------------------------ Unix socket
def test_unix_socket_listener(start_ops_stack, tmp_path):
    path = tmp_path / "frontend.sock"

    def ready(stack) -> bool:
        return run(_uds_get(path, "/health"))[0] == 200

    stack = start_ops_stack("--uds", str(path), ready=ready)

    async def main():
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path))) as s:
            async with s.post("http://frontend/v1/completions", json=COMPLETION) as r:
                plain = r.status, await r.json()
            async with s.post("http://frontend/v1/completions",
                              json={**COMPLETION, "stream": True}) as r:
                events = await read_stream(r)
            return plain, events

    (status, body), events = run(main())
    assert status == 200 and len(body["choices"][0]["token_ids"]) == 3
    assert events[-1] == "[DONE]"
    assert path.is_socket()
    with pytest.raises(OSError):  # nothing on the TCP port
        socket.create_connection(("127.0.0.1", stack.frontend.port), timeout=1).close()
    assert f"serving on unix:{path}" in stack.frontend.log()


async def _uds_get(path: Path, url_path: str) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path))) as s:
        async with s.get("http://frontend" + url_path) as r:
            return r.status, await r.read()


def test_unix_socket_replaces_a_stale_socket_file(start_ops_stack, tmp_path):
    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays behind, as after a crash
    start_ops_stack("--uds", str(path), ready=lambda st: run(_uds_get(path, "/health"))[0] == 200)


# ------------------------------------------------------------------------ TLS
def _write_pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def key_pem(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test CA")).issuer_name(name("test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                       crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False,
                                       decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    server_key, server = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH,
                              [x509.DNSName("localhost"),
                               x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key, client = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH)
    files = {}
    for label, data in {
            "ca": ca.public_bytes(serialization.Encoding.PEM),
            "server_cert": server.public_bytes(serialization.Encoding.PEM),
            "server_key": key_pem(server_key),
            "client_cert": client.public_bytes(serialization.Encoding.PEM),
            "client_key": key_pem(client_key)}.items():
        path = directory / f"{label}.pem"
        path.write_bytes(data)
        files[label] = path
    return files


async def _https(url: str, ctx: ssl.SSLContext, method: str = "GET", **kw):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        async with s.request(method, url, **kw) as r:
            return r.status, await r.read()


async def _https_streams(url: str, ctx: ssl.SSLContext, count: int) -> list[int]:
    """Stream ``count`` completions one after the other on one connection:
    the tokens each one got."""
    connector = aiohttp.TCPConnector(ssl=ctx, limit=1)
    async with aiohttp.ClientSession(connector=connector) as s:
        counts = []
        for _ in range(count):
            async with s.post(url, json={**COMPLETION, "stream": True}) as r:
                assert r.status == 200
                events = await read_stream(r)
                assert events[-1] == "[DONE]"
                counts.append(sum(len(e["choices"][0]["token_ids"]) for e in events[:-1]))
        return counts


def test_tls_handshake(start_ops_stack, tmp_path):
    pki = _write_pki(tmp_path)
    ctx = tls_client_context(pki["ca"])

    def ready(stack) -> bool:
        return run(_https(stack.url + "/health", ctx))[0] == 200

    stack = start_ops_stack("--ssl-certfile", str(pki["server_cert"]), "--ssl-keyfile",
                            str(pki["server_key"]), ready=ready, scheme="https")
    assert stack.url.startswith("https://")
    status, body = run(_https(stack.url + "/v1/completions", ctx, "POST", json=COMPLETION))
    assert status == 200 and b"text_completion" in body
    # Streams over TLS, two on one kept-alive connection (uvloop's TLS
    # transport is set up per stream: it cannot be weakly referenced).
    assert run(_https_streams(stack.url + "/v1/completions", ctx, 2)) == [3, 3]
    # The handshake really is TLS with our certificate.
    with socket.create_connection(("127.0.0.1", stack.frontend.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            peer = tls.getpeercert()
            assert dict(x[0] for x in peer["subject"])["commonName"] == "127.0.0.1"
    # Plain HTTP gets nowhere.
    with pytest.raises((aiohttp.ClientError, ConnectionError)):
        run(_plain_get(f"http://127.0.0.1:{stack.frontend.port}/health"))
    # A client that does not trust the certificate fails verification.
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        run(_https(stack.url + "/health", ssl.create_default_context()))


async def _plain_get(url: str):
    async with aiohttp.ClientSession() as s:
        async with s.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.status


def test_tls_client_certificate_required(start_ops_stack, tmp_path):
    pki = _write_pki(tmp_path)
    with_cert = tls_client_context(pki["ca"], pki["client_cert"], pki["client_key"])
    without = tls_client_context(pki["ca"])

    def ready(stack) -> bool:
        return run(_https(stack.url + "/health", with_cert))[0] == 200

    stack = start_ops_stack("--ssl-certfile", str(pki["server_cert"]), "--ssl-keyfile",
                            str(pki["server_key"]), "--ssl-ca-certs", str(pki["ca"]),
                            "--ssl-cert-reqs", "2", ready=ready, scheme="https")
    assert run(_https(stack.url + "/v1/completions", with_cert, "POST",
                      json=COMPLETION))[0] == 200
    with pytest.raises((aiohttp.ClientError, ConnectionError, ssl.SSLError)):
        run(_https(stack.url + "/health", without))


def test_tls_flags_are_checked_at_start(tiny_model_dir, tmp_path):
    """Inconsistent TLS flags: exit status 2 and a message, before binding anything."""
    import subprocess
    import sys
    pki = _write_pki(tmp_path)
    base = [sys.executable, "-m", "frontend.cli", "--engine-addr", "tcp://127.0.0.1:1",
            "--model", str(tiny_model_dir)]
    for extra, words in (
            (["--ssl-keyfile", str(pki["server_key"])], "--ssl-certfile"),
            (["--ssl-certfile", str(pki["server_cert"]), "--ssl-keyfile",
              str(pki["server_key"]), "--ssl-cert-reqs", "2"], "--ssl-ca-certs"),
            (["--ssl-certfile", str(tmp_path / "missing.pem")], "cannot load")):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr


# ------------------------------------------------------------------------ keep-alive
def _request(sock: socket.socket, path: str = "/health") -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


# Bounds on when the server closes an idle connection: after its timeout (a
# loaded host only delays that), and long before the other timeout it might
# wrongly use (the variable's 60 s, aiohttp's own 75 s).
def test_timeout_keep_alive(start_ops_stack):
    """The flag beats the environment variable."""
    stack = start_ops_stack("--timeout-keep-alive", "2",
                            env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "60"})
    with socket.create_connection(("127.0.0.1", stack.frontend.port), timeout=60) as sock:
        assert _request(sock).startswith(b"HTTP/1.1 200")
        time.sleep(0.3)
        assert _request(sock).startswith(b"HTTP/1.1 200")  # still open
        started = time.monotonic()
        assert sock.recv(1) == b""  # the server closes the idle connection
        waited = time.monotonic() - started
    assert 1.0 < waited < 30.0


def test_keep_alive_default_is_vllms(start_ops_stack, monkeypatch):
    """vLLM's default and variable (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s), not aiohttp's 75 s."""
    from frontend.cli import build_parser
    monkeypatch.delenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", raising=False)
    args = build_parser().parse_args(["--engine-addr", "tcp://127.0.0.1:1", "--model", "m"])
    assert args.timeout_keep_alive == 5.0
    stack = start_ops_stack(env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "2"})
    with socket.create_connection(("127.0.0.1", stack.frontend.port), timeout=60) as sock:
        assert _request(sock).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert sock.recv(1) == b""
        assert 1.5 < time.monotonic() - started < 30.0
