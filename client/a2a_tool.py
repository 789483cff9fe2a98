"""The ``a2a`` tool: the owner's assistant calls the agents of agents.json.

One tool with an ``action``:

- ``agents`` lists every agent with its card (10 s each, concurrently): description, card
  name, streaming/push, skills with up to three examples, or ``unreachable (<reason>)``;
- ``send`` sends ``message``, ``data`` (a JSON value, one data part) and/or ``files`` to
  ``agent`` (``contextId`` continues a conversation, ``taskId`` answers its question or
  adds to a task still running: an agent that refuses says so in its error, shown as
  is) with returnImmediately and the hop count + 1, never streamed, then waits for the
  task to settle, per ``mode``: ``foreground`` up to ``max_wait_s`` (600 s), ``background``
  not at all, none given up to ``wait_s`` (60 s; 0 hands over at once). It subscribes
  when the card streams (polling when the stream fails or ends early), else polls
  GetTask every second. A task still running then is handed to a watch (also when the
  turn is aborted or the agent stops answering once the task exists);
- ``resultSchema`` (with send) asks for a structured result (:mod:`.structured`): the
  schema goes out with the message, a completed answer is checked, one that does not
  match is asked for once more in the same conversation (a new task referring to the
  first: a completed task takes no more messages), and a second mismatch is reported with
  the answer. A watch of such a task checks before it delivers;
- ``wait`` waits for task ``taskId`` up to ``seconds`` (at most, and by default,
  ``max_wait_s``), with the result shape of ``send``; a result it gives is not delivered
  again by a watch;
- ``status`` reads a task (the same result shape as ``send``; a task still running is
  watched);
- ``cancel`` stops this conversation's watch of the task, then cancels it; when the agent
  cannot be reached (or rejects the key, or its card is unusable) the watch is re-armed.

A question asked with a schema (a data part tagged ``everruns/ask_user``) is shown with
its schema, so the model can answer with ``data``. Every wait is on the registry's clock.

Only owner sessions get this tool (a host never adds it to an inbound caller's session,
and a call with a caller in its context is refused). Every remote call is bounded by
60 s. Keys never appear in results or errors: every text from the agent's side passes the
entry's redactor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.tools.base import Tool, ToolContext, ToolError, ToolResult
from a2a_gateway.agent.tools.files import confine
from a2a_gateway.local.files import DEFAULT_MAX_FILE_BYTES, guess_media_type
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.json_schemas import data_part, schema_problem

from .agents_file import AGENTS_FILE, AgentEntry, read_agents, read_raw
from .clock import DEFAULT_MAX_WAIT_S, DEFAULT_WAIT_S
from .directory import describe, fetch_agent_cards
from .errors import AuthRejected, CardError, Timeout, Unreachable
from .guarded_http import open_agent
from .messages import send_request
from .pending import PendingRecord
from .remote import RemoteService
from .results import (
    SETTLED,
    STILL_WATCHED,
    is_settled,
    message_result,
    save_task_files,
    task_result,
)
from .structured import Checked, check_message, check_task, reask_text, stamp_schema
from .watches import CALL_TIMEOUT_S, WatchRegistry

log = logging.getLogger(__name__)
R = TypeVar("R")

#: Poll interval while send waits on an agent that does not stream.
SEND_POLL_S = 1.0
ACTIONS = ("agents", "send", "wait", "status", "cancel")
MODES = ("foreground", "background")

DESCRIPTION = (
    "Call other A2A agents listed in the workspace's .a2a/agents.json. action=agents lists"
    " them with their skills. action=send sends `message`, `data` (a JSON value) and/or"
    " workspace `files` to `agent` (pass `contextId` to continue a conversation with it,"
    " `taskId` to answer its question or to add to a task still running). Its `mode`:"
    " foreground when you need the answer to go on (it waits until the task settles, up"
    " to a bound), background when the task may take long and you can do other things"
    " meanwhile (it returns the taskId at once and the result is delivered to this"
    " conversation later). `resultSchema` (a JSON Schema) asks for a structured result:"
    " the answer is checked against it and asked for once more if it does not match."
    " action=wait waits for task `taskId` (at most `seconds`) when you need a background"
    " result now; action=status reads it without waiting; action=cancel cancels it. A task"
    " still running after a wait is watched and its result delivered later."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "agent": {"type": "string", "description": "the agent's name in agents.json"},
        "message": {"type": "string", "description": "text to send"},
        "data": {"description": "a JSON value to send as a data part (a structured answer)"},
        "files": {
            "type": "array",
            "items": {"type": "string"},
            "description": "workspace paths of files to attach",
        },
        "contextId": {"type": "string"},
        "taskId": {"type": "string"},
        "mode": {"type": "string", "enum": list(MODES)},
        "resultSchema": {"type": "object", "description": "JSON Schema the result must match"},
        "seconds": {"type": "number", "description": "wait: the most seconds to wait"},
    },
    "required": ["action"],
}


class A2ATool(Tool):
    name = "a2a"
    description = DESCRIPTION
    parameters = PARAMETERS

    def __init__(
        self,
        watches: WatchRegistry,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        allow_private_urls: bool = False,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        call_timeout_s: float = CALL_TIMEOUT_S,
        inbound: bool = False,
    ) -> None:
        """``inbound``: the tool of inbound callers' turns (``serve --llm``, callers with
        ``"delegate": true``): it may be called with a caller in its context, and it hands
        no task to a watch (no conversation is there to deliver a later result to): a task
        still running at the wait's bound is reported as such, to be waited on again."""
        self.inbound = inbound
        self.watches = watches
        self.wait_s = wait_s
        self.max_wait_s = max_wait_s
        self.allow_private_urls = allow_private_urls
        self.max_file_bytes = max_file_bytes
        self.call_timeout_s = call_timeout_s

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if context.caller is not None and not self.inbound:
            raise ToolError("the a2a tool is only available in the owner's own conversations")
        action = arguments.get("action")
        if action == "agents":
            return ToolResult(await self._agents(context.workspace))
        if action not in ACTIONS:
            raise ToolError(f"action must be one of: {', '.join(ACTIONS)}")
        entry = await self._entry(context.workspace, arguments.get("agent"))
        redact = Redactor([entry.key])
        try:
            if action == "send":
                text = await self._send(entry, arguments, context, redact)
            elif action == "wait":
                task_id = _text(arguments, "taskId", required=True)
                text = await self._wait_action(entry, task_id, arguments, context, redact)
            elif action == "status":
                task_id = _text(arguments, "taskId", required=True)
                text = await self._status(entry, task_id, context)
            else:
                task_id = _text(arguments, "taskId", required=True)
                text = await self._cancel(entry, task_id, context)
        except ToolError as exc:
            raise ToolError(redact(str(exc))) from None
        except A2AError as exc:
            raise ToolError(redact(_explain(entry.name, exc))) from None
        # The agent's answers, questions and file names pass the redactor as errors do.
        return ToolResult(redact(text))

    # --- actions ------------------------------------------------------------------------

    async def _agents(self, workspace: Path) -> str:
        agents = await asyncio.to_thread(read_agents, workspace)
        lines: list[str] = []
        if agents.error:
            lines.append(agents.error)
        elif not agents.agents:
            lines.append(f"No agents are configured ({AGENTS_FILE} lists none).")
        results = await fetch_agent_cards(
            list(agents.agents.values()), allow_private_urls=self.allow_private_urls
        )
        lines += [describe(result) for result in results]
        lines += [f"skipped: {reason}" for reason in agents.skipped]
        return "\n".join(lines)

    async def _send(
        self,
        entry: AgentEntry,
        arguments: Mapping[str, Any],
        context: ToolContext,
        redact: Redactor,
    ) -> str:
        bound = self._send_bound(arguments.get("mode"))
        schema = _result_schema(arguments.get("resultSchema"))
        text = _text(arguments, "message")
        parts: list[pb.Part] = [pb.Part(text=text)] if text else []
        if "data" in arguments:
            try:
                parts.append(data_part(arguments["data"]))
            except (ValueError, json_format.Error):
                raise ToolError("data: must be a JSON value") from None
        parts += await self._file_parts(context.workspace, arguments.get("files"))
        if not parts:
            raise ToolError("send needs a message, data or files")
        request = send_request(
            context_id=_text(arguments, "contextId"),
            task_id=_text(arguments, "taskId"),
            return_immediately=True,
            extra_parts=parts,
            hops=context.hops + 1,
        )
        async with await self._open(entry) as service:
            for asked_again in (False, True):
                if schema is not None:
                    stamp_schema(request.message, schema)
                reply = await self._bounded(service.send_message(request))
                if reply.WhichOneof("payload") == "message":
                    checked = check_message(schema, reply.message) if schema is not None else None
                    if checked is None or checked.valid or asked_again:
                        return message_result(entry.name, reply.message, checked)
                    request = _reask(checked, reply.message.context_id, "", context)
                    continue
                task = await self._settle(
                    entry, service, reply.task, bound, context, redact, schema
                )
                checked = _checked(schema, task)
                if checked is None or checked.valid or asked_again:
                    return await self._outcome(
                        entry, task, service.card, context, schema, checked, asked_again
                    )
                request = _reask(checked, task.context_id, task.id, context)
            raise AssertionError("unreachable")  # pragma: no cover

    def _send_bound(self, mode: Any) -> float:
        if mode is None or mode == "":
            return self.wait_s
        if mode == "foreground":
            return self.max_wait_s
        if mode == "background":
            return 0.0
        raise ToolError(f"mode: must be one of: {', '.join(MODES)}")

    async def _settle(
        self,
        entry: AgentEntry,
        service: RemoteService,
        task: pb.Task,
        bound: float,
        context: ToolContext,
        redact: Redactor,
        schema: dict[str, Any] | None,
        paused: PendingRecord | None = None,
    ) -> pb.Task:
        """The task once settled, or as it is at ``bound``; a task that exists is never
        left unwatched (a failed wait, an aborted turn: its ``paused`` watch goes on, or
        a new one starts)."""
        try:
            return await self._wait(service, task, redact, bound)
        except (A2AError, TimeoutError) as exc:
            log.info("a2a send: waiting on task %s failed: %s", task.id, _reason(exc, redact))
            return task
        except asyncio.CancelledError:
            if paused is not None:
                await asyncio.shield(self.watches.rearm(context.workspace, paused))
            else:
                await asyncio.shield(self._hand_over(entry, task, service.card, context, schema))
            raise

    async def _wait_action(
        self,
        entry: AgentEntry,
        task_id: str,
        arguments: Mapping[str, Any],
        context: ToolContext,
        redact: Redactor,
    ) -> str:
        seconds = arguments.get("seconds")
        bound = self.max_wait_s
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise ToolError("seconds: must be a number")
            if not seconds > 0:
                raise ToolError("seconds: must be more than 0")
            bound = min(float(seconds), self.max_wait_s)
        # This wait follows the task now: a watch that went on meanwhile could deliver
        # the result a second time. It is re-armed (same record) when the task is still
        # running at the bound, and when the wait fails or is aborted.
        record = await self.watches.stop(context.workspace, context.scope, task_id)
        schema = record.resultSchema if record is not None else None
        try:
            async with await self._open(entry) as service:
                task = await self._bounded(service.get_task(pb.GetTaskRequest(id=task_id)))
                task = await self._settle(
                    entry, service, task, bound, context, redact, schema, record
                )
                if is_settled(task):
                    # Given here: a result the watch kept before it stopped goes too.
                    await self.watches.forget(context.workspace, context.scope, task_id)
                elif record is not None:
                    await self.watches.rearm(context.workspace, record)
                checked = _checked(schema, task)
                return await self._outcome(entry, task, service.card, context, schema, checked)
        except BaseException:
            if record is not None:
                await asyncio.shield(self.watches.rearm(context.workspace, record))
            raise

    async def _status(self, entry: AgentEntry, task_id: str, context: ToolContext) -> str:
        schema = self._watched_schema(context, task_id)
        async with await self._open(entry) as service:
            task = await self._bounded(service.get_task(pb.GetTaskRequest(id=task_id)))
            # A task still running is watched (as after send), so its result comes.
            return await self._outcome(
                entry, task, service.card, context, schema, _checked(schema, task)
            )

    def _watched_schema(self, context: ToolContext, task_id: str) -> dict[str, Any] | None:
        """The resultSchema this conversation's watch of the task checks with."""
        watch = self.watches.find(context.workspace, context.scope, task_id)
        return watch.record.resultSchema if watch is not None else None

    async def _cancel(self, entry: AgentEntry, task_id: str, context: ToolContext) -> str:
        # The watch stops first, so a canceled outcome is not delivered again later.
        record = await self.watches.stop(context.workspace, context.scope, task_id)
        try:
            async with await self._open(entry) as service:
                try:
                    task = await self._bounded(
                        service.cancel_task(pb.CancelTaskRequest(id=task_id))
                    )
                except (Unreachable, Timeout):
                    raise
                except A2AError as refused:
                    task = await self._bounded(service.get_task(pb.GetTaskRequest(id=task_id)))
                    if record is not None and not is_settled(task):
                        await self.watches.rearm(context.workspace, record)
                    outcome = await self._outcome(entry, task, service.card, context)
                    why = _explain_short(refused)
                    return f'Agent "{entry.name}" refused to cancel: {why}\n{outcome}'
                return await self._outcome(entry, task, service.card, context)
        except (Unreachable, Timeout, AuthRejected, CardError) as exc:
            # Nothing reached the task (unreachable, key rejected, card unusable): it
            # may still be running, so its watch goes on.
            if record is None:
                raise
            await self.watches.rearm(context.workspace, record)
            raise ToolError(f"{_explain(entry.name, exc)} {STILL_WATCHED}") from None

    # --- helpers ------------------------------------------------------------------------

    async def _entry(self, workspace: Path, agent: Any) -> AgentEntry:
        agents = await asyncio.to_thread(read_agents, workspace)
        if agents.error:
            raise ToolError(agents.error)
        if not isinstance(agent, str) or not agent:
            raise ToolError("agent: give the agent's name (action=agents lists them)")
        entry = agents.agents.get(agent)
        if entry is None:
            names = ", ".join(agents.names) or "none"
            raise ToolError(f'Unknown agent "{agent[:60]}". Configured agents: {names}.')
        return entry

    async def _open(self, entry: AgentEntry) -> RemoteService:
        opening = open_agent(
            entry, allow_private_urls=self.allow_private_urls, timeout=self.call_timeout_s
        )
        return await self._bounded(opening)

    async def _bounded(self, call: Awaitable[R]) -> R:
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await call
        except TimeoutError:
            raise Timeout("no answer in time") from None

    async def _wait(
        self, service: RemoteService, task: pb.Task, redact: Redactor, bound: float
    ) -> pb.Task:
        """The task once settled, or as it is when ``bound`` seconds have passed."""
        if is_settled(task) or bound <= 0:
            return task
        clock = self.watches.clock
        deadline = clock.now().timestamp() + bound
        if service.card.capabilities.streaming:
            with contextlib.suppress(A2AError, TimeoutError):
                settled = await self._stream_until(service, task, deadline, redact)
                if settled is not None:
                    return settled
            # The stream failed or ended early (a task that settled before it opened
            # cannot be subscribed to): read it now, then poll.
            task = await self._bounded(service.get_task(pb.GetTaskRequest(id=task.id)))
            if is_settled(task):
                return task
        while True:
            remaining = deadline - clock.now().timestamp()
            if remaining <= 0:
                return task
            await clock.sleep(min(SEND_POLL_S, remaining))
            task = await self._bounded(service.get_task(pb.GetTaskRequest(id=task.id)))
            if is_settled(task):
                return task

    async def _stream_until(
        self, service: RemoteService, task: pb.Task, deadline: float, redact: Redactor
    ) -> pb.Task | None:
        """Follow the task's stream until it settles (then read it whole), the stream
        ends (None: poll instead), or ``deadline``."""
        clock = self.watches.clock
        done = asyncio.Event()
        result: list[pb.Task | None] = [None]

        async def consume() -> None:
            try:
                events = service.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id))
                async with contextlib.aclosing(events) as stream:
                    async for event in stream:
                        kind = event.WhichOneof("payload")
                        state = (
                            event.task.status.state
                            if kind == "task"
                            else event.status_update.status.state
                            if kind == "status_update"
                            else None
                        )
                        if state is not None and state in SETTLED:
                            result[0] = await self._bounded(
                                service.get_task(pb.GetTaskRequest(id=task.id))
                            )
                            return
            except (A2AError, TimeoutError) as exc:
                log.info("a2a send: stream of task %s ended: %s", task.id, _reason(exc, redact))
            finally:
                done.set()

        consumer = asyncio.get_running_loop().create_task(consume())
        try:
            remaining = deadline - clock.now().timestamp()
            await clock.sleep(max(0.0, remaining), done)
            return result[0]
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer

    async def _outcome(
        self,
        entry: AgentEntry,
        task: pb.Task,
        card: pb.AgentCard,
        context: ToolContext,
        schema: dict[str, Any] | None = None,
        checked: Checked | None = None,
        reasked: bool = False,
    ) -> str:
        if not is_settled(task):
            await self._hand_over(entry, task, card, context, schema)
            return task_result(entry.name, task, watched=not self.inbound)
        files = await asyncio.to_thread(
            save_task_files,
            task,
            context.workspace,
            entry.name,
            max_file_bytes=self.max_file_bytes,
        )
        return task_result(entry.name, task, files, checked=checked, reasked=reasked)

    async def _hand_over(
        self,
        entry: AgentEntry,
        task: pb.Task,
        card: pb.AgentCard,
        context: ToolContext,
        schema: dict[str, Any] | None = None,
    ) -> None:
        if self.inbound:
            return  # nothing would deliver its result (see __init__)
        await self.watches.watch(
            context.workspace,
            context.scope,
            entry.name,
            task.id,
            task.context_id,
            card=card,
            result_schema=schema,
        )

    async def _file_parts(self, workspace: Path, files: Any) -> list[pb.Part]:
        if files is None or files == []:
            return []
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ToolError("files: give a list of workspace paths")
        parts: list[pb.Part] = []
        total = 0
        for name in files:
            try:
                path = confine(workspace, name)
                data = await asyncio.to_thread(_read_file, path, self.max_file_bytes)
            except ToolError as exc:
                raise ToolError(f"files: {name[:200]}: {str(exc).removeprefix('path: ')}") from None
            total += len(data)
            if total > self.max_file_bytes:  # one file alone over the cap is refused above
                raise ToolError(f"files: together they are over {self.max_file_bytes} bytes")
            parts.append(
                pb.Part(raw=data, filename=path.name, media_type=guess_media_type(path.name))
            )
        return parts


