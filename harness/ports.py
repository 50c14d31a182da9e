"""Free loopback ports for the processes the harness starts."""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A free port, drawn below the ephemeral range: a process that binds it
    only after a slow start (vLLM's server imports for 20-50 s) would otherwise
    find it taken by some outgoing connection meanwhile."""
    return _free_run(host, 1)


def free_port_triple(host: str = HOST) -> int:
    """A port P with P..P+4 free: the engine link binds input/output at P+1, P+2
    (and a second frontend worker at P+3, P+4); below the ephemeral range too."""
    return _free_run(host, 5)


def _free_run(host: str, count: int) -> int:
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    # A host whose ephemeral range starts low: any port, checked below as ever.
    low, high = (20000, ephemeral_low - count) if ephemeral_low > 21000 else (1024, 65535 - count)
    for _ in range(500):
        port = random.randrange(low, high)
        if all(_port_free(host, p) for p in range(port, port + count)):
            return port
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
