"""The assistant runtime: one turn loop over an OpenAI-compatible model, with sessions,
the workspace's system prompt and a tool registry. It knows nothing of A2A: the
A2A adapter (:mod:`a2a_gateway.agent.assistant`) maps its events to agent outputs, and
hosts (``chat``, Telegram) use it directly for the owner's own conversations.

Host API::

    runtime = Runtime(ChatProvider(ProviderConfig(model="llama3.2")), RuntimeConfig())
    await runtime.start()                      # the idle-session sweeper
    tools = ToolRegistry(workspace_tools())    # plus the host's own tools
    async with contextlib.aclosing(
        runtime.run_turn("local-owner", workspace, "hello", tools=tools)
    ) as events:
        async for event in events:
            match event:
                case TextDelta(text): ...      # show it as it arrives
                case ToolStarted(name, arguments): ...
                case ToolFinished(name, is_error): ...
                case FileReady(filename, data, media_type): ...   # send_file
                case Finished(text, truncated): ...               # the turn's reply
                case Asked(question, schema): ...                 # request_input
                case SecretAsked(question, wait_s): ...  # the owner is asked (see below)
                case SecretAnswered(given): ...          # ...and the turn goes on
                case TurnFailed(text): ...                        # short, redacted
    await runtime.aclose()

Exactly one of :class:`Finished`, :class:`Asked` or :class:`TurnFailed` ends a turn.

A secret question (``request_input`` with ``secret``) does not end the turn: the host's
:class:`~.tools.interaction.SecretAsker` (``run_turn(secrets=...)``) asks the owner
while the turn waits (:class:`SecretAsked`, at most ``RuntimeConfig.secret_wait_s``),
then :class:`SecretAnswered` and the turn goes on. The value is the tool's result for
the model, is handed to :attr:`Runtime.on_secret` (the host registers it for log
redaction) and is never written: the transcript records only that a secret was given.
Without an asker the tool's result says no one can be asked.
After :class:`Asked`, the next ``run_turn`` on that scope with the same ``ask_tag``
is the answer: its text becomes the tool's result and the same turn goes on. A turn
with another tag (a new A2A task in the same context) first closes the question as
unanswered. Turns of one session run one at a time (a second waits for the first).

Stopping a turn: set ``cancelled`` or cancel the task iterating the events, or close
the generator; the provider's HTTP response is closed at once. Provider failures end
the turn with :class:`TurnFailed` and a redacted message; anything unexpected with
"The run failed unexpectedly." (details in the log). A model that keeps calling tools
is stopped after ``max_tool_rounds`` rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.trace import SpanKind

from a2a_gateway.protocol import tracing
from a2a_gateway.protocol.closing import Startable

from .base import Signal
from .defaults import (
    DEFAULT_CONTEXT_BUDGET_CHARS,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_TOOL_ROUNDS,
    DEFAULT_SECRET_WAIT_S,
)
from .metering import NULL_RUNTIME_METER, RuntimeMeter
from .prompt import PROMPT_FILE_CAP, frame, system_prompt
from .provider import ChatProvider, Delta, ProviderError, Reply, ToolCall, parse_arguments
from .sessions import Clock, Message, Question, Session, SessionStore, TextScrubber
from .tools.base import Tool, ToolContext, ToolError, ToolRegistry, ToolResult
from .tools.files import FileResult
from .tools.interaction import InputNeeded, SecretAsker, SecretQuestion

log = logging.getLogger("a2a_gateway.agent.runtime")

UNEXPECTED = "The run failed unexpectedly."
UNANSWERED = "No answer came: the conversation moved on to a new request."
TOOL_FAILED = "The tool failed unexpectedly."
#: The tool's result when the owner gave the secret (the value follows).
SECRET_GIVEN = (
    "The owner gave the value (it is not kept in the transcript; keep it out of your"
    " replies and files): "
)
#: What the transcript keeps in place of that result.
SECRET_KEPT_OUT = "[The owner gave a secret here; its value is not kept in the transcript.]"
NO_SECRET = (
    "No value was given: the owner did not answer within {wait:g} s, or declined."
    " Go on without it, or tell the one you are talking with."
)
NO_SECRET_ASKER = "No person can be asked for a secret here."
SECRET_STOPPED = "The turn was stopped before the owner answered."
#: How much longer than ``secret_wait_s`` the runtime lets an asker take.
SECRET_GRACE_S = 5.0


# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text of the reply, as the model writes it."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """The model called a tool (arguments as parsed; empty when they did not parse)."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call returned (``is_error``: its result is an error the model will read)."""

    name: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class FileReady:
    """``send_file``: a file for the one the session talks with."""

    filename: str
    data: bytes
    media_type: str = ""

    def __repr__(self) -> str:
        return f"FileReady({self.filename!r}, {len(self.data)} bytes)"


