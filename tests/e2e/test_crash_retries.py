"""Retry keys survive kill -9: a gateway process is killed with SIGKILL in the middle of
a burst of blocking sends, right after an answer arrives; after a restart on the same
workspace (and database), every messageId that was answered, sent again, is answered
with the task its first answer named, never a second task. On the workspace file store
(with and without ``--fsync``) and on PostgreSQL.

On the file store, the index's commits are held back for the last
:data:`STALLED_ANSWERS` answers before the kill (the test holds the index database
locked, as a stalled disk or a slow commit would): their retry keys are then in their
task files only, every time, not just for the few milliseconds a commit takes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.server.pg_local import LocalPostgres
from tests.support.ports import free_ports
from tests.support.postgres import fresh_database
from tests.support.processes import GATEWAY, ServerProcess

from .conftest import KEY_ALICE
from .test_postgres_store import alices_workspace

BURST_WORKERS = 4
#: Answers before the kill: enough that the process is busy writing when it dies.
KILL_AFTER = 300
#: How long the frozen gateway's sockets are read before it is killed.
FROZEN_READ_S = 0.5
#: The answers before the kill during which the index cannot commit (file store).
STALLED_ANSWERS = 50


def _send(message_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": message_id,
        "method": "SendMessage",
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": message_id,
                "parts": [{"text": f"hi {message_id}"}],
            }
        },
    }


class _Connection:
    """One keep-alive HTTP/1.1 connection sending JSON-RPC SendMessage: raw streams,
    so that the test reads an answer (and can kill the gateway) within a fraction of a
    millisecond of its arrival, and the burst is limited by the gateway, not by the
    client (an HTTP client library's per-request cost is several times the gateway's)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def task_of(self, message_id: str) -> str:
        if self._streams is None:
            self._streams = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self._streams
        body = json.dumps(_send(message_id)).encode()
        writer.write(
            b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"X-API-Key: {KEY_ALICE}\r\nA2A-Version: 1.0\r\n".encode()
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        envelope = json.loads(await reader.readexactly(length))
        assert "result" in envelope, envelope
        return str(envelope["result"]["task"]["id"])

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()


def _lock(index: Path) -> sqlite3.Connection:
    """A connection holding ``index`` locked for writing (until it is closed)."""
    db = sqlite3.connect(index, isolation_level=None, check_same_thread=False)
    db.execute("BEGIN IMMEDIATE")
    return db


async def _burst_then_kill(gateway: ServerProcess, port: int, index: Path | None) -> dict[str, str]:
    """Blocking sends on :data:`BURST_WORKERS` connections at once. Once
    :data:`KILL_AFTER` answers are read, the gateway is frozen (SIGSTOP) where it
    stands, every answer it had sent is read from the sockets, then it is killed
    (SIGKILL): the answers sent in the last instants before the kill are the ones whose
    retry keys a late write would lose (with ``index``, the last
    :data:`STALLED_ANSWERS`: that index is held locked from there on). The messageId
    -> task id of every answer."""
    assert gateway.proc is not None
    proc = gateway.proc
    answered: dict[str, str] = {}
    ids = itertools.count()
    frozen = asyncio.Event()
    stalled = asyncio.Event()
    locks: list[sqlite3.Connection] = []

    async def stall_index() -> None:
        await stalled.wait()
        if index is not None:
            locks.append(await asyncio.to_thread(_lock, index))

    async def worker() -> None:
        connection = _Connection(port)
        try:
            while not frozen.is_set():
                message_id = f"m-{next(ids)}"
                try:
                    task_id = await connection.task_of(message_id)
                except (OSError, asyncio.IncompleteReadError):
                    return  # the process is gone: this one was never answered
                answered[message_id] = task_id
                if len(answered) >= KILL_AFTER - STALLED_ANSWERS:
                    stalled.set()
                if len(answered) >= KILL_AFTER and not frozen.is_set():
                    proc.send_signal(signal.SIGSTOP)  # at once: no await before it
                    frozen.set()
        finally:
            connection.close()

    async def kill_once_read() -> None:
        await frozen.wait()
        await asyncio.sleep(FROZEN_READ_S)  # the answers sent are in the sockets
        proc.send_signal(signal.SIGKILL)  # the reads still waiting end (never answered)

    try:
        async with asyncio.timeout(60):
            await asyncio.gather(
                stall_index(), kill_once_read(), *(worker() for _ in range(BURST_WORKERS))
            )
    finally:
        for db in locks:
            with contextlib.suppress(sqlite3.Error):
                db.close()
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    gateway.proc = None
    return answered


@pytest.mark.parametrize("store", ["files", "files-fsync", "postgres"])
async def test_every_answered_message_id_retried_after_kill_9_finds_its_task(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    workspace = alices_workspace(tmp_path)
    args = ["--store", "postgres"] if store == "postgres" else []
    if store == "postgres":
        pg: LocalPostgres = request.getfixturevalue("postgres")
        args += ["--database-url", await fresh_database(pg)]
    if store == "files-fsync":
        args.append("--fsync")
    (port,) = free_ports(1)
    base = f"http://127.0.0.1:{port}"
    command = [*GATEWAY, "serve", "--faux",
               "--workspace", str(workspace), "--port", str(port), "--grpc-port", "-1",
               *args]  # fmt: skip
    card = f"{base}/.well-known/agent-card.json"
    first = ServerProcess(f"crash-{store}-1", command, tmp_path, card, grpc_port=None)
    first.start()
    try:
        index = None if store == "postgres" else WorkspaceLayout(workspace).task_index
        answered = await _burst_then_kill(first, port, index)
    finally:
        first.stop()
    assert len(answered) >= KILL_AFTER

    again = ServerProcess(f"crash-{store}-2", command, tmp_path, card, grpc_port=None)
    with again.running():
        connection = _Connection(port)
        try:
            retried = {m: await connection.task_of(m) for m in answered}
        finally:
            connection.close()
    second_tasks = {m for m, task_id in retried.items() if task_id != answered[m]}
    assert not second_tasks, f"{len(second_tasks)} of {len(answered)} retries made a new task"
