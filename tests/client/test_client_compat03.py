"""Our client calling A2A 0.3-only agents: the official SDK offering only 0.3 interfaces
(``sdk_server.py --only-0.3 --grpc-0.3``: JSON-RPC, REST and its 0.3 gRPC service; it
refuses any request announcing ``A2A-Version: 1.x``), scenarios shared with our own
gateway's 0.3 surface (more of it in ``test_client_compat03_own.py``), and a recording
0.3 peer for the bytes on the wire."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import (
    AuthRejected,
    JsonRpc03Transport,
    RemoteService,
    Rest03Transport,
    Unreachable,
    connect,
)
from a2a_gateway.client.cards import parse_card
from a2a_gateway.protocol import errors
from a2a_gateway.server.rest import LEGACY_STREAM_CODEC
from tests.support.ports import free_port, free_ports
from tests.support.processes import CARD_PATH, ServerProcess, require_peer_venv
from tests.support.processes import sdk_server_command as _sdk_server_command

from .client_support import (
    BINDINGS,
    HOST,
    PEER_KEY,
    TRANSPORTS,
    TRANSPORTS_03,
    Peer,
    own_legacy_service,
    serving,
    text_request,
)

BOUND_S = 20.0
LEGACY_TRANSPORTS = ("jsonrpc", "rest")
#: The SDK peer's 0.3 bindings; gRPC (``a2a.v1.A2AService``) is the last choice.
SDK_TRANSPORTS = (*LEGACY_TRANSPORTS, "grpc")


@pytest.fixture(scope="module")
def legacy_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    """The official SDK as a 0.3-only agent (JSON-RPC, REST and its 0.3 gRPC service), key
    required, push on."""
    require_peer_venv()
    port, grpc_port = free_ports(2)
    base = f"http://{HOST}:{port}"
    command = _sdk_server_command(
        port, grpc_port, transports=SDK_TRANSPORTS, api_key=PEER_KEY, push=True
    )
    server = ServerProcess(
        "sdk-peer-0.3",
        [*command, "--only-0.3", "--grpc-0.3"],
        tmp_path_factory.mktemp("sdk-peer-03"),
        base + CARD_PATH,
        grpc_port=grpc_port,
        strict_shutdown=False,
    )
    with server.running():
        yield Peer(url=base, key=PEER_KEY)


@pytest.fixture(params=SDK_TRANSPORTS)
async def agent(request: pytest.FixtureRequest, legacy_peer: Peer) -> AsyncIterator[RemoteService]:
    async with asyncio.timeout(BOUND_S):
        service = await connect(
            legacy_peer.url, key=legacy_peer.key, transport=request.param, timeout=10
        )
    # the forced transport was taken, not another one the card lists
    assert service.binding == BINDINGS[request.param]
    async with service:
        yield service


#: The 0.3 agents the scenarios shared by both run against: the official SDK's peer on
#: each binding, and our own gateway's 0.3 gRPC service (its card cut to 0.3).
AGENTS = (*(("sdk", t) for t in SDK_TRANSPORTS), ("own", "grpc"))
#: The same scenarios over A2A 1.0 too: the official SDK's 1.0 peer on each binding.
AGENTS_1_0 = tuple(("sdk-1.0", t) for t in TRANSPORTS)


def _agent_ids(agents: tuple[tuple[str, str], ...]) -> list[str]:
    return [f"{who}-{transport}" for who, transport in agents]


@pytest.fixture(params=AGENTS, ids=_agent_ids(AGENTS))
async def any_agent(request: pytest.FixtureRequest) -> AsyncIterator[RemoteService]:
    who, transport = request.param
    async with asyncio.timeout(BOUND_S):
        if who == "sdk-1.0":
            sdk: Peer = request.getfixturevalue("sdk_peer")
            service = await connect(sdk.url, key=sdk.key, transport=transport, timeout=10)
        elif who == "own":
            own_server: Peer = request.getfixturevalue("own_server")
            service = await own_legacy_service(own_server, transport)
        else:
            peer: Peer = request.getfixturevalue("legacy_peer")
            service = await connect(peer.url, key=peer.key, transport=transport, timeout=10)
    assert service.binding == BINDINGS[transport]
    async with service:
        yield service


# --- against the official SDK, 0.3 only ---------------------------------------------------


async def test_a_0_3_interface_is_chosen(agent: RemoteService) -> None:
    assert agent.interface.protocol_version == "0.3"
    assert isinstance(agent.transport, TRANSPORTS_03[agent.binding])
    # the key opened the extended card (over 0.3: agent/getAuthenticatedExtendedCard, /v1/card)
    assert "extended-echo" in [s.id for s in agent.card.skills]


async def test_without_a_forced_transport_json_rpc_is_preferred(legacy_peer: Peer) -> None:
    async with asyncio.timeout(BOUND_S):
        async with await connect(legacy_peer.url, key=legacy_peer.key) as service:
            assert (service.binding, service.interface.protocol_version) == ("JSONRPC", "0.3")


async def test_send_completes_with_artifact(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("hello there"))
        got = await agent.get_task(pb.GetTaskRequest(id=reply.task.id))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert [p.text for a in reply.task.artifacts for p in a.parts] == ["hello there"]
    assert got.id == reply.task.id and got.status.state == pb.TASK_STATE_COMPLETED
    assert got.history[0].role == pb.ROLE_USER and got.history[0].parts[0].text == "hello there"


async def test_plain_message_reply(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        reply = await agent.send_message(text_request("message:just words"))
    assert reply.message.role == pb.ROLE_AGENT and reply.message.parts[0].text == "just words"


async def test_stream_chunks_become_1_0_events(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        events = [e async for e in agent.send_streaming_message(text_request("chunks:3"))]
    assert events[0].WhichOneof("payload") == "task"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert [c.append for c in chunks] == [False, True, True]
    assert chunks[-1].last_chunk
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_cancel_a_held_task_seen_through_resubscribe(any_agent: RemoteService) -> None:
    agent = any_agent
    async with asyncio.timeout(BOUND_S):
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
        stream = agent.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id))
        first = await anext(stream)
        canceled = await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
        rest = [e async for e in stream]
    assert first.WhichOneof("payload") in ("task", "status_update")
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert rest[-1].status_update.status.state == pb.TASK_STATE_CANCELED


@pytest.mark.parametrize(
    "any_agent", AGENTS + AGENTS_1_0, ids=_agent_ids(AGENTS + AGENTS_1_0), indirect=True
)
async def test_multi_turn_ask_then_answer(
    any_agent: RemoteService, request: pytest.FixtureRequest
) -> None:
    agent = any_agent
    async with asyncio.timeout(BOUND_S):
        asked = (await agent.send_message(text_request("ask:your name?"))).task
        assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert asked.status.message.parts[0].text == "your name?"
        answered = await agent.send_message(
            text_request("Ada", task_id=asked.id, context_id=asked.context_id)
        )
    assert answered.task.id == asked.id
    assert answered.task.status.state == pb.TASK_STATE_COMPLETED
    if request.node.callspec.params["any_agent"][0] != "own":  # the SDK's peers echo it
        assert answered.task.artifacts[-1].parts[0].text == "Ada"


async def test_push_config_set_get_list_delete(agent: RemoteService) -> None:
    # A live webhook: the SDK delivers the cancel to it (a dead one makes it log a traceback).
    delivered = asyncio.Event()

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        delivered.set()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", accept)
    async with serving(app) as hook_base, asyncio.timeout(BOUND_S):
        hook = hook_base + "/hook"
        task = (await agent.send_message(text_request("hold:30", return_immediately=True))).task
        try:
            created = await agent.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, id="hook-1", url=hook, token="tok")
            )
            assert (created.task_id, created.id, created.token) == (task.id, "hook-1", "tok")
            got = await agent.get_task_push_notification_config(
                pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
            )
            assert got.url == hook
            listed = await agent.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == ["hook-1"]
            delete = pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
            if agent.binding == "HTTP+JSON":
                # The SDK's 0.3 REST adapter has no DELETE route (digest §14.1).
                with pytest.raises(errors.MethodNotFoundError):
                    await agent.delete_task_push_notification_config(delete)
                return
            await agent.delete_task_push_notification_config(delete)
            with pytest.raises(errors.TaskNotFoundError):
                await agent.get_task_push_notification_config(
                    pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
                )
        finally:
            await agent.cancel_task(pb.CancelTaskRequest(id=task.id))
            if agent.binding == "HTTP+JSON":  # the config is still there: wait for its push
                await delivered.wait()


async def test_unknown_task_is_task_not_found(agent: RemoteService) -> None:
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.TaskNotFoundError) as caught:
            await agent.get_task(pb.GetTaskRequest(id="no-such-task"))
        with pytest.raises(errors.TaskNotFoundError):
            await agent.cancel_task(pb.CancelTaskRequest(id="no-such-task"))
        if agent.binding == "JSONRPC":
            # The SDK's 0.3 REST adapter answers this one with 200, then drops the
            # connection (and logs a traceback): nothing a client could map.
            with pytest.raises(errors.TaskNotFoundError):
                await anext(agent.subscribe_to_task(pb.SubscribeToTaskRequest(id="no-such-task")))
    assert caught.value.spec.jsonrpc_code == -32001
    # the class prefix of the SDK's message is not repeated in ours
    assert not caught.value.message.startswith("TaskNotFoundError")


async def test_list_tasks_is_unsupported_over_0_3(agent: RemoteService) -> None:
    with pytest.raises(errors.UnsupportedOperationError, match=r"does not exist in A2A 0\.3"):
        await agent.list_tasks(pb.ListTasksRequest())


@pytest.mark.parametrize("transport", SDK_TRANSPORTS)
async def test_wrong_key_is_rejected_and_never_shown(legacy_peer: Peer, transport: str) -> None:
    wrong = "wrong-key-5f3a2b1c9d0e"
    async with asyncio.timeout(BOUND_S):
        async with await connect(legacy_peer.url, key=wrong, transport=transport) as service:
            with pytest.raises(AuthRejected) as caught:
                await service.send_message(text_request("hi"))
    assert "rejected the key" in str(caught.value)
    assert wrong not in str(caught.value) and wrong not in repr(service.transport)


# --- against our own gateway's 0.3 surface ------------------------------------------------


async def test_own_gateway_lists_tasks_over_0_3_json_rpc(own_server: Peer) -> None:
    async with asyncio.timeout(BOUND_S):
        async with await own_legacy_service(own_server, "jsonrpc") as agent:
            first = await agent.send_message(text_request("one"))
            context = first.task.context_id
            second = await agent.send_message(text_request("two", context_id=context))
            asked = await agent.send_message(text_request("ask:which?", context_id=context))
            mine = pb.ListTasksRequest(context_id=context)
            listed = await agent.list_tasks(mine)
            assert {t.id for t in listed.tasks} == {first.task.id, second.task.id, asked.task.id}
            assert listed.total_size == 3
            waiting = pb.ListTasksRequest(context_id=context, status=pb.TASK_STATE_INPUT_REQUIRED)
            assert [t.id for t in (await agent.list_tasks(waiting)).tasks] == [asked.task.id]
            page = await agent.list_tasks(pb.ListTasksRequest(context_id=context, page_size=2))
            assert len(page.tasks) == 2 and page.next_page_token
            rest = pb.ListTasksRequest(context_id=context, page_token=page.next_page_token)
            last = await agent.list_tasks(rest)
            assert {t.id for t in [*page.tasks, *last.tasks]} == {t.id for t in listed.tasks}
            with pytest.raises(errors.InvalidParamsError):
                await agent.list_tasks(pb.ListTasksRequest(page_token="not-a-token"))


# --- the bytes on the wire (a recording 0.3 peer) -----------------------------------------


LEGACY_TASK = {
    "kind": "task",
    "id": "t-1",
    "contextId": "c-1",
    "status": {"state": "completed", "timestamp": "2026-01-02T03:04:05+00:00"},
    "artifacts": [
        {
            "artifactId": "a-1",
            "parts": [
                {"kind": "text", "text": "done"},
                {"kind": "file", "file": {"uri": "https://f.example/x", "mimeType": "text/plain"}},
                {"kind": "data", "data": {"value": 3}, "metadata": {"data_part_compat": True}},
            ],
        }
    ],
}


class Recording:
    """A 0.3 JSON-RPC peer that records each request and answers from a script."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], Any]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        rid = body["id"]
        if body["method"] == "message/stream":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            update = {
                "kind": "status-update",
                "taskId": "t-1",
                "contextId": "c-1",
                "status": {"state": "working"},
                "final": False,
            }
            for result in (update, LEGACY_TASK):
                event = {"jsonrpc": "2.0", "id": rid, "result": result}
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            error = {"code": -32002, "message": "Task cannot be canceled"}
            await response.write(
                f"data: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'error': error})}\n\n".encode()
            )
            return response
        if body["params"].get("id") == "missing":
            error = {"code": -32001, "message": "Task not found", "data": {"taskId": "missing"}}
            return web.json_response({"jsonrpc": "2.0", "id": rid, "error": error})
        return web.json_response({"jsonrpc": "2.0", "id": rid, "result": LEGACY_TASK})