@dataclass(frozen=True, slots=True)
class Finished:
    """The turn ended; ``text`` is the whole reply (``truncated``: the model's length
    limit cut it, which still counts as finished)."""

    text: str
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Asked:
    """``request_input``: the turn waits for an answer (``schema``: the JSON Schema of
    the answer, when the model gave one)."""

    question: str
    schema: Mapping[str, Any] | None = None
    #: The caller must grant something first (a PACT scope): auth-required, not input.
    authorization: bool = False


@dataclass(frozen=True, slots=True)
class SecretAsked:
    """``request_input`` with ``secret``: the owner is being asked (through the host's
    asker); the turn waits at most ``wait_s``, then :class:`SecretAnswered`."""

    question: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class SecretAnswered:
    """The owner gave the value (``given``) or none came; never the value itself."""

    given: bool


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """The turn failed; ``text`` is short, redacted and safe to show."""

    text: str


TurnEvent = (
    TextDelta
    | ToolStarted
    | ToolFinished
    | FileReady
    | Finished
    | Asked
    | SecretAsked
    | SecretAnswered
    | TurnFailed
)

#: The turn outcome (:data:`~.metering.TURN_OUTCOMES`) each ending event means.
_OUTCOME_OF: dict[type, str] = {Finished: "finished", Asked: "asked", TurnFailed: "failed"}


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """``context_budget_chars``: the most conversation (as JSON characters) sent to the
    model per request; the oldest turns are dropped first, the system prompt and the
    current turn never."""

    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    context_budget_chars: int = DEFAULT_CONTEXT_BUDGET_CHARS
    prompt_file_cap: int = PROMPT_FILE_CAP
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    sweep_interval_s: float = 60.0
    #: How long a secret question waits for the owner's value.
    secret_wait_s: float = DEFAULT_SECRET_WAIT_S


@dataclass(slots=True)
class _Turn:
    session: Session
    tools: ToolRegistry
    context: ToolContext
    secrets: SecretAsker | None = None
    texts: list[str] = field(default_factory=list)


