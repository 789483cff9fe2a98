"""The verbs that call agents: ``card``, ``send``, ``get``, ``list``, ``cancel``, ``subscribe``.

Each verb is one :class:`~a2a_gateway.client.RemoteService` call. Output is for people by
default (streamed text printed as it arrives, a progress indicator on stderr while a task
waits, only when stderr is a terminal) and ProtoJSON with ``--json`` (one object per line;
streams print one line per event). Errors go to stderr; the exit status tells scripts
what happened (:data:`EXIT_CODES_HELP`). Keys never reach the output: the client redacts
them from every error text, and they are only ever read from ``--key`` or
``A2A_GATEWAY_KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

import orjson
from google.protobuf.message import Message

from a2a_gateway.client import (
    AuthRejected,
    RemoteService,
    Timeout,
    Unreachable,
    connect,
    resolve_card,
    send_request,
)
from a2a_gateway.client.errors import Redactor
from a2a_gateway.client.messages import INTERRUPTED_STATES, TERMINAL_STATES
from a2a_gateway.client.transport import DEFAULT_TIMEOUT
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.errors import A2AError, PermissionDeniedError, UnauthenticatedError
from lf.a2a.v1 import a2a_pb2 as pb

from .logs import register_secret, setup_logging

EXIT_OK = 0
EXIT_A2A_ERROR = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_UNREACHABLE = 4
EXIT_INTERRUPTED = 130

KEY_ENV = "A2A_GATEWAY_KEY"
VERBS = ("card", "send", "get", "list", "cancel", "subscribe")

EXIT_CODES_HELP = f"""\
exit status:
  {EXIT_OK}  success (the agent answered; a task's state is in the output)
  {EXIT_A2A_ERROR}  the agent returned an A2A error, or its card is missing or unusable
  {EXIT_USAGE}  usage error (bad option, unreadable --file)
  {EXIT_AUTH}  authentication failed (key missing or rejected)
  {EXIT_UNREACHABLE}  agent unreachable, or no answer within --timeout

The key comes from --key or the {KEY_ENV} environment variable (keeps it out of
shell history)."""

_TRANSPORTS = ("jsonrpc", "rest", "grpc")
_SPINNER_FRAMES = "|/-\\"
_SPINNER_PERIOD_S = 0.1
_CLEAR_LINE = "\r\x1b[K"
# Control characters in an agent's text could drive the user's terminal (escape
# sequences, carriage returns): human output shows them as U+FFFD instead.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# --- argument parsing -------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def task_state(text: str) -> pb.TaskState.ValueType:
    """``completed``, ``input-required`` or ``TASK_STATE_COMPLETED`` as a TaskState."""
    name = text.strip().upper().replace("-", "_")
    if not name.startswith("TASK_STATE_"):
        name = "TASK_STATE_" + name
    try:
        state = pb.TaskState.Value(name)
    except ValueError:
        state = pb.TASK_STATE_UNSPECIFIED
    if state == pb.TASK_STATE_UNSPECIFIED:
        known = ", ".join(state_name(v) for v in pb.TaskState.values() if v)
        raise argparse.ArgumentTypeError(f"unknown task state {text!r} (one of: {known})")
    return state


def state_name(state: pb.TaskState.ValueType) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required``."""
    try:
        name = pb.TaskState.Name(state)
    except ValueError:
        return f"state-{int(state)}"
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="the agent's base URL, or its card's URL")
    parser.add_argument("--key", help=f"API key for the agent (default: ${KEY_ENV}); never printed")
    parser.add_argument(
        "--transport",
        choices=_TRANSPORTS,
        help="force a binding (default: the first one the card lists that we speak)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds allowed for each call (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--json", action="store_true", help="ProtoJSON output, one object per line")


