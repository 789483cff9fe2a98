"""``chat`` in a terminal: a prompt with history, a live status line, answers in Markdown.

Used when stdin and stdout are both terminals and no ``--message`` is given; anything
else (a pipe, a file, ``--message``) keeps the plain output of :class:`.chat.PlainView`.

- A banner (the workspace, the model, how to quit), then a prompt (prompt_toolkit) with
  the history of earlier sessions (``.a2a/chat_history``); a paste of several lines is
  one message.
- While a turn runs, one status line says what it does (thinking, or the tool running
  with its elapsed seconds: ``→ a2a send assistant-a · 12 s``), and the answer shows as
  Markdown as it streams (rich). A tool's line stays when it ends (``✓``/``✗``).
- Ctrl-C stops the running turn (as ``--turn-timeout`` would: the model's stream is
  closed, a remote task it waits on is handed to a watch); a second Ctrl-C, or Ctrl-C or
  Ctrl-D at an empty prompt, quits. On quit, each watch still running gets a line: its
  result is delivered at the next start.
- Log lines go to ``.a2a/logs/chat.log`` (rotated), never into the conversation;
  ``--verbose`` shows them on stderr as well.
- Slash commands: ``/a2a`` (agents, watches, callers), ``/stop``, ``/tz``, ``/help``.
- A secret the assistant needs (``request_input`` with ``secret``) is asked with a
  hidden prompt (nothing echoed, no history); an empty line, Ctrl-C or Ctrl-D declines.

prompt_toolkit and rich are imported only here, so the plain paths start without them.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any, Final, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory
from prompt_toolkit.patch_stdout import patch_stdout
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

from a2a_gateway.agent.tools.interaction import SecretQuestion
from a2a_gateway.client.agents_file import read_agents
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.local.redaction import RedactingFilter
from a2a_gateway.server.auth import CALLERS_FILE, read_callers

from .chat import ChatHost
from .logs import log_to_file

log = logging.getLogger("a2a_gateway.chat")

PROMPT: Final = "you> "
SECRET_PROMPT: Final = "secret> "
LOG_FILE_BYTES: Final = 1_000_000
LOG_FILE_BACKUPS: Final = 3
HELP: Final = """\
/a2a   the agents you can call, the watches running, the callers of this workspace
/stop  stop the turn that is running (Ctrl-C does the same)
/tz    the time zone the assistant is told
/help  this list
Ctrl-C stops a turn; Ctrl-C or Ctrl-D at an empty prompt quits."""


def _summary(name: str, arguments: Mapping[str, Any]) -> str:
    """``a2a send assistant-a``: the tool and its first plain arguments, short."""
    words = [name]
    for key in ("action", "agent", "path", "name"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            words.append(value[:40])
    return " ".join(words)


class _Status:
    """The status line: a spinner, what runs, and for how long (read when drawn)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> RenderableType:
        seconds = int(time.monotonic() - self.started)
        self.spinner.text = Text(f"{self.label} · {seconds} s", style="dim")
        return self.spinner


class _Streaming:
    """What the live area shows: the tail of the answer so far, then the status line."""

    def __init__(self, view: TerminalView) -> None:
        self.view = view

    def __rich__(self) -> RenderableType:
        view = self.view
        parts: list[RenderableType] = []
        if view.segment.strip():
            lines = view.segment.splitlines()[-max(4, view.console.height - 4) :]
            parts.append(Markdown("\n".join(lines)))
        if view.status is not None:
            parts.append(view.status)
        return Group(*parts)


