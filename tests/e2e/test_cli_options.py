"""The client verbs' scripting and debugging options, through the CLI's ``main`` run
in-process (in a worker thread, against an in-process gateway or a recording peer):
extra words named, a2a-go's spellings, ``--fail-on-state``, ``--header`` / ``--tenant``
/ ``--extension`` on every binding, ``-v``, ``card --validate`` and ``list``'s filters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.cli import main
from a2a_gateway.protocol import codec
from a2a_gateway.serve import Gateway

from ..client.client_support import grpc_serving, serving
from .conftest import KEY_ALICE

EXIT_TASK_STATE = 5
EXIT_CARD_INVALID = 6
SECRET_HEADER_VALUE = "Bearer tok-9f8e7d6c5b4a3210"


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``await cli(*argv)``: the CLI's main in a worker thread (its own event loop, as
    the command runs), Alice's key in the environment."""
    monkeypatch.setenv("A2A_GATEWAY_KEY", KEY_ALICE)

    def run_main(argv: list[str]) -> int:
        try:
            return main(argv)
        except SystemExit as exc:  # a usage mistake argparse itself reports
            return int(exc.code or 0)

    async def run(*argv: str) -> Run:
        capsys.readouterr()
        code = await asyncio.wait_for(asyncio.to_thread(run_main, list(argv)), 30)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def url(gateway: Gateway) -> str:
    return f"http://127.0.0.1:{gateway.http_port}"


# --- extra words and the a2a-go CLI's habits ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["get", "http://x", "t-1", "t-2"],
            "unrecognized arguments: t-2 (get takes URL TASK_ID)",
        ),
        (
            ["send", "http://x", "hello", "world"],
            "unrecognized arguments: world (send takes URL [TEXT]; quote a text of several words)",
        ),
        (["cancel", "http://x", "t-1", "now"], "unrecognized arguments: now (cancel takes URL"),
        (["card", "http://x", "extended"], "unrecognized arguments: extended (card takes URL)"),
        # A value after a flag may be that flag's secret: counted, never shown.
        (
            ["send", "http://x", "hi", "--kye", "k-secret-0123456789"],
            "unrecognized arguments: --kye and 1 value not shown (--kye: did you mean --key?)",
        ),
        (
            ["send", "http://x", "--json", '{"role":"ROLE_USER","parts":[{"text":"hi"}]}'],
            "1 value not shown (--json takes no value (it asks for JSON output): send a whole"
            " Message with --message JSON)",
        ),
    ],
)
def test_an_extra_word_is_named_with_what_the_verb_takes(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    # It said "unrecognized arguments: 1 value not shown" whatever the word was.
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert "k-secret-0123456789" not in err and "ROLE_USER" not in err


async def test_the_a2a_go_verbs_and_spellings_work(cli: Any, url: str) -> None:
    card = await cli("card", url, "--json")
    discover = await cli("discover", url, "-o", "json")
    assert discover.code == 0 and json.loads(discover.out) == json.loads(card.out)
    sent = await cli("send", url, "--message", '{"parts":[{"text":"hi there"}]}', "--json")
    task = json.loads(sent.out)["task"]
    assert sent.code == 0 and task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["history"][0]["parts"] == [{"text": "hi there"}]
    got = await cli("get", "task", url, task["id"], "--history", "1", "-o", "json")
    assert got.code == 0 and json.loads(got.out)["id"] == task["id"]
    listed = await cli("list", "tasks", url, "--limit", "1", "--json")
    assert [t["id"] for t in json.loads(listed.out)["tasks"]] == [task["id"]]
    immediate = await cli("send", url, "later", "--immediate", "--json")
    assert json.loads(immediate.out)["task"]["status"]["state"] != "TASK_STATE_UNSPECIFIED"
    both = await cli("send", url, "text", "--message", '{"parts":[{"text":"x"}]}')
    assert both.code == 2 and "--message carries the whole message: drop TEXT" in both.err


# --- --fail-on-state ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "flags", "code"),
    [
        ("fail:broken", ["--fail-on-state", "failed,rejected"], EXIT_TASK_STATE),
        ("reject:no", ["--fail-on-state", "failed,rejected"], EXIT_TASK_STATE),
        ("fine", ["--fail-on-state", "failed,rejected"], 0),
        ("fail:broken", [], 0),  # without the flag a failed task is an answer, exit 0
        ("fail:broken", ["--fail-on-state", "failed", "--stream"], EXIT_TASK_STATE),
        ("fail:broken", ["--fail-on-state", "TASK_STATE_FAILED", "--json"], EXIT_TASK_STATE),
    ],
)
async def test_fail_on_state_makes_scripts_stop(
    cli: Any, url: str, text: str, flags: list[str], code: int
) -> None:
    run = await cli("send", url, text, *flags)
    assert run.code == code, run.err
    if code:
        assert "(--fail-on-state)" in run.err.splitlines()[-1]