def add_verbs(sub: Any) -> None:
    """Register the client verbs on the ``a2a-gateway`` sub-parsers."""

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common(parser)
        return parser

    verb("card", "show an agent's card (the extended card when a key is given)")

    send = verb("send", "send a message to an agent and print its answer")
    send.add_argument("text", metavar="TEXT", help="the message text ('' with --file only)")
    send.add_argument("--stream", action="store_true", help="print events as they arrive")
    send.add_argument(
        "--file",
        type=Path,
        action="append",
        metavar="PATH",
        help="attach a file (repeatable)",
    )
    send.add_argument("--context-id", default="", help="continue this conversation")
    send.add_argument("--task-id", default="", help="reply to this task (e.g. input-required)")
    send.add_argument(
        "--return-immediately",
        action="store_true",
        help="do not wait for the task to finish; print it as created",
    )

    get = verb("get", "show a task")
    get.add_argument("task_id", metavar="TASK_ID")
    get.add_argument(
        "--history-length",
        type=_non_negative_int,
        help="include at most N recent messages (0: none)",
    )

    listing = verb("list", "list your tasks, newest first")
    listing.add_argument("--context-id", default="", help="only tasks of this conversation")
    listing.add_argument(
        "--status", type=task_state, help="only tasks in this state (e.g. completed)"
    )
    listing.add_argument("--page-size", type=_non_negative_int, help="tasks per page (1-100)")
    listing.add_argument("--page-token", default="", help="the page to show (from a list)")

    cancel = verb("cancel", "cancel a task")
    cancel.add_argument("task_id", metavar="TASK_ID")

    subscribe = verb("subscribe", "follow a task's events until it ends")
    subscribe.add_argument("task_id", metavar="TASK_ID")


# --- output ---------------------------------------------------------------------------


