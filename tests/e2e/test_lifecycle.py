"""A gateway start that fails at any step leaves nothing open (``Gateway.start``).

The gateway has every part on: the PostgreSQL store (the suite's cluster, a database of
its own), gRPC, a metrics port, tracing, retention, the assistant (the demo model) and
PACT. Each start step is made to fail in turn: by a real failure where one exists (a
port already taken, a database that does not answer, a card icon that is not an image),
else by the test seam ``Gateway.before_step`` raising at the step's boundary. After the
failed start, with nothing stopped by the test: each port the gateway was given binds
again, no thread beyond those alive before is left, no asyncio task is, and the database
has no connection (``pg_stat_activity``). A start that succeeds goes through exactly
these steps, and its stop leaves nothing either. The proxy mode, the chat host and the
Telegram host (whose A2A side is a gateway) are checked the same way at one step each.

Each attempt runs in a loop of its own (``asyncio.run``), so that the loop's default
executor (its threads are the loop's, not the gateway's) is shut down before threads
are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from telegram.error import NetworkError, TelegramError

from a2a_gateway.chat import run_chat
from a2a_gateway.chat_settings import ChatSettings
from a2a_gateway.serve import Gateway
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.settings import load, resolve
from a2a_gateway.startup import StartupError
from a2a_gateway.telegram_cmd import TelegramApp, check
from a2a_gateway.telegram_settings import TelegramSettings
from tests.support.ports import free_ports
from tests.support.postgres import fresh_database

from ..telegram.conftest import BOT_TOKEN

#: Every start step of the gateway below, in order (test_a_start_goes_through_the_steps).
STEPS = [
    "tracing",
    "authenticator",
    "pact",
    "outbound",
    "push",
    "runtime",
    "engine",
    "card icon",
    "grpc",
    "http",
    "metrics",
    "grpc serve",
    "readiness",
    "retention",
]
#: The steps that bind a port, and its setting: each fails for real, the port taken
#: (the engine and the card icon fail for real too; the other steps by the seam).
PORT_FLAGS = {"grpc": "grpc_port", "http": "port", "metrics": "metrics_port"}
#: How long a closed connection's backend may take to leave pg_stat_activity.
CONNECTIONS_GONE_S = 10.0


class Injected(Exception):
    """The failure the seam raises."""


@dataclass
class Setup:
    workspace: Path
    ports: dict[str, int]
    database: str  # its name
    url: str


@pytest.fixture
def setup(tmp_path: Path, postgres: LocalPostgres) -> Setup:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    http, grpc, metrics = free_ports(3)
    url = asyncio.run(fresh_database(postgres))
    return Setup(
        workspace,
        {"port": http, "grpc_port": grpc, "metrics_port": metrics},
        url.rsplit("/", 1)[1],
        url,
    )


def _settings(setup: Setup, **overrides: Any) -> Any:
    flags: dict[str, Any] = {
        "workspace": [str(setup.workspace)],
        "host": "127.0.0.1",
        **setup.ports,
        "metrics": True,
        "otlp_endpoint": "http://127.0.0.1:9",  # never reached: no span is made
        "task_retention": "30d",
        "store": "postgres",
        "database_url": setup.url,
        "llm": True,
        "llm_demo": True,
        **overrides,
    }
    return resolve(flags, environ={})


@contextlib.contextmanager
def _taken(port: int) -> Iterator[None]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        yield


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def _connections(postgres: LocalPostgres, database: str) -> int:
    """The connections to ``database`` still there once those closing have gone (a
    backend ends a moment after its client closed it)."""
    conn = await asyncpg.connect(postgres.url)
    try:
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
        count: int = await conn.fetchval(query, database)
        deadline = asyncio.get_running_loop().time() + CONNECTIONS_GONE_S
        while count and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
            count = await conn.fetchval(query, database)
        return count
    finally:
        await conn.close()


def _threads_left(before: set[threading.Thread]) -> list[str]:
    """The threads started since ``before`` that are still alive (each given a moment
    to end: a stopped thread pool's workers leave on their own)."""
    left = [thread for thread in threading.enumerate() if thread not in before]
    for thread in left:
        thread.join(timeout=5)
    return [thread.name for thread in left if thread.is_alive()]


def _attempt(
    gateway_settings: Any, fail_at: str | None, postgres: LocalPostgres, setup: Setup
) -> Any:
    """Start (the seam raising at ``fail_at``), then what is left: the start's error,
    the tasks and the database connections left."""
    seen: list[str] = []

    async def run() -> tuple[BaseException | None, list[str], int]:
        gateway = Gateway(gateway_settings)

        async def seam(step: str) -> None:
            seen.append(step)
            if step == fail_at:
                raise Injected(step)

        gateway.before_step = seam
        error: BaseException | None = None
        try:
            await gateway.start()
        except (Injected, StartupError) as exc:
            error = exc
        else:
            await gateway.stop()
        tasks = [repr(t) for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return error, tasks, await _connections(postgres, setup.database)

    error, tasks, connections = asyncio.run(run())
    return seen, error, tasks, connections


@pytest.mark.parametrize("step", STEPS)
def test_a_start_failing_at_a_step_leaves_nothing_open(
    step: str, setup: Setup, postgres: LocalPostgres
) -> None:
    threads = set(threading.enumerate())
    overrides: dict[str, Any] = {}
    fail_at: str | None = step
    taken: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if step in PORT_FLAGS:  # a port already taken
        taken, fail_at = _taken(setup.ports[PORT_FLAGS[step]]), None
    elif step == "engine":  # a database that does not answer
        (nothing,) = free_ports(1)
        overrides["database_url"] = f"postgresql://nobody@127.0.0.1:{nothing}/none"
        fail_at = None
    elif step == "card icon":  # a file that is not an image
        icon = setup.workspace / "not-an-icon.png"
        icon.write_bytes(b"not an image")
        overrides["card_icon"] = str(icon)
        fail_at = None
    with taken:
        seen, error, tasks, connections = _attempt(
            _settings(setup, **overrides), fail_at, postgres, setup
        )
    assert seen[-1] == step  # it failed there, not before
    if fail_at is None:
        assert isinstance(error, StartupError), error
    else:
        assert isinstance(error, Injected) and str(error) == step
    assert tasks == []
    assert connections == 0
    assert _threads_left(threads) == []
    assert {flag: _bindable(port) for flag, port in setup.ports.items()} == dict.fromkeys(
        setup.ports, True
    )


def test_a_start_goes_through_the_steps_and_its_stop_leaves_nothing(
    setup: Setup, postgres: LocalPostgres
) -> None:
    threads = set(threading.enumerate())
    seen, error, tasks, connections = _attempt(_settings(setup), None, postgres, setup)
    assert error is None
    assert seen == STEPS
    assert tasks == []
    assert connections == 0
    assert _threads_left(threads) == []
    assert all(_bindable(port) for port in setup.ports.values())


@pytest.mark.parametrize("step", ["proxy", "http"])
def test_a_proxy_start_failing_leaves_nothing_open(
    step: str, setup: Setup, postgres: LocalPostgres
) -> None:
    """Proxy mode (``--upstream``): the upstream's client is closed too."""
    threads = set(threading.enumerate())
    (upstream,) = free_ports(1)  # not answering: the start goes on without its card
    flags = {
        "host": "127.0.0.1",
        **setup.ports,
        "metrics": True,
        "otlp_endpoint": "http://127.0.0.1:9",
        "upstream": f"http://127.0.0.1:{upstream}",
    }
    settings = resolve(flags, environ={})
    seen, error, tasks, _ = _attempt(settings, step, postgres, setup)
    assert seen[-1] == step and isinstance(error, Injected)
    assert "engine" not in seen
    assert tasks == []
    assert _threads_left(threads) == []
    assert all(_bindable(port) for port in setup.ports.values())


def test_a_chat_whose_receiver_cannot_listen_leaves_nothing_open(tmp_path: Path) -> None:
    """The chat host (``gateway/chat.py``) opens tracing (a thread), the runtime (a task)
    and then the push receiver on a port already taken: the start-up mistake, and the
    parts opened before it are closed."""
    threads = set(threading.enumerate())
    (port,) = free_ports(1)
    settings = load(
        ChatSettings,
        {
            "workspace": str(tmp_path / "owner"),
            "llm_demo": True,
            "host": "127.0.0.1",
            "port": port,
            "public_url": f"http://127.0.0.1:{port}",
            "otlp_endpoint": "http://127.0.0.1:9",
        },
        environ={},
    )

    async def run() -> tuple[BaseException | None, list[str]]:
        error: BaseException | None = None
        try:
            await run_chat(settings, message="hello", stdout=io.StringIO())
        except StartupError as exc:
            error = exc
        tasks = [repr(t) for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return error, tasks

    with _taken(port):
        error, tasks = asyncio.run(run())
    assert str(error) == f"cannot listen on 127.0.0.1:{port} (--port): address already in use"
    assert tasks == []
    assert _threads_left(threads) == []


def test_a_telegram_bot_whose_bot_api_cannot_be_reached_leaves_nothing_open(
    tmp_path: Path,
) -> None:
    """The Telegram host (``--a2a``) opens the runtime and its A2A side (a whole gateway
    with gRPC) before the bot, whose Bot API does not answer: the bot's error, and the
    gateway's ports bind again."""
    threads = set(threading.enumerate())
    port, grpc_port, nothing = free_ports(3)
    settings = load(
        TelegramSettings,
        {
            "workspaces_root": str(tmp_path / "chats"),
            "allowed_users": "111",
            "telegram_base_url": f"http://127.0.0.1:{nothing}",
            "llm_demo": True,
            "a2a": True,
            "host": "127.0.0.1",
            "port": port,
            "grpc_port": grpc_port,
        },
        environ={},
    )
    app_config = check(settings, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN})

    async def run() -> tuple[BaseException | None, list[str]]:
        app = TelegramApp(settings, app_config)
        error: BaseException | None = None
        try:
            await app.start()
        except TelegramError as exc:
            error = exc
        tasks = [repr(t) for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return error, tasks

    error, tasks = asyncio.run(run())
    assert isinstance(error, NetworkError), error
    assert tasks == []
    assert _threads_left(threads) == []
    assert _bindable(port) and _bindable(grpc_port)
