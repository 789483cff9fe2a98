"""The agent interface: what runs one turn of a task.

The task engine (``a2a_gateway.server.engine``) owns tasks, their states, streams and
storage; an agent only answers turns. For each user message the engine builds a
:class:`Turn` (the message, the task (read-only), the caller, the context id and a
cancellation signal) and iterates :meth:`Agent.run`, which yields outputs:

- :class:`TextChunk`: text for the task's ``response`` artifact (each run replaces it;
  the stored artifact holds the run's text as one text part, each stream event one chunk);
- :class:`ArtifactChunk`: any other artifact, or a chunk of one (``append``/``last_chunk``);
- :class:`Progress`: a WORKING status message (progress text);
- :class:`File`: a file for the caller (bytes, or a path in the workspace); the engine
  sends it as an artifact with one file part (inline bytes, ``mediaType``,
  ``filename``). A file over the server's cap (10 MB by default) is skipped and the
  task's final status message says so;
- one ending, after which nothing more is read: :class:`Completed`,
  :class:`InputRequired` (a question; the caller's next message on the task continues
  it), :class:`AuthRequired`, :class:`Failed`, :class:`Rejected`. (An
  ``AuthRequired(..., resumes=True)`` is not an ending: see the class.)

A run that ends without an ending is completed. Raising :class:`AgentError` fails the
task with the (redacted) error text; any other exception fails it with "The run failed
unexpectedly." and the details go to the log only.

Files the caller sent (``raw`` bytes or ``url`` parts) are saved to the caller's
workspace inbox before the run starts; ``turn.files`` lists where, in part order. A
file the engine refuses (too large, not downloadable) fails the task before the agent
runs. In the task's stored history the ``raw`` bytes of such parts are emptied once
saved (``metadata["a2a-gateway.savedAs"]`` names the file in the workspace).

The public agent card can carry the agent's own name, description and skills:
override :meth:`Agent.profile` (settings given to ``serve`` still win).

Before a *new* task exists, :meth:`Agent.reply` may answer with a plain Message instead
(the A2A "message reply": no task is created). Continuations never get one.

Cancellation: when the run must stop (CancelTask, the run timeout, server shutdown),
``turn.cancelled`` is set and the run's asyncio task is cancelled, so the agent sees
``CancelledError`` at its next ``await`` (clean up in ``finally``). Outputs yielded after
that are ignored.

Example::

    class Shout(Agent):
        async def run(self, turn: Turn) -> AsyncIterator[Output]:
            text = turn.text()
            if not text:
                yield InputRequired("What should I shout?")
                return
            yield TextChunk(text.upper(), last=True)
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import heapq
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.json_schemas import is_result_schema, part_value
from lf.a2a.v1 import a2a_pb2 as pb

#: Name of the artifact built from :class:`TextChunk` outputs.
RESPONSE_ARTIFACT = "response"
#: The artifact a PACT-delegated turn reports its scoped tools in (``toolsRun``,
#: ``missingScopes``): for the PACT service, never shown in its replies.
DELEGATION_ARTIFACT = "pact.delegation"
#: How :meth:`Turn.content_text` introduces a caller's result schema.
RESULT_SCHEMA_LABEL = "[The caller wants the answer as JSON matching this JSON Schema:]"
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


class Signal:
    """A one-shot flag to wait on (``asyncio.Event``'s API, a tenth of its memory: the
    engine holds one per live run, and the bench holds a thousand runs open)."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Return once the signal is set (at once if it already is)."""
        if self._set:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)

    async def wait_at_most(self, seconds: float) -> None:
        """Return once the signal is set or ``seconds`` have passed, whichever comes
        first. The waits of every signal share one timer (:class:`_Deadlines`): an
        ``asyncio.timeout`` each costs a timer handle and its scope (~0.7 KB a wait
        for as long as it lasts; the bench holds a thousand runs waiting)."""
        await self.until(seconds)

    def until(self, seconds: float) -> asyncio.Future[None]:
        """:meth:`wait_at_most` as a future to await (no coroutine frame held while
        it waits): done once the signal is set or ``seconds`` have passed; cancelling
        it (as cancelling the task that awaits it does) ends the wait."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        if self._set:
            waiter.set_result(None)
            return waiter
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        waiter.add_done_callback(self._forget, context=_FORGET_CONTEXT)
        _Deadlines.of(loop).add(loop.time() + seconds, waiter)
        return waiter

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        """A wait ended (its deadline, its cancellation, the signal): not a waiter now."""
        if self._waiters is not None and waiter in self._waiters:
            self._waiters.remove(waiter)


#: The context :meth:`Signal._forget` runs in (it reads no context variable): one for
#: all, not a copy of the current one per wait (``add_done_callback``'s default).
_FORGET_CONTEXT = contextvars.Context()


#: The heap size at which :class:`_Deadlines` first sweeps out the waits ended early.
_FIRST_SWEEP = 64


class _Deadlines:
    """One event loop's timer for :meth:`Signal.wait_at_most`: the waiters by deadline
    (a heap), one timer handle at the nearest. A waiter done early (its signal set, its
    task cancelled) leaves its entry until its deadline (it is skipped then) or until
    the heap, grown to twice what was live at the last sweep, is swept of them: at
    most about twice the waits pending, however many end early."""

    __slots__ = ("_handle", "_heap", "_loop", "_order", "_sweep_at")

    _current: _Deadlines | None = None

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._order = 0  # ties in time keep their order (futures do not compare)
        self._sweep_at = _FIRST_SWEEP

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Deadlines:
        current = cls._current
        if current is None or current._loop is not loop:
            current = cls._current = cls(loop)
        return current

    def add(self, when: float, waiter: asyncio.Future[None]) -> None:
        if len(self._heap) >= self._sweep_at:
            # Only entries go: the nearest pending one is the same or later, and the
            # timer set for the old nearest finds nothing due and sets the next.
            self._heap = [entry for entry in self._heap if not entry[2].done()]
            heapq.heapify(self._heap)
            self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._heap))
        self._order += 1
        heapq.heappush(self._heap, (when, self._order, waiter))
        if self._heap[0][2] is waiter:  # the nearest now
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._loop.call_at(when, self._due)

    def _due(self) -> None:
        self._handle = None
        heap = self._heap
        now = self._loop.time() + 0.001  # a timer may fire a little early (clock steps)
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done():
                waiter.set_result(None)
        if heap:
            self._handle = self._loop.call_at(heap[0][0], self._due)


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a task, as the agent sees it. Treat every field as read-only.

    ``task`` is the live task (it changes as the run's outputs are applied) and
    includes this turn's message as the last history entry; it is ``None`` only in
    :meth:`Agent.reply` (no task exists yet). ``cancelled`` is set when the run must
    stop. ``hops`` is the ``a2a-gateway.hops`` count of the inbound request: an agent
    that calls other agents sends ``hops + 1``. ``accepted_output_modes`` and
    ``metadata`` (as JSON values) come from the SendMessage request. ``files`` are
    the absolute paths of the files the message carried, saved in the caller's
    workspace inbox (empty in :meth:`Agent.reply`: files are saved for tasks only).
    ``payload`` is the request's params as compact ProtoJSON (unknown fields were
    dropped when it was parsed), only for an agent that :attr:`Agent.wants_payload`:
    file bytes and push secrets left out (the files are in ``files``).
    """

    message: pb.Message
    task: pb.Task | None
    caller: Caller
    context_id: str
    cancelled: Signal
    hops: int = 0
    accepted_output_modes: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=lambda: _NO_METADATA)
    files: tuple[Path, ...] = ()
    payload: str = ""

    def text(self) -> str:
        """The text of the message's text parts, joined by newlines."""
        return "\n".join(p.text for p in self.message.parts if p.WhichOneof("content") == "text")

    def content_text(self) -> str:
        """The text parts and the data parts (as compact JSON: a structured answer; a
        caller's result schema says what it is), in message order, joined by newlines."""
        lines: list[str] = []
        for part in self.message.parts:
            kind = part.WhichOneof("content")
            if kind == "text":
                lines.append(part.text)
            elif kind == "data":
                # Keys sorted: a Struct's map order differs from run to run (upb).
                value = part_value(part)
                data = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
                lines.append(f"{RESULT_SCHEMA_LABEL} {data}" if is_result_schema(part) else data)
        return "\n".join(lines)

    def first_text(self) -> str:
        """The first text part of the message (``""`` when it has none)."""
        for part in self.message.parts:
            if part.WhichOneof("content") == "text":
                return part.text
        return ""

    def session_scope(self, prefix: str) -> str:
        """The conversation scope of this turn for an agent that keeps sessions."""
        return session_scope(prefix, self.caller, self.context_id)


