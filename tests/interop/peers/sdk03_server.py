"""The official a2a-sdk 0.3.x release (``requirements/peer03.txt``) serving an echo agent:
an A2A 0.3 agent as deployed agents run it, for interop tests.

Runs in ``.venv-peer03`` (never imported by our venvs)::

    .venv-peer03/bin/python tests/interop/peers/sdk03_server.py --port 8090 --grpc-port 8091 \
        [--preferred jsonrpc|rest|grpc] [--push]

Prints exactly one line, ``READY``, once every listener accepts connections; then serves
until SIGTERM/SIGINT. The 0.3 card (``/.well-known/agent-card.json``: ``url``,
``preferredTransport``, ``additionalInterfaces``, ``protocolVersion: 0.3.0``) lists the
three bindings, the ``--preferred`` one as ``url``: JSON-RPC at ``POST /a2a/jsonrpc``,
HTTP+JSON under ``/a2a/rest`` (``/a2a/rest/v1/message:send``, ...), gRPC
(``a2a.v1.A2AService``) on ``--grpc-port``. No caller key is required.

The echo agent follows the directives of ``sdk_server.py`` (first text part):
plain text -> completed with a ``response`` artifact echoing it; ``chunks:N``;
``hold:S`` (cancellable); ``ask:Q`` -> input-required (the reply completes, echoed);
``fail:T`` / ``reject:T`` / ``auth:T``; ``message:T`` -> a Message; ``crash``.
Status updates are written as 0.3 agents write them with the SDK's ``TaskUpdater``:
``final: true`` on terminal states and on input-required (``requires_input(final=True)``).
``--push`` enables the SDK's in-memory push-config store and sender.
The extended card (``supportsAuthenticatedExtendedCard``) is the card plus one skill.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
import uuid
from typing import Any

import grpc
import httpx
import uvicorn
from a2a.grpc import a2a_pb2_grpc
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2ARESTFastAPIApplication, A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TextPart,
)

HOLD_CAP_S = 120.0
CHUNKS_CAP = 10_000
TRANSPORTS = ("jsonrpc", "rest", "grpc")
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PREFIX = "/a2a/rest"
CARD_PATH = "/.well-known/agent-card.json"


def first_text(message: Message | None) -> str:
    if message is None:
        return ""
    for part in message.parts:
        if isinstance(part.root, TextPart):
            return part.root.text
    return ""


def text_part(value: str) -> Part:
    return Part(root=TextPart(text=value))


class EchoAgentExecutor(AgentExecutor):
    """The faux agent's directives, written against the 0.3 SDK's executor interface."""

    def __init__(self) -> None:
        self._holds: dict[str, asyncio.Event] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id or "", context.context_id or ""
        text = first_text(message)
        current = context.current_task

        if current is None and text.startswith("message:"):
            await event_queue.enqueue_event(
                Message(
                    role=Role.agent,
                    message_id=str(uuid.uuid4()),
                    context_id=context_id,
                    parts=[text_part(text.removeprefix("message:"))],
                )
            )
            return
        if current is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.submitted),
                    history=[message] if message is not None else [],
                )
            )
        updater = TaskUpdater(event_queue=event_queue, task_id=task_id, context_id=context_id)

        def agent_text(value: str) -> Message:
            return updater.new_agent_message(parts=[text_part(value)])

        if current is not None and current.status.state == TaskState.input_required:
            await updater.start_work()
            await updater.add_artifact(parts=[text_part(text)], name="response", last_chunk=True)
            await updater.complete()
        elif text.startswith("chunks:"):
            count = _bounded_int(text.removeprefix("chunks:"), 1, CHUNKS_CAP)
            artifact_id = f"{task_id}-chunks"
            await updater.start_work()
            for i in range(count):
                await updater.add_artifact(
                    parts=[text_part(f"chunk-{i}")],
                    artifact_id=artifact_id,
                    name="response",
                    append=i > 0,
                    last_chunk=i == count - 1,
                )
            await updater.complete()
        elif text.startswith("hold:"):
            await self._hold(task_id, text.removeprefix("hold:"), updater)
        elif text.startswith("ask:"):
            await updater.requires_input(agent_text(text.removeprefix("ask:")), final=True)
        elif text.startswith("fail:"):
            await updater.failed(agent_text(text.removeprefix("fail:")))
        elif text.startswith("reject:"):
            await updater.reject(agent_text(text.removeprefix("reject:")))
        elif text.startswith("auth:"):
            await updater.requires_auth(agent_text(text.removeprefix("auth:")), final=True)
        elif text == "crash":
            raise RuntimeError("crash directive")
        else:
            await updater.add_artifact(parts=[text_part(text)], name="response", last_chunk=True)
            await updater.complete()

    async def _hold(self, task_id: str, arg: str, updater: TaskUpdater) -> None:
        try:
            seconds = max(0.0, min(float(arg), HOLD_CAP_S))
        except ValueError:
            seconds = 1.0
        released = asyncio.Event()
        self._holds[task_id] = released
        try:
            await updater.start_work()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), timeout=seconds)
            if task_id in self._holds:  # not released by cancel()
                await updater.complete()
        finally:
            self._holds.pop(task_id, None)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        released = self._holds.pop(task_id, None)
        if released is not None:
            released.set()
        updater = TaskUpdater(
            event_queue=event_queue, task_id=task_id, context_id=context.context_id or ""
        )
        await updater.cancel()


def _bounded_int(value: str, low: int, high: int) -> int:
    try:
        return max(low, min(int(value), high))
    except ValueError:
        return low


def build_card(args: argparse.Namespace) -> AgentCard:
    urls = {
        "jsonrpc": f"http://{args.host}:{args.port}{JSONRPC_PATH}",
        "rest": f"http://{args.host}:{args.port}{REST_PREFIX}",
        "grpc": f"{args.host}:{args.grpc_port}",
    }
    return AgentCard(
        name="a2a-sdk 0.3 echo peer",
        description="The official a2a-sdk 0.3 serving the faux agent's directives.",
        version="1.0.0",
        url=urls[args.preferred],
        preferred_transport=BINDINGS[args.preferred],
        additional_interfaces=[
            AgentInterface(transport=BINDINGS[t], url=urls[t]) for t in TRANSPORTS
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=args.push),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="echo",
                name="Echo",
                description="Echoes the input; directives chunks:/hold:/ask:/fail:/message:.",
                tags=["interop"],
                examples=["hi", "chunks:3", "ask:name?"],
            )
        ],
        supports_authenticated_extended_card=True,
    )


def build_extended_card(card: AgentCard) -> AgentCard:
    extended = card.model_copy(deep=True)
    extended.skills.append(
        AgentSkill(
            id="extended-echo",
            name="Extended echo",
            description="Only listed on the extended card.",
            tags=["interop"],
        )
    )
    return extended


def bind_http(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


async def serve(args: argparse.Namespace) -> None:
    http_sock = bind_http(args.host, args.port)
    args.port = http_sock.getsockname()[1]
    grpc_server = grpc.aio.server()
    bound = grpc_server.add_insecure_port(f"{args.host}:{args.grpc_port}")
    if bound == 0:
        raise SystemExit(f"cannot bind gRPC port {args.grpc_port}")
    args.grpc_port = bound

    push_http: httpx.AsyncClient | None = None
    push_store = push_sender = None
    if args.push:
        push_http = httpx.AsyncClient(timeout=10.0)
        push_store = InMemoryPushNotificationConfigStore()
        push_sender = BasePushNotificationSender(push_http, push_store)

    card = build_card(args)
    extended = build_extended_card(card)
    handler = DefaultRequestHandler(
        agent_executor=EchoAgentExecutor(),
        task_store=InMemoryTaskStore(),
        push_config_store=push_store,
        push_sender=push_sender,
    )
    app: Any = A2ARESTFastAPIApplication(card, handler, extended_agent_card=extended).build(
        agent_card_url=CARD_PATH, rpc_url=REST_PREFIX
    )
    jsonrpc = A2AStarletteApplication(card, handler, extended_agent_card=extended)
    app.router.routes.extend(jsonrpc.routes(agent_card_url=CARD_PATH, rpc_url=JSONRPC_PATH))
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(card, handler), grpc_server)
    await grpc_server.start()

    config = uvicorn.Config(
        app,
        access_log=False,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=2,  # open SSE streams must not hold up the exit
    )
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.handle_exit, sig, None)

    serving = asyncio.create_task(server.serve(sockets=[http_sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:
                if serving.done():
                    await serving  # raises the start-up error
                    raise SystemExit("HTTP server exited during start-up")
                await asyncio.sleep(0.01)
        print("READY", flush=True)
        await serving
    finally:
        await grpc_server.stop(0.5)
        if push_http is not None:
            await push_http.aclose()
        http_sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="HTTP port (card, JSON-RPC, REST)")
    parser.add_argument("--grpc-port", type=int, default=0, help="gRPC port (0: any free port)")
    parser.add_argument("--preferred", default="jsonrpc", choices=TRANSPORTS)
    parser.add_argument("--push", action="store_true", help="enable push notifications")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