async def test_subscribe_fails_on_the_state_too(cli: Any, url: str) -> None:
    started = await cli("send", url, "hold:2", "--return-immediately", "--json")
    task_id = json.loads(started.out)["task"]["id"]
    run = await cli("subscribe", url, task_id, "--fail-on-state", "completed")
    assert run.code == EXIT_TASK_STATE, run.err
    assert f"task {task_id} ended completed (--fail-on-state)" in run.err


async def test_fail_on_state_refuses_an_unknown_state(cli: Any, url: str) -> None:
    run = await cli("send", url, "hi", "--fail-on-state", "failed,broken")
    assert run.code == 2 and "unknown task state 'broken'" in run.err


# --- --header, --tenant, --extension on every binding; -v -----------------------------------


@dataclass
class Seen:
    """What the recording peer received on one call."""

    binding: str
    headers: dict[str, str]
    tenant: str
    path: str = ""


@dataclass
class RecordingPeer:
    base: str = ""
    grpc_target: str = ""
    seen: list[Seen] = field(default_factory=list)


TASK = pb.Task(id="t-1", context_id="c-1", status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED))


class _Servicer(a2a_pb2_grpc.A2AServiceServicer):
    def __init__(self, peer: RecordingPeer) -> None:
        self.peer = peer

    async def GetTask(self, request: pb.GetTaskRequest, context: Any) -> pb.Task:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.peer.seen.append(Seen("grpc", metadata, request.tenant))
        return TASK


@contextlib.asynccontextmanager
async def recording_peer() -> AsyncIterator[RecordingPeer]:
    """An agent whose card lists JSON-RPC, HTTP+JSON and gRPC, each answering GetTask
    with :data:`TASK` and recording the headers (metadata) and tenant it received."""
    peer = RecordingPeer()

    async def card(request: web.Request) -> web.Response:
        interfaces = [
            {"url": f"{peer.base}/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": f"{peer.base}/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": peer.grpc_target, "protocolBinding": "GRPC", "protocolVersion": "1.0"},
        ]
        return web.json_response(
            {"name": "recorder", "description": "d", "version": "1", "capabilities": {},
             "supportedInterfaces": interfaces, "defaultInputModes": ["text/plain"],
             "defaultOutputModes": ["text/plain"], "skills": []}
        )  # fmt: skip

    def headers(request: web.Request) -> dict[str, str]:
        return {k.lower(): v for k, v in request.headers.items()}

    async def jsonrpc(request: web.Request) -> web.Response:
        body = await request.json()
        peer.seen.append(Seen("jsonrpc", headers(request), body["params"].get("tenant", "")))
        result = codec.to_dict(TASK)
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})

    async def rest(request: web.Request) -> web.Response:
        path = request.path.removeprefix("/rest")
        tenant = path.split("/")[1] if not path.startswith("/tasks/") else ""
        peer.seen.append(Seen("rest", headers(request), tenant, path))
        return web.json_response(codec.to_dict(TASK))

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/rpc", jsonrpc)
    app.router.add_get("/rest/{tail:.*}", rest)
    async with serving(app) as base, grpc_serving(_Servicer(peer)) as target:
        peer.base, peer.grpc_target = base, target
        yield peer


@pytest.mark.parametrize("transport", ["jsonrpc", "rest", "grpc"])
async def test_service_parameters_tenant_and_extensions_reach_every_binding(
    cli: Any, transport: str
) -> None:
    async with recording_peer() as peer:
        run = await cli(
            "get", peer.base, "t-1", "--transport", transport, "-v",
            "--header", "X-Trace=run-42", "--svc-param", f"Authorization={SECRET_HEADER_VALUE}",
            "--tenant", "acme", "--extension", "urn:ext:a", "--extension", "urn:ext:b",
        )  # fmt: skip
    assert run.code == 0, run.err
    [seen] = peer.seen
    assert seen.binding == transport
    assert seen.headers["x-trace"] == "run-42"
    assert seen.headers["authorization"] == SECRET_HEADER_VALUE
    assert seen.headers["a2a-extensions"] == "urn:ext:a, urn:ext:b"
    assert seen.tenant == "acme"
    if transport == "rest":
        assert seen.path == "/acme/tasks/t-1"  # the tenant as the path prefix
    # -v: each call and its answer on stderr, credentials never shown.
    err = run.err
    assert "> GET " in err and "/.well-known/agent-card.json" in err
    assert "> GetTask (" in err and "> X-Trace: run-42" in err
    assert "> Authorization: ***" in err and "> A2A-Extensions: urn:ext:a, urn:ext:b" in err
    assert '"tenant":"acme"' in err and '< {"id":"t-1"' in err
    assert SECRET_HEADER_VALUE not in err and "tok-9f8e7d6c5b4a3210" not in err
    assert KEY_ALICE not in err and KEY_ALICE not in run.out


