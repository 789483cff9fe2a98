"""What ``serve`` writes on stderr: an access line per call with ``--access-log`` (never a
key or a body), no gRPC C-core noise on ``--exec`` turns, and with ``--log-format json``
every line a JSON object, gRPC's own included (real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.support.ports import free_ports
from tests.support.processes import GATEWAY
from tests.support.workspace import write_callers

from ..conftest import all_secrets, find_leaks

ACCESS_KEY = "access-key-5e2a9c0d71bf"
SECRET_TEXT = "body-text-that-must-not-be-logged"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    return subprocess.run(
        [*GATEWAY, *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**env, "A2A_GATEWAY_KEY": ACCESS_KEY},
    )


def _start(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``serve ARGS`` with callers.json's key, stderr (and stdout) to a file; started."""
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "alice", "key": ACCESS_KEY}])
    port, grpc_port = free_ports(2)
    log_path = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_GATEWAY_", "GRPC_"))} | env
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [*GATEWAY, "serve", *args, "--workspace", str(workspace), "--access-log",
             "--port", str(port), "--grpc-port", str(grpc_port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/.well-known/agent-card.json", timeout=1)
            return server, url, log_path
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise AssertionError("server did not start: " + log_path.read_text()) from None
            time.sleep(0.05)


def test_access_log_and_no_fork_noise(tmp_path: Path) -> None:
    server, url, log_path = _start(tmp_path, "--exec", "cat", "--log-level", "warning")
    try:
        runs = [
            _cli("send", url, SECRET_TEXT, "--transport", "jsonrpc", "--json"),
            _cli("send", url, SECRET_TEXT, "--transport", "grpc", "--stream"),
            _cli("send", url, SECRET_TEXT, "--transport", "grpc", "--json"),
            _cli("get", url, "no-such-task", "--transport", "rest"),
        ]
        assert [r.returncode for r in runs] == [0, 0, 0, 1], [r.stderr for r in runs]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    text = log_path.read_text()
    lines = [line for line in text.splitlines() if " access " in line]
    assert len(lines) == 4, text
    assert "access JSONRPC SendMessage caller=alice status=ok " in lines[0]
    assert "access GRPC SendStreamingMessage caller=alice status=ok " in lines[1]
    assert lines[1].endswith("events=" + lines[1].rsplit("events=", 1)[1])
    assert int(lines[1].rsplit("events=", 1)[1]) >= 2
    assert "access GRPC SendMessage caller=alice status=ok " in lines[2]
    assert "access HTTP+JSON GetTask caller=alice status=TASK_NOT_FOUND " in lines[3]
    assert ACCESS_KEY not in text
    assert SECRET_TEXT not in text
    # Three --exec turns forked a process each: gRPC's fork handlers stayed silent.
    assert "fork" not in text, text
    assert "Traceback" not in text


def test_json_logs_are_json_lines_grpc_core_included(tmp_path: Path) -> None:
    # gRPC's C core made to talk: a warning at start-up, then its API calls (every rpc).
    server, url, log_path = _start(
        tmp_path, "--faux", "--log-format", "json", GRPC_VERBOSITY="info", GRPC_TRACE="api"
    )
    try:
        runs = [
            _cli("send", url, SECRET_TEXT, "--transport", "grpc", "--json"),
            _cli("send", url, SECRET_TEXT, "--transport", "jsonrpc", "--json"),
        ]
        assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    text = log_path.read_text()
    entries = [json.loads(line) for line in text.splitlines()]  # every line, or it fails
    assert all(
        isinstance(e, dict) and {"ts", "level", "logger", "message"} <= e.keys() for e in entries
    )
    grpc = [e for e in entries if e["logger"] == "grpc"]
    assert any("not suitable for production" in e["message"] for e in grpc), text
    assert any(e["message"].startswith("grpc_server_start(") for e in grpc), text
    assert any(e["message"].startswith("grpc_call_start_batch(") for e in grpc), text
    assert all(e["level"] in ("info", "warning") and ".cc:" in e["source"] for e in grpc)
    messages = [e["message"] for e in entries if e["logger"] == "a2a_gateway.access"]
    assert [m.split(" caller=")[0] for m in messages] == [
        "access GRPC SendMessage",
        "access JSONRPC SendMessage",
    ], messages
    # The last lines, written as the process ends, are there when it has ended.
    assert any(e["message"] == "shutting down" for e in entries), text
    assert grpc[-1]["message"] == "grpc_shutdown(void)", text
    assert [e for e in entries if e["logger"] == "stderr"] == []
    assert find_leaks([(str(log_path), text)], all_secrets(tmp_path) | {SECRET_TEXT}) == []
