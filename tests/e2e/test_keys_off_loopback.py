"""A key is always required off loopback (issue 10, item 1), on real server processes.

- ``serve`` bound to a non-loopback address with no caller anywhere refuses to start:
  one line, exit 2, before any port is bound (a port held by this test would otherwise
  make it exit 1 with "address already in use"); proxy mode and ``--exec`` alike.
- Bound off loopback with a caller, a call without a key is 401 / UNAUTHENTICATED on
  every binding, in every mode (the anonymous caller exists only on loopback).
- A workspace without a callers.json logs one warning naming the folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from a2a_gateway.cli import build_parser
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import keyless_problem, server_config
from a2a_gateway.server.config import is_loopback
from a2a_gateway.settings import SETTINGS, resolve
from lf.a2a.v1 import a2a_pb2 as pb
from lf.a2a.v1 import a2a_pb2_grpc
from tests.support import ports
from tests.support.ports import HOST, free_ports
from tests.support.processes import CARD_PATH, GATEWAY, ServerProcess
from tests.support.workspace import write_callers

KEY = "offloop-key-5e0c2b7a91d4"
ANY_ADDRESS = "0.0.0.0"
START_TIMEOUT_S = 60.0


def _workspace(root: Path, name: str, callers: object | None) -> Path:
    folder = root / name
    WorkspaceLayout(folder).state.mkdir(parents=True)
    if callers is not None:
        write_callers(folder, callers)
    return folder


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port this test listens on: a server that tried to bind it would exit 1."""
    with ports.held_port(listen=True) as port:
        yield port