def _read_file(path: Path, limit: int) -> bytes:
    try:
        data = read_raw(path, limit=limit)
    except OSError as exc:
        raise ToolError(exc.strerror or "unreadable") from None
    if data is None:
        raise ToolError("no such file")
    return data


def _text(arguments: Mapping[str, Any], name: str, *, required: bool = False) -> str:
    value = arguments.get(name)
    if value is None or value == "":
        if required:
            raise ToolError(f"{name}: required for this action")
        return ""
    if not isinstance(value, str):
        raise ToolError(f"{name}: must be a string")
    return value


def _checked(schema: dict[str, Any] | None, task: pb.Task) -> Checked | None:
    if schema is None or task.status.state != pb.TASK_STATE_COMPLETED:
        return None
    return check_task(schema, task)


def _result_schema(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    problem = schema_problem(value)
    if problem is not None:
        raise ToolError(f"resultSchema: {problem}")
    assert isinstance(value, dict)
    return value


def _reask(
    checked: Checked, context_id: str, task_id: str, context: ToolContext
) -> pb.SendMessageRequest:
    """The one more ask after an answer that did not match: in the same conversation,
    referring to the task (a completed task takes no more messages)."""
    request = send_request(
        reask_text(checked.problem or ""),
        context_id=context_id,
        return_immediately=True,
        hops=context.hops + 1,
    )
    if task_id:
        request.message.reference_task_ids.append(task_id)
    return request


def _reason(exc: BaseException, redact: Redactor) -> str:
    """A failure for the log: the remote's text comes redacted, as the tool's errors do."""
    return redact(getattr(exc, "message", None) or str(exc) or type(exc).__name__)


def _explain_short(exc: A2AError) -> str:
    return f"{exc.message} ({exc.spec.jsonrpc_code})"


def _explain(agent: str, exc: A2AError) -> str:
    """The tool's error text for a failed remote call."""
    if isinstance(exc, AuthRejected):
        return f'Agent "{agent}" rejected the key (401).'
    if isinstance(exc, Timeout):
        return f'Agent "{agent}" did not answer in time.'
    if isinstance(exc, (Unreachable, CardError)):
        return f'Could not reach agent "{agent}": {exc.message}'
    return f'Agent "{agent}" refused: {_explain_short(exc)}'
