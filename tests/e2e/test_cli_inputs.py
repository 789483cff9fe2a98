"""The client verbs take what people pass and say what happened (real subprocesses).

stdin text, data / URL parts, metadata, whole requests, saved files, every URL form, usage
mistakes (exit 2), final status messages, the task id on stderr, Ctrl-C in a terminal
(pty), and request signing.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.processes import GATEWAY
from tests.support.workspace import write_callers

from .conftest import KEY_ALICE

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 30.0
SIGNED_KEY = "signed-key-4c1d9e0b7a22"
SIGNING_SECRET = "signing-secret-8e3f21a7c90d5b64"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def env_for(key: str | None = KEY_ALICE, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    if key is not None:
        env["A2A_GATEWAY_KEY"] = key
    return {**env, **extra}


async def cli(
    *args: str, key: str | None = KEY_ALICE, stdin: bytes | None = None, **env: str
) -> Run:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-m",
        "a2a_gateway",
        *args,
        cwd=ROOT,
        env=env_for(key, **env),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            out, err = await proc.communicate(stdin)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return Run(proc.returncode or 0, out.decode(), err.decode())


def task_id_of(run: Run) -> str:
    first = run.stderr.splitlines()[0]
    assert first.startswith("task "), run.stderr
    return first.removeprefix("task ")


@pytest.fixture
def url(gateway: Gateway) -> str:
    return f"http://127.0.0.1:{gateway.http_port}"


# --- what people pass ------------------------------------------------------------------


async def test_text_from_stdin_data_url_parts_and_metadata(url: str) -> None:
    piped = await cli("send", url, "-", stdin=b"a long text\nfrom a pipe\n")
    assert piped.code == 0, piped.stderr
    assert piped.stdout.startswith("a long text\nfrom a pipe\ntask ")

    rich = await cli(
        "send",
        url,
        "with parts",
        "--data",
        '{"city": "Lisbon", "days": 3}',
        "--file-url",
        "https://example.org/docs/report.pdf",
        "--metadata",
        '{"trace": "t-1"}',
        "--return-immediately",
        "--json",
    )
    assert rich.code == 0, rich.stderr
    task_id = json.loads(rich.stdout)["task"]["id"]
    got = await cli("get", url, task_id, "--json")
    message = json.loads(got.stdout)["history"][0]
    assert message["parts"][0] == {"text": "with parts"}
    assert message["parts"][1] == {"data": {"city": "Lisbon", "days": 3}}
    assert message["parts"][2]["url"] == "https://example.org/docs/report.pdf"
    assert message["parts"][2]["filename"] == "report.pdf"
    assert message["parts"][2]["mediaType"] == "application/pdf"
    assert message["metadata"]["trace"] == "t-1"


async def test_whole_request_from_a_file_and_from_stdin(url: str, tmp_path: Path) -> None:
    request = {
        "message": {
            "role": "ROLE_USER",
            "messageId": "req-file-1",
            "parts": [{"text": "from a request file"}],
        }
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    from_file, from_stdin = await asyncio.gather(
        cli("send", url, "--request", str(tmp_path / "request.json")),
        cli(
            "send",
            url,
            "--request",
            "-",
            stdin=json.dumps(request).replace("req-file-1", "req-stdin-1").encode(),
        ),
    )
    assert from_file.code == 0, from_file.stderr
    assert from_file.stdout.startswith("from a request file\ntask ")
    assert from_stdin.code == 0, from_stdin.stderr
    assert from_stdin.stdout.startswith("from a request file\ntask ")


async def test_save_dir_keeps_files_inside_it(url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    plain, hostile, again = (
        await cli("send", url, "file:report.txt", "--save-dir", str(out)),
        await cli("send", url, "file:../../escape.txt", "--save-dir", str(out), "--stream"),
        await cli("send", url, "file:report.txt", "--save-dir", str(out), "--json"),
    )
    for run in (plain, hostile, again):
        assert run.code == 0, run.stderr
    assert f"saved {out / 'report.txt'}" in plain.stderr
    assert f"saved {out / 'escape.txt'}" in hostile.stderr
    assert f"saved {out / 'report-2.txt'}" in again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["escape.txt", "report-2.txt", "report.txt"]
    assert b"Name: report.txt" in (out / "report.txt").read_bytes()
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path.parent / "escape.txt").exists()


async def test_every_url_form_reaches_the_agent(url: str, gateway: Gateway) -> None:
    host_port = f"127.0.0.1:{gateway.http_port}"
    grpc_address = f"127.0.0.1:{gateway.grpc_port}"
    runs = await asyncio.gather(
        cli("send", url + "/.well-known/agent-card.json", "via the card"),
        cli("send", url + "/a2a", "via the JSON-RPC interface"),
        cli("send", url + "/a2a/v1", "via the REST interface"),
        cli("send", host_port, "via host:port"),
        cli("send", grpc_address, "via the gRPC interface"),
        cli("send", "--transport", "grpc", grpc_address, "via forced gRPC"),
        cli("card", grpc_address, "--transport", "grpc"),
    )
    texts = [
        "via the card",
        "via the JSON-RPC interface",
        "via the REST interface",
        "via host:port",
        "via the gRPC interface",
        "via forced gRPC",
    ]
    for run, text in zip(runs, texts, strict=False):
        assert run.code == 0, (text, run.stderr)
        assert run.stdout.startswith(text + "\ntask "), run.stdout
    assert f"no scheme given, using http://{host_port}" in runs[3].stderr
    assert runs[3].stderr.count("no scheme given") == 1
    assert runs[6].code == 0, runs[6].stderr
    assert "interfaces:" in runs[6].stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("send", "not-a-url", "hi"), "not an agent URL: 'not-a-url'"),
        (("send", "ftp://example.org", "hi"), "not an agent URL"),
        (("card", "127.0.0.1:99999"), "port out of range"),
        (("send", "{url}", "hi", "--data", "{not json"), "--data is not valid JSON"),
        (("send", "{url}", "hi", "--metadata", "[1, 2]"), "--metadata must be a JSON object"),
        (("send", "{url}", "hi", "--file-url", "file:///etc/passwd"), "--file-url must be an"),
        (("send", "{url}", "hi", "--request", "-"), "--request carries the whole message"),
        (("send", "{url}", "--request", "/no/such/file.json"), "cannot read --request"),
        (("send", "{url}", "-"), "TEXT -: standard input was empty"),
        (("send", "{url}"), "a message needs text or at least one file"),
    ],
)
async def test_usage_mistakes_exit_2_never_4(url: str, args: tuple[str, ...], needle: str) -> None:
    run = await cli(*(a.replace("{url}", url) for a in args), stdin=b"")
    assert run.code == 2, run.stderr
    assert needle in run.stderr
    assert "Traceback" not in run.stderr


# --- what happened -----------------------------------------------------------------------


@pytest.fixture
async def exec_gateway(tmp_path: Path) -> AsyncIterator[str]:
    """An agent that streams an artifact and then fails (a process agent)."""
    settings = resolve(
        {
            "port": 0,
            "grpc_port": -1,
            "exec": "echo partial answer; echo 'disk full' >&2; exit 3",
            "allow_anonymous": True,
        },
        environ={},
    )
    server = Gateway(settings)
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.http_port}"
    finally:
        await server.stop()


async def test_final_status_message_is_always_printed(url: str, exec_gateway: str) -> None:
    runs = await asyncio.gather(
        cli("send", url, "fail:the disk is full"),
        cli("send", url, "fail:the disk is full", "--stream"),
        cli("send", url, "reject:not my job"),
        cli("send", url, "ask:Which city?", "--stream"),
        cli("send", url, "auth:sign in first"),
        cli("send", exec_gateway, "go", key=None),
        cli("send", exec_gateway, "go", "--stream", key=None),
    )
    expected = [
        ("the disk is full", "failed"),
        ("the disk is full", "failed"),
        ("not my job", "rejected"),
        ("Which city?", "input-required"),
        ("sign in first", "auth-required"),
        ("partial answer", "failed"),
        ("partial answer", "failed"),
    ]
    for run, (said, state) in zip(runs, expected, strict=True):
        assert run.code == 0, run.stderr
        assert said in run.stdout, run.stdout
        assert f": {state} (context " in run.stdout.splitlines()[-1]
    # With an artifact, the status message (why it failed) is printed too.
    for run in runs[5:]:
        lines = run.stdout.splitlines()
        assert lines[0] == "partial answer"
        assert len(lines) == 3 and lines[1], run.stdout  # the failure's own message


def _pty_run(args: list[str], *, until: bytes, then: bytes, env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI on a terminal; once ``until`` is printed type ``then`` (e.g. Ctrl-C)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [*GATEWAY, *args], env)
    output = b""
    sent = False
    deadline = time.monotonic() + CLI_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            if not sent and until in output:
                os.write(fd, then)
                sent = True
        else:
            raise AssertionError(f"no end in time: {output!r}")
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    assert sent, output
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


async def test_ctrl_c_says_how_to_follow_or_stop_the_task(url: str) -> None:
    env = env_for()
    code, text = await asyncio.to_thread(
        _pty_run, ["send", url, "hold:30"], until=b"task ", then=b"\x03", env=env
    )
    assert code == 130, text
    task_id = text.split("task ", 1)[1].split()[0]
    assert f"interrupted; task {task_id} goes on running on the agent" in text
    assert f"follow it: a2a-gateway subscribe {url} {task_id}" in text
    assert f"stop it:   a2a-gateway cancel {url} {task_id}" in text
    assert "Traceback" not in text
    still = await cli("get", url, task_id)
    assert ": working (context " in still.stdout
    await cli("cancel", url, task_id)


async def test_cancel_on_interrupt_cancels_the_task(url: str) -> None:
    code, text = await asyncio.to_thread(
        _pty_run,
        ["send", url, "hold:30", "--stream", "--cancel-on-interrupt"],
        until=b"task ",
        then=b"\x03",
        env=env_for(),
    )
    assert code == 130, text
    task_id = text.split("task ", 1)[1].split()[0]
    assert f"canceling task {task_id}" in text
    assert f"task {task_id}: canceled" in text
    after = await cli("get", url, task_id)
    assert ": canceled (context " in after.stdout


# --- signing -----------------------------------------------------------------------------


@pytest.fixture
async def signed_gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    workspace = tmp_path / "signed-ws"
    WorkspaceLayout(workspace).state.mkdir(parents=True)
    write_callers(
        workspace, [{"name": "carol", "key": SIGNED_KEY, "signing_secret": SIGNING_SECRET}]
    )
    settings = resolve(
        {"workspace": [str(workspace)], "port": 0, "grpc_port": 0, "faux": True}, environ={}
    )
    server = Gateway(settings)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_cli_signs_requests_on_every_binding(signed_gateway: Gateway) -> None:
    url = f"http://127.0.0.1:{signed_gateway.http_port}"
    signed = {"A2A_GATEWAY_SIGNING_SECRET": SIGNING_SECRET}
    runs = await asyncio.gather(
        *(
            cli("send", url, f"signed over {t}", "--transport", t, key=SIGNED_KEY, **signed)
            for t in ("jsonrpc", "rest", "grpc")
        ),
        cli("list", url, "--transport", "rest", key=SIGNED_KEY, **signed),
        cli("send", url, "unsigned", key=SIGNED_KEY),
    )
    for run, t in zip(runs[:3], ("jsonrpc", "rest", "grpc"), strict=True):
        assert run.code == 0, run.stderr
        assert run.stdout.startswith(f"signed over {t}\n")
    assert runs[3].code == 0, runs[3].stderr  # a GET signs the empty body
    assert runs[4].code == 3
    assert "X-A2A-Signature is required" in runs[4].stderr
    for run in runs:
        assert SIGNING_SECRET not in run.stdout + run.stderr
        assert SIGNED_KEY not in run.stdout + run.stderr


async def test_proxy_signs_upstream_requests(signed_gateway: Gateway, tmp_path: Path) -> None:
    upstream = f"http://127.0.0.1:{signed_gateway.http_port}"
    proxy = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-m",
        "a2a_gateway",
        "serve",
        "--upstream",
        upstream,
        "--allow-anonymous",
        "--port",
        "0",
        "--grpc-port",
        "-1",
        cwd=tmp_path,
        env=env_for(
            None,
            A2A_GATEWAY_UPSTREAM_KEY=SIGNED_KEY,
            A2A_GATEWAY_UPSTREAM_SIGNING_SECRET=SIGNING_SECRET,
        ),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proxy.stderr is not None
        async with asyncio.timeout(CLI_TIMEOUT_S):
            while True:
                line = (await proxy.stderr.readline()).decode()
                assert line, "the proxy exited"
                if "serving on http://" in line:
                    port = line.split("serving on http://127.0.0.1:", 1)[1].split()[0]
                    break
        run = await cli("send", f"http://127.0.0.1:{port}", "through the proxy", key=None)
        assert run.code == 0, run.stderr
        assert run.stdout.startswith("through the proxy\ntask ")
    finally:
        proxy.send_signal(signal.SIGTERM)
        await proxy.wait()
