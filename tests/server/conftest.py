"""Fixtures for the HTTP binding tests: a small deterministic service and real servers.

``EchoService`` is not the task engine: it is just enough behaviour to check what the
bindings put on the wire. Any operation naming an id listed in ``failures`` raises
that error; a message's ``metadata`` steers streams (``chunks``, ``idle``, ``hang``,
``fail``, ``crash``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Middleware
from google.protobuf import empty_pb2, message

from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.auth import AllowAnonymous, Authenticator, WorkspaceCallers
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.health import Readiness
from a2a_gateway.server.http_app import AppRunner, build_http_app
from a2a_gateway.server.metrics import NULL_METRICS, MetricsLike
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.workspace import write_callers

KEY = "k-test-6b1f0c9d2e"
TIMEOUT_S = 5.0


class Boom(RuntimeError):
    """An unexpected (non-A2A) exception raised by the service."""


def make_error(cls: type[errors.A2AError], subject: str) -> errors.A2AError:
    """An instance of ``cls`` carrying ``subject`` in its metadata (and a violation)."""
    return cls(
        f"{cls.__name__} for {subject}",
        metadata={"taskId": subject},
        violations=[errors.FieldViolation("id", "chosen by the test")],
    )


def text_message(text: str, message_id: str = "m-1", **metadata: Any) -> dict[str, Any]:
    """A SendMessageRequest as ProtoJSON."""
    body: dict[str, Any] = {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    }
    if metadata:
        body["metadata"] = metadata
    return body


@dataclass
class EchoService(A2AService):
    """Deterministic A2A service: send completes a task whose artifact echoes the text."""

    cards: CardProvider | None = None
    failures: dict[str, errors.A2AError | Exception] = field(default_factory=dict)
    tasks: dict[str, pb.Task] = field(default_factory=dict)
    configs: dict[tuple[str, str], pb.TaskPushNotificationConfig] = field(default_factory=dict)
    calls: list[tuple[str, message.Message, CallContext]] = field(default_factory=list)
    stream_started: asyncio.Event = field(default_factory=asyncio.Event)
    stream_closed: asyncio.Event = field(default_factory=asyncio.Event)
    counter: int = 0

    def _seen(self, name: str, request: message.Message, context: CallContext, *ids: str) -> None:
        self.calls.append((name, request, context))
        if "urn:test:echo" in context.extensions:
            context.activated_extensions.add("urn:test:echo")
        for subject in ids:
            failure = self.failures.get(subject)
            if failure is not None:
                raise failure

    @property
    def last(self) -> tuple[str, message.Message, CallContext]:
        return self.calls[-1]

    def _new_task(self, request: pb.SendMessageRequest, state: int) -> pb.Task:
        self.counter += 1
        task = pb.Task(
            id=f"task-{self.counter}",
            context_id=request.message.context_id or f"ctx-{self.counter}",
            status=pb.TaskStatus(state=state),  # type: ignore[arg-type]
        )
        task.history.append(request.message)
        self.tasks[task.id] = task
        return task

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        self._seen("send_message", request, context, request.message.message_id)
        if request.metadata.fields.get("reply") is not None:
            reply = pb.Message(message_id="r-1", role=pb.ROLE_AGENT, parts=[pb.Part(text="hi")])
            return pb.SendMessageResponse(message=reply)
        task = self._new_task(request, pb.TASK_STATE_COMPLETED)
        text = request.message.parts[0].text
        task.artifacts.append(pb.Artifact(artifact_id="a-1", parts=[pb.Part(text=f"echo: {text}")]))
        return pb.SendMessageResponse(task=task)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._stream(request, context)

    async def _stream(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        try:
            self._seen("send_streaming_message", request, context, request.message.message_id)
            options = request.metadata.fields
            task = self._new_task(request, pb.TASK_STATE_WORKING)
            self.stream_started.set()
            yield pb.StreamResponse(task=task)
            if "hang" in options:
                await asyncio.Event().wait()  # until the binding closes us
            if "idle" in options:
                await asyncio.sleep(options["idle"].number_value)
            if "fail" in options:
                raise make_error(
                    errors.error_for_reason(options["fail"].string_value) or errors.InternalError,
                    task.id,
                )
            if "crash" in options:
                raise Boom("secret internal detail")
            for index in range(int(options["chunks"].number_value) if "chunks" in options else 2):
                artifact = pb.Artifact(artifact_id="a-1", parts=[pb.Part(text=f"chunk {index}")])
                yield pb.StreamResponse(
                    artifact_update=pb.TaskArtifactUpdateEvent(
                        task_id=task.id,
                        context_id=task.context_id,
                        artifact=artifact,
                        append=index > 0,
                    )
                )
            yield pb.StreamResponse(
                status_update=pb.TaskStatusUpdateEvent(
                    task_id=task.id,
                    context_id=task.context_id,
                    status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED),
                )
            )
        finally:
            self.stream_closed.set()

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        self._seen("get_task", request, context, request.id)
        return self._task(request.id)

    def _task(self, task_id: str) -> pb.Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise errors.TaskNotFoundError(metadata={"taskId": task_id})
        return task

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        self._seen("list_tasks", request, context)
        tasks = list(self.tasks.values())
        return pb.ListTasksResponse(
            tasks=tasks, page_size=request.page_size or 50, total_size=len(tasks)
        )

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        self._seen("cancel_task", request, context, request.id)
        task = self._task(request.id)
        task.status.state = pb.TASK_STATE_CANCELED
        return task

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self._subscribe(request, context)

    async def _subscribe(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        self._seen("subscribe_to_task", request, context, request.id)
        task = self._task(request.id)
        yield pb.StreamResponse(task=task)
        yield pb.StreamResponse(
            status_update=pb.TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
        )

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._seen("create_task_push_notification_config", request, context, request.task_id)
        stored = pb.TaskPushNotificationConfig()
        stored.CopyFrom(request)
        stored.id = stored.id or request.task_id
        self.configs[(stored.task_id, stored.id)] = stored
        return stored

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._seen("get_task_push_notification_config", request, context, request.task_id)
        found = self.configs.get((request.task_id, request.id))
        if found is None:
            raise errors.TaskNotFoundError(metadata={"taskId": request.task_id})
        return found

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._seen("list_task_push_notification_configs", request, context, request.task_id)
        found = [c for (t, _), c in self.configs.items() if t == request.task_id]
        return pb.ListTaskPushNotificationConfigsResponse(configs=found)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self._seen("delete_task_push_notification_config", request, context, request.task_id)
        self.configs.pop((request.task_id, request.id), None)
        return empty_pb2.Empty()

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        self._seen("get_extended_agent_card", request, context)
        if self.cards is None:
            raise errors.ExtendedAgentCardNotConfiguredError()
        return self.cards.extended_card(context)


@dataclass
class Http:
    """One running HTTP app and a client session bound to it."""

    client: TestClient[aiohttp.web.Request, aiohttp.web.Application]
    service: EchoService
    config: ServerConfig
    cards: CardProvider

    @property
    def base(self) -> str:
        return str(self.client.make_url("")).rstrip("/")

    async def rpc(
        self,
        method: str,
        params: Any = None,
        *,
        request_id: Any = 1,
        headers: dict[str, str] | None = None,
        path: str | None = None,
    ) -> tuple[int, Any]:
        """One JSON-RPC call; returns (HTTP status, decoded body)."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        url = path if path is not None else self.config.mounts.jsonrpc or "/"
        async with asyncio.timeout(TIMEOUT_S):
            response = await self.client.post(url, json=body, headers=headers)
            async with response:
                return response.status, await response.json(content_type=None)


