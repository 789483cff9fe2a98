"""A driver for the official a2a-sdk (1.3.0) client: the reference peer for interop.

Runs in ``.venv-peer`` (never imported by our venv)::

    .venv-peer/bin/python tests/interop/peers/sdk_client.py \
        --card-url URL --transport jsonrpc|rest|grpc \
        [--api-key K] [--auth-header x-api-key|bearer] [--timeout S] SCENARIO [args]

``--card-url`` is the agent's base URL (the card is read from
``/.well-known/agent-card.json``) or the card's own URL (ending in ``.json``). The SDK's
``ClientFactory`` is told to support only the one binding asked for, so it must pick that
binding's interface from the card (or fail: ``no compatible transports found``).

Every result is printed as ONE JSON object per line on stdout:

- stream events and send results: the SDK's ``StreamResponse`` as ProtoJSON, i.e.
  ``{"task": …}``, ``{"message": …}``, ``{"statusUpdate": …}``, ``{"artifactUpdate": …}``
- ``card``: ``{"card": …, "interface": {url, protocolBinding, …}, "transport": <class>}``
- ``extended-card``: ``{"extendedCard": …}``; ``get``/``cancel``: ``{"task": …}``
- ``list``: ``{"listTasks": …}``; ``push-create``/``push-get``: ``{"pushConfig": …}``;
  ``push-list``: ``{"pushConfigs": …}``; ``push-delete``: ``{"deleted": true}``
- any SDK error: ``{"error": {"type": <SDK exception class>, "code": <JSON-RPC code or
  null>, "message": …, "data": …}}``

``--stdin`` (the only argument) reads one JSON array of such arguments per line and prints
``{"done": EXIT}`` after each command's lines: many scenarios, one interpreter start-up.

Exit status: 0 when the driver worked (an A2A error reply is a result, not a failure),
1 on an unexpected exception (traceback on stderr), 2 on bad usage, 3 when ``--deadline``
passed. Scenarios::

    card | extended-card
    send TEXT [--task-id T] [--context-id C] [--history-length N]     (blocking)
    send-immediate TEXT [--task-id T] [--context-id C]                (returnImmediately)
    stream TEXT [--task-id T] [--context-id C] [--max-events N]       (every event)
    get TASK_ID [--history-length N]
    list [--context-id C] [--status S] [--page-size N] [--page-token T]
         [--history-length N] [--include-artifacts]
    cancel TASK_ID
    subscribe TASK_ID [--max-events N]
    push-create TASK_ID URL [--config-id ID] [--token T]
    push-get TASK_ID CONFIG_ID | push-list TASK_ID | push-delete TASK_ID CONFIG_ID
    multi-turn QUESTION ANSWER    (send "ask:QUESTION", then ANSWER on the same task)
    answer-text TEXT              (blocking send, then GetTask: the SDK's text helper on
                                   each one's ``response`` artifact, ``{"answerText": …,
                                   "getText": …}``)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types.a2a_pb2 import (
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

BINDINGS = {
    "jsonrpc": TransportProtocol.JSONRPC,
    "rest": TransportProtocol.HTTP_JSON,
    "grpc": TransportProtocol.GRPC,
}
STREAMING_SCENARIOS = {"stream", "subscribe"}


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), sort_keys=False) + "\n")
    sys.stdout.flush()


def proto(msg: ProtoMessage) -> dict[str, Any]:
    return json_format.MessageToDict(msg)


def emit_error(exc: BaseException) -> None:
    code = JSON_RPC_ERROR_CODE_MAP.get(type(exc)) if isinstance(exc, A2AError) else None
    message = exc.message if isinstance(exc, A2AError) else str(exc)
    data = exc.data if isinstance(exc, A2AError) else None
    emit(
        {
            "error": {
                "type": type(exc).__name__,
                "code": code,
                "message": message,
                "data": data,
            }
        }
    )


class NoInterface(Exception):
    """The card offers no interface of the forced binding: a result, not a driver bug."""

    def __init__(self, cause: ValueError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Session:
    """One SDK client, forced onto one binding, plus the call context (auth, timeout)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.http = httpx.AsyncClient(timeout=args.timeout)
        headers: dict[str, str] = {}
        if args.api_key is not None:
            if args.auth_header == "bearer":
                headers["Authorization"] = f"Bearer {args.api_key}"
            else:
                headers["X-API-Key"] = args.api_key
        self.context = ClientCallContext(timeout=args.timeout, service_parameters=headers or None)
        self.card = AgentCard()
        self.client: Client | None = None

    async def open(self, *, streaming: bool) -> Client:
        base, card_path = split_card_url(self.args.card_url)
        resolver = A2ACardResolver(self.http, base, agent_card_path=card_path)
        config = ClientConfig(
            streaming=streaming,
            httpx_client=self.http,
            grpc_channel_factory=grpc.aio.insecure_channel,
            supported_protocol_bindings=[BINDINGS[self.args.transport]],
            use_client_preference=True,
        )
        factory = ClientFactory(config)  # adds A2A-Version: 1.0 to self.http
        self.card = await resolver.get_agent_card()
        try:
            self.client = factory.create(self.card)
        except ValueError as exc:  # the SDK's "no compatible transports found"
            raise NoInterface(exc) from exc
        return self.client

    def interface(self) -> AgentInterface | None:
        binding = BINDINGS[self.args.transport]
        for candidate in self.card.supported_interfaces:
            if candidate.protocol_binding == binding:
                return candidate
        return None

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.http.aclose()


