"""The official a2a-sdk (1.3.0) serving an echo agent: the reference server for interop.

Runs in ``.venv-peer`` (never imported by our venv)::

    .venv-peer/bin/python tests/interop/peers/sdk_server.py --port 8090 --grpc-port 8091 \
        [--transports jsonrpc,rest,grpc] [--api-key K] [--push] [--only-0.3]

Prints exactly one line, ``READY``, once every listener accepts connections; then serves
until SIGTERM/SIGINT. The card (``/.well-known/agent-card.json``) is always served over
HTTP and lists only the bindings served, in the order jsonrpc, rest, grpc:
JSON-RPC at ``POST /a2a/jsonrpc``, HTTP+JSON under ``/a2a/rest``, gRPC on ``--grpc-port``.
The mounts deliberately differ from our gateway's so clients must read the card.

The echo agent follows our faux agent's directives (first text part of the message):

- plain text      -> completed task, one artifact named ``response`` whose text is the input
- ``chunks:N``    -> N artifact-update chunks ``chunk-0`` .. ``chunk-(N-1)`` on one
                     artifact (append after the first, lastChunk on the last), completed
- ``hold:S``      -> working, waits S seconds (capped at 120) or until canceled, completed
- ``ask:Q``       -> input-required with Q as the status message; the reply on the same
                     task completes it with a ``response`` artifact echoing the reply
- ``fail:T``, ``reject:T``, ``auth:T`` -> failed / rejected / auth-required, T as message
- ``message:T``   -> a plain Message reply (no task)
- ``crash``       -> the executor raises

``--api-key K`` requires ``X-API-Key: K`` or ``Authorization: Bearer K`` on every A2A call
(not on the public card) and declares both schemes in the card; with ``--allow-anonymous``
a call that presents no key at all is let through too (a wrong key is still a 401), the
way ``a2a_gateway serve --allow-anonymous`` treats callers. ``--push`` enables the
SDK's in-memory push-config store and sender (``capabilities.pushNotifications``).
The extended card is always declared; it is the public card plus one extra skill.

``--only-0.3`` makes a 0.3-only agent: the SDK's 0.3 JSON-RPC and REST adapters are
mounted (same URLs), the card lists only ``protocolVersion: "0.3"`` interfaces (jsonrpc,
rest; gRPC is not offered), so the served card is the SDK's hybrid card with the 0.3
keys (``url``, ``preferredTransport``, ...), and any request that announces
``A2A-Version: 1.x`` is refused with HTTP 400 (a 1.0 client must not get through; the
card is exempt). ``--grpc-0.3`` (with ``--only-0.3``) also serves the SDK's 0.3 gRPC
service (``CompatGrpcHandler``, ``a2a.v1.A2AService``) on ``--grpc-port`` and lists it as
a 0.3 GRPC interface; without it ``--only-0.3`` offers no gRPC, as before.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import httpx
import uvicorn
from a2a.auth.user import UnauthenticatedUser, User
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import (
    DefaultGrpcServerCallContextBuilder,
    DefaultRequestHandler,
    GrpcHandler,
)
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
)
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import a2a_pb2_grpc
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.authentication import SimpleUser

HOLD_CAP_S = 120.0
CHUNKS_CAP = 10_000
TRANSPORTS = ("jsonrpc", "rest", "grpc")
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PREFIX = "/a2a/rest"
CARD_PATH = "/.well-known/agent-card.json"


def first_text(message: Message | None) -> str:
    if message is None:
        return ""
    for part in message.parts:
        if part.WhichOneof("content") == "text":
            return part.text
    return ""


class EchoAgentExecutor(AgentExecutor):
    """The faux agent's directives, written against the SDK's executor interface."""

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
                    role=Role.ROLE_AGENT,
                    message_id=str(uuid.uuid4()),
                    context_id=context_id,
                    parts=[Part(text=text.removeprefix("message:"))],
                )
            )
            return
        if current is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[message] if message is not None else [],
                )
            )
        updater = TaskUpdater(event_queue=event_queue, task_id=task_id, context_id=context_id)

        def agent_text(value: str) -> Message:
            return updater.new_agent_message(parts=[Part(text=value)])

        if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            # The reply to an ask: complete with the answer echoed.
            await updater.start_work()
            await updater.add_artifact(parts=[Part(text=text)], name="response", last_chunk=True)
            await updater.complete()
        elif text.startswith("chunks:"):
            count = _bounded_int(text.removeprefix("chunks:"), 1, CHUNKS_CAP)
            artifact_id = f"{task_id}-chunks"
            await updater.start_work()
            for i in range(count):
                await updater.add_artifact(
                    parts=[Part(text=f"chunk-{i}")],
                    artifact_id=artifact_id,
                    name="response",
                    append=i > 0,
                    last_chunk=i == count - 1,
                )
            await updater.complete()
        elif text.startswith("hold:"):
            await self._hold(task_id, text.removeprefix("hold:"), updater)
        elif text.startswith("ask:"):
            await updater.requires_input(agent_text(text.removeprefix("ask:")))
        elif text.startswith("fail:"):
            await updater.failed(agent_text(text.removeprefix("fail:")))
        elif text.startswith("reject:"):
            await updater.reject(agent_text(text.removeprefix("reject:")))
        elif text.startswith("auth:"):
            await updater.requires_auth(agent_text(text.removeprefix("auth:")))
        elif text == "crash":
            raise RuntimeError("crash directive")
        else:
            await updater.add_artifact(parts=[Part(text=text)], name="response", last_chunk=True)
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


def interface_version(args: argparse.Namespace) -> str:
    return "0.3" if args.only_03 else "1.0"


def build_card(args: argparse.Namespace, transports: list[str]) -> AgentCard:
    urls = {
        "jsonrpc": ("JSONRPC", f"http://{args.host}:{args.port}{JSONRPC_PATH}"),
        "rest": ("HTTP+JSON", f"http://{args.host}:{args.port}{REST_PREFIX}"),
        "grpc": ("GRPC", f"{args.host}:{args.grpc_port}"),
    }
    card = AgentCard(
        name="a2a-sdk echo peer",
        description="The official a2a-sdk serving the faux agent's directives.",
        version="1.0.0",
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=args.push, extended_agent_card=True
        ),
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
        supported_interfaces=[
            AgentInterface(
                protocol_binding=urls[t][0],
                protocol_version=interface_version(args),
                url=urls[t][1],
            )
            for t in transports
        ],
    )
    if args.api_key:
        card.security_schemes["apiKey"].CopyFrom(
            SecurityScheme(
                api_key_security_scheme=APIKeySecurityScheme(location="header", name="X-API-Key")
            )
        )
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.extend(
            [
                SecurityRequirement(schemes={"apiKey": StringList()}),
                SecurityRequirement(schemes={"bearer": StringList()}),
            ]
        )
    return card


def build_extended_card(card: AgentCard) -> AgentCard:
    extended = AgentCard()
    extended.CopyFrom(card)
    extended.skills.append(
        AgentSkill(
            id="extended-echo",
            name="Extended echo",
            description="Only listed on the extended card.",
            tags=["interop"],
        )
    )
    return extended


KEYED_CALLER = "keyed-caller"


def caller_for(get: Callable[[str], str | None], key: str, allow_anonymous: bool) -> str | None:
    """The caller's name ("" = anonymous), or None when the call must be refused."""
    presented = get("x-api-key")
    authorization = get("authorization")
    if presented is None and authorization is not None:
        scheme, _, token = authorization.partition(" ")
        presented = token if scheme.lower() == "bearer" else ""
    if presented is None:
        return "" if allow_anonymous else None
    return KEYED_CALLER if hmac.compare_digest(presented.encode(), key.encode()) else None


