"""The verbs that call agents: ``card``, ``send``, ``get``, ``list``, ``cancel``, ``subscribe``.

Each verb is one :class:`~a2a_gateway.client.RemoteService` call. Output is for people by
default (streamed text printed as it arrives, a progress indicator on stderr while a task
waits, only when stderr is a terminal) and ProtoJSON with ``--json`` (one object per line;
streams print one line per event). Errors go to stderr; the exit status tells scripts
what happened (:data:`EXIT_CODES_HELP`). Keys never reach the output: the client redacts
them from every error text, and they are only ever read from ``--key`` or
``A2A_GATEWAY_KEY``; a signing secret from ``--signing-secret`` or
``A2A_GATEWAY_SIGNING_SECRET``.

While a task runs, its id is printed on stderr as soon as the agent names it; Ctrl-C or
``--timeout`` then say how to follow the task (``subscribe``) or stop it (``cancel``),
or, with ``--cancel-on-interrupt``, cancel it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import mimetypes
import os
import re
import shlex
import signal
import sys
import threading
import urllib.parse
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

import orjson
from google.protobuf.message import Message
from joserfc.jwk import KeySet

from a2a_gateway.client import (
    AuthRejected,
    ClientAuth,
    RemoteService,
    Timeout,
    Unreachable,
    send_request,
)
from a2a_gateway.client.cards import fetch_card_value
from a2a_gateway.client.http_calls import new_http_client
from a2a_gateway.client.messages import INTERRUPTED_STATES, TERMINAL_STATES
from a2a_gateway.client.resumable import resumable_stream
from a2a_gateway.client.transport import DEFAULT_TIMEOUT
from a2a_gateway.client.wire_log import is_credential_header
from a2a_gateway.local.redaction import Redactor, register_secret
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.card_rules import card_problems
from a2a_gateway.protocol.card_signature import trusted_keys
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import A2AError, PermissionDeniedError, UnauthenticatedError
from a2a_gateway.protocol.json_schemas import ASK_USER_TAG, is_ask_user
from lf.a2a.v1 import a2a_pb2 as pb

from .logs import setup_logging
from .saving import save_file
from .targets import CallExtras, Target, agent_card, open_agent, parse_target

EXIT_OK = 0
EXIT_A2A_ERROR = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_UNREACHABLE = 4
EXIT_TASK_STATE = 5
EXIT_CARD_INVALID = 6
EXIT_INTERRUPTED = 130

KEY_ENV = "A2A_GATEWAY_KEY"
PASSWORD_ENV = "A2A_GATEWAY_PASSWORD"
CLIENT_SECRET_ENV = "A2A_GATEWAY_CLIENT_SECRET"
SIGNING_ENV = "A2A_GATEWAY_SIGNING_SECRET"
VERBS = ("card", "send", "get", "list", "cancel", "subscribe")

EXIT_CODES_HELP = f"""\
exit status:
  {EXIT_OK}  success (the agent answered; a task's state is in the output)
  {EXIT_A2A_ERROR}  the agent returned an A2A error, or its card is missing or unusable
  {EXIT_USAGE}  usage error (bad option, not a URL, invalid JSON, unreadable file)
  {EXIT_AUTH}  authentication failed (key missing or rejected)
  {EXIT_UNREACHABLE}  agent unreachable, or no answer within --timeout
  {EXIT_TASK_STATE}  the task ended in a state --fail-on-state names (send, subscribe)
  {EXIT_CARD_INVALID}  card --validate found problems in the card
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); the task's id and how to follow it are printed

The key comes from --key or the {KEY_ENV} environment variable (keeps it out of
shell history); a signing secret from --signing-secret or {SIGNING_ENV}.
URL: the agent's base URL, its card URL, an interface URL its card lists, or
host:port (http assumed; gRPC with --transport grpc)."""

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


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def header(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (``NAME: VALUE`` too) as a service parameter."""
    name, sep, value = text.partition("=")
    if not sep:
        name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not _HEADER_NAME.match(name):
        # The value is never echoed: it may be a credential.
        raise argparse.ArgumentTypeError("expected NAME=VALUE with an HTTP header name")
    if any(c in value for c in "\r\n\0"):
        raise argparse.ArgumentTypeError(f"the value of {name} holds a line break")
    return name, value.strip()


