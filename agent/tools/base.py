"""The tool seam: what a tool is, what it sees, and the registry hosts fill.

A :class:`Tool` is one OpenAI function (``name``, ``description``, JSON Schema
``parameters``). The runtime calls :meth:`Tool.call` with the parsed arguments and a
:class:`ToolContext` (the owner's workspace, the session scope, the inbound caller, the
hop count and the turn's cancellation signal) and hands the :class:`ToolResult` text to
the model. A tool that raises :class:`ToolError` returns an error result to the model
with that text; any other exception is logged and becomes a generic error result, so a
failing tool never ends the turn by itself.

Hosts (``serve``, the ``chat`` command, the Telegram host) build a
:class:`ToolRegistry` per runtime and add their own tools to it::

    class Clock(Tool):
        name = "clock"
        description = "The current UTC time."
        parameters = {"type": "object", "properties": {}}

        async def call(self, arguments, context):
            return ToolResult(datetime.now(UTC).isoformat())

    registry = ToolRegistry()
    registry.add(Clock())

Tools the runtime treats specially (``request_input`` suspends the turn, ``send_file``
hands a file to the caller) are defined in their own modules of this package.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2a_gateway.agent.base import Signal


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool call may use besides its arguments.

    ``workspace`` is the owner's workspace folder (resolved); ``scope`` the session
    scope (conversation id, e.g. ``local-owner``, ``telegram-42``,
    ``<prefix>-a2a-<caller>_<contextId>``); ``caller`` the inbound A2A caller's name
    (``None`` in an owner session); ``hops`` the hop count of the inbound request (an
    outgoing A2A call sends ``hops + 1``); ``cancelled`` is set when the turn must stop;
    ``bearer`` is the user's delegation token, for a tool a PACT scope opens.
    """

    workspace: Path
    scope: str
    caller: str | None
    hops: int
    cancelled: Signal
    #: The user's delegation token for a scoped tool's account API (PACT Delegated;
    #: ``""`` for every other tool and turn). A tool sends it, never shows it.
    bearer: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model sees as the tool's result."""

    text: str
    is_error: bool = False


class ToolError(Exception):
    """A known tool failure: the model gets ``str(error)`` as an error result."""


class Tool(abc.ABC):
    """One function the model may call. Instances are shared by every session: keep
    per-call state in locals, not on ``self``."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    @abc.abstractmethod
    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Run the tool (``arguments`` were parsed from the model's JSON)."""

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class ToolRegistry:
    """Tools by name, in the order they were added; hosts add their own."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Add ``tool``; a second tool with the same name is an error."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list (empty when there are no tools)."""
        return [tool.spec() for tool in self._tools.values()]

    def copy(self) -> ToolRegistry:
        """A new registry with the same tools (to add per-host tools to a base set)."""
        return ToolRegistry(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry", "ToolResult"]
