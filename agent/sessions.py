"""Sessions: one conversation per scope, kept as an append-only JSONL transcript.

A session's transcript lives at ``<workspace>/.a2a/sessions/<scope>.jsonl``: one JSON
object per line, each an OpenAI chat message (``role`` user, assistant or tool; tool
calls and tool results included) or an event line (``{"event": "question", ...}``: the
turn is waiting for the answer to a ``request_input`` call). Lines are only appended.
Loading skips lines that do not parse (a torn last line after a crash), and a tool call
left without a result (the process died mid-tool) gets a placeholder result, so a
transcript always replays as a valid conversation.

:class:`SessionStore` keeps the sessions in use in memory. A session idle for
``idle_timeout_s`` (by the injectable ``clock``) is dropped by :meth:`SessionStore.sweep`
and loaded again from its transcript the next time its scope is used; nothing is lost.
:meth:`Session.context` is what the model is sent: the newest turns that fit the budget
(whole turns; the current one always).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from a2a_gateway.local.layout import RELATIVE

log = logging.getLogger("a2a_gateway.agent.sessions")

Clock = Callable[[], float]
Message = dict[str, Any]

SESSIONS_DIR = RELATIVE.sessions
_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
INTERRUPTED_TOOL = "The run was interrupted before this tool finished."


def transcript_path(workspace: Path, scope: str) -> Path:
    """Where the transcript of ``scope`` lives (ValueError for an unsafe scope)."""
    if not _SCOPE.fullmatch(scope) or ".." in scope:
        raise ValueError(f"invalid session scope {scope!r}")
    return workspace / SESSIONS_DIR / f"{scope}.jsonl"


@dataclass(slots=True)
class Question:
    """A ``request_input`` call waiting for its answer; ``tag`` says who may answer
    (the A2A task id; empty for an owner session)."""

    tool_call_id: str
    tag: str = ""


def _size(message: Mapping[str, Any]) -> int:
    return len(orjson.dumps(message))


#: What a private value the model writes back becomes in its reply and the transcript.
SCRUBBED = "[secret]"


class TextScrubber:
    """Takes a session's private values out of streamed text: a value may be split
    across deltas, so the last ``len(longest) - 1`` characters wait for the next delta
    (or :meth:`flush`). With no private values it passes deltas through as they are."""

    __slots__ = ("_held", "_keep", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._keep = max((len(v) for v in session.private_values), default=1) - 1
        self._held = ""

    def feed(self, delta: str) -> str:
        if not self._session.private_values:
            return delta
        text = self._session.scrub(self._held + delta)
        cut = max(0, len(text) - self._keep)
        self._held = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        text, self._held = self._session.scrub(self._held), ""
        return text


class Session:
    """One conversation. Its messages are what the transcript holds (no system
    prompt). Use it under :attr:`lock`: one turn at a time."""

    __slots__ = (
        "_needs_newline",
        "_sizes",
        "busy",
        "last_used",
        "lock",
        "messages",
        "path",
        "private_values",
        "question",
        "scope",
        "workspace",
    )

    def __init__(self, workspace: Path, scope: str, now: float) -> None:
        self.workspace = workspace
        self.scope = scope
        self.path = transcript_path(workspace, scope)
        self.messages: list[Message] = []
        self._sizes: list[int] = []
        #: Values the model was given privately (secrets from the owner): in memory
        #: only, and taken out of what the model writes (see the runtime's scrubbing).
        self.private_values: set[str] = set()
        self.question: Question | None = None
        self.lock = asyncio.Lock()
        self.busy = 0
        self.last_used = now
        self._needs_newline = False

    # --- loading ----------------------------------------------------------------------

    def load(self) -> None:
        """Read the transcript (blocking: call it off the event loop)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        self._needs_newline = bool(data) and not data.endswith(b"\n")
        question: Question | None = None
        skipped = 0
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(record, dict):
                skipped += 1
            elif record.get("event") == "question" and isinstance(record.get("id"), str):
                question = Question(record["id"], str(record.get("tag", "")))
            elif record.get("role") in ("user", "assistant", "tool"):
                record.pop("ts", None)
                self.messages.append(record)
        if skipped:
            log.warning("%s: skipped %d unreadable line(s)", self.path, skipped)
        self._repair(question)
        self._sizes = [_size(m) for m in self.messages]

    def _repair(self, question: Question | None) -> None:
        """Give every unanswered tool call a placeholder result, placed before the next
        message that is not a tool result; the pending question (an unanswered
        ``request_input`` call at the very end) stays open."""
        repaired: list[Message] = []
        open_calls: list[str] = []

        def close_open() -> None:
            for call_id in open_calls:
                repaired.append(
                    {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_TOOL}
                )
            open_calls.clear()

        for message in self.messages:
            role = message.get("role")
            if role == "tool":
                call_id = message.get("tool_call_id")
                if call_id in open_calls:
                    open_calls.remove(call_id)
                repaired.append(message)
                continue
            close_open()
            repaired.append(message)
            calls = message.get("tool_calls") if role == "assistant" else None
            for call in calls if isinstance(calls, list) else ():
                call_id = call.get("id") if isinstance(call, dict) else None
                if isinstance(call_id, str):
                    open_calls.append(call_id)
        if question is not None and question.tool_call_id in open_calls:
            open_calls.remove(question.tool_call_id)
            self.question = question
        close_open()
        self.messages = repaired

    # --- writing ----------------------------------------------------------------------

    def append(self, *records: Message) -> None:
        """Add messages (or event lines) to the session and its transcript."""
        for record in records:
            if "role" in record:
                self.messages.append(dict(record))
                self._sizes.append(_size(record))
        self._write(records)

    def append_private(self, message: Message, stored: Message) -> None:
        """Add ``message`` to the conversation the model is sent while the transcript
        gets ``stored`` in its place: a secret the model may read but no file keeps
        (after a reload from the transcript, the model sees ``stored``)."""
        self.messages.append(dict(message))
        self._sizes.append(_size(message))
        self._write((stored,))

    def scrub(self, text: str) -> str:
        """``text`` with every private value replaced by :data:`SCRUBBED`."""
        for value in self.private_values:
            text = text.replace(value, SCRUBBED)
        return text

    def _write(self, records: tuple[Message, ...]) -> None:
        lines = bytearray()
        if self._needs_newline:
            lines += b"\n"  # never glue a line onto a torn one
        stamp = round(time.time(), 3)
        for record in records:
            lines += orjson.dumps({**record, "ts": stamp}) + b"\n"
        try:
            _append(self.path, lines)  # small append: page cache, not slow
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _append(self.path, lines)
        self._needs_newline = False

    def ask(self, question: Question) -> None:
        self.question = question
        self.append({"event": "question", "id": question.tool_call_id, "tag": question.tag})

    # --- what the model sees ----------------------------------------------------------

    def context(self, budget_chars: int) -> list[Message]:
        """The newest whole turns that fit ``budget_chars`` (JSON size); the current
        (last) turn is always there, whatever its size.

        A turn left out once is left out for good (the turns after it only add to the
        total), so it also leaves memory: a long conversation holds about one budget
        of messages, while its transcript keeps everything."""
        starts = [i for i, m in enumerate(self.messages) if m.get("role") == "user"]
        if not starts:
            return list(self.messages)
        first = starts[-1]
        total = sum(self._sizes[first:])
        for start in reversed(starts[:-1]):
            cost = sum(self._sizes[start:first])
            if total + cost > budget_chars:
                break
            total += cost
            first = start
        if first > 0:
            del self.messages[:first]
            del self._sizes[:first]
        return list(self.messages)