def _refusal_cases(root: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (serve arguments, extra environment): all must refuse to start."""
    bare = _workspace(root, "bare", None)  # no callers.json (a typo in the path)
    empty = _workspace(root, "empty", [])
    broken = _workspace(root, "broken", [{"name": "x"}])  # no valid entry
    farm = root / "farm"
    for name in ("a", "b"):
        _workspace(farm, name, None)
    host = ["--host", ANY_ADDRESS]
    return {
        "no workspace": (host, {}),
        "workspace without callers.json": ([*host, "--workspace", str(bare)], {}),
        "empty callers.json": ([*host, "--workspace", str(empty)], {}),
        "callers.json without a valid caller": ([*host, "--workspace", str(broken)], {}),
        "two workspaces, none with callers": (
            [*host, "--workspace", str(bare), "--workspace", str(empty)],
            {},
        ),
        "workspaces root without callers": ([*host, "--workspaces-root", str(farm)], {}),
        "every address, empty host": (["--host", "", "--workspace", str(bare)], {}),
        "host from the environment": ([], {"A2A_GATEWAY_HOST": ANY_ADDRESS}),
        "proxy mode": ([*host, "--upstream", f"http://{HOST}:9"], {}),
        "exec agent": ([*host, "--exec", "cat", "--workspace", str(bare)], {}),
        "allow-anonymous off loopback": ([*host, "--allow-anonymous"], {}),
    }


def test_the_whole_table_is_refused_before_serving(tmp_path: Path) -> None:
    """Every case, through the command line's own settings and check (in-process)."""
    for name, (args, env) in _refusal_cases(tmp_path).items():
        if "allow-anonymous" in name:
            continue  # refused by its own rule, in the subprocess test below
        parser = build_parser()
        parsed = parser.parse_args(["serve", *args])
        flags = {s.name: getattr(parsed, s.name) for s in SETTINGS}
        config = server_config(resolve(flags, environ=env))
        problem = keyless_problem(config)
        assert problem is not None, name
        assert "\n" not in problem and "callers add" in problem, name
        assert "without keys" in problem, name


#: The cases also run as real processes (each costs an interpreter start).
SUBPROCESS_CASES = (
    "no workspace",
    "workspace without callers.json",
    "proxy mode",
    "exec agent",
    "allow-anonymous off loopback",
)


def test_no_caller_off_loopback_refuses_to_start(tmp_path: Path, held_port: int) -> None:
    cases = _refusal_cases(tmp_path)
    running = {}
    for name in SUBPROCESS_CASES:
        args, env = cases[name]
        command = [*GATEWAY, "serve", *args, "--port", str(held_port), "--grpc-port", "-1"]
        running[name] = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
    failures = []
    for name, proc in running.items():
        out, err = proc.communicate(timeout=START_TIMEOUT_S)
        lines = [line for line in err.splitlines() if line.strip()]
        if proc.returncode != 2 or len(lines) != 1 or out:
            failures.append(f"{name}: exit {proc.returncode}, stderr {err!r}, stdout {out!r}")
            continue
        line = lines[0]
        if "allow-anonymous" in name:
            ok = "loopback" in line
        else:
            ok = "without keys" in line and "callers add" in line and "--workspace" in line
        if not ok or "Traceback" in line:
            failures.append(f"{name}: {line!r}")
    assert not failures, "\n".join(failures)


def test_a_caller_anywhere_is_enough(tmp_path: Path) -> None:
    bare = _workspace(tmp_path, "bare", None)
    keyed = _workspace(tmp_path, "keyed", [{"name": "alice", "key": KEY}])
    for host, workspaces in [
        (ANY_ADDRESS, [keyed]),
        (ANY_ADDRESS, [bare, keyed]),
        ("127.0.0.1", []),
        ("localhost", [bare]),
    ]:
        flags = {"host": host, "workspace": [str(w) for w in workspaces]}
        assert keyless_problem(server_config(resolve(flags, environ={}))) is None, (
            host,
            workspaces,
        )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.1", False),
        ("example.internal", False),
        ("127.0.0.1.example", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _http_status(url: str, body: bytes | None, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _server(name: str, log_dir: Path, *args: str) -> ServerProcess:
    """``serve ARGS`` on free ports (HTTP and gRPC), as a managed subprocess."""
    port, grpc_port = free_ports(2)
    command = [*GATEWAY, "serve", *args, "--port", str(port), "--grpc-port", str(grpc_port)]
    card_url = f"http://{HOST}:{port}{CARD_PATH}"
    return ServerProcess(name, command, log_dir, card_url, grpc_port=grpc_port)


def _statuses(server: ServerProcess, key: str | None) -> dict[str, object]:
    """What each binding answers to a GetTask of an unknown task with ``key``."""
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    metadata: list[tuple[str, str]] = [("a2a-version", "1.0")]
    if key is not None:
        headers["X-API-Key"] = key
        metadata.append(("x-api-key", key))
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
    base = server.card_url.removesuffix(CARD_PATH)
    grpc_port = server.grpc_port
    found: dict[str, object] = {
        "jsonrpc": _http_status(f"{base}/a2a", json.dumps(body).encode(), headers),
        "rest": _http_status(f"{base}/a2a/v1/tasks/nope", None, headers),
    }
    with grpc.insecure_channel(f"{HOST}:{grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        try:
            stub.GetTask(pb.GetTaskRequest(id="nope"), metadata=metadata, timeout=10)
            found["grpc"] = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            found["grpc"] = exc.code()
    return found


@pytest.mark.parametrize("mode", ["faux", "exec", "proxy"])
def test_off_loopback_no_key_is_refused_on_every_binding(tmp_path: Path, mode: str) -> None:
    workspace = _workspace(tmp_path, "ws", [{"name": "alice", "key": KEY}])
    agent = {
        "faux": ["--faux"],
        "exec": ["--exec", "cat"],
        "proxy": ["--upstream", f"http://{HOST}:9", "--upstream-timeout", "1"],
    }[mode]
    server = _server(
        f"offloop-{mode}", tmp_path, *agent, "--workspace", str(workspace), "--host", ANY_ADDRESS
    )
    with server.running():
        anonymous = _statuses(server, None)
        keyed = _statuses(server, KEY)
    assert anonymous == {
        "jsonrpc": 401,
        "rest": 401,
        "grpc": grpc.StatusCode.UNAUTHENTICATED,
    }
    # With the key the call gets through authentication (an unknown task, or an
    # upstream that is not there: anything but 401).
    assert keyed["jsonrpc"] == 200
    assert keyed["rest"] != 401
    assert keyed["grpc"] != grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("allow_anonymous", [False, True])
def test_workspace_without_callers_warns_naming_it(tmp_path: Path, allow_anonymous: bool) -> None:
    workspace = _workspace(tmp_path, "typo-ws", None)
    extra = ["--allow-anonymous"] if allow_anonymous else []
    server = _server(
        "loopback-no-callers", tmp_path, "--faux", "--workspace", str(workspace), *extra
    )
    with server.running():
        anonymous = _statuses(server, None)
        keyed = _statuses(server, KEY)
    stderr = server.stderr_path.read_text()
    warnings = [line for line in stderr.splitlines() if "no callers" in line]
    assert len(warnings) == 1, stderr
    assert str(workspace) in warnings[0]
    assert "WARNING" in warnings[0]
    if allow_anonymous:
        assert anonymous["jsonrpc"] == 200 and anonymous["grpc"] != grpc.StatusCode.UNAUTHENTICATED
        assert "every call with a key will be refused" in warnings[0]
    else:
        assert anonymous["jsonrpc"] == 401
        assert "no callers: every call will be refused" in warnings[0]
    assert keyed == {"jsonrpc": 401, "rest": 401, "grpc": grpc.StatusCode.UNAUTHENTICATED}