def session_scope(prefix: str, caller: Caller, context_id: str) -> str:
    """``<prefix>-a2a-<caller>_<contextId>``: one session per (caller, context).

    Caller names are ``[a-z0-9-]`` (no ``_``) and context ids are checked by the
    engine, so two callers or two contexts can never share a scope. The host supplies
    the prefix (the Telegram host uses ``telegram-<chatId>``).
    """
    return f"{prefix}-a2a-{caller.name}_{context_id}"


# --- outputs --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextChunk:
    """Text for the ``response`` artifact: the first chunk of a run replaces the
    artifact, later ones are appended to its text (one text part in the stored task;
    a stream event per chunk, ``append: true``); ``last`` marks the last chunk."""

    text: str
    last: bool = False


@dataclass(frozen=True, slots=True)
class ArtifactChunk:
    """An artifact (``append=False``: new, or replaces the one with its id) or a chunk
    appended to one. An empty ``artifact_id`` gets a fresh one."""

    artifact: pb.Artifact
    append: bool = False
    last_chunk: bool = False


@dataclass(frozen=True, slots=True)
class Progress:
    """A WORKING status with this text as its message."""

    text: str


@dataclass(frozen=True, slots=True)
class File:
    """A file for the caller: ``data``, or a ``path`` to read (relative paths are
    relative to the caller's workspace; a path must resolve inside it). It becomes a
    new artifact named after the file, with one part holding the bytes, ``filename``
    (sanitised) and ``mediaType`` (guessed from the name when empty)."""

    filename: str
    data: bytes | None = None
    path: Path | None = None
    media_type: str = ""

    def __repr__(self) -> str:  # never dump the bytes
        size = len(self.data) if self.data is not None else None
        return f"File({self.filename!r}, data={size} bytes, path={self.path!r})"