def _append(path: Path, data: bytes | bytearray) -> None:
    with open(path, "ab") as file:
        file.write(data)


class SessionStore:
    """The sessions in memory, by (workspace, scope)."""

    def __init__(self, *, idle_timeout_s: float = 1800.0, clock: Clock = time.monotonic) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.clock = clock
        self._sessions: dict[tuple[str, str], Session] = {}
        self._loading: dict[tuple[str, str], asyncio.Future[Session]] = {}
        self._last_sweep = clock()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, workspace: Path, scope: str) -> Session | None:
        """The session if it is in memory (no loading)."""
        return self._sessions.get((str(workspace), scope))

    async def open(self, workspace: Path, scope: str) -> Session:
        """The session of ``scope``, from memory or loaded from its transcript."""
        if self.clock() - self._last_sweep >= self.idle_timeout_s / 4:
            self.sweep()  # also without the runtime's sweeper task; not on every turn
        key = (str(workspace), scope)
        session = self._sessions.get(key)
        if session is None:
            pending = self._loading.get(key)
            if pending is not None:
                session = await asyncio.shield(pending)
            else:
                future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
                self._loading[key] = future
                try:
                    session = Session(workspace, scope, self.clock())
                    await asyncio.to_thread(session.load)
                    self._sessions[key] = session
                    future.set_result(session)
                except BaseException as exc:
                    future.set_exception(exc)
                    with contextlib.suppress(BaseException):
                        future.exception()  # retrieved: no "never retrieved" warning
                    raise
                finally:
                    del self._loading[key]
        session.last_used = self.clock()
        return session

    def sweep(self) -> int:
        """Drop sessions idle for longer than the timeout (not those in a turn)."""
        self._last_sweep = now = self.clock()
        deadline = now - self.idle_timeout_s
        idle = [
            key
            for key, session in self._sessions.items()
            if session.last_used <= deadline and not session.busy and not session.lock.locked()
        ]
        for key in idle:
            del self._sessions[key]
        return len(idle)


__all__ = [
    "INTERRUPTED_TOOL",
    "SCRUBBED",
    "Clock",
    "Message",
    "Question",
    "Session",
    "SessionStore",
    "TextScrubber",
    "transcript_path",
]
