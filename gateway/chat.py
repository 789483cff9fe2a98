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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from aiohttp import web

from a2a_gateway.agent.runtime import (
    Asked,
    FileReady,
    Finished,
    Runtime,
    TextDelta,
    TurnFailed,
)
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.files import workspace_tools
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.client.agents_file import agents_path
from a2a_gateway.client.watches import CALL_TIMEOUT_S, WatchRegistry
from a2a_gateway.server.files import sanitize_filename, save_new_file
from a2a_gateway.server.push_receiver import build_push_app

from .assistant_host import build_runtime
from .chat_settings import TURN_TIMEOUT_S
from .settings import Settings
from .startup import StartupError

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


class ChatHost:
    """One owner conversation: a queue of prompts run one turn at a time."""

    def __init__(
        self,
        runtime: Runtime,
        workspace: Path,
        tools: ToolRegistry,
        out: TextIO,
        *,
        turn_timeout_s: float = TURN_TIMEOUT_S,
    ) -> None:
        self.runtime = runtime
        self.workspace = workspace
        self.tools = tools
        self.out = out
        self.turn_timeout_s = turn_timeout_s
        self.queue: asyncio.Queue[_Prompt] = asyncio.Queue()

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
            try:
                async with asyncio.timeout(self.turn_timeout_s):
                    ok = await self._turn(prompt)
            except TimeoutError:
                log.warning("chat turn stopped after %g s", self.turn_timeout_s)
                self._print(f"\n[failed: the turn took longer than {self.turn_timeout_s:g} s]\n")
                ok = False
            except asyncio.CancelledError:
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
        if prompt.delivered:
            self._print(f"\n{prompt.text}\n")
        events = self.runtime.run_turn(SCOPE, self.workspace, prompt.text, tools=self.tools)
        ok = False
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    self._print(event.text)
                elif isinstance(event, FileReady):
                    saved = await asyncio.to_thread(self._save, event)
                    self._print(f"\n[file saved: {saved}]\n")
                elif isinstance(event, Finished):
                    self._print("\n")
                    ok = True
                elif isinstance(event, Asked):
                    self._print(f"\n{event.question}\n")
                    ok = True
                elif isinstance(event, TurnFailed):
                    self._print(f"\n[failed: {event.text}]\n")
        return ok

    def _save(self, event: FileReady) -> str:
        name = sanitize_filename(event.filename)
        _, relative = save_new_file(self.workspace, OUTBOX, name, event.data)
        return relative

    def _print(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def _tools(settings: Settings, watches: WatchRegistry) -> ToolRegistry:
    tools = ToolRegistry(workspace_tools())
    tools.add(
        A2ATool(
            watches,
            wait_s=settings["a2a_wait"],
            max_wait_s=settings["a2a_max_wait"],
            allow_private_urls=settings["allow_private_urls"],
            max_file_bytes=settings["max_file_bytes"],
        )
    )
    return tools


async def _start_push_receiver(settings: Settings, watches: WatchRegistry) -> web.AppRunner:
    runner = web.AppRunner(build_push_app(watches), access_log=None, shutdown_timeout=1)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings["host"], settings["port"]).start()
    except OSError as exc:
        await runner.cleanup()
        where = f"{settings['host']}:{settings['port']}"
        raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    log.info(
        "push receiver on %s:%s for %s", settings["host"], settings["port"], settings["public_url"]
    )
    return runner


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


async def run_chat(
    settings: Settings,
    *,
    message: str | None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    workspace = _workspace(settings["workspace"])
    if not settings["llm_model"]:
        raise StartupError("--llm-model is required (the model name the provider knows)")
    runtime = build_runtime(settings)
    public_url = settings["public_url"].rstrip("/") or None
    watches = WatchRegistry(
        public_url=public_url,
        allow_private_urls=settings["allow_private_urls"],
        watch_timeout_s=settings["watch_timeout"],
        max_file_bytes=settings["max_file_bytes"],
    )
    host = ChatHost(
        runtime,
        workspace,
        _tools(settings, watches),
        stdout or sys.stdout,
        turn_timeout_s=settings["turn_timeout"],
    )
    receiver: web.AppRunner | None = None
    await runtime.start()
    worker = asyncio.get_running_loop().create_task(host.serve(), name="chat-turns")
    try:
        if public_url:
            receiver = await _start_push_receiver(settings, watches)
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
        lines = await _lines(stdin or sys.stdin)
        while True:
            try:
                line = await lines.next()
            except _TooLong:
                host._print(f"[not sent: the line is longer than {MAX_LINE_BYTES} bytes]\n")
                continue
            if line is None:
                return 0
            text = line.decode("utf-8", "replace").strip()
            if text:
                await host.ask(text)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
        await watches.aclose()  # the records stay for the next start
        if receiver is not None:
            await receiver.cleanup()
        await runtime.aclose()