Starter = Callable[..., Awaitable[Http]]


class GatewayTestServer(TestServer):
    """aiohttp's test server with the runner ``serve`` uses (its connection handler
    answers malformed HTTP without quoting it)."""

    async def _make_runner(self, **kwargs: Any) -> AppRunner:
        return AppRunner(self.app, **kwargs)


@pytest.fixture
async def start_http() -> AsyncIterator[Starter]:
    """Start HTTP apps on 127.0.0.1 (free port); all are closed after the test."""
    clients: list[TestClient[aiohttp.web.Request, aiohttp.web.Application]] = []

    async def start(
        *,
        config: ServerConfig | None = None,
        service: EchoService | None = None,
        authenticator: Authenticator | None = None,
        metrics: MetricsLike = NULL_METRICS,
        readiness: Readiness | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> Http:
        """``middlewares`` run after the app's own (a test's stand-in client address)."""
        config = config or ServerConfig()
        cards = CardProvider(config)
        service = service or EchoService()
        if service.cards is None:
            service.cards = cards
        app = build_http_app(
            service,
            config,
            authenticator or AllowAnonymous(),
            cards,
            metrics=metrics,
            readiness=readiness,
        )
        app.middlewares.extend(middlewares)
        client = TestClient(GatewayTestServer(app, host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return Http(client, service, config, cards)

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
async def http(start_http: Starter) -> Http:
    """Anonymous access, default mounts, a fast keep-alive."""
    return await start_http(config=ServerConfig(keepalive_interval_s=0.05))


@pytest.fixture
def keyed_workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / ".a2a").mkdir(parents=True)
    callers = [{"name": "alice", "key": KEY}]
    write_callers(workspace, callers)
    return workspace


@pytest.fixture
async def keyed(start_http: Starter, keyed_workspace: Path) -> Http:
    """Keys required (callers.json of one workspace)."""
    config = ServerConfig(workspaces=[keyed_workspace])
    return await start_http(config=config, authenticator=WorkspaceCallers([keyed_workspace]))
