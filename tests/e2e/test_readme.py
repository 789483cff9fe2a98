"""The README's curl examples, run verbatim against a real ``serve`` subprocess.

Each ``sh`` block of the sections in SECTIONS runs in bash with only the port
changed; every ``# → ...`` line after it is a claim: each fragment between ``...``
must appear in what the command printed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("## Try it with curl", "## Call agents from the command line", "## A2A 0.3 peers")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def readme_blocks() -> list[tuple[str, list[str]]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks: list[str] = []
    for heading in SECTIONS:
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        blocks += re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    result = []
    for block in blocks:
        claims = [
            line.split("# → ", 1)[1] for line in block.splitlines() if line.startswith("# → ")
        ]
        result.append((block, claims))
    return result


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, int]]:
    port = _free_port()
    log = (tmp_path / "server.log").open("w+")
    grpc_port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "a2a_gateway",
            "serve",
            "--faux",
            "--allow-anonymous",
            "--workspace",
            str(tmp_path / "ws"),
            "--port",
            str(port),
            "--grpc-port",
            str(grpc_port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=1
                )
                break
            except OSError:
                assert process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        yield port, grpc_port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        log.seek(0)
        assert "Traceback" not in log.read()
        log.close()


def test_readme_examples(served: tuple[int, int]) -> None:
    port, grpc_port = served
    assert shutil.which("curl"), "the README examples need curl"
    blocks = readme_blocks()
    assert len(blocks) >= 5
    for block, claims in blocks:
        script = block.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        script = script.replace("127.0.0.1:8081", f"127.0.0.1:{grpc_port}")
        script = script.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )
        assert result.returncode == 0, (block, result.stderr)
        assert result.stdout.strip(), block
        for claim in claims:
            for fragment in claim.split("..."):
                fragment = fragment.strip().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
                fragment = fragment.replace("127.0.0.1:8081", f"127.0.0.1:{grpc_port}")
                if fragment:
                    assert fragment in result.stdout, (fragment, result.stdout[:2000])


def test_readme_agent_example_is_served(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, flags=re.S)
    assert code is not None
    (tmp_path / "shout.py").write_text(code.group(1))
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "a2a_gateway", "serve", "--agent", "shout:Shout",
         "--allow-anonymous", "--port", str(port), "--grpc-port", "-1"],
        cwd=tmp_path,  # found in the current folder, as the README says: no PYTHONPATH
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        body = (
            b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
            b'{"role":"ROLE_USER","messageId":"m","parts":[{"text":"hello"}]}}}'
        )
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/a2a",
                    data=body,
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=5) as response:
                    answer = response.read().decode()
                break
            except OSError:
                assert process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        assert '"text":"HELLO"' in answer
        assert "TASK_STATE_COMPLETED" in answer
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