async def test_wire_has_0_3_methods_and_headers() -> None:
    peer = Recording()
    app = web.Application()
    app.router.add_post("/rpc", peer.handle)
    async with serving(app) as base, asyncio.timeout(BOUND_S), httpx.AsyncClient() as http:
        wire = JsonRpc03Transport(base + "/rpc", http)
        async with RemoteService(wire, extensions=["urn:ext:a"]) as agent:
            assert agent.interface.protocol_version == "0.3"
            reply = await agent.send_message(text_request("hi", return_immediately=True))
            with pytest.raises(errors.TaskNotFoundError):
                await agent.get_task(pb.GetTaskRequest(id="missing"))
            events = []
            with pytest.raises(errors.TaskNotCancelableError):
                async for event in agent.send_streaming_message(text_request("s")):
                    events.append(event)
    headers, body = peer.requests[0]
    lower = {k.lower(): v for k, v in headers.items()}
    assert "a2a-version" not in lower
    assert lower["x-a2a-extensions"] == "urn:ext:a"
    assert body["method"] == "message/send"
    assert body["params"]["configuration"] == {"blocking": False}
    assert body["params"]["message"]["kind"] == "message"
    assert body["params"]["message"]["role"] == "user"
    assert body["params"]["message"]["parts"] == [{"kind": "text", "text": "hi"}]
    assert [b["method"] for _, b in peer.requests] == [
        "message/send",
        "tasks/get",
        "message/stream",
    ]
    task = reply.task
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert task.status.timestamp.ToJsonString() == "2026-01-02T03:04:05Z"
    parts = task.artifacts[0].parts
    assert parts[1].url == "https://f.example/x" and parts[1].media_type == "text/plain"
    assert parts[2].data.number_value == 3 and "data_part_compat" not in parts[2].metadata
    assert [e.WhichOneof("payload") for e in events] == ["status_update", "task"]