def split_card_url(url: str) -> tuple[str, str]:
    """(base, card path) for the SDK's resolver: a ``.json`` URL is the card itself."""
    if urlsplit(url).path.endswith(".json"):
        return url, ""
    return url, "/.well-known/agent-card.json"


def user_message(text: str, args: argparse.Namespace) -> Message:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if getattr(args, "task_id", None):
        message.task_id = args.task_id
    if getattr(args, "context_id", None):
        message.context_id = args.context_id
    return message


def send_request(message: Message, args: argparse.Namespace) -> SendMessageRequest:
    request = SendMessageRequest(message=message)
    if getattr(args, "history_length", None) is not None:
        request.configuration.history_length = args.history_length
    return request


async def emit_stream(events: AsyncIterator[StreamResponse], max_events: int | None) -> None:
    count = 0
    async for event in events:
        emit(proto(event))
        count += 1
        if max_events is not None and count >= max_events:
            break


# --- scenarios ------------------------------------------------------------------------


async def run_card(s: Session, client: Client) -> None:
    chosen = s.interface()
    emit(
        {
            "card": proto(s.card),
            "interface": proto(chosen) if chosen is not None else None,
            "transport": type(getattr(client, "_transport", None)).__name__,
        }
    )


async def run_extended_card(s: Session, client: Client) -> None:
    card = await client.get_extended_agent_card(GetExtendedAgentCardRequest(), context=s.context)
    emit({"extendedCard": proto(card)})


async def run_send(s: Session, client: Client) -> None:
    request = send_request(user_message(s.args.text, s.args), s.args)
    await emit_stream(client.send_message(request, context=s.context), None)


async def run_send_immediate(s: Session, client: Client) -> None:
    request = send_request(user_message(s.args.text, s.args), s.args)
    request.configuration.return_immediately = True
    await emit_stream(client.send_message(request, context=s.context), None)


async def run_stream(s: Session, client: Client) -> None:
    request = send_request(user_message(s.args.text, s.args), s.args)
    await emit_stream(client.send_message(request, context=s.context), s.args.max_events)


async def run_get(s: Session, client: Client) -> None:
    request = GetTaskRequest(id=s.args.task_id)
    if s.args.history_length is not None:
        request.history_length = s.args.history_length
    emit({"task": proto(await client.get_task(request, context=s.context))})


