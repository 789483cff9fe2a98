"""OAuth 2.0 token introspection (RFC 7662): opaque bearer tokens checked by their issuer.

The gateway posts the token to the configured endpoint, authenticating with its own
client credentials (HTTP Basic, RFC 7662 §2.1), through the guarded outbound client.
``active: false`` is a refusal. An active answer is remembered (by the token's SHA-256,
bounded) until the smaller of its ``exp`` and ``max_cache_s``, so a busy caller costs
one introspection per ``max_cache_s``; a negative answer is never remembered, so a token
that becomes active is accepted at once, and a revoked token is refused at most
``max_cache_s`` after revocation. An endpoint that cannot be reached (or answers
nonsense) makes the token unverifiable: a bounded wait, then a refusal.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..outbound import OutboundClient, OutboundError
from .jwt import TokenRefused

log = logging.getLogger(__name__)

DEFAULT_MAX_CACHE_S = 60.0
MAX_REMEMBERED = 4096
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(slots=True)
class Introspector:
    """Asks ``endpoint`` about tokens as client ``client_id``."""

    endpoint: str
    client_id: str
    client_secret: str = field(repr=False)
    outbound: OutboundClient
    max_cache_s: float = DEFAULT_MAX_CACHE_S
    timeout_s: float = 5.0
    clock: Callable[[], float] = time.time
    _remembered: OrderedDict[bytes, tuple[float, dict[str, Any]]] = field(
        default_factory=OrderedDict
    )
    #: Introspection requests made (the cache's witness in tests).
    requests: int = 0

    def _authorization(self) -> str:
        # RFC 6749 §2.3.1: both parts form-encoded before the Basic encoding.
        pair = f"{urllib.parse.quote(self.client_id)}:{urllib.parse.quote(self.client_secret)}"
        return "Basic " + base64.b64encode(pair.encode()).decode()

    async def introspect(self, token: str) -> dict[str, Any]:
        """The active token's answer (its claims), or raise :class:`TokenRefused`."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self.clock()
        remembered = self._remembered.get(digest)
        if remembered is not None:
            until, claims = remembered
            if now < until:
                self._remembered.move_to_end(digest)
                return claims
            del self._remembered[digest]
        claims = await self._ask(token)
        if claims.get("active") is not True:
            raise TokenRefused("The token is not active")
        exp = claims.get("exp")
        until = now + self.max_cache_s
        if isinstance(exp, int | float) and not isinstance(exp, bool):
            if exp <= now:
                raise TokenRefused("The token has expired")
            until = min(until, float(exp))
        self._remembered[digest] = (until, claims)
        while len(self._remembered) > MAX_REMEMBERED:
            self._remembered.popitem(last=False)
        return claims

    async def _ask(self, token: str) -> dict[str, Any]:
        self.requests += 1
        body = urllib.parse.urlencode({"token": token, "token_type_hint": "access_token"})
        try:
            answer = await self.outbound.post(
                self.endpoint,
                body.encode(),
                headers={
                    "Authorization": self._authorization(),
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Accept": "application/json",
                },
                timeout_s=self.timeout_s,
                max_response_bytes=MAX_ANSWER_BYTES,
            )
        except OutboundError as exc:
            log.warning("token introspection failed: %s", exc)
            raise TokenRefused("The token could not be verified: introspection failed") from None
        if answer.status != 200:
            log.warning("token introspection answered %d", answer.status)
            raise TokenRefused("The token could not be verified: introspection failed")
        try:
            claims = json.loads(answer.body)
        except ValueError:
            claims = None
        if not isinstance(claims, dict):
            log.warning("token introspection answered something that is not a JSON object")
            raise TokenRefused("The token could not be verified: introspection failed")
        return claims


__all__ = ["Introspector"]
