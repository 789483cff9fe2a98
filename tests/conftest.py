"""Suite-wide secret scan: no secret a test used may appear in any log of the run.

One session-scoped autouse fixture attaches a capturing handler to the root logger at
DEBUG for the whole run. At the end of the session it collects the secrets the tests
used and fails the run if any appears in a captured record (raw, before the
production redaction filter: secrets must never be logged in the first place) or in a
log file a subprocess server wrote under the session's temp folder.

The secrets are:
- every plaintext ``key`` and ``signing_secret`` of every ``callers.json``, and every
  ``key``/``token``-like member of every ``agents.json``, written under the session's
  temp folder (so each new test's keys are covered without registering them);
- the literal keys of :data:`KNOWN_SECRETS`, for keys that never reach a file;
- anything a test passes to :func:`tests.support.secrets.use_secret` (or the
  ``use_secret`` fixture).

Tests that log a secret on purpose (to test redaction) must use a logger with
``propagate = False``.

A second, per-test check (:func:`no_traceback_in_logs`): a test whose logs hold a
traceback fails, unless it is marked ``server_fault`` (it makes our own code fail on
purpose: a crashing agent or service, a store that cannot write). Bad input of any kind
(malformed HTTP, undecodable bodies, raw HTTP/2 frames, wrong fields) is the caller's
mistake and must be logged, if at all, without one. Subprocess servers are checked by
their fixture (``tests/support/processes.py``, ``ServerProcess.stop``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .support.postgres import postgres  # noqa: F401 - the session's PostgreSQL
from .support.processes import Sdk03Agent, sdk03_agent_running
from .support.secrets import MIN_SECRET_CHARS, registered_secrets, use_secret

# ``make test`` runs the suite on pytest-xdist's workers, which start with COLUMNS=80 and
# LINES=24 in their environment (a plain run has neither). Every subprocess a test starts
# would inherit them, and a terminal program sized by its pty (the chat's pexpect tests)
# would wrap at 80 columns: a worker's environment is made the one a plain run has.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

#: The suite-wide fixtures (``workspace``, ``callers``) live in tests/support.
pytest_plugins = ["tests.support.fixtures"]

#: Keys used by tests that may never be written to a callers.json or agents.json.
KNOWN_SECRETS = frozenset(
    {
        "alice-key-0f3e9a7c51d2",  # tests/e2e/conftest.py KEY_ALICE
        "bob-key-7d1c0b9e44aa",  # tests/e2e/conftest.py KEY_BOB
        "k-test-6b1f0c9d2e",  # tests/server/conftest.py KEY
        "k-alice-0123456789",  # tests/server/test_grpc.py KEY
        "card-key-99aa88bb77cc",  # tests/client/test_client_cards.py
        "sk-live-0123456789abcdef",  # tests/client/test_client_wire.py
        "peer-key-7c1e9b2a4d",  # tests/client/client_support.py
        "own-key-3e5d7f9b1a2c",  # tests/client/client_support.py
        "wrong-key-123456",  # wrong keys presented on purpose
        "wrong-own-key-a1b2c3d4e5",
        "wrong-key-5f3a2b1c9d0e",
        "db-pass-4f1e8d2c7b",  # tests/e2e/test_postgres_store.py
        "pw-9d8c7b6a5f",  # tests/server/test_pg_store.py
    }
)
#: JSON members whose string values are secrets, wherever they appear in agents.json.
_SECRET_MEMBERS = frozenset(
    {
        "key",
        "apiKey",
        "api_key",
        "token",
        "secret",
        "signing_secret",
        "signingSecret",
        "client_secret",
        "basic_password",
    }
)
#: Log files of subprocess servers and peers (interop fixtures write ``*.stderr``).
_LOG_SUFFIXES = (".stderr", ".stdout", ".log")


@pytest.fixture(name="use_secret")
def use_secret_fixture() -> Callable[..., None]:
    return use_secret


class LogCapture(logging.Handler):
    """Keeps the text of every record (message and traceback) for the final scan."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.name} {record.levelname}: {record.getMessage()}"
        except Exception:  # a broken format string must not hide the raw text
            text = f"{record.name} {record.levelname}: {record.msg!r} {record.args!r}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + record.stack_info
        self.texts.append(text)


_capture: LogCapture | None = None


def captured_logs() -> list[str]:
    """Every record captured so far in this session (empty outside the session)."""
    return list(_capture.texts) if _capture is not None else []


def _walk_secrets(value: Any, members: frozenset[str]) -> Iterator[str]:
    if isinstance(value, dict):
        for name, item in value.items():
            if name in members and isinstance(item, str):
                yield item
            else:
                yield from _walk_secrets(item, members)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_secrets(item, members)


