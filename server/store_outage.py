"""A store whose database is away: what callers are told, and what the log says.

While the database cannot be used (connections refused or dropped, no pooled connection
within the acquire timeout, a database shutting down or starting up), every store call
that needs it raises :class:`StoreOutageError`: the protocol's UNAVAILABLE, which every
binding answers as it does any UnavailableError (HTTP 503 with ``Retry-After``,
JSON-RPC's error with the UNAVAILABLE reason, gRPC ``UNAVAILABLE``; each with
``retryAfterSeconds`` in its ErrorInfo). Nothing is logged per call: :class:`OutageLog`
writes one WARNING when an outage starts (the first failed call) and one INFO when it
ends (the first call that succeeds after it), and tells its listeners when one starts
(the engine ends its open streams with UNAVAILABLE, so their clients subscribe again
once the database is back). A call that succeeds ends the outage at once: the gateway
serves again with the first request after the database's return.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from a2a_gateway.protocol.errors import UnavailableError

log = logging.getLogger(__name__)

#: ``Retry-After`` of an answer during an outage: a request a second later may be
#: served (the outage ends with the first call that succeeds).
RETRY_AFTER_S = 1
OUTAGE_MESSAGE = "The task database is unavailable; try again shortly."


class StoreOutageError(UnavailableError):
    """A store call could not reach its database (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(OUTAGE_MESSAGE, metadata={"retryAfterSeconds": str(RETRY_AFTER_S)})


class OutageLog:
    """Whether the database is away now: one log line at each edge, listeners called
    when an outage starts."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.since: float | None = None  # monotonic time of the first failure
        self._listeners: list[Callable[[], None]] = []

    @property
    def down(self) -> bool:
        return self.since is not None

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (on the event loop) when an outage starts."""
        self._listeners.append(listener)

    def failed(self, reason: str) -> None:
        """A call found the database away (``reason`` names neither URL nor password)."""
        if self.since is not None:
            return
        self.since = time.monotonic()
        log.warning(
            "%s is unavailable (%s): requests that need it are answered UNAVAILABLE until"
            " it is back",
            self.what,
            reason,
        )
        for listener in self._listeners:
            listener()

    def answered(self, started: float) -> None:
        """A call started at ``started`` (monotonic) succeeded: an outage that began
        before it ends here. (One started earlier proves nothing: while the database
        shuts down, a statement under way may still succeed.)"""
        since = self.since
        if since is not None and started >= since:
            self.since = None
            log.info("%s is back after %.1f s", self.what, time.monotonic() - since)
