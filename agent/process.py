"""The process agent (``serve --exec "CMD"``): one shell command per turn.

The turn's text goes to the command's stdin; its stdout streams back as chunks of the
``response`` artifact (decoded as UTF-8, invalid bytes replaced). Exit status 0
completes the task; any other status fails it with "The command exited with status N",
plus the redacted last line of stderr. The command also gets ``A2A_TASK_ID``,
``A2A_CONTEXT_ID`` and ``A2A_CALLER`` in its environment.

The command runs in its own process group; cancellation, timeout and shutdown kill the
whole group (SIGTERM, then SIGKILL after a grace period), so the agent's work really
stops.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from .base import Agent, Completed, Failed, Output, TextChunk, Turn, redact

log = logging.getLogger(__name__)

_READ_BYTES = 64 * 1024
_STDERR_TAIL_BYTES = 4096
_KILL_GRACE_S = 2.0


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
        env = {
            **os.environ,
            **self.env,
            "A2A_TASK_ID": turn.task.id if turn.task is not None else "",
            "A2A_CONTEXT_ID": turn.context_id,
            "A2A_CALLER": turn.caller.name,
        }
        proc = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.cwd,
            env=env,
            start_new_session=True,  # its own process group, killed as a whole
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        feeder = asyncio.create_task(_feed(proc.stdin, turn.text().encode()))
        stderr_tail = asyncio.create_task(_tail(proc.stderr))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        held = ""  # one chunk of look-ahead, so the last one can carry lastChunk
        status: int | None = None
        timed_out = False
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    data = await proc.stdout.read(_READ_BYTES)
                    text = decoder.decode(data, final=not data)
                    if text:
                        if held:
                            yield TextChunk(held)
                        held = text
                    if not data:
                        break
                status = await proc.wait()
        except TimeoutError:
            timed_out = True
        finally:
            feeder.cancel()
            if status is None:  # timeout, cancellation or close: its stderr is not needed
                stderr_tail.cancel()
                await _kill(proc)
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
            reason += " " + redact(last_line)
        log.info("exec agent: command exited with status %s", status)
        yield Failed(reason)


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


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Stop the command's whole process group: SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            async with asyncio.timeout(_KILL_GRACE_S):
                await proc.wait()
            return
        except TimeoutError:
            continue
