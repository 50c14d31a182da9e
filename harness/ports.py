"""Free loopback ports for the processes the harness starts."""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port_triple(host: str = HOST) -> int:
    """A port P with P..P+4 free: the engine link binds input/output at P+1, P+2
    (and a second frontend worker at P+3, P+4).

    Drawn below the ephemeral range, so that the engine's own outgoing
    connections cannot take them before the frontend binds them.
    """
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(500):
        port = random.randrange(20000, ephemeral_low - 5)
        if all(_port_free(host, p) for p in range(port, port + 5)):
            return port
    raise RuntimeError("no five consecutive free ports")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