async def test_list_tasks_over_0_3_rest_fails_before_any_network_call() -> None:
    url = f"http://{HOST}:{free_port()}/rpc"
    async with httpx.AsyncClient() as http:
        async with RemoteService(Rest03Transport(url, http)) as agent:
            with pytest.raises(errors.UnsupportedOperationError) as refused:
                await agent.list_tasks(pb.ListTasksRequest())
        assert "as tasks/list over JSON-RPC, none over HTTP+JSON or gRPC" in str(refused.value)
        # Over 0.3 JSON-RPC it is sent (tasks/list): nothing listens, so it cannot arrive.
        async with RemoteService(JsonRpc03Transport(url, http)) as agent:
            with pytest.raises(Unreachable):
                await agent.list_tasks(pb.ListTasksRequest())


async def test_list_tasks_params_and_result_on_the_wire() -> None:
    seen: list[dict[str, Any]] = []

    async def rpc(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        result = {"tasks": [LEGACY_TASK], "nextPageToken": "p2", "pageSize": 1, "totalSize": 4}
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})

    app = web.Application()
    app.router.add_post("/rpc", rpc)
    waiting = pb.TASK_STATE_INPUT_REQUIRED
    request = pb.ListTasksRequest(context_id="c-1", status=waiting, page_size=1)
    request.status_timestamp_after.FromJsonString("2026-01-02T00:00:00Z")
    async with serving(app) as base, httpx.AsyncClient() as http:
        agent = RemoteService(JsonRpc03Transport(base + "/rpc", http))
        async with agent:
            listed = await agent.list_tasks(request)
    (body,) = seen
    assert body["method"] == "tasks/list"
    assert body["params"] == {
        "contextId": "c-1",
        "status": "input-required",
        "pageSize": 1,
        "statusTimestampAfter": "2026-01-02T00:00:00Z",
    }
    assert [t.id for t in listed.tasks] == ["t-1"]
    assert listed.tasks[0].status.state == pb.TASK_STATE_COMPLETED
    assert (listed.next_page_token, listed.page_size, listed.total_size) == ("p2", 1, 4)


