"""``a2a-gateway chat --workspace W``: the owner's own conversation with the assistant in
a terminal (scope ``local-owner``), with the ``a2a`` tool and the file tools.

Interactive by default: each line on stdin is a message; the answer streams to stdout.
Results of watches arrive as follow-up prompts, queued behind a running turn (never
interrupting it), and their answers print as they come. Every turn is bounded by
``--turn-timeout`` (an hour, as the server bounds an agent's run): a turn that runs
longer is stopped (its model stream closed, a remote task it was waiting on handed to a
watch) and reported failed, so whoever waits on a prompt (the owner's line, ``--message``,
a watch delivering a result) waits at most the turns queued before it.

``--message TEXT`` runs one turn and exits 0 (1 when the turn fails): kept results and
the first check of every re-armed watch come first, and watches still running stay in
pending.json for the next start.

``--public-url`` (with ``--host``/``--port``) serves the push receiver
(``POST /a2a/push/{watchId}``) so watches of agents that push are woken by them.

In a terminal the assistant may ask the owner for a secret (``request_input`` with
``secret``): a hidden prompt, the value given to the model only (never the transcript).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from opentelemetry.trace import Tracer

from a2a_gateway.agent.defaults import TURN_TIMEOUT_S
from a2a_gateway.agent.runtime import (
    Asked,
    FileReady,
    Finished,
    Runtime,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFailed,
)
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.files import workspace_tools
from a2a_gateway.agent.tools.interaction import RequestInput, SecretAsker
from a2a_gateway.client.agents_file import agents_path
from a2a_gateway.client.watches import CALL_TIMEOUT_S
from a2a_gateway.local.files import sanitize_filename, save_new_file
from a2a_gateway.protocol.tracing import traced_by
from a2a_gateway.server.tracing import Tracing, tracing_wanted

from .assistant_host import MODEL_REQUIRED
from .chat_settings import ChatSettings
from .owner_kit import OwnerKit
from .startup import StartupError

if TYPE_CHECKING:
    from .chat_tui import TerminalView

log = logging.getLogger("a2a_gateway.chat")

SCOPE = "local-owner"
#: Where files the assistant sends (send_file) land in the workspace.
OUTBOX = ("inbox", "chat")
#: The longest line read from stdin as one message (a longer one is not sent).
MAX_LINE_BYTES = 1024 * 1024
READ_CHUNK = 64 * 1024


@dataclass
class _Prompt:
    text: str
    delivered: bool  # a watch's result (a follow-up), not the owner's own line
    done: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class ChatView(Protocol):
    """Where a turn shows: plain text (``--message``, a pipe) or the terminal program
    (:mod:`.chat_tui`). The host calls these in order as the turn's events come."""

    def turn_started(self, text: str, *, delivered: bool) -> None: ...

    def text(self, delta: str) -> None: ...

    def tool_started(self, name: str, arguments: Mapping[str, Any]) -> None: ...

    def tool_finished(self, name: str, *, is_error: bool) -> None: ...

    def file_saved(self, relative: str) -> None: ...

    def finished(self) -> None: ...

    def asked(self, question: str) -> None: ...

    def failed(self, text: str) -> None: ...

    def stopped(self) -> None: ...

    def notice(self, text: str) -> None: ...


