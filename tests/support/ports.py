"""Free TCP ports on 127.0.0.1, for servers that must be told their port up front (a
subprocess, a gRPC port named in a card); in-process servers bind port 0 instead.

A port chosen here is released before its server binds it. ``make test`` runs two
pytest-xdist workers at once, and a port given back to the system's ephemeral pool in
that gap could be taken by the other worker (a server binding port 0, or a client's
outgoing connection). So the ports come from below the ephemeral range, where neither
lands, and each worker has its own slice of that range; within a process they go round
the slice (from a random place), so a port handed out is not handed out again soon.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
from collections.abc import Iterator

HOST = "127.0.0.1"

#: Where chosen ports come from (the ephemeral range starts at 32768 by default).
LOW_PORT, HIGH_PORT = 20000, 32000


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # unknown: ports from port 0 only


def _worker_slice() -> range:
    """This process's share of [LOW_PORT, HIGH_PORT): the whole of it outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1"))
    index = int(worker[2:]) % count if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (HIGH_PORT - LOW_PORT) // count
    start = LOW_PORT + index * size
    return range(start, start + size)


_SLICE = _worker_slice() if _ephemeral_start() >= HIGH_PORT else range(0)
#: The next place in _SLICE to try: from a random one, so that two runs of the suite at
#: once (a clone's beside a checkout's) do not walk the same ports in step.
_next = random.randrange(max(len(_SLICE), 1))


def _bound(sock: socket.socket) -> bool:
    """Bind ``sock`` to the next port of this process's slice that is free (False when
    no slice or none is free: the caller binds port 0)."""
    global _next
    for _ in range(len(_SLICE)):
        port = _SLICE[_next % len(_SLICE)]
        _next += 1
        try:
            sock.bind((HOST, port))
        except OSError:
            continue
        return True
    return False


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held together while choosing)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            if not _bound(sock):
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
