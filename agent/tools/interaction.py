"""Tools that reach a person: ``request_input`` (ask the one you are talking with) and
``notify_owner`` (tell the workspace's owner, through the host's notifier).

``request_input`` raises :class:`InputNeeded`; the runtime suspends the turn on it
(an A2A task becomes input-required, or auth-required for a secret) and the next
message of that conversation arrives as the tool's result.

``notify_owner`` exists only when the host registers an :class:`OwnerNotifier`: the
Telegram host sends a chat message, ``serve`` uses :class:`InboxNotifier` (a line in
``<workspace>/.a2a/owner-inbox.jsonl``, and a log line without the text).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from a2a_gateway.protocol.json_schemas import schema_problem

from .base import Tool, ToolContext, ToolError, ToolResult

log = logging.getLogger("a2a_gateway.agent.tools")

QUESTION_CAP = 4000
NOTE_CAP = 4000
OWNER_INBOX = Path(".a2a") / "owner-inbox.jsonl"


class InputNeeded(Exception):
    """Raised by ``request_input``: suspend the turn until the answer comes."""

    def __init__(self, question: str, schema: Mapping[str, Any] | None, secret: bool) -> None:
        super().__init__(question)
        self.question = question
        self.schema = schema
        self.secret = secret


class RequestInput(Tool):
    name = "request_input"
    description = (
        "Ask the one you are talking with a question and wait for the answer, which"
        " comes back as this tool's result. Give a JSON Schema when the answer should"
        " have a shape (an answer sent as data is checked against it and comes back as"
        " JSON); set secret when a person must provide a credential."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "schema": {"type": "object", "description": "JSON Schema of the answer"},
            "secret": {"type": "boolean", "default": False},
        },
        "required": ["question"],
    }

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolError("question: must be a non-empty string")
        if len(question) > QUESTION_CAP:
            raise ToolError(f"question: at most {QUESTION_CAP} characters")
        schema = arguments.get("schema")
        problem = schema_problem(schema) if schema is not None else None
        if problem is not None:
            raise ToolError(f"schema: {problem}")
        secret = arguments.get("secret", False)
        if not isinstance(secret, bool):
            raise ToolError("secret: must be true or false")
        raise InputNeeded(question.strip(), schema, secret)


class OwnerNotifier(Protocol):
    """How a host tells the workspace's owner something."""

    async def notify(self, workspace: Path, caller: str | None, text: str) -> None: ...


class NotifyOwner(Tool):
    name = "notify_owner"
    description = (
        "Tell the owner of this workspace something (your only channel to them from"
        " this conversation). Keep it short and say who asked."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    def __init__(self, notifier: OwnerNotifier) -> None:
        self.notifier = notifier

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ToolError("text: must be a non-empty string")
        if len(text) > NOTE_CAP:
            raise ToolError(f"text: at most {NOTE_CAP} characters")
        await self.notifier.notify(context.workspace, context.caller, text)
        return ToolResult("The owner was notified.")


class InboxNotifier:
    """``serve``'s notifier: appends ``{"ts", "caller", "text"}`` to the workspace's
    ``.a2a/owner-inbox.jsonl`` and logs one line without the text."""

    async def notify(self, workspace: Path, caller: str | None, text: str) -> None:
        line = orjson.dumps({"ts": round(time.time(), 3), "caller": caller, "text": text})
        await asyncio.to_thread(_append_line, workspace / OWNER_INBOX, line + b"\n")
        log.info("owner notified by %s (%d characters)", caller or "the owner", len(text))


def _append_line(path: Path, line: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as file:
        file.write(line)


__all__ = [
    "OWNER_INBOX",
    "InboxNotifier",
    "InputNeeded",
    "NotifyOwner",
    "OwnerNotifier",
    "RequestInput",
]