async def test_rest_mid_stream_error_from_our_own_0_3_server_is_that_error() -> None:
    """Our 0.3 REST server ends a failing stream with ``event: error`` carrying the 0.3
    REST error body (``{type, code, message, data}``, no ``error`` member): our 0.3 REST
    client raises that error, not an unreadable-event one."""
    first = pb.StreamResponse(
        task=pb.Task(id="t-1", context_id="c-1", status=pb.TaskStatus(state=pb.TASK_STATE_WORKING))
    )
    failure = errors.TaskNotCancelableError("task t-1 cannot be canceled")

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(LEGACY_STREAM_CODEC.event(first))
        await response.write(LEGACY_STREAM_CODEC.error(failure))
        return response

    app = web.Application()
    app.router.add_post("/rest/v1/message:stream", handle)
    events = []
    async with (
        serving(app) as base,
        asyncio.timeout(BOUND_S),
        httpx.AsyncClient() as http,
        RemoteService(Rest03Transport(base + "/rest", http)) as agent,
    ):
        with pytest.raises(errors.TaskNotCancelableError, match="cannot be canceled"):
            async for event in agent.send_streaming_message(text_request("s")):
                events.append(event)
    assert [e.WhichOneof("payload") for e in events] == ["task"]


def test_legacy_card_with_several_oauth_flows_is_read() -> None:
    """A 0.3 scheme may list several OAuth flows; 1.0 holds one. The card still parses,
    keeping the flow the SDK's own 0.3 conversion keeps (the last of authorizationCode,
    clientCredentials, implicit, password)."""
    flows = {
        "authorizationCode": {
            "authorizationUrl": "https://auth.example/a",
            "tokenUrl": "https://auth.example/t",
            "scopes": {"read": "r"},
        },
        "clientCredentials": {"tokenUrl": "https://auth.example/t", "scopes": {}},
    }
    card = {
        "name": "legacy",
        "description": "d",
        "version": "1",
        "url": "https://agent.example/a2a",
        "protocolVersion": "0.3.0",
        "capabilities": {},
        "defaultInputModes": [],
        "defaultOutputModes": [],
        "skills": [],
        "securitySchemes": {"o": {"type": "oauth2", "flows": flows}},
        "security": [{"o": ["read"]}],
    }
    parsed = parse_card(card, source="https://agent.example/.well-known/agent-card.json")
    scheme = parsed.security_schemes["o"].oauth2_security_scheme
    assert scheme.flows.WhichOneof("flow") == "client_credentials"
    assert scheme.flows.client_credentials.token_url == "https://auth.example/t"
    assert parsed.supported_interfaces[0].protocol_version == "0.3"
    assert list(parsed.security_requirements[0].schemes["o"].list) == ["read"]


