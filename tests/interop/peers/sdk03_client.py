"""A driver for the official a2a-sdk 0.3.x release's clients (``JsonRpcTransport``,
``RestTransport``, ``GrpcTransport`` of ``requirements/peer03.txt``): an A2A 0.3 client as
deployed callers run it.

Runs in ``.venv-peer03`` (never imported by our venvs)::

    .venv-peer03/bin/python tests/interop/peers/sdk03_client.py --card-url URL \
        [--transport jsonrpc|rest|grpc] [--timeout S] [--hook-host 127.0.0.1] [--api-key K]

It reads the card with the SDK's resolver, takes the card's interface of that binding
(``url`` + ``preferredTransport``, or ``additionalInterfaces``) and runs a fixed script of
scenarios, printing one JSON line per scenario::

    {"scenario": NAME, "result": …}   or   {"scenario": NAME, "error": {type, code, message}}

Results are the SDK's 0.3 objects as 0.3 JSON (``model_dump``: ``kind``, lower-case
states). Scenarios:

- ``card``: the card's 0.3 keys; ``send``: ``blocking: true``; ``send-absent``: no
  configuration at all (JSON-RPC: ``hello absent``, which 0.3 JSON-RPC servers block on;
  HTTP+JSON and gRPC: ``hold:30``, which they must not block on, then cancelled);
  ``send-nonblocking``: ``blocking: false`` on ``hold:30`` (gRPC: false is not on the
  wire);
- ``resubscribe``: every event of a resubscription to that held task while ``cancel``
  cancels it; ``get``; ``stream`` (``chunks:3``); ``stream-ask`` (ends input-required);
- ``ask`` + ``answer`` (multi-turn); ``push-set``/``push-get``/``push-list``/
  ``push-delete``/``push-get-gone`` (list and delete are not in the SDK's client: sent
  with its types on its transport's connection);
- ``push-delivery``: a webhook served here (``--hook-host``) set on an input-required
  task, which is then answered; every body received is checked with the SDK's 0.3 ``Task``
  model (the server must allow webhooks on loopback);
- ``extended-card`` (``get_card``: the authenticated extended card); ``missing-task``.

``--answer TEXT`` runs two scenarios instead: ``answer-text`` (a blocking send of TEXT
and a GetTask; the SDK's ``get_artifact_text`` on each one's ``response`` artifact:
``{"answerText", "getText"}``) and ``answer-stream`` (a streaming send of TEXT: every
event).

``--api-key K`` sends ``X-API-Key: K`` on every call (gRPC: ``x-api-key`` metadata).
Exit status 0 when the script ran (A2A errors are results), 1 on a driver failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import httpx
import uvicorn
from a2a.client import A2ACardResolver
from a2a.client.errors import A2AClientHTTPError, A2AClientJSONRPCError
from a2a.client.transports import GrpcTransport, JsonRpcTransport, RestTransport
from a2a.client.transports.base import ClientTransport
from a2a.grpc import a2a_pb2
from a2a.types import (
    AgentCard,
    DeleteTaskPushNotificationConfigParams,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigParams,
    ListTaskPushNotificationConfigParams,
    ListTaskPushNotificationConfigRequest,
    Message,
    MessageSendConfiguration,
    MessageSendParams,
    Part,
    PushNotificationConfig,
    Role,
    Task,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TextPart,
)
from a2a.utils import proto_utils
from a2a.utils.artifact import get_artifact_text
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

HOOK_TOKEN = "hook-t0k"
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}
FIRST_EVENT_S = 2.0  # how long the resubscription may stay silent before the cancel


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True, by_alias=True)
    if isinstance(value, list):
        return [dump(v) for v in value]
    return value


def user(text: str, task_id: str | None = None, context_id: str | None = None) -> Message:
    return Message(
        role=Role.user,
        message_id=str(uuid.uuid4()),
        parts=[Part(root=TextPart(text=text))],
        task_id=task_id,
        context_id=context_id,
    )


def interface_url(card: AgentCard, binding: str) -> str:
    if card.preferred_transport == binding or (
        not card.preferred_transport and binding == "JSONRPC"
    ):
        return card.url
    for interface in card.additional_interfaces or []:
        if interface.transport == binding:
            return interface.url
    raise RuntimeError(f"the card has no {binding} interface")


def error_of(exc: BaseException) -> dict[str, Any]:
    code: Any = None
    message = str(exc)
    if isinstance(exc, A2AClientJSONRPCError):
        code, message = exc.error.code, exc.error.message
    elif isinstance(exc, A2AClientHTTPError):
        code = exc.status_code
    elif isinstance(exc, grpc.aio.AioRpcError):
        code, message = exc.code().name, exc.details() or ""
    return {"type": type(exc).__name__, "code": code, "message": message}


class Hook:
    """A webhook on a free loopback port that keeps every body it is sent."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.bodies: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self._sock = socket.socket()
        self._sock.bind((host, 0))
        self.url = f"http://{host}:{self._sock.getsockname()[1]}/hook"
        app = Starlette(routes=[Route("/hook", self._receive, methods=["POST"])])
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._server.capture_signals = lambda: _nothing()  # type: ignore[method-assign]
        self._task: asyncio.Task[None] | None = None

    async def _receive(self, request: Request) -> Response:
        body = await request.body()
        self.bodies.append(
            {"body": json.loads(body), "token": request.headers.get("x-a2a-notification-token")}
        )
        self.arrived.set()
        return Response(status_code=204)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                await self._task
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._sock.close()


