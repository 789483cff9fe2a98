"""The LLM assistant as an A2A agent: adapts the runtime's turns to the Agent interface.

Each inbound message runs as a turn of a session in the caller's workspace:

- ``per-context`` (default): one session per (caller, contextId), scope
  ``<prefix>-a2a-<caller>_<contextId>``; a second task in the context sees the first.
- ``per-task``: a fresh session for every task (``..._<taskId>``); continuations of the
  task keep it.
- ``shared``: one long-lived session per caller (``<prefix>-a2a-<caller>``).

The text is the message template (``{{a2a.text}}``, ``{{a2a.task_id}}``,
``{{a2a.context_id}}``, ``{{payload}}``: the request's params as compact ProtoJSON)
under the framing header for untrusted inbound text. The reply streams into the
``response`` artifact; ``request_input`` makes the task input-required and the
caller's next message on the task arrives as the tool's result; a secret question makes
it auth-required while the host's asker gets the value from the owner (never from the
caller), then the run goes on; ``send_file`` becomes a file artifact; provider failures
fail the task with their short redacted text.

PACT Delegated (``turn.caller.on_behalf.tool_scopes``): a tool a scope opens runs only
when the user's delegation token grants one of its scopes, with that token as its
``bearer``; called without it, the turn ends auth-required. Such a turn also yields
an artifact named :data:`DELEGATION_ARTIFACT` (one data part: ``toolsRun``, the scoped
tools that ran, and ``missingScopes``) for the PACT service, which takes it out of
the reply and signs the receipt from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2

from a2a_gateway.protocol.context import OnBehalf
from lf.a2a.v1 import a2a_pb2 as pb

from .base import (
    DELEGATION_ARTIFACT,
    Agent,
    ArtifactChunk,
    AuthRequired,
    Completed,
    Failed,
    File,
    InputRequired,
    Output,
    Progress,
    TextChunk,
    Turn,
    session_scope,
)
from .defaults import DEFAULT_SESSION_MODE, SESSION_MODES
from .prompt import (
    DEFAULT_TEMPLATE,
    check_template,
    framing_header,
    render_template,
    uses_payload,
)
from .runtime import (
    Asked,
    FileReady,
    Finished,
    Runtime,
    SecretAnswered,
    SecretAsked,
    TextDelta,
    TurnFailed,
)
from .tools.base import Tool, ToolContext, ToolRegistry, ToolResult
from .tools.files import SEND_CAP, workspace_tools
from .tools.interaction import InputNeeded, NotifyOwner, OwnerNotifier, RequestInput, SecretAsker

NO_WORKSPACE = "The assistant has no workspace for this caller."
#: The auth-required status message of a secret question (the question follows).
OWNER_PROVIDES = (
    "A person (the owner of this agent) is asked privately for a value; the task goes"
    " on by itself once they have given it (or after {wait:g} s without it). Do not send"
    " it: messages to this task are refused meanwhile. The question: "
)
SECRET_GIVEN_STATUS = "The owner gave the value; the task goes on."
NO_SECRET_STATUS = "No value came from the owner; the task goes on without it."


@dataclass(slots=True)
class DelegationRecord:
    """What one turn did with scoped tools."""

    ran: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def artifact(self) -> ArtifactChunk:
        data = struct_pb2.Value()
        data.struct_value.update({"toolsRun": self.ran, "missingScopes": self.missing})
        part = pb.Part(data=data, media_type="application/json")
        return ArtifactChunk(pb.Artifact(name=DELEGATION_ARTIFACT, parts=[part]))


class ScopedTool(Tool):
    """A tool a PACT scope opens, for one turn of one user."""

    def __init__(
        self, inner: Tool, opened_by: tuple[str, ...], on_behalf: OnBehalf, record: DelegationRecord
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.opened_by = opened_by
        self.on_behalf = on_behalf
        self.record = record

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if self.on_behalf.token and self.on_behalf.scopes.intersection(self.opened_by):
            self.record.ran.append(self.name)
            bearer = dataclasses.replace(context, bearer=self.on_behalf.token)
            return await self.inner.call(arguments, bearer)
        for scope in self.opened_by:
            if scope not in self.record.missing:
                self.record.missing.append(scope)
        raise InputNeeded(
            f"{self.name} needs your permission ({' or '.join(self.opened_by)}):"
            " sign in with the link to allow it, then ask again.",
            None,
            secret=False,
            authorization=True,
        )


def delegated_tools(
    tools: ToolRegistry, on_behalf: OnBehalf | None
) -> tuple[ToolRegistry, DelegationRecord | None]:
    """``tools`` with the scoped ones gated for this user (unchanged without scopes)."""
    if on_behalf is None or not on_behalf.tool_scopes:
        return tools, None
    record = DelegationRecord()
    opened = dict(on_behalf.tool_scopes)
    gated = ToolRegistry(
        ScopedTool(tool, opened[tool.name], on_behalf, record) if tool.name in opened else tool
        for tool in tools
    )
    return gated, record


@dataclass(frozen=True, slots=True)
class AssistantConfig:
    session_mode: str = DEFAULT_SESSION_MODE
    message_template: str = DEFAULT_TEMPLATE
    scope_prefix: str = "serve"
    max_file_bytes: int = SEND_CAP

    def __post_init__(self) -> None:
        if self.session_mode not in SESSION_MODES:
            raise ValueError(f"session mode must be one of {', '.join(SESSION_MODES)}")
        check_template(self.message_template)


class AssistantAgent(Agent):
    """Hosts the runtime for inbound A2A callers (``serve --llm``)."""

    def __init__(
        self,
        runtime: Runtime,
        config: AssistantConfig | None = None,
        *,
        default_workspace: Path | None = None,
        notifier: OwnerNotifier | None = None,
        extra_tools: Iterable[Tool] = (),
        local_time: Callable[[Path], str] | None = None,
        secrets: SecretAsker | None = None,
        delegating_tools: Iterable[Tool] = (),
    ) -> None:
        """``local_time(workspace)``, when a host gives it, is the owner's local time
        (the Telegram host: the chat's time zone), shown under the framing header.
        ``secrets`` asks the workspace's owner for the values of secret questions
        (without it, a secret question's result says no one can be asked).
        ``delegating_tools`` (the ``a2a`` tool) are added to the turns of callers whose
        callers.json entry says ``"delegate": true``, and only to theirs."""
        self.runtime = runtime
        self.secrets = secrets
        self.local_time = local_time
        self.config = config or AssistantConfig()
        self.default_workspace = default_workspace
        tools = ToolRegistry(workspace_tools(send_cap=self.config.max_file_bytes))
        tools.add(RequestInput())
        if notifier is not None:
            tools.add(NotifyOwner(notifier))
        for tool in extra_tools:
            tools.add(tool)
        self.tools = tools
        delegating = list(delegating_tools)
        self.delegating: ToolRegistry | None = None
        if delegating:
            self.delegating = tools.copy()
            for tool in delegating:
                self.delegating.add(tool)
        # One shared session per caller cannot take concurrent streamed turns.
        self.streaming = self.config.session_mode != "shared"
        self.wants_payload = uses_payload(self.config.message_template)
        self._resolved: dict[str, Path] = {}

    def scope(self, turn: Turn) -> str:
        prefix = self.config.scope_prefix
        if "{workspace}" in prefix:
            # One prefix per workspace: the Telegram host's telegram-<chatId>.
            prefix = prefix.replace("{workspace}", Path(turn.caller.workspace or "").name)
        mode = self.config.session_mode
        if mode == "shared":
            return f"{prefix}-a2a-{turn.caller.name}"
        if mode == "per-task" and turn.task is not None:
            return session_scope(prefix, turn.caller, turn.task.id)
        return turn.session_scope(prefix)

    async def _workspace(self, turn: Turn) -> Path | None:
        folder = turn.caller.workspace or (
            str(self.default_workspace) if self.default_workspace else ""
        )
        if not folder:
            return None
        resolved = self._resolved.get(folder)
        if resolved is None:
            resolved = await asyncio.to_thread(Path(folder).resolve)
            self._resolved[folder] = resolved
        return resolved

    async def run(self, turn: Turn) -> AsyncIterator[Output]:
        workspace = await self._workspace(turn)
        if workspace is None:
            yield Failed(NO_WORKSPACE)
            return
        task_id = turn.task.id if turn.task is not None else ""
        text = render_template(
            self.config.message_template,
            text=turn.content_text(),
            task_id=task_id,
            context_id=turn.context_id,
            payload=turn.payload,
        )
        framing = framing_header(
            turn.caller.name,
            can_notify_owner="notify_owner" in self.tools,
            on_behalf=turn.caller.on_behalf,
        )
        if self.local_time is not None:
            framing += f"\n[Your owner's local time: {self.local_time(workspace)}]"
        offered = (
            self.delegating if turn.caller.delegate and self.delegating is not None else self.tools
        )
        tools, record = delegated_tools(offered, turn.caller.on_behalf)
        events = self.runtime.run_turn(
            self.scope(turn),
            workspace,
            text,
            files=turn.files,
            tools=tools,
            framing=framing,
            caller=turn.caller.name,
            hops=turn.hops,
            cancelled=turn.cancelled,
            ask_tag=task_id,
            secrets=self.secrets,
        )
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, TextDelta):
                    yield TextChunk(event.text)
                elif isinstance(event, FileReady):
                    yield File(event.filename, data=event.data, media_type=event.media_type)
                elif isinstance(event, Finished):
                    if record is not None:
                        yield record.artifact()
                    yield Completed()
                    return
                elif isinstance(event, SecretAsked):
                    text = OWNER_PROVIDES.format(wait=event.wait_s) + event.question
                    yield AuthRequired(text, resumes=True)
                elif isinstance(event, SecretAnswered):
                    yield Progress(SECRET_GIVEN_STATUS if event.given else NO_SECRET_STATUS)
                elif isinstance(event, Asked):
                    if record is not None:
                        yield record.artifact()
                    if event.authorization:
                        yield AuthRequired(event.question)
                    else:
                        yield InputRequired(event.question, schema=event.schema)
                    return
                elif isinstance(event, TurnFailed):
                    if record is not None:
                        yield record.artifact()
                    yield Failed(event.text)
                    return


__all__ = [
    "DELEGATION_ARTIFACT",
    "SESSION_MODES",
    "AssistantAgent",
    "AssistantConfig",
    "DelegationRecord",
    "ScopedTool",
    "delegated_tools",
]
