"""What the runtime reports for metrics: turns, the model's calls, tokens and tool calls.

A narrow seam (DESIGN.md: observability is a seam, not sprinkled calls): the runtime
calls one :class:`RuntimeMeter`, which is :data:`NULL_RUNTIME_METER` (does nothing)
unless a host gives it the gateway's (``serve --metrics``: server/metrics.py). Every
label value comes from the fixed sets below, so the meter can bound what it counts.
"""

from __future__ import annotations

from typing import Final, Protocol

#: How a turn ended: its reply, a question (request_input), a failure, or stopped
#: (cancelled: the owner's Ctrl-C, a task cancelled, a turn bound, a shutdown).
TURN_OUTCOMES: Final = ("finished", "asked", "failed", "stopped")
#: What became of a tool call.
TOOL_OUTCOMES: Final = ("ok", "error", "no_such_tool")
#: Why a model call failed (:attr:`~a2a_gateway.agent.provider.ProviderError.kind`).
PROVIDER_ERRORS: Final = ("timeout", "connection", "status", "malformed", "reported")


class RuntimeMeter(Protocol):
    def turn(self, outcome: str) -> None:
        """A turn ended (one of :data:`TURN_OUTCOMES`)."""

    def model_call(self, first_s: float | None, total_s: float, error: str | None) -> None:
        """A model call ended: seconds to its first piece (None: none came), in all,
        and the :data:`PROVIDER_ERRORS` kind if it failed."""

    def tokens(self, prompt: int, completion: int) -> None:
        """Tokens a model call used, when the provider said (its ``usage``)."""

    def tool_call(self, tool: str, outcome: str) -> None:
        """A tool call ended (``tool``: a name of the turn's registry)."""


class _NullRuntimeMeter:
    __slots__ = ()

    def turn(self, outcome: str) -> None:
        pass

    def model_call(self, first_s: float | None, total_s: float, error: str | None) -> None:
        pass

    def tokens(self, prompt: int, completion: int) -> None:
        pass

    def tool_call(self, tool: str, outcome: str) -> None:
        pass


NULL_RUNTIME_METER: Final[RuntimeMeter] = _NullRuntimeMeter()

__all__ = [
    "NULL_RUNTIME_METER",
    "PROVIDER_ERRORS",
    "TOOL_OUTCOMES",
    "TURN_OUTCOMES",
    "RuntimeMeter",
]
