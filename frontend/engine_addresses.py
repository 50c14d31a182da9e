"""Where the engine link listens: the handshake address an operator gives
(``--engine-addr``), the input and output addresses derived next to it (stable,
so that a restarted frontend is found again by running engines), and which of
them listen beyond this host."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineAddresses:
    handshake: str
    inputs: list[str]  # one per frontend client, index = client_index
    outputs: list[str]


def derive_addresses(
    engine_addr: str,
    input_addr: str | None = None,
    output_addr: str | None = None,
    clients: int = 1,
) -> EngineAddresses:
    """Input/output addresses next to the handshake address, so they are stable.

    Stable addresses let a restarted frontend be found again by running
    engines (their DEALER/PUSH reconnect by themselves). Client ``i`` of
    several (``--api-server-count``) gets the pair ``2 i`` ports further (TCP)
    or ``-i`` appended (IPC).
    """
    if engine_addr.startswith("tcp://"):
        host, port = _host_port("--engine-addr", engine_addr)
        input_addr = input_addr or f"tcp://{host}:{port + 1}"
        output_addr = output_addr or f"tcp://{host}:{port + 2}"
    elif engine_addr.startswith("ipc://"):
        input_addr = input_addr or engine_addr + "-input"
        output_addr = output_addr or engine_addr + "-output"
    else:
        raise ValueError(
            f"--engine-addr must be tcp://HOST:PORT or ipc://PATH, got {engine_addr!r}"
        )
    for flag, address in (
        ("--engine-input-addr", input_addr),
        ("--engine-output-addr", output_addr),
    ):
        if address.startswith("tcp://"):
            _host_port(flag, address)
        elif not address.startswith("ipc://"):
            raise ValueError(f"{flag} must be tcp://HOST:PORT or ipc://PATH, got {address!r}")
    return EngineAddresses(
        engine_addr,
        [_nth(input_addr, i) for i in range(clients)],
        [_nth(output_addr, i) for i in range(clients)],
    )


def _host_port(flag: str, address: str) -> tuple[str, int]:
    """HOST and PORT of a tcp:// address the engines are sent: a concrete host,
    so that the port listens only where the engines connect."""
    host, _, port = address[len("tcp://") :].rpartition(":")
    if not port.isdigit() or not host:
        raise ValueError(f"{flag} must be tcp://HOST:PORT, got {address!r}")
    if host in ("*", "0.0.0.0", "[::]", "::"):
        raise ValueError(
            f"{flag} needs a concrete address the engine can reach (it is also sent to "
            f"the engine, and the port listens there only), not {host}"
        )
    return host, int(port)


def beyond_loopback(addresses: EngineAddresses) -> list[str]:
    """The engine addresses that listen beyond this host (TCP, not loopback):
    anyone who reaches them can speak to the engine link."""
    out = []
    for address in (addresses.handshake, *addresses.inputs, *addresses.outputs):
        if address.startswith("tcp://"):
            host = address[len("tcp://") :].rpartition(":")[0].strip("[]")
            if not (host == "localhost" or host == "::1" or host.startswith("127.")):
                out.append(address)
    return out


def _nth(address: str, i: int) -> str:
    if i == 0:
        return address
    if address.startswith("tcp://"):
        host, _, port = address.rpartition(":")
        return f"{host}:{int(port) + 2 * i}"
    return f"{address}-{i}"