class Progress:
    """A spinner on stderr while we wait; disabled unless stderr is a terminal.

    :meth:`show` starts it (its first frame is drawn at once), :meth:`hide` erases it
    before anything is printed on stdout. Its task is owned here and cancelled on exit.
    """

    def __init__(self, stream: TextIO, *, enabled: bool) -> None:
        self._stream = stream
        self.enabled = enabled
        self._label = ""
        self._task: asyncio.Task[None] | None = None

    def show(self, label: str) -> None:
        self._label = label
        if self.enabled and self._task is None:
            self._draw(0)
            self._task = asyncio.get_running_loop().create_task(self._spin())

    def hide(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        self._task = None
        self._stream.write(_CLEAR_LINE)
        self._stream.flush()

    def _draw(self, frame: int) -> None:
        spinner = _SPINNER_FRAMES[frame % len(_SPINNER_FRAMES)]
        self._stream.write(f"{_CLEAR_LINE}{spinner} {self._label}")
        self._stream.flush()

    async def _spin(self) -> None:
        frame = 0
        while True:
            await asyncio.sleep(_SPINNER_PERIOD_S)
            frame += 1
            self._draw(frame)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        self.hide()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def describe_part(part: pb.Part) -> str:
    """A part as one readable string: its text, or a short description of its content."""
    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text
    name = part.filename or "file"
    media = f", {part.media_type}" if part.media_type else ""
    if kind == "raw":
        return f"[{name}{media}, {len(part.raw)} bytes]"
    if kind == "url":
        return f"[{name}{media}: {part.url}]"
    if kind == "data":
        return "[data] " + orjson.dumps(codec.to_dict(part)["data"]).decode()
    return "[empty part]"


def parts_text(parts: Iterable[pb.Part]) -> str:
    return "\n".join(describe_part(p) for p in parts)


def task_summary(task_id: str, state: pb.TaskState.ValueType, context_id: str) -> str:
    context = f" (context {context_id})" if context_id else ""
    return f"task {task_id}: {state_name(state)}{context}"


class Printer:
    """Writes one verb's results on stdout, for people or (``--json``) for scripts."""

    def __init__(self, out: TextIO, progress: Progress, *, as_json: bool) -> None:
        self.out = out
        self.progress = progress
        self.as_json = as_json
        self.at_line_start = True

    def write(self, text: str) -> None:
        """Text without a line end (streamed text): the spinner is erased first."""
        if not text:
            return
        if not self.as_json:
            text = _CONTROL.sub("\ufffd", text)
        self.progress.hide()
        self.out.write(text)
        self.out.flush()
        self.at_line_start = text.endswith("\n")

    def line(self, text: str = "") -> None:
        self.end_line()
        self.write(text + "\n")

    def end_line(self) -> None:
        if not self.at_line_start:
            self.write("\n")

    def proto(self, msg: Message) -> None:
        self.write(codec.to_json(msg).decode() + "\n")

    # --- people ---------------------------------------------------------------------

    def card(self, card: pb.AgentCard) -> None:
        self.line(card.name + (f" (version {card.version})" if card.version else ""))
        if card.description:
            self.line(card.description)
        if card.HasField("provider") and card.provider.organization:
            self.line(f"provider: {card.provider.organization} {card.provider.url}".rstrip())
        self.line("interfaces:")
        for interface in card.supported_interfaces:
            tenant = f" (tenant {interface.tenant})" if interface.tenant else ""
            self.line(
                f"  {interface.protocol_binding} {interface.protocol_version}"
                f"  {interface.url}{tenant}"
            )
        capabilities = card.capabilities
        offered = [
            name
            for name, on in (
                ("streaming", capabilities.streaming),
                ("push notifications", capabilities.push_notifications),
                ("extended card", capabilities.extended_agent_card),
            )
            if on
        ]
        offered += [f"extension {e.uri}" for e in capabilities.extensions]
        self.line("capabilities: " + (", ".join(offered) or "none"))
        if card.security_schemes:
            self.line("security: " + ", ".join(_scheme(n, s) for n, s in _schemes(card)))
        self.line("skills:")
        for skill in card.skills:
            about = f": {skill.description}" if skill.description else ""
            self.line(f"  {skill.id} ({skill.name}){about}")

    def task(self, task: pb.Task, *, history: bool = False) -> None:
        if history:
            for item in task.history:
                role = "agent" if item.role == pb.ROLE_AGENT else "user"
                self.line(f"[{role}] {parts_text(item.parts)}")
        body = "\n".join(parts_text(a.parts) for a in task.artifacts)
        if not body and task.status.HasField("message"):
            body = parts_text(task.status.message.parts)
        if body:
            self.line(body)
        self.line(task_summary(task.id, task.status.state, task.context_id))

    def message(self, message: pb.Message) -> None:
        self.line(parts_text(message.parts))

    def listing(self, reply: pb.ListTasksResponse) -> None:
        if not reply.tasks:
            self.line("no tasks")
        for task in reply.tasks:
            stamp = (
                task.status.timestamp.ToJsonString() if task.status.HasField("timestamp") else "-"
            )
            self.line(
                f"{task.id}  {state_name(task.status.state):<14} {stamp}  "
                f"context {task.context_id or '-'}"
            )
        self.line(f"{len(reply.tasks)} of {reply.total_size} task(s)")
        if reply.next_page_token:
            self.line(f"next page: --page-token {reply.next_page_token}")


def _schemes(card: pb.AgentCard) -> list[tuple[str, pb.SecurityScheme]]:
    return sorted(card.security_schemes.items())


def _scheme(name: str, scheme: pb.SecurityScheme) -> str:
    kind = scheme.WhichOneof("scheme")
    if kind == "api_key_security_scheme":
        api_key = scheme.api_key_security_scheme
        return f"{name} (API key in {api_key.location} {api_key.name})"
    if kind == "http_auth_security_scheme":
        return f"{name} (HTTP {scheme.http_auth_security_scheme.scheme})"
    return f"{name} ({(kind or 'unknown').removesuffix('_security_scheme')})"


class StreamView:
    """Renders a stream of events for people: artifact text as it arrives (appended
    chunks inline), status messages on their own lines, and the task's final state."""

    def __init__(self, printer: Printer) -> None:
        self.printer = printer
        self.task_id = ""
        self.context_id = ""
        self.state: pb.TaskState.ValueType = pb.TASK_STATE_UNSPECIFIED
        self._seen_artifacts: set[str] = set()
        self._current_artifact: str | None = None
        self._seen_messages: set[str] = set()

    def event(self, event: pb.StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "message":
            self.printer.message(event.message)
        elif kind == "task":
            task = event.task
            self._task(task.id, task.context_id, task.status)
            for artifact in task.artifacts:
                if artifact.artifact_id not in self._seen_artifacts:
                    self._artifact(artifact, append=False)
        elif kind == "status_update":
            status = event.status_update
            self._task(status.task_id, status.context_id, status.status)
        elif kind == "artifact_update":
            chunk = event.artifact_update
            self._artifact(chunk.artifact, append=chunk.append)
        waiting = self.state not in TERMINAL_STATES and self.state not in INTERRUPTED_STATES
        # Mid-line (streamed text) the spinner would erase the text on a terminal.
        if kind != "message" and waiting and self.printer.at_line_start:
            self.printer.progress.show(f"{state_name(self.state)}...")

    def _task(self, task_id: str, context_id: str, status: pb.TaskStatus) -> None:
        self.task_id = task_id or self.task_id
        self.context_id = context_id or self.context_id
        self.state = status.state
        message = status.message
        if status.HasField("message") and message.message_id not in self._seen_messages:
            self._seen_messages.add(message.message_id)
            text = parts_text(message.parts)
            if text:
                self.printer.line(text)
                self._current_artifact = None

    def _artifact(self, artifact: pb.Artifact, *, append: bool) -> None:
        self._seen_artifacts.add(artifact.artifact_id)
        inline = append and artifact.artifact_id == self._current_artifact
        if not inline:
            self.printer.end_line()
        for part in artifact.parts:
            text = describe_part(part)
            if part.WhichOneof("content") == "text":
                self.printer.write(text)
            else:
                self.printer.line(text)
        self._current_artifact = artifact.artifact_id

    def finish(self) -> None:
        self.printer.end_line()
        if self.task_id:
            self.printer.line(task_summary(self.task_id, self.state, self.context_id))


# --- the verbs ----------------------------------------------------------------------------


class UsageError(Exception):
    """The request cannot be built from the arguments (exit status 2)."""


class _Call:
    """What every verb needs: its arguments, the output, and a connection on demand."""

    def __init__(self, args: argparse.Namespace, key: str | None, printer: Printer) -> None:
        self.args = args
        self.key = key
        self.printer = printer

    def connect(self) -> Awaitable[RemoteService]:
        return connect(
            self.args.url,
            key=self.key,
            transport=self.args.transport,
            timeout=self.args.timeout,
            extended_card=False,  # one call needs no extended card: save the round trip
        )

    async def waiting(self, call: Awaitable[Any], label: str) -> Any:
        self.printer.progress.show(label)
        try:
            return await call
        finally:
            self.printer.progress.hide()

    async def stream(self, events: AsyncGenerator[pb.StreamResponse, None]) -> None:
        view = StreamView(self.printer)
        self.printer.progress.show("waiting for the agent...")
        async with contextlib.aclosing(events):
            async for event in events:
                if self.printer.as_json:
                    self.printer.proto(event)
                else:
                    view.event(event)
        self.printer.progress.hide()
        if not self.printer.as_json:
            view.finish()


async def _card(call: _Call) -> None:
    args = call.args
    card = await call.waiting(
        resolve_card(args.url, key=call.key, transport=args.transport, timeout=args.timeout),
        "fetching the card...",
    )
    if call.printer.as_json:
        call.printer.proto(card)
    else:
        call.printer.card(card)


async def _send(call: _Call) -> None:
    args = call.args
    try:
        request = send_request(
            args.text,
            files=args.file or (),
            context_id=args.context_id,
            task_id=args.task_id,
            return_immediately=args.return_immediately,
        )
    except (ValueError, OSError) as exc:  # empty message, unreadable or too large file
        raise UsageError(str(exc)) from None
    async with await call.connect() as agent:
        if args.stream:
            await call.stream(agent.send_streaming_message(request))
            return
        reply: pb.SendMessageResponse = await call.waiting(
            agent.send_message(request), "waiting for the agent..."
        )
    if call.printer.as_json:
        call.printer.proto(reply)
    elif reply.WhichOneof("payload") == "message":
        call.printer.message(reply.message)
    else:
        call.printer.task(reply.task)


async def _get(call: _Call) -> None:
    args = call.args
    request = pb.GetTaskRequest(id=args.task_id)
    if args.history_length is not None:
        request.history_length = args.history_length
    async with await call.connect() as agent:
        task: pb.Task = await call.waiting(agent.get_task(request), "fetching the task...")
    if call.printer.as_json:
        call.printer.proto(task)
    else:
        call.printer.task(task, history=True)


async def _list(call: _Call) -> None:
    args = call.args
    request = pb.ListTasksRequest(context_id=args.context_id, page_token=args.page_token)
    if args.status is not None:
        request.status = args.status
    if args.page_size is not None:
        request.page_size = args.page_size
    async with await call.connect() as agent:
        reply: pb.ListTasksResponse = await call.waiting(
            agent.list_tasks(request), "listing tasks..."
        )
    if call.printer.as_json:
        call.printer.proto(reply)
    else:
        call.printer.listing(reply)


async def _cancel(call: _Call) -> None:
    async with await call.connect() as agent:
        task: pb.Task = await call.waiting(
            agent.cancel_task(pb.CancelTaskRequest(id=call.args.task_id)), "canceling..."
        )
    if call.printer.as_json:
        call.printer.proto(task)
    else:
        call.printer.line(task_summary(task.id, task.status.state, task.context_id))


async def _subscribe(call: _Call) -> None:
    async with await call.connect() as agent:
        await call.stream(agent.subscribe_to_task(pb.SubscribeToTaskRequest(id=call.args.task_id)))


_HANDLERS: dict[str, Callable[[_Call], Awaitable[None]]] = {
    "card": _card,
    "send": _send,
    "get": _get,
    "list": _list,
    "cancel": _cancel,
    "subscribe": _subscribe,
}


# --- running ------------------------------------------------------------------------------


def exit_code(error: A2AError) -> int:
    """The exit status for an error a verb ended with (see :data:`EXIT_CODES_HELP`)."""
    if isinstance(error, (AuthRejected, UnauthenticatedError, PermissionDeniedError)):
        return EXIT_AUTH
    if isinstance(error, (Unreachable, Timeout)):
        return EXIT_UNREACHABLE
    return EXIT_A2A_ERROR


def _explain(error: A2AError) -> str:
    if isinstance(error, (Unreachable, Timeout, AuthRejected)):
        return error.message
    spec = error.spec
    return f"{spec.reason} ({spec.jsonrpc_code}): {error.message}"


async def _run(args: argparse.Namespace, key: str | None, err: TextIO) -> int:
    redact = Redactor([key])
    async with Progress(err, enabled=err.isatty() and not args.json) as progress:
        call = _Call(args, key, Printer(sys.stdout, progress, as_json=args.json))
        try:
            await _HANDLERS[args.verb](call)
        except A2AError as exc:
            progress.hide()
            call.printer.end_line()
            shown = _CONTROL.sub("\ufffd", redact(_explain(exc)))
            print(f"a2a-gateway {args.verb}: {shown}", file=err)
            return exit_code(exc)
        except UsageError as exc:
            progress.hide()
            print(f"a2a-gateway {args.verb}: {redact(str(exc))}", file=err)
            return EXIT_USAGE
    return EXIT_OK


def run_verb(args: argparse.Namespace) -> int:
    """Run a client verb parsed by :func:`add_verbs`; returns the exit status."""
    key = args.key or os.environ.get(KEY_ENV) or None
    if key:
        register_secret(key)
    setup_logging("warning")
    try:
        return asyncio.run(_run(args, key, sys.stderr))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


__all__ = [
    "EXIT_A2A_ERROR",
    "EXIT_AUTH",
    "EXIT_CODES_HELP",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "KEY_ENV",
    "VERBS",
    "add_verbs",
    "exit_code",
    "run_verb",
    "state_name",
    "task_state",
]