_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since(text: str) -> datetime:
    """``--since``: an RFC 3339 time, or an age (``10m``) counted back from now."""
    age = _AGE.match(text.strip().lower())
    if age:
        return datetime.now(UTC) - timedelta(seconds=float(age[1]) * _AGE_SECONDS[age[2]])
    try:
        when = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text[:40]!r} (an RFC 3339 time such as 2026-12-01T12:00:00Z,"
            " or an age such as 10m)"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"say the time zone of {text[:40]!r} (Z or +01:00)")
    return when


def task_states(text: str) -> frozenset[pb.TaskState.ValueType]:
    """``failed,rejected`` as a set of TaskStates."""
    return frozenset(task_state(word) for word in text.split(",") if word.strip())


def state_name(state: pb.TaskState.ValueType) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required``."""
    try:
        name = pb.TaskState.Name(state)
    except ValueError:
        return f"state-{int(state)}"
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        metavar="URL",
        help="the agent's base URL, card URL, an interface URL, or host:port",
    )
    parser.add_argument("--key", help=f"API key for the agent (default: ${KEY_ENV}); never printed")
    parser.add_argument(
        "--signing-secret",
        help=f"sign each request with this secret (default: ${SIGNING_ENV}); never printed",
    )
    parser.add_argument(
        "--basic-user",
        metavar="USER",
        help=f"HTTP Basic as USER; the password from ${PASSWORD_ENV} (never a flag)",
    )
    parser.add_argument(
        "--client-id",
        help=f"OAuth 2.0 client credentials: our client id; the secret from ${CLIENT_SECRET_ENV}",
    )
    parser.add_argument(
        "--token-url", help="with --client-id: the token URL (default: the card's OAuth2 scheme)"
    )
    parser.add_argument(
        "--token-command",
        metavar="CMD",
        help="run CMD for a bearer token (its first line), e.g. an OIDC ID token",
    )
    parser.add_argument("--client-cert", metavar="PEM", help="our TLS client certificate (mTLS)")
    parser.add_argument("--client-key", metavar="PEM", help="the private key of --client-cert")
    parser.add_argument("--ca-cert", metavar="PEM", help="trust this CA for the agent's TLS")
    parser.add_argument(
        "--verify-card",
        metavar="JWKS",
        type=Path,
        help="refuse the agent unless its card is signed by a key of this JWKS file",
    )
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
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        help="'json' is --json (the a2a-go CLI's spelling)",
    )
    parser.add_argument(
        "--header",
        "--svc-param",
        dest="headers",
        action="append",
        type=header,
        metavar="NAME=VALUE",
        help="send this service parameter (an HTTP header, gRPC metadata) on every call;"
        " repeatable",
    )
    parser.add_argument(
        "--tenant", help="the tenant of every request (default: the card interface's)"
    )
    parser.add_argument(
        "--extension",
        dest="extensions",
        action="append",
        metavar="URI",
        help="ask for this extension (sent in A2A-Extensions); repeatable",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="write each call and answer on stderr (credentials shown as ***)",
    )


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

    card = verb("card", "show an agent's card (the extended card when a key is given)")
    card.add_argument(
        "--validate",
        action="store_true",
        help="check the public card against the A2A 1.0 schema and the spec's rules; each"
        f" problem on its own line, exit {EXIT_CARD_INVALID} if there is any",
    )

    send = verb("send", "send a message to an agent and print its answer")
    send.add_argument(
        "text",
        metavar="TEXT",
        nargs="?",
        default=None,
        help="the message text; '-' reads it from stdin (optional with other parts)",
    )
    send.add_argument("--stream", action="store_true", help="print events as they arrive")
    send.add_argument(
        "--data", action="append", metavar="JSON", help="add a data part (repeatable)"
    )
    send.add_argument(
        "--file-url", action="append", metavar="URL", help="add a file part by URL (repeatable)"
    )
    send.add_argument("--metadata", metavar="JSON", help="the message's metadata (an object)")
    send.add_argument(
        "--request",
        metavar="FILE",
        help="send this ProtoJSON SendMessageRequest as it is ('-' reads stdin)",
    )
    _after_send_options(send)
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
        "--immediate",
        action="store_true",
        help="do not wait for the task to finish; print it as created",
    )
    send.add_argument(
        "--message",
        dest="message_json",
        metavar="JSON",
        help="the whole Message as ProtoJSON (role and messageId filled in when missing)",
    )

    get = verb("get", "show a task")
    get.add_argument("task_id", metavar="TASK_ID")
    get.add_argument(
        "--history-length",
        "--history",
        type=_non_negative_int,
        metavar="N",
        help="include at most N recent messages (0: none)",
    )

    listing = verb("list", "list your tasks, newest first")
    listing.add_argument("--context-id", default="", help="only tasks of this conversation")
    listing.add_argument(
        "--status", type=task_state, help="only tasks in this state (e.g. completed)"
    )
    listing.add_argument(
        "--since",
        type=since,
        metavar="WHEN",
        help="only tasks whose status changed since WHEN: an RFC 3339 time"
        " (2026-12-01T12:00:00Z) or an age (90s, 10m, 2h, 1d)",
    )
    listing.add_argument(
        "--history",
        type=_non_negative_int,
        metavar="N",
        help="include each task's N most recent messages (0: none)",
    )
    listing.add_argument(
        "--with-artifacts", action="store_true", help="include each task's artifacts"
    )
    listing.add_argument(
        "--page-size", "--limit", type=_non_negative_int, help="tasks per page (1-100)"
    )
    listing.add_argument("--page-token", default="", help="the page to show (from a list)")

    cancel = verb("cancel", "cancel a task")
    cancel.add_argument("task_id", metavar="TASK_ID")

    subscribe = verb("subscribe", "follow a task's events until it ends")
    subscribe.add_argument("task_id", metavar="TASK_ID")
    _after_send_options(subscribe)


def _after_send_options(parser: argparse.ArgumentParser) -> None:
    """What ``send`` and ``subscribe`` share: where files go and what Ctrl-C does."""
    parser.add_argument(
        "--save-dir", type=Path, metavar="DIR", help="save the files the agent returns in DIR"
    )
    parser.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="on Ctrl-C cancel the task (default: leave it running and say how to follow it)",
    )
    parser.add_argument(
        "--fail-on-state",
        type=task_states,
        default=frozenset(),
        metavar="STATES",
        help=f"exit {EXIT_TASK_STATE} when the task ends in one of these comma-separated"
        " states (e.g. failed,rejected,canceled)",
    )


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
        data = orjson.dumps(codec.to_dict(part)["data"]).decode()
        if is_ask_user(part):  # a question's answer schema: answer with --data
            return f"[answer schema, {ASK_USER_TAG}: answer with --data JSON] {data}"
        return "[data] " + data
    return "[empty part]"


def parts_text(parts: Iterable[pb.Part]) -> str:
    return "\n".join(describe_part(p) for p in parts)


def task_summary(task_id: str, state: pb.TaskState.ValueType, context_id: str) -> str:
    context = f" (context {context_id})" if context_id else ""
    return f"task {task_id}: {state_name(state)}{context}"


class Printer:
    """Writes one verb's results on stdout, for people or (``--json``) for scripts."""

    def __init__(
        self,
        out: TextIO,
        progress: Progress,
        *,
        as_json: bool,
        err: TextIO | None = None,
        save_dir: Path | None = None,
    ) -> None:
        self.out = out
        self.progress = progress
        self.as_json = as_json
        self.err = err or sys.stderr
        self.save_dir = save_dir
        self.at_line_start = True

    def note(self, text: str) -> None:
        """One line on stderr (the spinner erased first; stdout's line ended first)."""
        self.progress.hide()
        if not self.at_line_start:
            self.end_line()
        self.err.write(_CONTROL.sub("\ufffd", text) + "\n")
        self.err.flush()

    def aside(self, text: str) -> None:
        """A line on stderr in the middle of streamed text: stdout's line is ended
        first only on a terminal (piped, the text stays as the agent sent it)."""
        if self.out.isatty():
            self.note(text)
            return
        self.progress.hide()
        self.err.write(_CONTROL.sub("\ufffd", text) + "\n")
        self.err.flush()

    def save(self, part: pb.Part) -> None:
        """With ``--save-dir``: write a file part's bytes there (names made safe)."""
        if self.save_dir is None or part.WhichOneof("content") != "raw":
            return
        try:
            path = save_file(self.save_dir, part.filename, part.raw)
        except OSError as exc:
            self.note(f"cannot save {part.filename or 'a file'}: {exc.strerror or exc}")
            return
        self.note(f"saved {path}")

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
                self.line(_history_line(item))
        body = "\n".join(parts_text(a.parts) for a in task.artifacts)
        for artifact in task.artifacts:
            for part in artifact.parts:
                self.save(part)
        if body:
            self.line(body)
        # The status message says why a task failed, was rejected or waits: always shown.
        if task.status.HasField("message"):
            said = parts_text(task.status.message.parts)
            if said and not (history and task.history and _same(task.history[-1], task.status)):
                self.line(said)
        self.line(task_summary(task.id, task.status.state, task.context_id))

    def message(self, message: pb.Message) -> None:
        self.line(parts_text(message.parts))

    def listing(self, reply: pb.ListTasksResponse, *, history: bool = False) -> None:
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
            for item in task.history if history else ():
                self.line(f"  {_history_line(item)}")
            for artifact in task.artifacts:
                self.line(f"  [artifact] {parts_text(artifact.parts)}")
        self.line(f"{len(reply.tasks)} of {reply.total_size} task(s)")
        if reply.next_page_token:
            self.line(f"next page: --page-token {reply.next_page_token}")


