"""What ``serve`` writes on stderr: an access line per call with ``--access-log`` (never a
key or a body), and no gRPC C-core noise on ``--exec`` turns (real subprocesses)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.support.ports import free_ports
from tests.support.processes import GATEWAY
from tests.support.workspace import write_callers

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


def test_access_log_and_no_fork_noise(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "alice", "key": ACCESS_KEY}])
    port, grpc_port = free_ports(2)
    log_path = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_GATEWAY_", "GRPC_"))}
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [*GATEWAY, "serve", "--exec", "cat",
             "--workspace", str(workspace), "--access-log", "--log-level", "warning",
             "--port", str(port), "--grpc-port", str(grpc_port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url + "/.well-known/agent-card.json", timeout=1)
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
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
