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
``response`` artifact; ``request_input`` makes the task input-required (auth-required
for a secret) and the caller's next message on the task arrives as the tool's result;
``send_file`` becomes a file artifact; provider failures fail the task with their short
redacted text.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .base import (
    Agent,
    AuthRequired,
    Completed,
    Failed,
    File,
    InputRequired,
    Output,
    TextChunk,
    Turn,
    session_scope,
)
from .prompt import (
    DEFAULT_TEMPLATE,
    check_template,
    framing_header,
    render_template,
    uses_payload,
)
from .runtime import Asked, FileReady, Finished, Runtime, TextDelta, TurnFailed
from .tools.base import Tool, ToolRegistry
from .tools.files import SEND_CAP, workspace_tools
from .tools.interaction import NotifyOwner, OwnerNotifier, RequestInput

SESSION_MODES = ("per-context", "per-task", "shared")
NO_WORKSPACE = "The assistant has no workspace for this caller."


@dataclass(frozen=True, slots=True)
class AssistantConfig:
    session_mode: str = "per-context"
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
        delegating_tools: Iterable[Tool] = (),
    ) -> None:
        """``local_time(workspace)``, when a host gives it, is the owner's local time
        (the Telegram host: the chat's time zone), shown under the framing header.
        ``delegating_tools`` (the ``a2a`` tool) are added to the turns of callers whose
        callers.json entry says ``"delegate": true``, and only to theirs."""
        self.runtime = runtime
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
        events = self.runtime.run_turn(
            self.scope(turn),
            workspace,
            text,
            files=turn.files,
            tools=(
                self.delegating
                if turn.caller.delegate and self.delegating is not None
                else self.tools
            ),
            framing=framing,
            caller=turn.caller.name,
            hops=turn.hops,
            cancelled=turn.cancelled,
            ask_tag=task_id,
        )
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, TextDelta):
                    yield TextChunk(event.text)
                elif isinstance(event, FileReady):
                    yield File(event.filename, data=event.data, media_type=event.media_type)
                elif isinstance(event, Finished):
                    yield Completed()
                    return
                elif isinstance(event, Asked):
                    if event.secret:
                        yield AuthRequired(event.question)
                    else:
                        yield InputRequired(event.question, schema=event.schema)
                    return
                elif isinstance(event, TurnFailed):
                    yield Failed(event.text)
                    return


__all__ = ["SESSION_MODES", "AssistantAgent", "AssistantConfig"]