def _history_line(item: pb.Message) -> str:
    role = "agent" if item.role == pb.ROLE_AGENT else "user"
    return f"[{role}] {parts_text(item.parts)}"


def _same(item: pb.Message, status: pb.TaskStatus) -> bool:
    """Whether the history's last message is the status message (already printed)."""
    return bool(item.message_id) and item.message_id == status.message.message_id


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

    def __init__(
        self, printer: Printer, on_task: Callable[[str, str, int], None] | None = None
    ) -> None:
        self.printer = printer
        self.on_task = on_task
        self.task_id = ""
        self.context_id = ""
        self.state: pb.TaskState.ValueType = pb.TASK_STATE_UNSPECIFIED
        self._seen_artifacts: set[str] = set()
        self._current_artifact: str | None = None
        self._seen_messages: set[str] = set()

    def event_state(self, event: pb.StreamResponse) -> None:
        """Follow the task's id and state only (``--json`` prints the events itself)."""
        kind = event.WhichOneof("payload")
        if kind == "task" and self.on_task is not None:
            self.on_task(event.task.id, event.task.context_id, event.task.status.state)
        elif kind == "status_update" and self.on_task is not None:
            update = event.status_update
            self.on_task(update.task_id, update.context_id, update.status.state)

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
        if self.on_task is not None:
            self.on_task(self.task_id, self.context_id, self.state)
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
            self.printer.save(part)
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