class KeyedUser(User):
    """The key holder: the SDK's task store scopes tasks by ``user_name``, as we do."""

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return KEYED_CALLER


class Refuse1x:
    """ASGI middleware of ``--only-0.3``: a request announcing ``A2A-Version: 1.x`` is
    refused, so only 0.3 calls (no version header, or 0.3) reach the SDK."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != CARD_PATH:
            for key, value in scope["headers"]:
                if key.decode("latin-1").lower() == "a2a-version" and value.startswith(b"1"):
                    body = json.dumps(
                        {"error": {"code": 400, "message": "this agent speaks A2A 0.3 only"}}
                    ).encode()
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 400,
                            "headers": [(b"content-type", b"application/json")],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)


class RequireKey:
    """ASGI middleware: every path but the public card needs the key (or no key at all
    with allow_anonymous); the key holder becomes ``scope["user"]``."""

    def __init__(self, app: Any, key: str, allow_anonymous: bool) -> None:
        self.app = app
        self.key = key
        self.allow_anonymous = allow_anonymous

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] == CARD_PATH:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        caller = caller_for(headers.get, self.key, self.allow_anonymous)
        if caller is not None:
            if caller:
                scope["user"] = SimpleUser(caller)
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "API key required"}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def grpc_getter(metadata: Any) -> Callable[[str], str | None]:
    values = {str(k).lower(): v if isinstance(v, str) else v.decode() for k, v in metadata or ()}
    return values.get


class GrpcRequireKey(grpc.aio.ServerInterceptor):
    """gRPC counterpart of RequireKey: UNAUTHENTICATED when refused."""

    def __init__(self, key: str, allow_anonymous: bool) -> None:
        self.key = key
        self.allow_anonymous = allow_anonymous

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        get = grpc_getter(handler_call_details.invocation_metadata)
        if handler is None or caller_for(get, self.key, self.allow_anonymous) is not None:
            return handler
        return _deny_like(handler)


class GrpcKeyedContext(DefaultGrpcServerCallContextBuilder):
    """Marks the key holder as the call's user on gRPC too (the interceptor refused the rest)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def build_user(self, context: grpc.aio.ServicerContext) -> User:
        get = grpc_getter(context.invocation_metadata())
        if caller_for(get, self.key, allow_anonymous=True):
            return KeyedUser()
        return UnauthenticatedUser()


