"""A driver for the official a2a-sdk's A2A 0.3 compat clients (``CompatJsonRpcTransport``,
``CompatRestTransport``, ``CompatGrpcTransport``).

Runs in ``.venv-peer`` (never imported by our venv)::

    .venv-peer/bin/python tests/interop/peers/sdk_client03.py --card-url URL \
        [--transport jsonrpc|rest|grpc] [--timeout S]

It reads the (hybrid) card with the SDK's resolver, takes the card's interface of that
binding whose ``protocolVersion`` is 0.3, and runs a fixed script of scenarios on the
SDK's 0.3 transport (JSON-RPC: ``message/send``-style methods; REST: ``/v1/...`` paths;
gRPC: ``a2a.v1.A2AService``; all with ``A2A-Version: 0.3``), which converts every reply
back to 1.0 types. (The
SDK's 0.3 REST client has no push list/delete: those scenarios report its
NotImplementedError.) One JSON line per scenario on stdout::

    {"scenario": NAME, "result": …}   or   {"scenario": NAME, "error": {type, code, message}}

Results are the SDK's 1.0 objects as ProtoJSON (its transport already converted them).
Scenarios: ``factory`` (which transport the SDK's 1.0 ClientFactory picks for JSON-RPC),
``interface``, ``send``, ``stream`` (``chunks:3``), ``get``, ``hold`` + ``cancel``,
``ask`` + ``answer`` (multi-turn), ``push-set``/``push-get``/``push-list``/
``push-delete``/``push-get-gone``, ``extended-card``, ``missing-task`` (an error).
Exit status 0 when the script ran (A2A errors are results), 1 on a driver failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.transports.base import ClientTransport
from a2a.compat.v0_3.grpc_transport import CompatGrpcTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import MessageToDict

HOOK = "https://example.com/hook"  # a finished task: nothing is delivered to it
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def proto(msg: Any) -> Any:
    return MessageToDict(msg)


def user(text: str, task_id: str = "", context_id: str = "") -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


def legacy_interface(card: AgentCard, binding: str) -> str:
    for interface in card.supported_interfaces:
        if interface.protocol_binding == binding and interface.protocol_version.startswith("0.3"):
            return interface.url
    raise RuntimeError(f"the card has no 0.3 {binding} interface")


async def script(card_url: str, transport_name: str, call_timeout: float) -> None:
    state: dict[str, Any] = {}

    async def step(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with asyncio.timeout(call_timeout):
                result = await call()
        except Exception as exc:  # an A2A error is a result of the scenario
            code = getattr(exc, "code", None)
            emit(
                {
                    "scenario": name,
                    "error": {
                        "type": type(exc).__name__,
                        "code": code if isinstance(code, int) else None,
                        "message": str(exc),
                    },
                }
            )
            return None
        emit({"scenario": name, "result": result})
        return result

    async with (
        httpx.AsyncClient(timeout=call_timeout) as http,
        httpx.AsyncClient(timeout=call_timeout) as factory_http,
    ):
        card = await A2ACardResolver(http, card_url).get_agent_card()

        async def factory() -> Any:
            # A separate httpx client: the factory adds ``A2A-Version: 1.0`` to it.
            config = ClientConfig(
                httpx_client=factory_http, supported_protocol_bindings=["JSONRPC"]
            )
            client = ClientFactory(config).create(card)
            transport = getattr(client, "_transport", None)
            return type(transport).__name__

        await step("factory", factory)
        url = legacy_interface(card, BINDINGS[transport_name])
        emit({"scenario": "interface", "result": url})
        transport: ClientTransport
        if transport_name == "rest":
            transport = CompatRestTransport(http, card, url, is_shared_httpx=True)
        elif transport_name == "grpc":
            import grpc  # only this binding needs it

            transport = CompatGrpcTransport(grpc.aio.insecure_channel(url), card)
        else:
            transport = CompatJsonRpcTransport(http, card, url, is_shared_httpx=True)

        async def send(text: str, **kw: Any) -> Any:
            request = SendMessageRequest(message=user(text, **kw))
            # A configuration makes the SDK send ``blocking: true``. Without one, its
            # 0.3 REST client sends ``"configuration": {}``, which (proto3: blocking
            # false) the SDK's and our 0.3 REST servers read as non-blocking.
            request.configuration.history_length = 10
            return proto(await transport.send_message(request))

        sent = await step("send", lambda: send("hello 0.3"))

        async def stream() -> Any:
            request = SendMessageRequest(message=user("chunks:3"))
            return [proto(e) async for e in transport.send_message_streaming(request)]

        await step("stream", stream)
        if sent and "task" in sent:
            task_id = sent["task"]["id"]
            await step("get", lambda: _get(transport, task_id))

        async def hold() -> Any:
            request = SendMessageRequest(message=user("hold:30"))
            request.configuration.return_immediately = True
            return proto(await transport.send_message(request))

        held = await step("hold", hold)
        if held and "task" in held:
            held_id = held["task"]["id"]
            await step(
                "cancel",
                lambda: _as_dict(transport.cancel_task(CancelTaskRequest(id=held_id))),
            )

        asked = await step("ask", lambda: send("ask:What colour?"))
        if asked and "task" in asked:
            state["ask"] = asked["task"]
            await step(
                "answer",
                lambda: send(
                    "blue", task_id=state["ask"]["id"], context_id=state["ask"]["contextId"]
                ),
            )

        if sent and "task" in sent:
            task_id = sent["task"]["id"]
            config = TaskPushNotificationConfig(task_id=task_id, id="cfg-1", url=HOOK, token="t0k")
            await step(
                "push-set",
                lambda: _as_dict(transport.create_task_push_notification_config(config)),
            )
            get = GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
            await step(
                "push-get", lambda: _as_dict(transport.get_task_push_notification_config(get))
            )
            listed = ListTaskPushNotificationConfigsRequest(task_id=task_id)
            await step(
                "push-list",
                lambda: _as_dict(transport.list_task_push_notification_configs(listed)),
            )
            delete = DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")

            async def push_delete() -> Any:
                await transport.delete_task_push_notification_config(delete)
                return {"deleted": True}

            await step("push-delete", push_delete)
            await step(
                "push-get-gone",
                lambda: _as_dict(transport.get_task_push_notification_config(get)),
            )

        await step(
            "extended-card",
            lambda: _as_dict(transport.get_extended_agent_card(GetExtendedAgentCardRequest())),
        )
        await step("missing-task", lambda: _get(transport, str(uuid.uuid4())))
        if isinstance(transport, CompatGrpcTransport):
            await transport.close()  # its channel; the httpx clients close with the block


async def _get(transport: ClientTransport, task_id: str) -> Any:
    return proto(await transport.get_task(GetTaskRequest(id=task_id)))


async def _as_dict(call: Awaitable[Any]) -> Any:
    return proto(await call)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--card-url", required=True, help="the agent's base URL")
    p.add_argument("--transport", default="jsonrpc", choices=sorted(BINDINGS))
    p.add_argument("--timeout", type=float, default=15.0, help="per call (seconds)")
    args = p.parse_args()
    try:
        asyncio.run(script(args.card_url, args.transport, args.timeout))
    except Exception:
        traceback.print_exc()
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