class CardInvalid(Exception):
    """``card --validate`` found problems (already printed; exit status 6)."""


class _Call:
    """What every verb needs: its arguments, the output, a connection on demand, and the
    task it is about (for the hints on Ctrl-C and timeouts)."""

    def __init__(
        self,
        args: argparse.Namespace,
        key: str | None,
        printer: Printer,
        *,
        signing_secret: str | None = None,
    ) -> None:
        self.args = args
        self.key = key
        self.signing_secret = signing_secret
        self.printer = printer
        self.target: Target = parse_target(args.url, args.transport)
        self.task_id: str = getattr(args, "task_id", "") if args.verb == "subscribe" else ""
        self.context_id = ""
        self.state: pb.TaskState.ValueType = pb.TASK_STATE_UNSPECIFIED
        self._announced = bool(self.task_id)

    def connect(self) -> Awaitable[RemoteService]:
        return open_agent(
            self.target,
            key=self.key,
            signing_secret=self.signing_secret,
            transport=self.args.transport,
            timeout=self.args.timeout,
            auth=getattr(self.args, "auth", None),
            card_keys=getattr(self.args, "card_keys", None),
            extras=self.extras,
        )

    @property
    def extras(self) -> CallExtras:
        """The verb's ``--header``, ``--tenant``, ``--extension`` and ``-v``."""
        args = self.args
        return CallExtras(
            headers=tuple(args.headers or ()),
            tenant=args.tenant,
            extensions=tuple(args.extensions or ()),
            wire=self.printer.note if args.verbose else None,
        )

    def track(self, task_id: str, context_id: str, state: int) -> None:
        """Remember the task; the first time its id is known, say it on stderr."""
        self.task_id = task_id or self.task_id
        self.context_id = context_id or self.context_id
        self.state = pb.TaskState.ValueType(state)
        if self.task_id and not self._announced:
            self._announced = True
            if not self.printer.as_json:
                self.printer.note(f"task {self.task_id}")

    @property
    def task_running(self) -> bool:
        return bool(self.task_id) and self.state not in TERMINAL_STATES

    def follow_hints(self) -> list[str]:
        """The commands that follow or stop the task (with the same URL and transport)."""
        url = shlex.quote(self.args.url)
        forced = f" --transport {self.args.transport}" if self.args.transport else ""
        task = shlex.quote(self.task_id)
        return [
            f"  follow it: a2a-gateway subscribe {url} {task}{forced}",
            f"  stop it:   a2a-gateway cancel {url} {task}{forced}",
        ]

    async def waiting(self, call: Awaitable[Any], label: str) -> Any:
        self.printer.progress.show(label)
        try:
            return await call
        finally:
            self.printer.progress.hide()

    def resumable(
        self, agent: RemoteService, request: pb.SendMessageRequest | pb.SubscribeToTaskRequest
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        """The stream of ``request`` (SendStreamingMessage or SubscribeToTask), resumed
        when its connection drops (a line on stderr says so each time; see
        client/resumable.py)."""

        def resumed(event_id: str, why: A2AError | None) -> None:
            cause = f" ({why.message})" if why is not None else ""
            self.printer.aside(f"stream resumed after event {event_id}{cause}")

        def first(context: CallContext) -> AsyncGenerator[pb.StreamResponse, None]:
            if isinstance(request, pb.SendMessageRequest):
                return agent.send_streaming_message(request, context)
            return agent.subscribe_to_task(request, context)

        return resumable_stream(
            first,
            agent.subscribe_to_task,
            until_interrupted=isinstance(request, pb.SendMessageRequest),
            on_resume=resumed,
        )

    async def stream(self, events: AsyncGenerator[pb.StreamResponse, None]) -> None:
        view = StreamView(self.printer, on_task=self.track)
        self.printer.progress.show("waiting for the agent...")
        async with contextlib.aclosing(events):
            async for event in events:
                if self.printer.as_json:
                    view.event_state(event)
                    self.printer.proto(event)
                    self._save_event(event)
                else:
                    view.event(event)
        self.printer.progress.hide()
        if not self.printer.as_json:
            view.finish()

    def _save_event(self, event: pb.StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        artifacts: Iterable[pb.Artifact] = ()
        if kind == "task":
            artifacts = event.task.artifacts
        elif kind == "artifact_update":
            artifacts = (event.artifact_update.artifact,)
        for artifact in artifacts:
            for part in artifact.parts:
                self.printer.save(part)


async def _validate_card(call: _Call) -> None:
    """``card --validate``: the public card as served, checked (:mod:`card_rules`)."""
    args = call.args
    target = call.target
    if target.url:
        async with new_http_client(args.timeout) as http:
            source, value = await call.waiting(
                fetch_card_value(target.url, http=http, timeout=args.timeout),
                "fetching the card...",
            )
    else:  # a gRPC agent without a card over HTTP: the one GetExtendedAgentCard answers
        async with await call.connect() as agent:
            card = await call.waiting(agent.get_extended_agent_card(), "fetching the card...")
        source, value = f"grpc://{target.grpc}", codec.to_dict(card)
    problems = card_problems(value)
    if call.printer.as_json:
        call.printer.write(
            orjson.dumps({"card": source, "valid": not problems, "problems": problems}).decode()
            + "\n"
        )
    else:
        for problem in problems:
            call.printer.line(problem)
        verdict = f"{len(problems)} problem(s)" if problems else "valid (A2A 1.0)"
        call.printer.line(f"{source}: {verdict}")
    if problems:
        raise CardInvalid(len(problems))


async def _card(call: _Call) -> None:
    args = call.args
    if args.validate:
        await _validate_card(call)
        return
    card = await call.waiting(
        agent_card(
            call.target,
            key=call.key,
            signing_secret=call.signing_secret,
            transport=args.transport,
            timeout=args.timeout,
            card_keys=getattr(args, "card_keys", None),
            extras=call.extras,
        ),
        "fetching the card...",
    )
    if call.printer.as_json:
        call.printer.proto(card)
    else:
        call.printer.card(card)


def _json_arg(text: str, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc}") from None


def _extra_parts(args: argparse.Namespace) -> list[pb.Part]:
    parts: list[pb.Part] = []
    for item in args.data or ():
        try:
            parts.append(codec.parse(pb.Part, {"data": _json_arg(item, "--data")}))
        except A2AError as exc:
            raise UsageError(f"--data: {exc.message}") from None
    for url in args.file_url or ():
        where = urllib.parse.urlsplit(url)
        if where.scheme not in ("http", "https") or not where.netloc:
            raise UsageError(f"--file-url must be an http(s) URL: {url[:80]!r}")
        name = urllib.parse.unquote(where.path.rsplit("/", 1)[-1])
        media, _ = mimetypes.guess_type(name)
        parts.append(pb.Part(url=url, filename=name, media_type=media or ""))
    return parts


def _read_stdin(what: str) -> str:
    if sys.stdin is None or sys.stdin.closed:
        raise UsageError(f"{what}: no standard input")
    return sys.stdin.read()


def _message_flags(args: argparse.Namespace) -> list[tuple[str, bool]]:
    """The flags that build a message, and whether each was given."""
    return [
        ("TEXT", args.text is not None),
        ("--file", bool(args.file)),
        ("--data", bool(args.data)),
        ("--file-url", bool(args.file_url)),
        ("--metadata", args.metadata is not None),
        ("--context-id", bool(args.context_id)),
        ("--task-id", bool(args.task_id)),
    ]


def _whole_request(args: argparse.Namespace) -> pb.SendMessageRequest:
    """``--request FILE|-``: a ProtoJSON SendMessageRequest, sent as it is."""
    taken = [flag for flag, given in _message_flags(args) if given]
    if args.message_json is not None:
        taken.append("--message")
    if taken:
        raise UsageError(f"--request carries the whole message: drop {', '.join(taken)}")
    try:
        raw = _read_stdin("--request -") if args.request == "-" else Path(args.request).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --request {args.request}: {exc}") from None
    try:
        request = codec.parse(pb.SendMessageRequest, _json_arg(raw, "--request"), path="request")
    except A2AError as exc:
        raise UsageError(f"--request: {exc.message}") from None
    if args.return_immediately:
        request.configuration.return_immediately = True
    return request


def _message_request(args: argparse.Namespace) -> pb.SendMessageRequest:
    """``--message JSON``: a whole Message (the a2a-go CLI's ``send --json``)."""
    taken = [flag for flag, given in _message_flags(args) if given]
    if taken:
        raise UsageError(f"--message carries the whole message: drop {', '.join(taken)}")
    value = _json_arg(args.message_json, "--message")
    if not isinstance(value, dict):
        raise UsageError("--message must be a JSON object (a Message)")
    value.setdefault("role", "ROLE_USER")
    value.setdefault("messageId", str(uuid.uuid4()))
    try:
        message = codec.parse(pb.Message, value, path="message")
    except A2AError as exc:
        raise UsageError(f"--message: {exc.message}") from None
    request = pb.SendMessageRequest(message=message)
    if args.return_immediately:
        request.configuration.return_immediately = True
    return request


def _looks_like_a_message(text: str | None) -> bool:
    """A TEXT that is a JSON Message: the a2a-go CLI's ``send URL --json '{...}'``."""
    if not text or not text.lstrip().startswith("{"):
        return False
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and ("parts" in value or "role" in value)


def build_send_request(args: argparse.Namespace) -> pb.SendMessageRequest:
    """The request ``send`` sends, from its arguments (UsageError when it cannot)."""
    if args.request is not None:
        return _whole_request(args)
    if args.message_json is not None:
        return _message_request(args)
    if args.json and _looks_like_a_message(args.text):
        raise UsageError(
            "TEXT is a JSON Message, and --json asks for JSON output here:"
            " send a whole Message with --message '{...}'"
        )
    text = args.text or ""
    if text == "-":
        text = _read_stdin("TEXT -").rstrip("\n")
        if not text:
            raise UsageError("TEXT -: standard input was empty")
    try:
        request = send_request(
            text,
            files=args.file or (),
            context_id=args.context_id,
            task_id=args.task_id,
            return_immediately=args.return_immediately,
            extra_parts=_extra_parts(args),
        )
    except (ValueError, OSError) as exc:  # empty message, unreadable or too large file
        raise UsageError(str(exc)) from None
    if args.metadata is not None:
        metadata = _json_arg(args.metadata, "--metadata")
        if not isinstance(metadata, dict):
            raise UsageError("--metadata must be a JSON object")
        request.message.metadata.update(metadata)
    return request


async def _send(call: _Call) -> None:
    args = call.args
    request = build_send_request(args)
    async with await call.connect() as agent:
        if args.stream:
            await call.stream(call.resumable(agent, request))
            return
        human = not call.printer.as_json and not request.configuration.return_immediately
        if human and agent.card.capabilities.streaming:
            # Followed as a stream, so the task id is known (and said) at once, and
            # Ctrl-C or --timeout can say how to follow or stop the task; still bounded
            # by --timeout as a whole, like a blocking send.
            try:
                async with asyncio.timeout(args.timeout):
                    await call.stream(call.resumable(agent, request))
            except TimeoutError:
                raise Timeout(f"{args.url} did not answer within {args.timeout:g} s") from None
            return
        reply: pb.SendMessageResponse = await call.waiting(
            agent.send_message(request), "waiting for the agent..."
        )
    if reply.WhichOneof("payload") == "task":
        call.track(reply.task.id, reply.task.context_id, reply.task.status.state)
    if call.printer.as_json:
        call.printer.proto(reply)
        if reply.WhichOneof("payload") == "task":
            for artifact in reply.task.artifacts:
                for part in artifact.parts:
                    call.printer.save(part)
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
    if args.since is not None:
        request.status_timestamp_after.FromDatetime(args.since)
    if args.history is not None:
        request.history_length = args.history
    if args.with_artifacts:
        request.include_artifacts = True
    async with await call.connect() as agent:
        reply: pb.ListTasksResponse = await call.waiting(
            agent.list_tasks(request), "listing tasks..."
        )
    if call.printer.as_json:
        call.printer.proto(reply)
    else:
        call.printer.listing(reply, history=args.history is not None)


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
        request = pb.SubscribeToTaskRequest(id=call.args.task_id)
        await call.stream(call.resumable(agent, request))


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


async def _run(
    args: argparse.Namespace, key: str | None, err: TextIO, signing_secret: str | None = None
) -> int:
    redact = Redactor(getattr(args, "secrets", None) or [key, signing_secret])
    async with Progress(err, enabled=err.isatty() and not args.json) as progress:
        printer = Printer(
            sys.stdout,
            progress,
            as_json=args.json,
            err=err,
            save_dir=getattr(args, "save_dir", None),
        )
        try:
            call = _Call(args, key, printer, signing_secret=signing_secret)
        except ValueError as exc:  # the URL is not one
            print(f"a2a-gateway {args.verb}: {redact(str(exc))}", file=err)
            return EXIT_USAGE
        if call.target.assumed_http:
            printer.note(f"a2a-gateway {args.verb}: no scheme given, using {call.target.url}")
        loop = asyncio.get_running_loop()
        work = asyncio.ensure_future(_HANDLERS[args.verb](call))
        interrupted = False

        def on_interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            work.cancel()
            # A second Ctrl-C is Python's own KeyboardInterrupt again (exit 130 at once).
            loop.remove_signal_handler(signal.SIGINT)

        # Signals reach the main thread only (a verb run in a worker thread, as the
        # tests run it in-process, leaves Ctrl-C to its caller).
        handles_sigint = threading.current_thread() is threading.main_thread()
        if handles_sigint:
            loop.add_signal_handler(signal.SIGINT, on_interrupt)
        try:
            await work
        except asyncio.CancelledError:
            if not interrupted:
                raise
            progress.hide()
            printer.end_line()
            return await _interrupted(call, redact)
        except A2AError as exc:
            progress.hide()
            printer.end_line()
            shown = _CONTROL.sub("\ufffd", redact(_explain(exc)))
            print(f"a2a-gateway {args.verb}: {shown}", file=err)
            if isinstance(exc, Timeout) and call.task_running:
                print(f"task {call.task_id} may still be running on the agent:", file=err)
                print("\n".join(call.follow_hints()), file=err)
            return exit_code(exc)
        except UsageError as exc:
            progress.hide()
            print(f"a2a-gateway {args.verb}: {redact(str(exc))}", file=err)
            return EXIT_USAGE
        except CardInvalid:
            return EXIT_CARD_INVALID
        finally:
            if handles_sigint:
                loop.remove_signal_handler(signal.SIGINT)
        failing: frozenset[int] = getattr(args, "fail_on_state", frozenset())
        if call.task_id and call.state in failing:
            print(
                f"a2a-gateway {args.verb}: task {call.task_id} ended {state_name(call.state)}"
                " (--fail-on-state)",
                file=err,
            )
            return EXIT_TASK_STATE
    return EXIT_OK


async def _interrupted(call: _Call, redact: Redactor) -> int:
    """Ctrl-C: say how to follow or stop the task, or (``--cancel-on-interrupt``) stop it."""
    err = call.printer.err
    verb = call.args.verb
    if not call.task_id:
        told = " before the agent named the task" if verb == "send" else ""
        print(f"a2a-gateway {verb}: interrupted{told}", file=err)
        return EXIT_INTERRUPTED
    if not call.task_running:
        return EXIT_INTERRUPTED
    if getattr(call.args, "cancel_on_interrupt", False):
        print(f"a2a-gateway {verb}: interrupted; canceling task {call.task_id}", file=err)
        try:
            async with await call.connect() as agent:
                task = await agent.cancel_task(pb.CancelTaskRequest(id=call.task_id))
        except A2AError as exc:
            shown = _CONTROL.sub("\ufffd", redact(_explain(exc)))
            print(f"a2a-gateway {verb}: the task could not be canceled: {shown}", file=err)
            print("\n".join(call.follow_hints()), file=err)
            return EXIT_INTERRUPTED
        print(task_summary(task.id, task.status.state, task.context_id), file=err)
        return EXIT_INTERRUPTED
    print(
        f"a2a-gateway {verb}: interrupted; task {call.task_id} goes on running on the agent",
        file=err,
    )
    print("\n".join(call.follow_hints()), file=err)
    return EXIT_INTERRUPTED


def card_keys(path: Path | None) -> KeySet | None:
    """The keys ``--verify-card`` trusts (OSError or ValueError saying why not)."""
    if path is None:
        return None
    try:
        value = json.loads(path.read_bytes())
    except ValueError:
        raise ValueError("not JSON") from None
    return trusted_keys(value)


def client_auth(args: argparse.Namespace) -> ClientAuth | None:
    """Credentials beyond a key from the flags (secrets only from the environment)."""
    auth = ClientAuth(
        basic_user=args.basic_user or "",
        basic_password=os.environ.get(PASSWORD_ENV, "") if args.basic_user else "",
        client_id=args.client_id or "",
        client_secret=os.environ.get(CLIENT_SECRET_ENV, "") if args.client_id else "",
        token_url=args.token_url or "",
        token_command=args.token_command or "",
        client_cert=args.client_cert or "",
        client_key=args.client_key or "",
        ca_cert=args.ca_cert or "",
    )
    used = auth.basic_user or auth.client_id or auth.token_command or auth.has_tls
    return auth if used else None


def run_verb(args: argparse.Namespace) -> int:
    """Run a client verb parsed by :func:`add_verbs`; returns the exit status."""
    args.json = args.json or args.output == "json"
    key = args.key or os.environ.get(KEY_ENV) or None
    signing_secret = args.signing_secret or os.environ.get(SIGNING_ENV) or None
    args.auth = client_auth(args)
    try:
        args.card_keys = card_keys(args.verify_card)
    except (OSError, ValueError) as exc:
        print(f"a2a-gateway {args.verb}: --verify-card {args.verify_card}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    credential_headers = [v for n, v in args.headers or () if is_credential_header(n)]
    args.secrets = [key, signing_secret, *credential_headers]
    for secret in (*args.secrets, *(args.auth.secrets() if args.auth else ())):
        if secret:
            register_secret(secret)
    setup_logging("warning")
    try:
        return asyncio.run(_run(args, key, sys.stderr, signing_secret))
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
    "SIGNING_ENV",
    "VERBS",
    "add_verbs",
    "build_send_request",
    "exit_code",
    "run_verb",
    "state_name",
    "task_state",
]