async def run_list(s: Session, client: Client) -> None:
    a = s.args
    request = ListTasksRequest()
    if a.context_id:
        request.context_id = a.context_id
    if a.status:
        request.status = TaskState.Value(a.status)
    if a.page_size is not None:
        request.page_size = a.page_size
    if a.page_token:
        request.page_token = a.page_token
    if a.history_length is not None:
        request.history_length = a.history_length
    if a.include_artifacts:
        request.include_artifacts = True
    emit({"listTasks": proto(await client.list_tasks(request, context=s.context))})


async def run_cancel(s: Session, client: Client) -> None:
    task = await client.cancel_task(CancelTaskRequest(id=s.args.task_id), context=s.context)
    emit({"task": proto(task)})


async def run_subscribe(s: Session, client: Client) -> None:
    events = client.subscribe(SubscribeToTaskRequest(id=s.args.task_id), context=s.context)
    await emit_stream(events, s.args.max_events)


async def run_push_create(s: Session, client: Client) -> None:
    a = s.args
    config = TaskPushNotificationConfig(task_id=a.task_id, url=a.url)
    if a.config_id:
        config.id = a.config_id
    if a.token:
        config.token = a.token
    result = await client.create_task_push_notification_config(config, context=s.context)
    emit({"pushConfig": proto(result)})


async def run_push_get(s: Session, client: Client) -> None:
    request = GetTaskPushNotificationConfigRequest(task_id=s.args.task_id, id=s.args.config_id)
    result = await client.get_task_push_notification_config(request, context=s.context)
    emit({"pushConfig": proto(result)})


async def run_push_list(s: Session, client: Client) -> None:
    request = ListTaskPushNotificationConfigsRequest(task_id=s.args.task_id)
    result = await client.list_task_push_notification_configs(request, context=s.context)
    emit({"pushConfigs": proto(result)})


async def run_push_delete(s: Session, client: Client) -> None:
    request = DeleteTaskPushNotificationConfigRequest(task_id=s.args.task_id, id=s.args.config_id)
    await client.delete_task_push_notification_config(request, context=s.context)
    emit({"deleted": True})


async def run_multi_turn(s: Session, client: Client) -> None:
    first: StreamResponse | None = None
    request = SendMessageRequest(message=user_message(f"ask:{s.args.question}", s.args))
    async for event in client.send_message(request, context=s.context):
        emit(proto(event))
        first = event
    if first is None or not first.HasField("task"):
        raise RuntimeError("multi-turn: the first reply was not a task")
    reply = user_message(s.args.answer, s.args)
    reply.task_id = first.task.id
    reply.context_id = first.task.context_id
    await emit_stream(
        client.send_message(SendMessageRequest(message=reply), context=s.context), None
    )


async def run_answer_text(s: Session, client: Client) -> None:
    def response_text(task: Any) -> str | None:
        found = [a for a in task.artifacts if a.name == "response"]
        return get_artifact_text(found[0]) if found else None

    last: StreamResponse | None = None
    request = send_request(user_message(s.args.text, s.args), s.args)
    async for event in client.send_message(request, context=s.context):
        last = event
    if last is None or not last.HasField("task"):
        raise RuntimeError("answer-text: the reply was not a task")
    got = await client.get_task(GetTaskRequest(id=last.task.id), context=s.context)
    emit({"answerText": response_text(last.task), "getText": response_text(got)})