def secrets_in_files(root: Path) -> set[str]:
    """Plaintext keys and secrets of every callers.json / agents.json under ``root``."""
    found: set[str] = set()
    for name, members in (
        ("callers.json", frozenset({"key", "signing_secret"})),
        ("agents.json", _SECRET_MEMBERS),
    ):
        for path in root.rglob(name):
            if not path.is_file():  # a FIFO planted by a test must not hang the scan
                continue
            try:
                data = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            for secret in _walk_secrets(data, members):
                if not secret.startswith("sha256:"):
                    found.add(secret)
    return found


def log_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in _LOG_SUFFIXES and p.is_file())


def all_secrets(root: Path | None) -> set[str]:
    found = set(KNOWN_SECRETS) | registered_secrets()
    if root is not None:
        found |= secrets_in_files(root)
    return {s.strip() for s in found if len(s.strip()) >= MIN_SECRET_CHARS}


def find_leaks(texts: Iterable[tuple[str, str]], secrets: Iterable[str]) -> list[str]:
    """One line per (secret, place) found; the secret itself is masked in the report."""
    ordered = sorted(set(secrets), key=len, reverse=True)
    leaks: list[str] = []
    for where, text in texts:
        for secret in ordered:
            if secret in text:
                shown = secret[:3] + "..." if len(secret) > 12 else "***"
                excerpt = text.replace(secret, "<SECRET>")[:300].replace("\n", " | ")
                leaks.append(f"secret {shown} in {where}: {excerpt}")
    return leaks


def scan(root: Path | None) -> list[str]:
    """Leaks in the records captured so far and in the log files under ``root``."""
    texts: list[tuple[str, str]] = [(f"log record {i}", t) for i, t in enumerate(captured_logs())]
    if root is not None:
        for path in log_files(root):
            try:
                texts.append((str(path), path.read_text(errors="replace")))
            except OSError:
                continue
    return find_leaks(texts, all_secrets(root))


@pytest.fixture(scope="session", autouse=True)
def no_secrets_in_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogCapture]:
    global _capture
    capture = LogCapture()
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    _capture = capture
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(previous_level)
    leaks = scan(tmp_path_factory.getbasetemp())
    _capture = None
    if leaks:
        pytest.fail(
            f"{len(leaks)} secret(s) used by the tests appeared in logs:\n" + "\n".join(leaks[:20]),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def capture_level_kept() -> Iterator[None]:
    """A test that runs the command line in-process (``main([...])``) has it set up
    logging (``setup_logging``: the root level and a handler of ours). Undo both after
    the test, so every later test's records still reach the secret scan and the
    traceback watch at DEBUG, and no later test finds a stale handler."""
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in list(root.handlers):
        if handler not in before and not isinstance(handler, LogCapture | TracebackWatch):
            root.removeHandler(handler)
    if _capture is not None:
        root.setLevel(logging.DEBUG)


@pytest.fixture(scope="session")
def sdk03_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sdk03Agent]:
    """The a2a-sdk 0.3.x release's echo agent (``tests/interop/peers/sdk03_server.py``),
    started once for the whole run: client, CLI, proxy and interop tests share it."""
    with sdk03_agent_running(tmp_path_factory.mktemp("sdk03-agent")) as agent:
        yield agent


class TracebackWatch(logging.Handler):
    """Notes every record that carries a traceback (or stack), in one line each."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not (record.exc_info or record.exc_text or record.stack_info):
            return
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            return  # a task cancelled while a test tears its servers down: no fault
        if (
            record.name == "asyncio"
            and record.exc_info
            and isinstance(record.exc_info[1], RuntimeError)
            and "PollerCompletionQueue" in record.getMessage()
        ):
            # grpc.aio's process-wide poller waking the loop of an earlier test, which
            # pytest-asyncio has closed ("Event loop is closed"): an artefact of one loop
            # per test, not a fault of the test that happens to be running.
            return
        kind = ""
        if record.exc_info and record.exc_info[0] is not None:
            kind = f" ({record.exc_info[0].__name__})"
        self.found.append(f"{record.name} {record.levelname}: {record.msg!s:.120}{kind}")


@pytest.fixture(autouse=True)
def no_traceback_in_logs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test whose logs (set-up and teardown included) hold a traceback, unless it
    is marked ``server_fault``."""
    if request.node.get_closest_marker("server_fault") is not None:
        yield
        return
    watch = TracebackWatch()
    root = logging.getLogger()
    root.addHandler(watch)
    try:
        yield
    finally:
        root.removeHandler(watch)
    if watch.found:
        pytest.fail(
            "a traceback was logged (mark the test server_fault if our own code fails on"
            " purpose; bad input must never log one):\n" + "\n".join(watch.found[:10]),
            pytrace=False,
        )