class TerminalView:
    """The turn in the terminal (see the module docstring). While the owner is typing
    (a follow-up arrived), nothing live is drawn: finished pieces print above the
    prompt instead."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.segment = ""  # the answer's text since the last tool call
        self.status: _Status | None = None
        self.prompting = False
        self._live: Live | None = None
        self._tool: tuple[str, float] | None = None

    # -- the live area ------------------------------------------------------------------

    def _show(self) -> None:
        if self.prompting or self._live is not None:
            return
        self._live = Live(
            _Streaming(self),
            console=self.console,
            refresh_per_second=8,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _flush(self) -> None:
        """End the live area and print the answer's text so far for good."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.segment.strip():
            self.console.print(Markdown(self.segment))
        self.segment = ""

    # -- ChatView -------------------------------------------------------------------------

    def turn_started(self, text: str, *, delivered: bool) -> None:
        if delivered:
            title = text.strip().splitlines()[0] if text.strip() else "follow-up"
            self.console.rule(Text(title[:100], style="bold magenta"), align="left")
        self.status = _Status("thinking")
        self._show()

    def text(self, delta: str) -> None:
        self.segment += delta
        if self.status is not None and self.status.label == "thinking":
            self.status.label = "answering"
        self._show()

    def tool_started(self, name: str, arguments: Mapping[str, Any]) -> None:
        self._flush()
        label = _summary(name, arguments)
        self._tool = (label, time.monotonic())
        self.status = _Status(f"→ {label}")
        self._show()

    def tool_finished(self, name: str, *, is_error: bool) -> None:
        self._flush()
        label, started = self._tool or (name, time.monotonic())
        self._tool = None
        took = int(time.monotonic() - started)
        mark = Text("✗ ", style="bold red") if is_error else Text("✓ ", style="bold green")
        self.console.print(mark + Text(f"{label} · {took} s", style="dim"))
        self.status = _Status("thinking")
        self._show()

    def file_saved(self, relative: str) -> None:
        self._flush()
        self.console.print(Text(f"[file saved: {relative}]", style="cyan"))
        self._show()

    def finished(self) -> None:
        self.status = None
        self._flush()
        self.console.print()  # a blank line before the next prompt

    def asked(self, question: str) -> None:
        self.status = None
        self._flush()
        self.console.print(Text(question, style="yellow"))

    def failed(self, text: str) -> None:
        self.status = None
        self._flush()
        self.console.print(Text(f"[failed: {text}]", style="bold red"))

    def stopped(self) -> None:
        self.status = None
        self._flush()
        self.console.print(Text("[stopped]", style="bold yellow"))

    def notice(self, text: str) -> None:
        self.console.print(Text(text.rstrip("\n"), style="dim"))

    # -- the secret asker ------------------------------------------------------------------

    async def ask_secret(self, question: SecretQuestion) -> str | None:
        """A hidden prompt for a secret (the chat's asker): the value typed, or None
        (an empty line, Ctrl-C, Ctrl-D, or ``wait_s`` without an answer)."""
        self._flush()
        self.prompting = True  # nothing live is drawn over the prompt
        try:
            self.console.print(Text(f"🔑 {question.question}", style="bold yellow"))
            self.console.print(
                Text(
                    "typed hidden, not kept in the transcript; an empty line declines",
                    style="dim",
                )
            )
            session: PromptSession[str] = PromptSession()  # no history: never written
            try:
                async with asyncio.timeout(question.wait_s):
                    value = await session.prompt_async(SECRET_PROMPT, is_password=True)
            except (TimeoutError, KeyboardInterrupt, EOFError):
                value = ""
        finally:
            self.prompting = False
        return value if value.strip() else None


def log_to_workspace(workspace: Path, *, verbose: bool) -> Path:
    """Send the process's log lines to ``.a2a/logs/chat.log`` (rotated) instead of the
    conversation; ``verbose`` keeps them on stderr too. Returns the file's path."""
    path = WorkspaceLayout(workspace).chat_log
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(
        path, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8"
    )
    handler.addFilter(RedactingFilter())
    log_to_file(handler, keep_stderr=verbose)
    return path


def open_terminal(out: TextIO, workspace: Path, model: str) -> TerminalView:
    """The view of a terminal chat, once its banner is shown."""
    console = Console(file=out)
    console.print(Text("a2a-gateway chat", style="bold"), Text(f"· {model}", style="cyan"))
    console.print(Text(f"workspace {workspace}", style="dim"))
    console.print(Text("/help for commands · Ctrl-C stops a turn · Ctrl-D quits", style="dim"))
    return TerminalView(console)