async def test_verbose_shows_each_stream_event_and_hides_the_key(cli: Any, url: str) -> None:
    run = await cli("send", url, "chunks:3", "--stream", "-v", "--key", KEY_ALICE)
    assert run.code == 0, run.err
    assert "> SendStreamingMessage (" in run.err and "> X-API-Key: ***" in run.err
    assert run.err.count("< event ") >= 3
    # The stream's end: the server's, or the client's after the final event (it resumes
    # streams, so it stops reading once the task is final).
    assert "< end of stream" in run.err or "< stream closed by the client" in run.err
    assert KEY_ALICE not in run.err


@pytest.mark.parametrize(
    ("value", "problem"),
    [("X-Trace", "expected NAME=VALUE"), ("Bad Name=1", "expected NAME=VALUE")],
)
def test_a_malformed_header_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], value: str, problem: str
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["get", "http://x", "t-1", "--header", value])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err


# --- card --validate -------------------------------------------------------------------------

BAD_CARD = {
    "name": "broken",
    "prefferedTransport": "JSONRPC",
    "supportedInterfaces": [
        {"url": "ftp://agent.example/a2a", "protocolBinding": "SOAP", "protocolVersion": "1"},
        {"url": "agent.example", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
    ],
    "version": "1",
    "capabilities": {},
    "securitySchemes": {"key": {"apiKeySecurityScheme": {"location": "body", "name": "K"}}},
    "securityRequirements": [{"schemes": {"oauth": {"list": []}}}],
    "defaultInputModes": ["text"],
    "defaultOutputModes": ["text/plain"],
    "skills": [
        {"id": "a", "name": "A", "description": "d", "tags": ["t"]},
        {"id": "a", "name": "B", "description": "d", "tags": ["t"]},
    ],
    "iconUrl": "icon.png",
}
BAD_CARD_PROBLEMS = [
    "prefferedTransport: not a field of the A2A 1.0 schema",
    "description: is required",
    "supportedInterfaces[0].protocolBinding: 'SOAP' is none of JSONRPC, HTTP+JSON, GRPC",
    "supportedInterfaces[0].protocolVersion: '1' is not Major.Minor",
    "supportedInterfaces[0].url: 'ftp://agent.example/a2a' is not an absolute http(s) URL",
    "supportedInterfaces[1].url: 'agent.example' is not host:port",
    "iconUrl: 'icon.png' is not an absolute http(s) URL",
    "securityRequirements[0]: names the security scheme 'oauth', which securitySchemes does"
    " not define",
    "securitySchemes['key'].apiKeySecurityScheme.location: 'body' is none of query, header, cookie",
    "defaultInputModes[0]: 'text' is not a media type",
    "skills[1].id: 'a' is used by another skill",
]


async def test_card_validate_names_each_problem(cli: Any, url: str) -> None:
    good = await cli("card", url, "--validate")
    assert good.code == 0, good.out + good.err
    assert good.out.strip().endswith("agent-card.json: valid (A2A 1.0)")

    async def bad(request: web.Request) -> web.Response:
        return web.json_response(BAD_CARD)

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", bad)
    async with serving(app) as base:
        run = await cli("card", base, "--validate")
        as_json = await cli("card", base, "--validate", "--json")
    assert run.code == EXIT_CARD_INVALID
    lines = run.out.splitlines()
    for problem in BAD_CARD_PROBLEMS:
        assert any(line.startswith(problem) for line in lines), (problem, run.out)
    assert lines[-1].endswith(f": {len(lines) - 1} problem(s)")
    report = json.loads(as_json.out)
    assert as_json.code == EXIT_CARD_INVALID and report["valid"] is False
    assert report["problems"] == lines[:-1]


# --- list filters -----------------------------------------------------------------------------


async def test_list_filters_by_context_status_and_time_with_history(cli: Any, url: str) -> None:
    first = json.loads((await cli("send", url, "one", "--json")).out)["task"]
    failed = json.loads((await cli("send", url, "fail:two", "--json")).out)["task"]

    async def ids(*flags: str) -> list[str]:
        run = await cli("list", url, "--json", *flags)
        assert run.code == 0, run.err
        return [t["id"] for t in json.loads(run.out).get("tasks", [])]

    assert await ids("--context-id", first["contextId"]) == [first["id"]]
    assert await ids("--status", "failed") == [failed["id"]]
    assert await ids("--since", "1h") == [failed["id"], first["id"]]
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    assert await ids("--since", future) == []
    human = await cli("list", url, "--history", "1", "--context-id", first["contextId"])
    assert "  [user] one" in human.out.splitlines()
    plain = await cli("list", url, "--context-id", first["contextId"])
    assert "[user]" not in plain.out
    with_artifacts = await cli("list", url, "--with-artifacts", "--context-id", first["contextId"])
    assert "  [artifact] " in with_artifacts.out
    wrong = await cli("list", url, "--since", "yesterday")
    assert wrong.code == 2 and "not a time: 'yesterday'" in wrong.err
