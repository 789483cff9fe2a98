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

PACT Delegated: ``X-A2A-User-Delegation: Bearer <token>`` beside the personal agent's
JWT carries a delegation token of this gateway (:mod:`.oauth`): ``typ: at+jwt``, signed
by the workspace's key, ``iss`` the oauth URL and ``aud`` the PACT URL of this
request's base URL, ``client_id`` the personal agent that presents it. The turn then
runs as that account: the caller is ``pact.<hash of iss, sub and the token's sub>``
(so a conversation of one account never continues under another's token), and
``OnBehalf`` carries the account, its granted scopes (those still offered) and the
token. A bad token is a 401 like a bad JWT.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
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
    JwtVerifier,
    TokenRefused,
    audience_contains,
    is_number,
    peek,
)
from ..limits import RateLimits
from ..publication import Publication
from .config import PactConfig, pact_file
from .oauth import OAUTH, DelegationServer
from .replay import ReplayGuard

#: The header a delegation token travels in, beside the personal agent's JWT.
DELEGATION_HEADER = "X-A2A-User-Delegation"

log = logging.getLogger(__name__)

#: The algorithms PACT allows personal agents.
PACT_ALGORITHMS = frozenset({"ES256", "RS256"})
MAX_CLAIM_CHARS = 256
CALLER_PREFIX = "pact."


def caller_name(issuer: str, sub: str, account: str = "") -> str:
    """The caller name of one user of one personal agent (stable, path-safe), acting
    as ``account`` when a delegation token says so."""
    text = f"{issuer}\x00{sub}" + (f"\x00{account}" if account else "")
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape"))
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
        self.delegation = DelegationServer(self.configs, verifier)
        #: The PACT URL of the request being served (the mount sets it: the request's
        #: base URL and the PACT path); delegation tokens name it.
        self.endpoint: Callable[[], str] = lambda: ""

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
        on_behalf = OnBehalf(agent=issuer, user=sub)
        if config.delegation is not None:
            on_behalf = OnBehalf(issuer, sub, tool_scopes=config.delegation.tool_scopes())
        presented = get(DELEGATION_HEADER)
        if presented is not None:
            on_behalf = await self._delegated(presented, workspace, on_behalf)
        caller = Caller(
            name=caller_name(issuer, sub, on_behalf.account),
            workspace=str(workspace),
            on_behalf=on_behalf,
        )
        return Identity(caller)

    async def _delegated(self, presented: str, workspace: Path, on_behalf: OnBehalf) -> OnBehalf:
        """``on_behalf`` acting as the account a delegation token names."""
        scheme, _, token = presented.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise TokenRefused(f"{DELEGATION_HEADER} must be Bearer <delegation token>")
        endpoint = self.endpoint()
        if not endpoint:
            raise TokenRefused("Delegation tokens are not accepted here")
        where, delegation, claims = await self.delegation.verify_token(
            token, endpoint + OAUTH, endpoint
        )
        if where != workspace:
            raise TokenRefused("The delegation token is for another audience")
        if claims["client_id"] != on_behalf.agent:
            raise TokenRefused("The delegation token was issued to another personal agent")
        account = claims["sub"]
        if len(account) > MAX_CLAIM_CHARS:
            raise TokenRefused("The delegation token has no sub claim")
        granted = frozenset(s for s in claims["scope"].split() if delegation.scope(s))
        return OnBehalf(
            on_behalf.agent,
            on_behalf.user,
            account=account,
            scopes=granted,
            tool_scopes=delegation.tool_scopes(),
            token=token,
        )

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
    "DELEGATION_HEADER",
    "PACT_ALGORITHMS",
    "PactAuthenticator",
    "ReplayGuard",
    "caller_name",
]