class Runtime(Startable):
    """Runs turns of sessions against one provider. Share one per process."""

    def __init__(
        self,
        provider: ChatProvider,
        config: RuntimeConfig | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.provider = provider
        self.config = config or RuntimeConfig()
        self.sessions = SessionStore(idle_timeout_s=self.config.idle_timeout_s, clock=clock)
        self._sweeper: asyncio.Task[None] | None = None
        #: Where turns, model calls and tool calls are counted (a host's metrics).
        self.meter: RuntimeMeter = NULL_RUNTIME_METER
        #: Called with each secret value the owner gives (hosts register it for log
        #: redaction; the agent layer cannot reach the registry).
        self.on_secret: Callable[[str], None] = _ignore

    async def start(self) -> None:
        """Start sweeping idle sessions out of memory (``aclose`` stops it)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_loop(), name="session-sweeper")

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self.provider.aclose()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            self.sessions.sweep()

    async def run_turn(
        self,
        scope: str,
        workspace: Path,
        text: str,
        *,
        files: Sequence[Path] = (),
        tools: ToolRegistry | None = None,
        framing: str | None = None,
        caller: str | None = None,
        hops: int = 0,
        cancelled: Signal | None = None,
        ask_tag: str = "",
        secrets: SecretAsker | None = None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """Run one turn of the session ``scope`` in ``workspace`` (see the module doc).

        ``text`` is the new message (or the answer to the session's question);
        ``files`` are workspace files that came with it (listed for the model);
        ``framing`` is put before the text (untrusted inbound messages); ``caller``,
        ``hops`` and ``cancelled`` reach the tools through their context; ``secrets``
        asks the owner for the values of secret questions.
        """
        if not workspace.is_absolute():
            raise ValueError("workspace: give an absolute (resolved) path")
        session = await self.sessions.open(workspace, scope)
        context = ToolContext(workspace, scope, caller, hops, cancelled or Signal())
        outcome = "stopped"  # until an event that ends the turn says otherwise
        async with session.lock:
            session.busy += 1
            try:
                turn = _Turn(session, tools or ToolRegistry(), context, secrets)
                content = frame(framing, _with_files(text, files, workspace))
                self._take_message(session, content, ask_tag)
                async for event in self._loop(turn, ask_tag):
                    outcome = _OUTCOME_OF.get(type(event), outcome)
                    yield event
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception:
                log.exception("turn of session %s failed", scope)
                outcome = "failed"
                yield TurnFailed(UNEXPECTED)
            finally:
                self.meter.turn(outcome)
                session.busy -= 1
                session.last_used = self.sessions.clock()

    @staticmethod
    def _take_message(session: Session, content: str, ask_tag: str) -> None:
        question = session.question
        if question is not None:
            session.question = None
            if question.tag == ask_tag:
                session.append(
                    {"role": "tool", "tool_call_id": question.tool_call_id, "content": content}
                )
                return
            session.append(
                {"role": "tool", "tool_call_id": question.tool_call_id, "content": UNANSWERED}
            )
        session.append({"role": "user", "content": content})

    async def _loop(self, turn: _Turn, ask_tag: str) -> AsyncIterator[TurnEvent]:
        session = turn.session
        config = self.config
        specs = turn.tools.specs()
        rounds = 0
        while True:
            prompt = await system_prompt(session.workspace, config.prompt_file_cap)
            messages = [{"role": "system", "content": prompt}]
            messages += session.context(config.context_budget_chars)
            reply: Reply | None = None
            separator = "\n\n" if any(turn.texts) else ""
            written: list[str] = []
            scrubber = TextScrubber(session)  # a secret the model repeats is not shown
            model_call = _ModelCall(self.meter)
            try:
                with tracing.span(
                    f"chat {self.provider.config.model}",
                    kind=SpanKind.CLIENT,
                    attributes={"gen_ai.request.model": self.provider.config.model},
                ):
                    async with contextlib.aclosing(self.provider.stream(messages, specs)) as stream:
                        async for item in stream:
                            model_call.arrived()
                            if isinstance(item, Delta):
                                shown = scrubber.feed(item.text)
                                if not shown:
                                    continue
                                written.append(shown)
                                yield TextDelta(separator + shown if separator else shown)
                                separator = ""
                            else:
                                reply = item
                    if rest := scrubber.flush():
                        written.append(rest)
                        yield TextDelta(separator + rest if separator else rest)
            except ProviderError as exc:
                model_call.ended(exc.kind)
                if written:  # keep what the caller already saw
                    session.append({"role": "assistant", "content": "".join(written)})
                yield TurnFailed(str(exc))
                return
            except (asyncio.CancelledError, GeneratorExit):
                if written:
                    session.append({"role": "assistant", "content": "".join(written)})
                raise
            assert reply is not None  # the provider always ends with a Reply
            model_call.ended(None)
            if reply.usage is not None:
                self.meter.tokens(*reply.usage)
            truncated = reply.finish_reason == "length"
            calls = () if truncated else reply.tool_calls
            reply_text = session.scrub(reply.text)
            turn.texts.append(reply_text)
            message: dict[str, Any] = {"role": "assistant", "content": reply_text or None}
            if calls:
                message["tool_calls"] = [call.to_message() for call in calls]
            session.append(message)
            if not calls:
                yield Finished("\n\n".join(t for t in turn.texts if t), truncated)
                return
            rounds += 1
            if rounds > config.max_tool_rounds:
                session.append(
                    *(
                        {
                            "role": "tool",
                            "tool_call_id": c.id,
                            "content": "Not run: too many tool rounds.",
                        }
                        for c in calls
                    )
                )
                yield TurnFailed(
                    f"The model kept calling tools: stopped after {config.max_tool_rounds} rounds."
                )
                return
            asked: tuple[ToolCall, InputNeeded] | None = None
            for call in calls:
                if asked is not None and call.name == "request_input":
                    result: ToolResult = ToolResult("Ask one question at a time.", is_error=True)
                else:
                    arguments = _arguments(call)
                    yield ToolStarted(call.name, arguments or {})
                    try:
                        with tracing.span(f"tool {call.name}", attributes={"tool": call.name}):
                            result = await self._call(turn, call, arguments)
                    except InputNeeded as exc:
                        if exc.secret and not exc.authorization:
                            async for event in self._ask_secret(turn, call, exc):
                                yield event
                        else:
                            asked = (call, exc)
                        continue
                    yield ToolFinished(call.name, result.is_error)
                if isinstance(result, FileResult):
                    yield FileReady(result.filename, result.data, result.media_type)
                content = f"Error: {result.text}" if result.is_error else result.text
                session.append({"role": "tool", "tool_call_id": call.id, "content": content})
            if asked is not None:
                call, needed = asked
                session.ask(Question(call.id, ask_tag))
                yield Asked(needed.question, needed.schema, needed.authorization)
                return

    async def _ask_secret(
        self, turn: _Turn, call: ToolCall, needed: InputNeeded
    ) -> AsyncIterator[TurnEvent]:
        """Ask the owner for a secret through the turn's asker and give the model the
        value as the tool's result; the transcript keeps only that it was given."""
        session = turn.session
        result: Message = {"role": "tool", "tool_call_id": call.id}
        asker = turn.secrets
        if asker is None:
            session.append({**result, "content": f"Error: {NO_SECRET_ASKER}"})
            yield ToolFinished(call.name, is_error=True)
            return
        wait_s = self.config.secret_wait_s
        yield SecretAsked(needed.question, wait_s)
        context = turn.context
        question = SecretQuestion(context.workspace, context.caller, needed.question, wait_s)
        value: str | None = None
        try:
            async with asyncio.timeout(wait_s + SECRET_GRACE_S):
                value = await asker.ask_secret(question)
        except TimeoutError:
            value = None
        except asyncio.CancelledError:  # the turn was stopped: the call still gets a result
            session.append({**result, "content": f"Error: {SECRET_STOPPED}"})
            raise
        except Exception:
            log.exception("asking the owner for a secret failed")
            value = None
        if value:
            self.on_secret(value)
            session.private_values.add(value)
            session.append_private(
                {**result, "content": SECRET_GIVEN + value}, {**result, "content": SECRET_KEPT_OUT}
            )
        else:
            session.append({**result, "content": "Error: " + NO_SECRET.format(wait=wait_s)})
        yield SecretAnswered(bool(value))
        yield ToolFinished(call.name, is_error=not value)

    async def _call(
        self, turn: _Turn, call: ToolCall, arguments: dict[str, Any] | None
    ) -> ToolResult:
        tool = turn.tools.get(call.name)
        if tool is None:
            self.meter.tool_call("", "no_such_tool")  # never the name: the model wrote it
            return ToolResult(f"There is no tool named {call.name!r}.", is_error=True)
        result = await self._call_tool(turn, tool, call, arguments)
        self.meter.tool_call(call.name, "error" if result.is_error else "ok")
        return result

    async def _call_tool(
        self, turn: _Turn, tool: Tool, call: ToolCall, arguments: dict[str, Any] | None
    ) -> ToolResult:
        if arguments is None:
            return ToolResult("The arguments are not a JSON object.", is_error=True)
        try:
            return await tool.call(arguments, turn.context)
        except ToolError as exc:
            return ToolResult(str(exc) or TOOL_FAILED, is_error=True)
        except InputNeeded:
            raise
        except Exception:
            log.exception("tool %s failed", call.name)
            return ToolResult(TOOL_FAILED, is_error=True)


class _ModelCall:
    """The timing of one model call, reported once to the meter when it ends."""

    __slots__ = ("first", "meter", "started")

    def __init__(self, meter: RuntimeMeter) -> None:
        self.meter = meter
        self.started = time.monotonic()
        self.first: float | None = None

    def arrived(self) -> None:
        if self.first is None:
            self.first = time.monotonic() - self.started

    def ended(self, error: str | None) -> None:
        self.meter.model_call(self.first, time.monotonic() - self.started, error)


def _ignore(value: str) -> None:
    pass


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        return parse_arguments(call)
    except ValueError:
        return None


def _with_files(text: str, files: Sequence[Path], workspace: Path) -> str:
    if not files:
        return text
    names = []
    for path in files:
        try:
            names.append(str(path.resolve().relative_to(workspace)))
        except ValueError:
            names.append(path.name)
    listing = "\n".join(f"- {name}" for name in names)
    return f"{text}\n\nFiles received (in the workspace):\n{listing}".lstrip()


def dumps_event(event: TurnEvent) -> str:
    """A one-line description of an event (for logs and debugging; never file bytes)."""
    if isinstance(event, FileReady):
        return repr(event)
    return orjson.dumps({"type": type(event).__name__, **_fields(event)}).decode()


def _fields(event: TurnEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in event.__dataclass_fields__}


__all__ = [
    "UNEXPECTED",
    "Asked",
    "FileReady",
    "Finished",
    "Runtime",
    "RuntimeConfig",
    "SecretAnswered",
    "SecretAsked",
    "TextDelta",
    "ToolFinished",
    "ToolStarted",
    "TurnEvent",
    "TurnFailed",
]
