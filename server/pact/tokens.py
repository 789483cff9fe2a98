"""Who is speaking on the PACT URL: a personal agent's JWT for one of its users.

Every request carries ``Authorization: Bearer <JWT>``, checked by the gateway's one
verifier (:class:`~..identity.jwt.JwtVerifier`: signature, kid, JWKS cache and refetch
bound, the outbound guard, exp/nbf/iat with the leeway) plus PACT's own rules, each a
401 with ``WWW-Authenticate`` naming why:

- ``alg`` is ES256 or RS256 (never ``none``, never an HMAC);
- ``iss`` is an enabled personal agent of a workspace's pact.json (exactly; a disabled
  one is refused like an unknown one, and nothing is fetched for either), and ``aud``
  is that workspace's audience: exactly one workspace must accept the pair;
- ``sub`` (the user), ``iat`` and ``jti`` are present; the token lives at most
  ``max_lifetime_s`` (``exp - iat``);
- its ``jti`` was not seen before within its lifetime (:class:`ReplayGuard`).

The caller is the user: ``pact.<hash of iss and sub>`` of the workspace (a name no
callers.json entry can have: those are ``[a-z0-9-]``), with the personal agent and the
user as :class:`~a2a_gateway.protocol.context.OnBehalf` for the agent's framing header.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from a2a_gateway.protocol.context import Caller, OnBehalf
from a2a_gateway.protocol.errors import UnauthenticatedError

from ..auth import (
    AUTHORIZATION_HEADER,
    BEARER_CHALLENGE,
    Authenticator,
    HeaderGetter,
    Identity,
)
from ..config import DEFAULT_PACT_MAX_LIFETIME_S
from ..identity.jwt import (
    Clock,
    JwtVerifier,
    TokenRefused,
    audience_contains,
    is_number,
    peek,
)
from ..limits import RateLimits
from ..publication import Publication
from .config import PactConfig, pact_file

log = logging.getLogger(__name__)

#: The algorithms PACT allows personal agents.
PACT_ALGORITHMS = frozenset({"ES256", "RS256"})
#: jtis remembered at once; a flood beyond it is refused, never forgotten early.
MAX_REMEMBERED_JTIS = 100_000
MAX_CLAIM_CHARS = 256
CALLER_PREFIX = "pact."


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


def caller_name(issuer: str, sub: str) -> str:
    """The caller name of one user of one personal agent (stable, path-safe)."""
    digest = hashlib.sha256(f"{issuer}\x00{sub}".encode("utf-8", "surrogateescape"))
    return CALLER_PREFIX + digest.hexdigest()[:32]


def _bounded_text(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_CLAIM_CHARS


class PactAuthenticator(Authenticator):
    """Admits personal agents' users on the PACT URL (see the module docstring)."""

    def __init__(
        self,
        workspaces: Sequence[Path],
        verifier: JwtVerifier,
        *,
        max_lifetime_s: float = DEFAULT_PACT_MAX_LIFETIME_S,
        limits: RateLimits | None = None,
        replay: ReplayGuard | None = None,
    ) -> None:
        super().__init__(limits=limits)
        self._files = [(Path(w), pact_file(Path(w))) for w in workspaces]
        self.publication = Publication([Path(w) for w in workspaces])
        self.verifier = verifier
        self.max_lifetime_s = max_lifetime_s
        self.replay = replay or ReplayGuard(wall_clock=verifier.wall_clock)

    def configs(self) -> list[tuple[Path, PactConfig]]:
        """The workspaces with a usable pact.json, and theirs."""
        found = []
        for workspace, file in self._files:
            config = file.value()
            if config is not None:
                found.append((workspace, config))
        return found

    async def identify(self, get: HeaderGetter, certificate: bytes | None = None) -> Identity:
        token = self._presented(get)
        unverified = peek(token)
        alg = unverified.header.get("alg")
        if alg not in PACT_ALGORITHMS:
            raise TokenRefused(f"The token's algorithm {alg} is not allowed here (ES256, RS256)")
        issuer = unverified.issuer
        accepting = [
            (workspace, config, agent)
            for workspace, config in self.configs()
            if (agent := config.agent(issuer)) is not None and agent.enabled
        ]
        if not accepting:
            raise TokenRefused("The token's issuer is not accepted")
        accepting = [a for a in accepting if audience_contains(unverified.claims, a[1].audience)]
        if not accepting:
            raise TokenRefused("The token's audience is not accepted")
        if len(accepting) > 1:
            where = ", ".join(sorted(str(a[0]) for a in accepting))
            log.warning("a PACT token's issuer and audience match several workspaces: %s", where)
            raise TokenRefused("The token's audience is not accepted")
        workspace, config, agent = accepting[0]
        if not self.publication.published(str(workspace)):  # as on the ordinary URL
            raise UnauthenticatedError("This agent is not published", challenge=BEARER_CHALLENGE)
        claims = await self.verifier.verify(token, {issuer: agent.keys})
        if not audience_contains(claims, config.audience):  # the claims peeked are these
            raise TokenRefused("The token's audience is not accepted")
        sub, jti, iat = claims.get("sub"), claims.get("jti"), claims.get("iat")
        if not _bounded_text(sub):
            raise TokenRefused("The token has no sub claim (the user)")
        if not _bounded_text(jti):
            raise TokenRefused("The token has no jti claim")
        if not is_number(iat):
            raise TokenRefused("The token has no iat claim")
        if claims["exp"] - iat > self.max_lifetime_s:
            raise TokenRefused(f"The token lives longer than {self.max_lifetime_s:g} s (exp - iat)")
        self.replay.spend(issuer, jti, float(claims["exp"]) + self.verifier.leeway_s)
        caller = Caller(
            name=caller_name(issuer, sub),
            workspace=str(workspace),
            on_behalf=OnBehalf(agent=issuer, user=sub),
        )
        return Identity(caller)

    @staticmethod
    def _presented(get: HeaderGetter) -> str:
        authorization = get(AUTHORIZATION_HEADER)
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthenticatedError(
                "A personal agent's token is required (Authorization: Bearer <JWT>)",
                challenge=BEARER_CHALLENGE,
            )
        return token.strip()

    async def aclose(self) -> None:
        await self.verifier.aclose()


__all__ = [
    "CALLER_PREFIX",
    "PACT_ALGORITHMS",
    "PactAuthenticator",
    "ReplayGuard",
    "caller_name",
]