class PlainView:
    """The turn as plain text on ``out``: the answer as it streams, nothing else but
    failures, questions and saved files (what scripts and pipes have always read)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def _print(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def turn_started(self, text: str, *, delivered: bool) -> None:
        if delivered:
            self._print(f"\n{text}\n")

    def text(self, delta: str) -> None:
        self._print(delta)

    def tool_started(self, name: str, arguments: Mapping[str, Any]) -> None:
        pass

    def tool_finished(self, name: str, *, is_error: bool) -> None:
        pass

    def file_saved(self, relative: str) -> None:
        self._print(f"\n[file saved: {relative}]\n")

    def finished(self) -> None:
        self._print("\n")

    def asked(self, question: str) -> None:
        self._print(f"\n{question}\n")

    def failed(self, text: str) -> None:
        self._print(f"\n[failed: {text}]\n")

    def stopped(self) -> None:
        self._print("\n[stopped]\n")

    def notice(self, text: str) -> None:
        self._print(text)


class ChatHost:
    """One owner conversation: a queue of prompts run one turn at a time."""

    def __init__(
        self,
        runtime: Runtime,
        workspace: Path,
        tools: ToolRegistry,
        out: TextIO,
        *,
        view: ChatView | None = None,
        turn_timeout_s: float = TURN_TIMEOUT_S,
        tracer: Tracer | None = None,
        secrets: SecretAsker | None = None,
    ) -> None:
        """Turns show in ``view``, else as plain text on ``out``. With a ``tracer``
        (``--otlp-endpoint``), each turn is the root span of a trace that the model's
        calls, the tools and the agents they call add to. ``secrets`` asks the owner
        for a secret the assistant needs (the terminal's hidden prompt)."""
        self.tracer = tracer
        self.secrets = secrets
        self.runtime = runtime
        self.workspace = workspace
        self.tools = tools
        self.view: ChatView = view if view is not None else PlainView(out)
        self.turn_timeout_s = turn_timeout_s
        self.queue: asyncio.Queue[_Prompt] = asyncio.Queue()
        #: The turn running now (its own task, so that :meth:`stop_turn` can end it).
        self._running: asyncio.Task[bool] | None = None
        self._stop_asked = False

    @property
    def turn_running(self) -> bool:
        return self._running is not None and not self._running.done()

    def stop_turn(self) -> bool:
        """Stop the running turn as a timeout would (its model stream closed, a remote
        task it waits on handed to a watch); False if none runs."""
        if not self.turn_running:
            return False
        assert self._running is not None
        self._stop_asked = True
        self._running.cancel()
        return True

    async def deliver(self, scope: str, text: str) -> None:
        """The watch registry's delivery: a follow-up turn, queued behind a running
        one; returns once it ran (so the record is removed only after that)."""
        prompt = _Prompt(text, delivered=True)
        await self.queue.put(prompt)
        if not await prompt.done:
            raise RuntimeError("the follow-up turn failed")

    async def ask(self, text: str) -> bool:
        prompt = _Prompt(text, delivered=False)
        await self.queue.put(prompt)
        return await prompt.done

    async def serve(self) -> None:
        """Run queued prompts forever (cancel to stop), each within the turn bound."""
        while True:
            prompt = await self.queue.get()
            self._stop_asked = False
            self._running = asyncio.ensure_future(self._turn(prompt))
            try:
                async with asyncio.timeout(self.turn_timeout_s):
                    ok = await self._running
            except TimeoutError:
                log.warning("chat turn stopped after %g s", self.turn_timeout_s)
                self.view.failed(f"the turn took longer than {self.turn_timeout_s:g} s")
                ok = False
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._stop_asked and current is not None and not current.cancelling():
                    log.info("chat turn stopped by the owner")
                    self.view.stopped()
                    ok = False
                else:
                    self._running.cancel()
                    if not prompt.done.done():
                        prompt.done.set_result(False)
                    raise
            except Exception:
                log.exception("chat turn failed")
                ok = False
            if not prompt.done.done():
                prompt.done.set_result(ok)
            self.queue.task_done()

    async def _turn(self, prompt: _Prompt) -> bool:
        if self.tracer is None:
            return await self._run_turn(prompt)
        name = "owner follow-up" if prompt.delivered else "owner turn"
        with traced_by(self.tracer), self.tracer.start_as_current_span(name):
            return await self._run_turn(prompt)

    async def _run_turn(self, prompt: _Prompt) -> bool:
        view = self.view
        view.turn_started(prompt.text, delivered=prompt.delivered)
        events = self.runtime.run_turn(
            SCOPE, self.workspace, prompt.text, tools=self.tools, secrets=self.secrets
        )
        ok = False
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    view.text(event.text)
                elif isinstance(event, ToolStarted):
                    view.tool_started(event.name, event.arguments)
                elif isinstance(event, ToolFinished):
                    view.tool_finished(event.name, is_error=event.is_error)
                elif isinstance(event, FileReady):
                    view.file_saved(await asyncio.to_thread(self._save, event))
                elif isinstance(event, Finished):
                    view.finished()
                    ok = True
                elif isinstance(event, Asked):
                    view.asked(event.question)
                    ok = True
                elif isinstance(event, TurnFailed):
                    view.failed(event.text)
        return ok

    def _save(self, event: FileReady) -> str:
        name = sanitize_filename(event.filename)
        _, relative = save_new_file(self.workspace, OUTBOX, name, event.data)
        return relative


class _TooLong(Exception):
    """A line over :data:`MAX_LINE_BYTES` (read to its end and dropped)."""


class _Lines:
    """The owner's lines from ``read(n)`` (bytes, b"" at the end of input), each at most
    :data:`MAX_LINE_BYTES`: a longer one is read to its end and dropped (:class:`_TooLong`),
    so the next line is read as usual (asyncio's own readline gives up at 64 KiB)."""

    def __init__(self, read: Callable[[int], Awaitable[bytes]]) -> None:
        self._read = read
        self._buffer = bytearray()
        self._eof = False

    async def next(self) -> bytes | None:
        """The next line without its end of line; None at the end of input."""
        too_long = False
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0 or (self._eof and (self._buffer or too_long)):
                end = len(self._buffer) if end < 0 else end
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if too_long or len(line) > MAX_LINE_BYTES:
                    raise _TooLong
                return line
            if self._eof:
                return None
            if len(self._buffer) > MAX_LINE_BYTES:
                too_long = True
                self._buffer.clear()
            chunk = await self._read(READ_CHUNK)
            self._eof = not chunk
            self._buffer += chunk


async def _lines(stream: TextIO) -> _Lines:
    """The lines of ``stream``: read by the event loop from a pipe, a socket or a
    terminal; otherwise (a file, /dev/null: the loop's pipe reader refuses them, uvloop's
    by aborting the process) in a worker thread, where such reads never wait long."""
    fd = stream.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return _Lines(lambda size: asyncio.to_thread(os.read, fd, size))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
    return _Lines(reader.read)


def _workspace(text: str) -> Path:
    if not text:
        raise StartupError("--workspace is required (the owner's folder)")
    workspace = Path(text).expanduser()
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot use --workspace {workspace}: {exc.strerror}") from None
    return workspace.resolve()


def is_terminal(stdin: TextIO, stdout: TextIO) -> bool:
    """Both ends are a terminal: the interactive program, not the plain one."""
    try:
        return os.isatty(stdin.fileno()) and os.isatty(stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a StringIO)
        return False


async def run_chat(
    settings: ChatSettings,
    *,
    message: str | None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    verbose: bool = False,
) -> int:
    workspace = _workspace(settings.workspace)
    if not settings.llm_model and not settings.llm_demo:
        raise StartupError(MODEL_REQUIRED)
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    interactive = message is None and is_terminal(stdin, stdout)
    if interactive:  # before anything logs: never into the conversation
        from .chat_tui import log_to_workspace  # prompt_toolkit and rich: only for a terminal

        log_to_workspace(workspace, verbose=verbose)
    public_url = settings.public_url.rstrip("/") or None
    kit = OwnerKit(settings, public_url=public_url)
    runtime, watches = kit.runtime, kit.watches
    tools = ToolRegistry(workspace_tools())
    tools.add(kit.a2a_tool)
    endpoint = settings.otlp_endpoint
    tracing = Tracing(endpoint) if tracing_wanted(endpoint) else None
    view: TerminalView | None = None
    if interactive:
        from .chat_tui import open_terminal

        view = open_terminal(stdout, workspace, runtime.provider.config.model)  # or the demo
    if view is not None:  # a person at a terminal can be asked for a secret
        tools.add(RequestInput(secret_only=True))
    host = ChatHost(
        runtime,
        workspace,
        tools,
        stdout,
        view=view,
        turn_timeout_s=settings.turn_timeout,
        tracer=tracing.tracer if tracing is not None else None,
        secrets=view,
    )
    # Opened in order, closed in reverse (also when one fails to open): the turns stop,
    # the watches (their records stay for the next start), the receiver, the runtime.
    async with contextlib.AsyncExitStack() as parts:
        if tracing is not None:
            await parts.enter_async_context(tracing)
        await parts.enter_async_context(runtime)
        if public_url:
            await parts.enter_async_context(kit.receiver())
            log.info("push receiver on %s:%s for %s", settings.host, settings.port, public_url)
        await parts.enter_async_context(watches)
        worker = asyncio.get_running_loop().create_task(host.serve(), name="chat-turns")
        parts.push_async_callback(_cancelled, worker)
        log.info(
            "a2a client: agents in %s; watches %s",
            agents_path(workspace),
            f"push at {public_url}" if public_url else "subscribe or poll",
        )
        watches.register_target(workspace, SCOPE, host.deliver)
        restoring = watches.restore(workspace)  # start-up never waits for it...
        if message is not None:
            # ...but a one-shot run lets ready results go first, then its own turn.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(restoring), CALL_TIMEOUT_S)
            await watches.quiesce(workspace, bound=2 * CALL_TIMEOUT_S)
            return 0 if await host.ask(message) else 1
        if view is not None:
            from .chat_tui import Terminal

            await Terminal(host, view, watches, workspace).run()
            return 0
        lines = await _lines(stdin)
        while True:
            try:
                line = await lines.next()
            except _TooLong:
                host.view.notice(f"[not sent: the line is longer than {MAX_LINE_BYTES} bytes]\n")
                continue
            if line is None:
                return 0
            text = line.decode("utf-8", "replace").strip()
            if text:
                await host.ask(text)


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