Scenario = Callable[[Session, Client], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "card": run_card,
    "extended-card": run_extended_card,
    "send": run_send,
    "send-immediate": run_send_immediate,
    "stream": run_stream,
    "get": run_get,
    "list": run_list,
    "cancel": run_cancel,
    "subscribe": run_subscribe,
    "push-create": run_push_create,
    "push-get": run_push_get,
    "push-list": run_push_list,
    "push-delete": run_push_delete,
    "multi-turn": run_multi_turn,
    "answer-text": run_answer_text,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--card-url", required=True)
    p.add_argument("--transport", required=True, choices=sorted(BINDINGS))
    p.add_argument("--api-key", default=None)
    p.add_argument("--auth-header", default="x-api-key", choices=["x-api-key", "bearer"])
    p.add_argument("--timeout", type=float, default=30.0, help="per call (seconds)")
    p.add_argument("--deadline", type=float, default=60.0, help="whole run (seconds)")
    sub = p.add_subparsers(dest="scenario", required=True)

    sub.add_parser("card")
    sub.add_parser("extended-card")
    for name in ("send", "send-immediate", "stream", "answer-text"):
        sp = sub.add_parser(name)
        sp.add_argument("text")
        sp.add_argument("--task-id")
        sp.add_argument("--context-id")
        sp.add_argument("--history-length", type=int)
        if name == "stream":
            sp.add_argument("--max-events", type=int)
    sp = sub.add_parser("get")
    sp.add_argument("task_id")
    sp.add_argument("--history-length", type=int)
    sp = sub.add_parser("list")
    sp.add_argument("--context-id")
    sp.add_argument("--status", help="a TaskState name, e.g. TASK_STATE_COMPLETED")
    sp.add_argument("--page-size", type=int)
    sp.add_argument("--page-token")
    sp.add_argument("--history-length", type=int)
    sp.add_argument("--include-artifacts", action="store_true")
    sp = sub.add_parser("cancel")
    sp.add_argument("task_id")
    sp = sub.add_parser("subscribe")
    sp.add_argument("task_id")
    sp.add_argument("--max-events", type=int)
    sp = sub.add_parser("push-create")
    sp.add_argument("task_id")
    sp.add_argument("url")
    sp.add_argument("--config-id")
    sp.add_argument("--token")
    for name in ("push-get", "push-delete"):
        sp = sub.add_parser(name)
        sp.add_argument("task_id")
        sp.add_argument("config_id")
    sp = sub.add_parser("push-list")
    sp.add_argument("task_id")
    sp = sub.add_parser("multi-turn")
    sp.add_argument("question")
    sp.add_argument("answer")
    return p


async def run(args: argparse.Namespace) -> int:
    session = Session(args)
    try:
        async with asyncio.timeout(args.deadline):
            client = await session.open(streaming=args.scenario in STREAMING_SCENARIOS)
            await SCENARIOS[args.scenario](session, client)
    except A2AError as exc:  # the SDK's typed errors, client-side ones included
        emit_error(exc)
    except NoInterface as exc:
        emit_error(exc.cause)
    except TimeoutError as exc:
        emit_error(exc)
        return 3
    except Exception as exc:
        emit_error(exc)
        traceback.print_exc()
        return 1
    finally:
        await session.close()
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if getattr(args, "max_events", None) is not None and args.max_events < 1:
        p.error("--max-events must be positive")
    return args


def serve_stdin() -> int:
    """``--stdin``: one JSON argv array per input line, ``{"done": EXIT}`` after each.

    The same scenarios in one process: a fresh card fetch and SDK client per command,
    without paying the interpreter and import start-up each time.
    """
    loop = asyncio.new_event_loop()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                argv = json.loads(line)
                if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                    raise ValueError("each line must be a JSON array of strings")
                args = parse(argv)
            except SystemExit as exc:  # argparse already printed the usage on stderr
                emit({"done": exc.code if isinstance(exc.code, int) else 2})
                continue
            except ValueError as exc:
                emit_error(exc)
                emit({"done": 2})
                continue
            emit({"done": loop.run_until_complete(run(args))})
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return 0


def main() -> None:
    if sys.argv[1:] == ["--stdin"]:
        raise SystemExit(serve_stdin())
    raise SystemExit(asyncio.run(run(parse(sys.argv[1:]))))


if __name__ == "__main__":
    main()