def _deny_like(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind (unary or server-streaming) that aborts."""

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "API key required")

    async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "API key required")
        yield  # never reached: abort raises

    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **codec)
    return grpc.unary_unary_rpc_method_handler(deny, **codec)


def bind_http(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


async def serve(args: argparse.Namespace, transports: list[str]) -> None:
    http_sock = bind_http(args.host, args.port)
    args.port = http_sock.getsockname()[1]

    push_http: httpx.AsyncClient | None = None
    push_store = push_sender = None
    if args.push:
        push_http = httpx.AsyncClient(timeout=10.0)
        push_store = InMemoryPushNotificationConfigStore()
        push_sender = BasePushNotificationSender(push_http, push_store)

    grpc_server: grpc.aio.Server | None = None
    if "grpc" in transports:
        interceptors = [GrpcRequireKey(args.api_key, args.allow_anonymous)] if args.api_key else []
        grpc_server = grpc.aio.server(interceptors=interceptors)
        bound = grpc_server.add_insecure_port(f"{args.host}:{args.grpc_port}")
        if bound == 0:
            raise SystemExit(f"cannot bind gRPC port {args.grpc_port}")
        args.grpc_port = bound

    card = build_card(args, transports)
    handler = DefaultRequestHandler(
        agent_executor=EchoAgentExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=push_store,
        push_sender=push_sender,
        extended_agent_card=build_extended_card(card),
    )
    routes: list[Any] = list(create_agent_card_routes(agent_card=card))
    if "jsonrpc" in transports:
        routes += create_jsonrpc_routes(
            request_handler=handler, rpc_url=JSONRPC_PATH, enable_v0_3_compat=args.only_03
        )
    if "rest" in transports:
        routes += create_rest_routes(
            request_handler=handler, path_prefix=REST_PREFIX, enable_v0_3_compat=args.only_03
        )
    app: Any = Starlette(routes=routes)
    if args.only_03:
        app = Refuse1x(app)
    if args.api_key:
        app = RequireKey(app, args.api_key, args.allow_anonymous)

    if grpc_server is not None:
        builder = GrpcKeyedContext(args.api_key) if args.api_key else None
        if args.only_03:  # --grpc-0.3: the SDK's 0.3 service only
            from a2a.compat.v0_3 import a2a_v0_3_pb2_grpc
            from a2a.compat.v0_3.grpc_handler import CompatGrpcHandler

            compat = CompatGrpcHandler(handler, context_builder=builder)
            a2a_v0_3_pb2_grpc.add_A2AServiceServicer_to_server(compat, grpc_server)
        else:
            servicer = GrpcHandler(handler, context_builder=builder)
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, grpc_server)
        await grpc_server.start()

    config = uvicorn.Config(
        app,
        access_log=False,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=2,  # open SSE streams must not hold up the exit
    )
    server = uvicorn.Server(config)
    # We own the signals (uvicorn would re-raise them after serving, skipping our
    # clean-up): stop uvicorn, then gRPC, then exit 0. handle_exit is the one that
    # sse-starlette hooks to end open SSE streams instead of letting them hold the exit.
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
        if grpc_server is not None:
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
    parser.add_argument(
        "--transports", default=",".join(TRANSPORTS), help="comma list of jsonrpc,rest,grpc"
    )
    parser.add_argument("--api-key", default=None, help="require this key on every A2A call")
    parser.add_argument(
        "--allow-anonymous", action="store_true", help="with --api-key: no key is fine too"
    )
    parser.add_argument("--push", action="store_true", help="enable push notifications")
    parser.add_argument(
        "--only-0.3",
        dest="only_03",
        action="store_true",
        help="offer only A2A 0.3 interfaces (JSON-RPC and REST; no gRPC)",
    )
    parser.add_argument(
        "--grpc-0.3",
        dest="grpc_03",
        action="store_true",
        help="with --only-0.3: also serve the SDK's 0.3 gRPC service on --grpc-port",
    )
    args = parser.parse_args()
    if args.grpc_03 and not args.only_03:
        parser.error("--grpc-0.3 needs --only-0.3")
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if args.only_03 and not args.grpc_03:
        transports = [t for t in transports if t != "grpc"]
    unknown = sorted(set(transports) - set(TRANSPORTS))
    if unknown or not transports:
        parser.error(f"--transports: unknown or empty: {unknown or transports}")
    transports = [t for t in TRANSPORTS if t in transports]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(serve(args, transports))


if __name__ == "__main__":
    main()
