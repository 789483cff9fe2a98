"""What the watches report for metrics: how each watch ended, and each delivery.

A narrow seam like ``agent/metering.py``, here because both the client (the watches) and
the server (its metrics) use it: a ``client.watches.WatchRegistry`` calls one
:class:`WatchMeter`, :data:`NULL_WATCH_METER` (does nothing) unless a host gives it its
gateway's (``telegram --a2a --metrics``: server/metrics.py). The watches pending now are
read from the registry at scrape time (``WatchRegistry.pending_by_mode``), not reported.
Every label value comes from the fixed sets below.
"""

from __future__ import annotations

from typing import Final, Protocol

#: How a watch learns about its task (``PendingRecord.source``).
WATCH_MODES: Final = ("push", "subscribe", "poll")
#: How a watch ended: its task settled, no result in time, its agent left agents.json,
#: or the watch itself failed (a bug, logged).
WATCH_OUTCOMES: Final = ("settled", "expired", "stopped", "error")
#: What became of one attempt to hand a result to its conversation.
DELIVERY_OUTCOMES: Final = ("delivered", "failed")


class WatchMeter(Protocol):
    def ended(self, mode: str, outcome: str) -> None:
        """A watch ended (``mode``: its mode then; ``outcome``: of WATCH_OUTCOMES)."""

    def delivery(self, outcome: str) -> None:
        """An attempt to deliver a result ended (of DELIVERY_OUTCOMES)."""


class _NullWatchMeter:
    __slots__ = ()

    def ended(self, mode: str, outcome: str) -> None:
        pass

    def delivery(self, outcome: str) -> None:
        pass


NULL_WATCH_METER: Final[WatchMeter] = _NullWatchMeter()

__all__ = [
    "DELIVERY_OUTCOMES",
    "NULL_WATCH_METER",
    "WATCH_MODES",
    "WATCH_OUTCOMES",
    "WatchMeter",
]
