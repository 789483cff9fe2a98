"""Client test fixtures: the official a2a-sdk server and our own gateway, as subprocesses.

The SDK lives in ``.venv-peer`` and is never imported here: ``peers/sdk_server.py``
runs as a subprocess, started once per session, and prints ``READY`` when it serves.
Our gateway runs as ``python -P -m a2a_gateway serve --faux`` with one caller key.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from .client_support import (
    HOST,
    OWN_KEY,
    PEER_KEY,
    PEER_PYTHON,
    READY_TIMEOUT_S,
    ROOT,
    SDK_SERVER,
    Peer,
    free_port,
)


def _wait_ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"READY" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise RuntimeError(f"SDK peer did not start (exit {proc.poll()})")
            if selector.select(timeout=min(left, 0.5)):
                chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
                if not chunk:
                    raise RuntimeError(f"SDK peer closed stdout (exit {proc.poll()})")
                buffer += chunk


@pytest.fixture(scope="session")
def sdk_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    """The official SDK serving the echo agent on all three bindings, key required."""
    if not PEER_PYTHON.exists():
        pytest.skip(f"the a2a-sdk venv is missing ({PEER_PYTHON}): run `make peer`")
    port = free_port()
    stderr = tmp_path_factory.mktemp("sdk-peer") / "stderr.log"
    command = [
        str(PEER_PYTHON),
        str(SDK_SERVER),
        "--host",
        HOST,
        "--port",
        str(port),
        "--grpc-port",
        "0",
        "--api-key",
        PEER_KEY,
        "--push",
    ]
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err
        )
    try:
        _wait_ready(proc)
        yield Peer(url=f"http://{HOST}:{port}", key=PEER_KEY)
    finally:
        _stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_card(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"our gateway exited during start-up ({proc.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("our gateway did not serve its card in time")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    """Our own gateway (``a2a-gateway serve --faux``) with one caller, all bindings."""
    workspace = tmp_path_factory.mktemp("own-gateway")
    (workspace / ".a2a").mkdir()
    callers = [{"name": "tester", "key": OWN_KEY}]
    (workspace / ".a2a" / "callers.json").write_text(json.dumps(callers))
    port, grpc_port = free_port(), free_port()
    command = [
        sys.executable,
        "-P",
        "-m",
        "a2a_gateway",
        "serve",
        "--faux",
        "--workspace",
        str(workspace),
        "--store",
        "memory",
        "--host",
        HOST,
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
    ]
    log = workspace / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    base = f"http://{HOST}:{port}"
    try:
        _wait_card(proc, base + "/.well-known/agent-card.json")
        yield Peer(url=base, key=OWN_KEY)
    finally:
        _stop(proc)