def with_key(details: Any, key: str) -> Any:
    metadata = [*list(details.metadata or ()), ("x-api-key", key)]
    return details._replace(metadata=metadata)


class _UnaryKey(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds ``x-api-key`` to every unary gRPC call (the SDK's 0.3 client has no hook)."""

    def __init__(self, key: str) -> None:
        self._key = key

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(with_key(details, self._key), request)


class _StreamKey(grpc.aio.UnaryStreamClientInterceptor):
    """The same for server-streaming calls (grpc.aio files an interceptor under one kind)."""

    def __init__(self, key: str) -> None:
        self._key = key

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(with_key(details, self._key), request)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def push_list(transport: ClientTransport, task_id: str) -> Any:
    """tasks/pushNotificationConfig/list the way the SDK encodes it on each binding."""
    if isinstance(transport, JsonRpcTransport):
        request = ListTaskPushNotificationConfigRequest(
            id=str(uuid.uuid4()), params=ListTaskPushNotificationConfigParams(id=task_id)
        )
        answer = await transport._send_request(request.model_dump(mode="json", exclude_none=True))
        if "error" in answer:
            raise RuntimeError(json.dumps(answer["error"]))
        return answer["result"]
    if isinstance(transport, RestTransport):
        answer = await transport._send_get_request(
            f"/v1/tasks/{task_id}/pushNotificationConfigs", {}
        )
        configs = answer.get("configs", []) if isinstance(answer, dict) else answer
        return [_rest_config(c) for c in configs]
    assert isinstance(transport, GrpcTransport)
    reply = await transport.stub.ListTaskPushNotificationConfig(
        a2a_pb2.ListTaskPushNotificationConfigRequest(parent=f"tasks/{task_id}")
    )
    return [dump(proto_utils.FromProto.task_push_notification_config(c)) for c in reply.configs]


def _rest_config(config: dict[str, Any]) -> Any:
    parsed = a2a_pb2.TaskPushNotificationConfig()
    from google.protobuf.json_format import ParseDict

    ParseDict(config, parsed)
    return dump(proto_utils.FromProto.task_push_notification_config(parsed))


async def push_delete(transport: ClientTransport, task_id: str, config_id: str) -> Any:
    if isinstance(transport, JsonRpcTransport):
        request = DeleteTaskPushNotificationConfigRequest(
            id=str(uuid.uuid4()),
            params=DeleteTaskPushNotificationConfigParams(
                id=task_id, push_notification_config_id=config_id
            ),
        )
        answer = await transport._send_request(request.model_dump(mode="json", exclude_none=True))
        if "error" in answer:
            raise RuntimeError(json.dumps(answer["error"]))
        return {"deleted": True}
    if isinstance(transport, RestTransport):
        response = await transport.httpx_client.delete(
            f"{transport.url}/v1/tasks/{task_id}/pushNotificationConfigs/{config_id}"
        )
        response.raise_for_status()
        return {"deleted": True}
    assert isinstance(transport, GrpcTransport)
    await transport.stub.DeleteTaskPushNotificationConfig(
        a2a_pb2.DeleteTaskPushNotificationConfigRequest(
            name=f"tasks/{task_id}/pushNotificationConfigs/{config_id}"
        )
    )
    return {"deleted": True}


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    return [dump(event) async for event in events]


async def script(args: argparse.Namespace) -> None:
    name = args.transport
    binding = BINDINGS[name]

    async def step(scenario: str, call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with asyncio.timeout(args.timeout):
                result = await call()
        except Exception as exc:  # an A2A error is a result of the scenario
            emit({"scenario": scenario, "error": error_of(exc)})
            return None
        emit({"scenario": scenario, "result": dump(result)})
        return dump(result)

    headers = {"X-API-Key": args.api_key} if args.api_key else {}
    async with httpx.AsyncClient(timeout=args.timeout, headers=headers) as http:
        card = await A2ACardResolver(http, args.card_url).get_agent_card()
        emit(
            {
                "scenario": "card",
                "result": {
                    "protocolVersion": card.protocol_version,
                    "preferredTransport": card.preferred_transport,
                    "url": card.url,
                    "additionalInterfaces": dump(card.additional_interfaces or []),
                },
            }
        )
        url = interface_url(card, binding)
        transport: ClientTransport
        if name == "rest":
            transport = RestTransport(http, card, url)
        elif name == "grpc":
            interceptors: Any = None
            if args.api_key:
                interceptors = [_UnaryKey(args.api_key), _StreamKey(args.api_key)]
            transport = GrpcTransport(
                grpc.aio.insecure_channel(url, interceptors=interceptors), card
            )
        else:
            transport = JsonRpcTransport(http, card, url)

        def params(text: str, blocking: bool | None = True, **kw: Any) -> MessageSendParams:
            configuration = None
            if blocking is not None:
                configuration = MessageSendConfiguration(blocking=blocking, history_length=10)
            return MessageSendParams(message=user(text, **kw), configuration=configuration)

        async def send(text: str, blocking: bool | None = True, **kw: Any) -> Any:
            return await transport.send_message(params(text, blocking, **kw))

        async def cancel(task_id: str) -> Any:
            return await transport.cancel_task(TaskIdParams(id=task_id))

        if args.answer is not None:
            await answer_scenarios(transport, params(args.answer), step)
            await transport.close()
            return

        sent = await step("send", lambda: send("hello 0.3"))
        absent_text = "hello absent" if name == "jsonrpc" else "hold:30"
        absent = await step("send-absent", lambda: send(absent_text, blocking=None))
        if absent and absent.get("kind") == "task" and absent["status"]["state"] != "completed":
            await step("send-absent-cancel", lambda: cancel(absent["id"]))

        held = await step("send-nonblocking", lambda: send("hold:30", blocking=False))
        if held and held.get("kind") == "task":
            await step("resubscribe", lambda: resubscribe_while_cancelled(transport, held["id"]))
            await step("get-cancelled", lambda: transport.get_task(TaskQueryParams(id=held["id"])))

        if sent and sent.get("kind") == "task":
            await step(
                "get", lambda: transport.get_task(TaskQueryParams(id=sent["id"], history_length=10))
            )

        await step("stream", lambda: collect(transport.send_message_streaming(params("chunks:3"))))
        await step(
            "stream-ask",
            lambda: collect(transport.send_message_streaming(params("ask:Which colour?"))),
        )

        asked = await step("ask", lambda: send("ask:What colour?"))
        if asked and asked.get("kind") == "task":
            await step(
                "answer",
                lambda: send("blue", task_id=asked["id"], context_id=asked["contextId"]),
            )

        if sent and sent.get("kind") == "task":
            task_id = sent["id"]
            config = TaskPushNotificationConfig(
                task_id=task_id,
                push_notification_config=PushNotificationConfig(
                    id="cfg-1", url="https://example.com/hook", token="t0k"
                ),
            )
            await step("push-set", lambda: transport.set_task_callback(config))
            get = GetTaskPushNotificationConfigParams(
                id=task_id, push_notification_config_id="cfg-1"
            )
            await step("push-get", lambda: transport.get_task_callback(get))
            await step("push-list", lambda: push_list(transport, task_id))
            await step("push-delete", lambda: push_delete(transport, task_id, "cfg-1"))
            await step("push-get-gone", lambda: transport.get_task_callback(get))

        await step("push-delivery", lambda: push_delivery(transport, send, args.hook_host))
        await step("extended-card", lambda: transport.get_card())
        await step(
            "missing-task", lambda: transport.get_task(TaskQueryParams(id=str(uuid.uuid4())))
        )
        await transport.close()


async def answer_scenarios(
    transport: ClientTransport,
    params: MessageSendParams,
    step: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]],
) -> None:
    def response_text(task: Task) -> str | None:
        found = [a for a in task.artifacts or () if a.name == "response"]
        return get_artifact_text(found[0]) if found else None

    async def answer_text() -> dict[str, Any]:
        sent = await transport.send_message(params)
        if not isinstance(sent, Task):
            raise RuntimeError("answer-text: the reply was not a task")
        got = await transport.get_task(TaskQueryParams(id=sent.id))
        return {"answerText": response_text(sent), "getText": response_text(got)}

    await step("answer-text", answer_text)
    params.message.message_id = str(uuid.uuid4())
    await step("answer-stream", lambda: collect(transport.send_message_streaming(params)))


async def resubscribe_while_cancelled(transport: ClientTransport, task_id: str) -> Any:
    """Every event of a resubscription to ``task_id``, which is cancelled once the first
    event arrived (or the stream stayed silent for a while: a 0.3 server sends none)."""
    events: list[Any] = []
    first = asyncio.Event()

    async def read() -> None:
        async for event in transport.resubscribe(TaskIdParams(id=task_id)):
            events.append(dump(event))
            first.set()

    reader = asyncio.create_task(read())
    try:
        try:
            async with asyncio.timeout(FIRST_EVENT_S):
                await first.wait()
        except TimeoutError:
            pass
        cancelled = dump(await transport.cancel_task(TaskIdParams(id=task_id)))
        await reader
    finally:
        reader.cancel()
    return {"events": events, "cancel": cancelled}


async def push_delivery(
    transport: ClientTransport, send: Callable[..., Awaitable[Any]], host: str
) -> Any:
    hook = Hook(host)
    await hook.start()
    try:
        asked = dump(await send("ask:Which city?"))
        config = TaskPushNotificationConfig(
            task_id=asked["id"],
            push_notification_config=PushNotificationConfig(
                id="hook", url=hook.url, token=HOOK_TOKEN
            ),
        )
        await transport.set_task_callback(config)
        answered = dump(await send("Lisbon", task_id=asked["id"], context_id=asked["contextId"]))
        while not any(_state(b["body"]) == "completed" for b in hook.bodies):
            hook.arrived.clear()
            await hook.arrived.wait()
    finally:
        await hook.stop()
    checked = []
    for delivery in hook.bodies:
        try:
            Task.model_validate(delivery["body"])
            problem = None
        except ValidationError as exc:
            problem = str(exc).splitlines()[0]
        checked.append({**delivery, "sdk_task_error": problem})
    return {"answered": answered, "deliveries": checked}


def _state(body: Any) -> Any:
    if isinstance(body, dict):
        status = body.get("status") or (body.get("task") or {}).get("status") or {}
        state = status.get("state")
        return state.lower().removeprefix("task_state_") if isinstance(state, str) else None
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--card-url", required=True, help="the agent's base URL")
    p.add_argument("--transport", default="jsonrpc", choices=sorted(BINDINGS))
    p.add_argument("--timeout", type=float, default=15.0, help="per scenario (seconds)")
    p.add_argument("--api-key", default=None, help="present this key (X-API-Key)")
    p.add_argument("--hook-host", default="127.0.0.1", help="where push-delivery listens")
    p.add_argument("--answer", default=None, help="run only the answer-text scenarios")
    args = p.parse_args()
    try:
        asyncio.run(script(args))
    except Exception:
        traceback.print_exc()
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