class EndsEarly:
    """A 0.3 JSON-RPC peer whose resubscription sends one update and ends with no final
    state, while the task (as tasks/get says) is cancelled meanwhile."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.gets = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.methods.append(body["method"])
        rid = body["id"]
        if body["method"] == "tasks/resubscribe":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            update = {
                "kind": "status-update",
                "taskId": "t-1",
                "contextId": "c-1",
                "status": {"state": "working"},
                "final": False,
            }
            event = {"jsonrpc": "2.0", "id": rid, "result": update}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
            return response  # closed: no final event
        self.gets += 1
        state = "working" if self.gets <= 2 else "canceled"
        task = {"kind": "task", "id": "t-1", "contextId": "c-1", "status": {"state": state}}
        return web.json_response({"jsonrpc": "2.0", "id": rid, "result": task})


async def test_a_0_3_subscription_starts_with_the_task_and_ends_in_its_real_state() -> None:
    peer = EndsEarly()
    app = web.Application()
    app.router.add_post("/rpc", peer.handle)
    async with (
        serving(app) as base,
        asyncio.timeout(BOUND_S),
        httpx.AsyncClient() as http,
        RemoteService(JsonRpc03Transport(base + "/rpc", http)) as agent,
    ):
        stream = agent.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-1"))
        events = [e async for e in stream]
    assert events[0].task.id == "t-1"
    assert events[0].task.status.state == pb.TASK_STATE_WORKING
    assert events[1].status_update.status.state == pb.TASK_STATE_WORKING
    assert events[-1].status_update.status.state == pb.TASK_STATE_CANCELED
    assert len(events) == 3
    assert sorted(peer.methods) == ["tasks/get"] * 3 + ["tasks/resubscribe"]
