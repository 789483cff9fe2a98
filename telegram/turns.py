"""What the Telegram host needs from the assistant: run one turn of an owner chat.

The host owns the conversation (which chat, what queue, where the answer goes); the
runtime owns the turn. :class:`OwnerTurns` is that seam: given the chat's workspace and
scope, a prompt and the files the owner sent, it yields what the turn produces.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from a2a_gateway.agent.base import Signal


@dataclass(frozen=True, slots=True)
class OwnerPrompt:
    """One turn to run: ``text`` (already framed for follow-ups), ``files`` the owner
    attached (saved in the workspace), and the chat it belongs to."""

    chat_id: int
    workspace: Path
    scope: str
    text: str
    files: tuple[Path, ...] = ()
    follow_up: bool = False


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer as the model writes it."""

    text: str


@dataclass(frozen=True, slots=True)
class FileOut:
    """A workspace file the assistant sends to the owner (``send_file``)."""

    path: Path
    filename: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The turn is over: ``text`` is the whole final answer (may repeat the deltas);
    ``failed`` marks a turn that did not finish (the text says why)."""

    text: str
    failed: bool = False


TurnEvent = TextDelta | FileOut | TurnEnd


class OwnerTurns(Protocol):
    """Runs owner turns; one instance serves every chat, concurrently."""

    def run(self, prompt: OwnerPrompt, cancelled: Signal) -> AsyncIterator[TurnEvent]:
        """Run one turn; cancelling the iterating task aborts it."""

    async def aclose(self) -> None:
        """Release what the turns hold (the provider's connections)."""


__all__ = ["FileOut", "OwnerPrompt", "OwnerTurns", "TextDelta", "TurnEnd", "TurnEvent"]
