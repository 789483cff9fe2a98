"""Free TCP ports on 127.0.0.1, for servers that must be told their port up front (a
subprocess, a gRPC port named in a card); in-process servers bind port 0 instead."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held together while choosing)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]


def free_port() -> int:
    """One free TCP port on 127.0.0.1."""
    (port,) = free_ports(1)
    return port


@contextlib.contextmanager
def held_port(*, listen: bool = False) -> Iterator[int]:
    """A port bound on 127.0.0.1 for the ``with`` body, so no one else is given it:
    connections to it are refused, or (``listen``) accepted by no one while a server
    that tries to bind it fails."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        if listen:
            sock.listen()
        yield int(sock.getsockname()[1])
