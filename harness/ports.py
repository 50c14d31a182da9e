"""Free loopback ports for the processes the harness starts."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

HOST = "127.0.0.1"

# Ports handed out by this process: a port is found free when it is drawn, but
# its process binds it later (seconds, for vLLM's server), so a second draw
# meanwhile could find it free too.
_handed_out: set[int] = set()


def free_port(host: str = HOST) -> int:
    """A free port, drawn below the ephemeral range: a process that binds it
    only after a slow start (vLLM's server imports for 20-50 s) would otherwise
    find it taken by some outgoing connection meanwhile."""
    return _free_run(host, 1)


def free_port_triple(host: str = HOST) -> int:
    """A port P with P..P+4 free: the engine link binds input/output at P+1, P+2
    (and a second frontend worker at P+3, P+4); below the ephemeral range too."""
    return _free_run(host, 5)


def _port_range(count: int) -> tuple[int, int]:
    """Where to draw: below the ephemeral range, and under pytest-xdist this
    worker's own share of it (two workers never draw the same port)."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    # A host whose ephemeral range starts low: any port, checked below as ever.
    low, high = (20000, ephemeral_low) if ephemeral_low > 21000 else (1024, 65536)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and workers > 1:
        share = (high - low) // workers
        low += int(worker[2:]) % workers * share
        high = low + share
    return low, high - count


def _free_run(host: str, count: int) -> int:
    low, high = _port_range(count)
    for _ in range(500):
        port = random.randrange(low, high)
        run = range(port, port + count)
        if not _handed_out.intersection(run) and all(_port_free(host, p) for p in run):
            _handed_out.update(run)
            return port
    raise RuntimeError(f"no {count} consecutive free ports in {low}..{high + count}")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
