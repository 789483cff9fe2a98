"""One-time use of a token's ``jti``: personal agents' tokens, login assertions."""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict

from ..identity.jwt import Clock, TokenRefused

log = logging.getLogger(__name__)

#: jtis remembered at once; a flood beyond it is refused, never forgotten early.
MAX_REMEMBERED_JTIS = 100_000


class ReplayGuard:
    """The jtis of accepted tokens, each until its token expires (plus the leeway).

    Tokens live at most minutes, so entries leave roughly in arrival order: expired
    ones are dropped from the front. Full of live entries, a new token is refused
    rather than an entry dropped early (which would let its token be replayed).
    """

    def __init__(
        self, *, max_entries: int = MAX_REMEMBERED_JTIS, wall_clock: Clock = time.time
    ) -> None:
        self.max_entries = max_entries
        self.wall_clock = wall_clock
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def spend(self, issuer: str, jti: str, until: float) -> None:
        """Remember ``jti`` of ``issuer`` until ``until``; TokenRefused when it is known."""
        now = self.wall_clock()
        while self._seen:
            first_key, first_until = next(iter(self._seen.items()))
            if first_until >= now:
                break
            del self._seen[first_key]
        key = hashlib.sha256(f"{issuer}\x00{jti}".encode("utf-8", "surrogateescape")).digest()
        expires = self._seen.get(key)
        if expires is not None and expires >= now:
            raise TokenRefused("The token was already used (its jti is replayed)")
        if len(self._seen) >= self.max_entries:
            log.warning("PACT replay guard is full (%d live tokens); refusing", self.max_entries)
            raise TokenRefused("The token cannot be accepted now; retry later")
        self._seen[key] = until

    def __len__(self) -> int:
        return len(self._seen)


__all__ = ["MAX_REMEMBERED_JTIS", "ReplayGuard"]
