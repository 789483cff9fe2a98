"""The process agent (``serve --exec "CMD"``): one shell command per turn.

The turn's text goes to the command's stdin; its stdout streams back as chunks of the
``response`` artifact (decoded as UTF-8, invalid bytes replaced). Exit status 0
completes the task; any other status fails it with "The command exited with status N",
plus the redacted last line of stderr.

The command's environment also has:

- ``A2A_TASK_ID``, ``A2A_CONTEXT_ID``, ``A2A_CALLER``: the task, its context and the
  caller's name;
- ``A2A_PACT_AGENT``, ``A2A_PACT_USER``: for a personal agent's user (PACT), the
  personal agent (its token's ``iss``) and the user (``sub``), as the token states
  them; empty for any other caller;
- ``A2A_FILES``: the absolute paths of the files the message carried (saved in the
  caller's workspace inbox), one per line, in part order; empty when there are none.

The command runs in its own session (so its own process group). When the turn ends
(the command exits, is cancelled, times out, or the server shuts down) the whole group
is killed (SIGTERM, then SIGKILL after a grace period): background children the
command left behind do not survive it, and cannot keep the turn open by holding its
stdout.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path

from a2a_gateway.local.redaction import redact_error

from .base import Agent, Completed, Failed, Output, TextChunk, Turn

log = logging.getLogger(__name__)

_READ_BYTES = 64 * 1024
_STDERR_TAIL_BYTES = 4096
_KILL_GRACE_S = 2.0
_GROUP_POLL_S = 0.02


class ProcessAgent(Agent):
    """Runs ``command`` through ``/bin/sh -c`` for every turn.

    ``timeout_s`` bounds one turn (the task fails when it passes); ``cwd`` is the
    working directory (default: the server's); ``env`` adds environment variables.
    """

    def __init__(
        self,
        command: str,
        *,
        cwd: Path | None = None,
        timeout_s: float = 600.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not command.strip():
            raise ValueError("the command is empty")
        self.command = command
        self.cwd = cwd
        self.timeout_s = timeout_s
        self.env = dict(env or {})

    async def run(self, turn: Turn) -> AsyncIterator[Output]:
        on_behalf = turn.caller.on_behalf
        env = {
            **os.environ,
            **self.env,
            "A2A_TASK_ID": turn.task.id if turn.task is not None else "",
            "A2A_CONTEXT_ID": turn.context_id,
            "A2A_CALLER": turn.caller.name,
            "A2A_PACT_AGENT": on_behalf.agent if on_behalf is not None else "",
            "A2A_PACT_USER": on_behalf.user if on_behalf is not None else "",
            "A2A_FILES": "\n".join(str(path) for path in turn.files),
        }
        loop = asyncio.get_running_loop()
        start = asyncio.ensure_future(
            loop.subprocess_shell(
                lambda: _CommandProtocol(loop),
                self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.cwd,
                env=env,
                start_new_session=True,  # its own process group, killed as a whole
            )
        )
        try:
            transport, protocol = await asyncio.shield(start)
        except asyncio.CancelledError:
            await _abandon(start)
            raise
        conversation = self._converse(turn, transport, protocol)
        try:
            async for output in conversation:
                yield output
        finally:
            await conversation.aclose()  # at once, not when collected: it kills the group
            transport.close()  # its pipes, even if a child that left the group holds them

    async def _converse(
        self,
        turn: Turn,
        transport: asyncio.SubprocessTransport,
        protocol: _CommandProtocol,
    ) -> AsyncGenerator[Output, None]:
        stdin, stdout, stderr = protocol.stdin, protocol.stdout, protocol.stderr
        assert stdin is not None and stdout is not None and stderr is not None
        command = _Command(transport, protocol.exited)
        feeder = asyncio.create_task(_feed(stdin, turn.text().encode()))
        stderr_tail = asyncio.create_task(_tail(stderr))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        held = ""  # one chunk of look-ahead, so the last one can carry lastChunk
        status: int | None = None
        timed_out = False
        try:
            async with asyncio.timeout(self.timeout_s) as bound:
                # Once the command exits, what it left behind is killed and the rest
                # of its output gets a short bound (a child may have left the group).
                reaper = asyncio.create_task(_reap_leftovers(command, bound))
                try:
                    while True:
                        data = await stdout.read(_READ_BYTES)
                        text = decoder.decode(data, final=not data)
                        if text:
                            if held:
                                yield TextChunk(held)
                            held = text
                        if not data:
                            break
                    await command.exited.wait()
                    status = transport.get_returncode()
                finally:
                    reaper.cancel()
        except TimeoutError:
            status = transport.get_returncode()  # set: it exited, a straggler held stdout
            timed_out = status is None
        finally:
            feeder.cancel()
            if status is None:  # timeout, cancellation or close: its stderr is not needed
                stderr_tail.cancel()
            await _kill(command)  # the whole group, whatever ended the turn
        if timed_out:  # killed (and reaped) before the failure is reported
            yield Failed(f"The command did not finish within {self.timeout_s:g} s.")
            return
        tail = await _finish_tail(stderr_tail)
        if held:
            yield TextChunk(held, last=True)
        if status == 0:
            yield Completed()
            return
        reason = f"The command exited with status {status}."
        last_line = _last_line(tail)
        if last_line:
            reason += " " + redact_error(last_line)
        log.info("exec agent: command exited with status %s", status)
        yield Failed(reason)


class _CommandProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol, plus the moment the command itself exits.

    ``Process.wait()`` returns only once every pipe is closed, which a background
    child holding stdout delays for as long as it lives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_READ_BYTES, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class _Command:
    """The running command as the turn's helpers see it: its group and its exit."""

    __slots__ = ("exited", "gone", "group", "transport")

    def __init__(self, transport: asyncio.SubprocessTransport, exited: asyncio.Event) -> None:
        self.transport = transport
        self.exited = exited
        self.group = transport.get_pid()  # start_new_session: it leads its own group
        self.gone = False  # the group was seen empty: its id may be reused, never signal it


async def _abandon(
    start: asyncio.Future[tuple[asyncio.SubprocessTransport, _CommandProtocol]],
) -> None:
    """A turn cancelled while its command starts: asyncio, cancelled while it connects
    the pipes, would kill the shell alone and leave its background children running.
    So the start is let finish (bounded), then the whole group is stopped."""
    try:
        async with asyncio.timeout(_KILL_GRACE_S):
            transport, protocol = await start
    except (OSError, TimeoutError):  # it did not start (a timeout cancels the start)
        return
    try:
        await _kill(_Command(transport, protocol.exited))
    finally:
        transport.close()


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    # A command that never reads stdin must not block the turn: errors are ignored.
    with contextlib.suppress(ConnectionError, BrokenPipeError):
        if data:
            stdin.write(data)
            await stdin.drain()
        stdin.close()
        await stdin.wait_closed()


async def _tail(stream: asyncio.StreamReader) -> bytes:
    tail = b""
    while chunk := await stream.read(_READ_BYTES):
        tail = (tail + chunk)[-_STDERR_TAIL_BYTES:]
    return tail


async def _finish_tail(task: asyncio.Task[bytes]) -> bytes:
    try:
        async with asyncio.timeout(_KILL_GRACE_S):
            return await task
    except TimeoutError:
        return b""
    finally:
        task.cancel()


def _last_line(tail: bytes) -> str:
    lines = [line.strip() for line in tail.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:200] if lines else ""


async def _reap_leftovers(command: _Command, bound: asyncio.Timeout) -> None:
    """When the command exits, kill what it left in its group, and give its output
    (still held open by a child that left the group) at most ``_KILL_GRACE_S`` more."""
    await command.exited.wait()
    await _kill(command)
    deadline = asyncio.get_running_loop().time() + _KILL_GRACE_S
    when = bound.when()
    if when is None or when > deadline:
        bound.reschedule(deadline)


async def _kill(command: _Command) -> None:
    """Stop the command's whole process group: SIGTERM, then SIGKILL. The group
    outlives the command when it left children behind, so the group itself is waited
    for (polled: they are not our children), each signal for at most _KILL_GRACE_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if command.gone or not _signal_group(command.group, sig):
            command.gone = True
            return  # nobody left
        try:
            async with asyncio.timeout(_KILL_GRACE_S):
                await command.exited.wait()
                while _signal_group(command.group, 0):  # noqa: ASYNC110 - not our children: no event to wait on
                    await asyncio.sleep(_GROUP_POLL_S)
            command.gone = True
            return
        except TimeoutError:
            continue


def _signal_group(group: int, sig: int) -> bool:
    """Send ``sig`` to the process group; False when the group no longer exists.

    A member that is only a zombie (dead, not yet reaped by its new parent) still
    counts as a member for the kernel: it is treated as gone."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # cannot happen to our own group; be safe, do not spin
        return False
    return sig != 0 or _has_live_member(group)


def _has_live_member(group: int) -> bool:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc: trust killpg
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After "comm)": state, ppid, pgrp.
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != b"Z":
            return True
    return False
