"""Tools that reach a person: ``request_input`` (ask the one you are talking with) and
``notify_owner`` (tell the workspace's owner, through the host's notifier).

``request_input`` raises :class:`InputNeeded`; the runtime suspends the turn on it
(an A2A task becomes input-required) and the next message of that conversation arrives
as the tool's result. A *secret* question is never answered by the caller: the runtime
asks the workspace's owner through the host's :class:`SecretAsker` (a Telegram message
whose reply is the value, a hidden prompt in ``chat``, a one-time link under ``serve``)
while the turn waits (an A2A task is auth-required meanwhile); the value reaches the
model as the tool's result and never the transcript.

``notify_owner`` exists only when the host registers an :class:`OwnerNotifier`: the
Telegram host sends a chat message, ``serve`` uses :class:`InboxNotifier` (a line in
``<workspace>/.a2a/owner-inbox.jsonl``, and a log line without the text).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol.json_schemas import schema_problem

from .base import Tool, ToolContext, ToolError, ToolResult

log = logging.getLogger("a2a_gateway.agent.tools")

QUESTION_CAP = 4000
NOTE_CAP = 4000
OWNER_INBOX = RELATIVE.owner_inbox


class InputNeeded(Exception):
    """Raised by ``request_input``: suspend the turn until the answer comes."""

    def __init__(
        self,
        question: str,
        schema: Mapping[str, Any] | None,
        secret: bool,
        *,
        authorization: bool = False,
    ) -> None:
        super().__init__(question)
        self.question = question
        self.schema = schema
        self.secret = secret  # the owner is asked for a value while the turn waits
        #: The caller must grant something first (a PACT scope): the turn ends
        #: auth-required with ``question`` as its status; nobody is asked for a value.
        self.authorization = authorization


class RequestInput(Tool):
    """``secret_only``: the owner's own conversation (``chat``), where an ordinary
    question is simply asked in the reply; only secrets go through the tool."""

    name = "request_input"
    description = (
        "Ask the one you are talking with a question and wait for the answer, which"
        " comes back as this tool's result. Give a JSON Schema when the answer should"
        " have a shape (an answer sent as data is checked against it and comes back as"
        " JSON). Set secret when a credential (a password, an API key) is needed: the"
        " owner of this workspace is asked for it privately, never the caller, and the"
        " value comes back as the result (keep it out of replies and files)."
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

    def __init__(self, *, secret_only: bool = False) -> None:
        self.secret_only = secret_only
        if secret_only:
            self.description = (
                "Ask the owner for a secret (a password, an API key) with a hidden prompt;"
                " the value comes back as this tool's result and is not kept in the"
                " transcript (keep it out of replies and files). Ask ordinary questions"
                " in your reply instead."
            )
            self.parameters = {
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "secret": {"type": "boolean", "const": True},
                },
                "required": ["question", "secret"],
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
        if self.secret_only and not secret:
            raise ToolError(
                "secret: only secrets are asked with this tool here; ask other questions"
                " in your reply"
            )
        raise InputNeeded(question.strip(), schema, secret)


@dataclass(frozen=True, slots=True)
class SecretQuestion:
    """A secret the turn needs: ``caller`` asked for it (None: the owner's own
    conversation); ``wait_s`` is how long the turn waits (a link expires then)."""

    workspace: Path
    caller: str | None
    question: str
    wait_s: float


class SecretAsker(Protocol):
    """How a host asks the workspace's owner for a secret, privately."""

    async def ask_secret(self, question: SecretQuestion) -> str | None:
        """The value the owner gave, or None (declined, expired, unreachable)."""
        ...


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
    "SecretAsker",
    "SecretQuestion",
]