class Terminal:
    """The prompt loop of one terminal chat (see the module docstring)."""

    def __init__(
        self,
        host: ChatHost,
        view: TerminalView,
        watches: WatchRegistry,
        workspace: Path,
        *,
        history: Path | None = None,
    ) -> None:
        self.host = host
        self.view = view
        self.console = view.console
        self.watches = watches
        self.workspace = workspace
        path = history or WorkspaceLayout(workspace).chat_history
        self.session: PromptSession[str] = PromptSession(history=FileHistory(str(path)))
        self._quit = asyncio.Event()
        self._commands: dict[str, Callable[[], Awaitable[None]]] = {
            "/a2a": self._a2a,
            "/stop": self._stop,
            "/tz": self._tz,
            "/help": self._help,
        }

    async def run(self) -> None:
        """Read and run the owner's messages until they quit; then say what still runs."""
        interrupted = False  # the last thing was a Ctrl-C: one more quits
        while not self._quit.is_set():
            try:
                text = await self._read()
            except KeyboardInterrupt:
                if interrupted:
                    break
                interrupted = True
                self.console.print(Text("(Ctrl-C again or Ctrl-D to quit)", style="dim"))
                continue
            except EOFError:
                break
            interrupted = False
            text = text.strip()
            if not text:
                continue
            command = self._commands.get(text.split()[0].lower()) if text[0] == "/" else None
            if command is not None:
                await command()
                continue
            if text[0] == "/" and " " not in text:
                self.console.print(Text(f"unknown command {text}: /help lists them", style="red"))
                continue
            interrupted = await self._ask(text)
        self._farewell()

    async def _read(self) -> str:
        self.view.prompting = True
        try:
            with patch_stdout(raw=True):  # follow-ups print above the prompt
                return await self.session.prompt_async(PROMPT)
        finally:
            self.view.prompting = False

    async def _ask(self, text: str) -> bool:
        """Run one turn; Ctrl-C (SIGINT: the terminal is not in raw mode now) stops it,
        a second one quits. True when the turn was stopped."""
        loop = asyncio.get_running_loop()
        stopped = False

        def interrupt() -> None:
            nonlocal stopped
            if stopped or not self.host.stop_turn():
                self._quit.set()
                self.host.stop_turn()
            stopped = True

        loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            asking = asyncio.ensure_future(self.host.ask(text))
            quitting = asyncio.ensure_future(self._quit.wait())
            await asyncio.wait({asking, quitting}, return_when=asyncio.FIRST_COMPLETED)
            quitting.cancel()
            if not asking.done():
                await asyncio.wait({asking}, timeout=5.0)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        return stopped

    # -- slash commands -------------------------------------------------------------------

    async def _help(self) -> None:
        self.console.print(Text(HELP, style="dim"))

    async def _a2a(self) -> None:
        console = self.console
        agents = await asyncio.to_thread(read_agents, self.workspace)
        console.print(Text("agents", style="bold"))
        if agents.error:
            console.print(Text(f"  {agents.error}", style="red"))
        for entry in agents.agents.values():
            console.print(f"  {entry.name}  {entry.url}", markup=False, highlight=False)
        if not agents.agents and not agents.error:
            console.print(Text("  none (add one with `a2a-gateway agents add`)", style="dim"))
        console.print(Text("watches", style="bold"))
        running = self.watches.watches(self.workspace)
        for watch in running:
            record = watch.record
            console.print(
                f"  {record.agent}  task {record.taskId}  since {record.startedAt}"
                f"  ({record.source})",
                markup=False,
                highlight=False,
            )
        if not running:
            console.print(Text("  none", style="dim"))
        callers, _ = await asyncio.to_thread(
            read_callers, self.workspace / CALLERS_FILE, str(self.workspace)
        )
        console.print(Text("callers", style="bold"))
        names = ", ".join(entry.name for entry in callers) or "none"
        console.print(f"  {names}", markup=False, highlight=False)

    async def _stop(self) -> None:
        if not self.host.stop_turn():
            self.console.print(Text("nothing is running", style="dim"))

    async def _tz(self) -> None:
        now = datetime.now().astimezone()
        self.console.print(
            Text(f"{now.tzname()} (UTC{now:%z}); the TZ variable changes it", style="dim")
        )

    def _farewell(self) -> None:
        for watch in self.watches.watches(self.workspace):
            record = watch.record
            self.console.print(
                Text(
                    f"{record.agent}: task {record.taskId} still running;"
                    " its result is delivered at the next start",
                    style="yellow",
                )
            )


__all__ = ["Terminal", "TerminalView", "log_to_workspace", "open_terminal"]