@dataclass(frozen=True, slots=True)
class Completed:
    """The run ended normally; ``text``, when set, becomes the status message."""

    text: str = ""


@dataclass(frozen=True, slots=True)
class InputRequired:
    """Ask the caller: the task waits (INPUT_REQUIRED) with ``question`` as its status
    message; the caller's next message with this task's id continues it. ``schema``,
    when given, is the JSON Schema of the expected answer: the status message carries
    it as a data part (``{"schema": ...}``, tagged ``everruns/ask_user`` in its media
    type and metadata) after the question, and a data part in the answer must match it
    (else InvalidParams, and the task keeps waiting)."""

    question: str
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AuthRequired:
    """The task needs credentials (AUTH_REQUIRED); ``text`` explains which.

    ``resumes``: the credentials come out of band (a person the host asks), so this is
    not an ending: the task shows AUTH_REQUIRED (a blocking send returns it, a stream
    of SendStreamingMessage ends with it) while the run goes on, a caller's message to
    the task meanwhile is UnsupportedOperation, and the run's next output puts the task
    back to WORKING (a :class:`Progress` with its text)."""

    text: str
    resumes: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """The run failed; ``text`` is shown to the caller as is (no secrets in it)."""

    text: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """The agent declines the task (REJECTED)."""

    text: str


Ending = Completed | InputRequired | AuthRequired | Failed | Rejected
Output = TextChunk | ArtifactChunk | Progress | File | Ending
ENDINGS: tuple[type, ...] = (Completed, InputRequired, AuthRequired, Failed, Rejected)


class AgentError(Exception):
    """A known failure of a run (a provider error, a bad file, ...). The task fails
    with ``redact_error(str(error))`` as its status message."""


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """How a hosted agent describes itself on the public agent card. Every field is
    optional (empty: the gateway's default); a ``--card-name``, ``--card-description``
    or ``--card-skills`` setting wins over it. Public: put nothing private here."""

    name: str = ""
    description: str = ""
    skills: tuple[pb.AgentSkill, ...] = ()


class Agent(abc.ABC):
    """What answers turns. One instance serves every task, concurrently.

    ``streaming`` False (an agent whose turns cannot be streamed, such as the assistant
    with one shared session per caller) makes every streaming send UnsupportedOperation
    and the card say ``streaming: false``. ``wants_payload`` True asks the engine for
    :attr:`Turn.payload` (it costs an encoding per turn, so it is off by default).
    """

    streaming: bool = True
    wants_payload: bool = False

    def profile(self) -> AgentProfile | None:
        """The agent's name, description and skills for the public card, read once at
        start-up (None, the default: the gateway's settings and defaults)."""
        return None

    async def reply(self, turn: Turn) -> pb.Message | None:
        """Answer a new message with a plain Message (no task), or ``None`` (default)
        to run a task. ``turn.task`` is ``None`` here."""
        return None

    @abc.abstractmethod
    def run(self, turn: Turn) -> AsyncIterator[Output]:
        """Run one turn (an async generator yielding outputs)."""

    def answer_now(self, turn: Turn) -> Sequence[Output] | None:
        """The turn's outputs when the agent has them at once, without waiting for
        anything (None, the default: :meth:`run` it). They must be exactly what
        :meth:`run` would yield for this turn, and asking must change nothing: the
        engine may then drive a blocking send's run in the sender's own task, with no
        task of its own (the same states and bytes, less work a send), and runs the
        turn with :meth:`run` when this answers None. A subclass that overrides
        :meth:`run` but not this is always run (:func:`answers_at_once`): its parent's
        answers do not know its run."""
        return None


def answers_at_once(agent: Agent) -> bool:
    """Whether the engine may ask ``agent.answer_now``: it is overridden, by the class
    that defines the agent's ``run`` or one below it."""
    cls = type(agent)
    answers = next(c for c in cls.__mro__ if "answer_now" in c.__dict__)
    runs = next(c for c in cls.__mro__ if "run" in c.__dict__)
    return answers is not Agent and issubclass(answers, runs)


__all__ = [
    "DELEGATION_ARTIFACT",
    "ENDINGS",
    "RESPONSE_ARTIFACT",
    "Agent",
    "AgentError",
    "AgentProfile",
    "ArtifactChunk",
    "AuthRequired",
    "Completed",
    "Ending",
    "Failed",
    "File",
    "InputRequired",
    "Output",
    "Progress",
    "Rejected",
    "Signal",
    "TextChunk",
    "Turn",
    "answers_at_once",
]
