"""JWT bearer tokens from an OpenID Connect issuer: discovery, a JWKS cache, verification.

One verifier serves every JWT the gateway accepts (OIDC callers today; PACT's tokens
reuse it). The rules, each a refusal with its own message:

- the token is a JWS in compact form (three segments), at most :data:`MAX_TOKEN_CHARS`;
- ``alg`` is an asymmetric algorithm of :data:`ALLOWED_ALGORITHMS`: never ``none``, never
  an HMAC (a public key used as an HMAC secret is the classic confusion attack), and the
  JWK's own ``alg`` and ``use``, when present, must agree;
- the signing key is the issuer's key with the token's ``kid``, from the JWKS its
  discovery document names (``<issuer>/.well-known/openid-configuration``, whose
  ``issuer`` must be ours exactly, then ``jwks_uri``), or, as a :class:`KeySource`
  says, from a JWKS URL without discovery or from a JWKS given inline (PACT's
  personal agents);
- ``iss`` equals the configured issuer exactly, ``aud`` (a string or a list) contains
  the configured audience, ``exp`` is required and ``exp``/``nbf``/``iat`` hold within
  ``leeway_s``.

The JWKS is cached for :data:`JWKS_MAX_AGE_S`; a ``kid`` it lacks triggers one fetch, and
fetches of one issuer are at least :data:`MIN_REFETCH_INTERVAL_S` apart and never
concurrent (one in flight, the others wait for it), so a flood of tokens with random
kids costs one fetch. Every fetch goes through the guarded outbound client (https, no
private addresses unless ``--allow-private-urls``, or the caller entry's own
``allow_private`` for an issuer on the owner's network) and is bounded by its timeout;
an issuer that cannot be reached makes the token unverifiable (401), never a hang.

Verified tokens are remembered by their SHA-256 (bounded, until their ``exp``), so a
caller that reuses its token pays the signature check once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import math
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import Key, KeySet
from joserfc.jws import JWSRegistry

from a2a_gateway.protocol.card_signature import ALGORITHMS
from a2a_gateway.protocol.errors import UnauthenticatedError

from ..outbound import OutboundClient, OutboundError

log = logging.getLogger(__name__)

Clock = Callable[[], float]

#: Asymmetric JWS algorithms only (RFC 7518 §3, RFC 8037, RFC 9864): the same list
#: as signed cards.
ALLOWED_ALGORITHMS = frozenset(ALGORITHMS)
MAX_TOKEN_CHARS = 16 * 1024
DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_MAX_AGE_S = 3600.0
MIN_REFETCH_INTERVAL_S = 30.0
DEFAULT_LEEWAY_S = 60.0
#: How long one discovery-plus-JWKS fetch may take before the token is unverifiable.
DEFAULT_FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 512 * 1024
MAX_VERIFIED_TOKENS = 4096

_REGISTRY = JWSRegistry(algorithms=sorted(ALLOWED_ALGORITHMS), strict_check_header=False)


class TokenRefused(UnauthenticatedError):
    """A bearer token that is not valid: RFC 6750's ``invalid_token``."""

    def __init__(self, message: str) -> None:
        # RFC 6750 §3: the description is ASCII without quotes; ours are fixed texts.
        challenge = f'Bearer realm="a2a", error="invalid_token", error_description="{message}"'
        super().__init__(message, challenge=challenge)


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated segments: worth trying as a JWT (a key never has two dots
    where callers add makes it; a hand-written one that does still matches as a key
    first)."""
    return token.count(".") == 2 and len(token) <= MAX_TOKEN_CHARS


def _segment_json(segment: str, what: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        raise TokenRefused(f"The token's {what} is not valid base64url JSON") from None
    if not isinstance(value, dict):
        raise TokenRefused(f"The token's {what} is not a JSON object")
    return value


@dataclass(frozen=True, slots=True)
class Unverified:
    """What a token says before its signature is checked: enough to pick the issuer."""

    header: dict[str, Any]
    claims: dict[str, Any]

    @property
    def issuer(self) -> str:
        iss = self.claims.get("iss")
        if not isinstance(iss, str) or not iss:
            raise TokenRefused("The token has no iss claim")
        return iss


def peek(token: str) -> Unverified:
    """Header and claims of a compact JWS, unverified; refuses a disallowed ``alg``."""
    if not looks_like_jwt(token):
        raise TokenRefused("The token is not a signed JWT")
    header_segment, payload_segment, _ = token.split(".")
    header = _segment_json(header_segment, "header")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS:
        shown = alg if isinstance(alg, str) and alg.isalnum() and len(alg) <= 10 else "?"
        raise TokenRefused(f"The token's algorithm {shown} is not allowed")
    return Unverified(header, _segment_json(payload_segment, "claims"))


def check_time_claims(claims: Mapping[str, Any], now: float, leeway_s: float) -> None:
    """``exp`` (required), ``nbf`` and ``iat`` against ``now`` with ``leeway_s``."""
    exp: Any = claims.get("exp")
    if not is_number(exp):
        raise TokenRefused("The token has no exp claim")
    if now > exp + leeway_s:
        raise TokenRefused("The token has expired")
    nbf: Any = claims.get("nbf")
    iat: Any = claims.get("iat")
    for name, value in (("nbf", nbf), ("iat", iat)):
        if value is not None and not is_number(value):
            raise TokenRefused(f"The token's {name} claim is not a number")
    if nbf is not None and now + leeway_s < nbf:
        raise TokenRefused("The token is not valid yet")
    if iat is not None and now + leeway_s < iat:
        raise TokenRefused("The token was issued in the future")


def is_number(value: Any) -> bool:
    """A JSON number that is finite: Python's JSON reader also takes ``NaN`` and
    ``Infinity``, and an ``exp`` of NaN would never expire (every comparison is false)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def audience_contains(claims: Mapping[str, Any], audience: str) -> bool:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return aud == audience
    return isinstance(aud, list) and audience in aud


@dataclass(frozen=True, slots=True)
class KeySource:
    """Where an issuer's keys come from: its discovery document (the default), a
    ``jwks_uri`` fetched directly, or ``jwks``, a JWKS given inline (its JSON text, so
    that the source is hashable and an edited JWKS is a new source)."""

    allow_private: bool = False  # fetch from a private address (the owner's network)
    jwks_uri: str = ""
    jwks: str = ""


def inline_keys(jwks: Any) -> KeySet:
    """A JWKS document as a key set; ValueError when it is not one (nothing of it in
    the message)."""
    try:
        return KeySet.import_key_set(jwks)
    except (JoseError, ValueError, TypeError, KeyError, AttributeError):
        raise ValueError("not a JWKS of public keys") from None


class IssuerKeys:
    """The signing keys of one issuer, from its discovery document and JWKS (or as
    its :class:`KeySource` says)."""

    def __init__(
        self,
        issuer: str,
        outbound: OutboundClient,
        *,
        clock: Clock = time.monotonic,
        fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
        source: KeySource = KeySource(),
    ) -> None:
        self.issuer = issuer
        self._outbound = outbound
        self._clock = clock
        self._fetch_timeout_s = fetch_timeout_s
        self._jwks_uri = source.jwks_uri
        self._keys: KeySet | None = None
        self._fetched_at = float("-inf")
        self._static = bool(source.jwks)
        if self._static:  # never stale, never fetched
            self._keys, self._fetched_at = inline_keys(json.loads(source.jwks)), float("inf")
        self._attempted_at = float("-inf")
        self._lock = asyncio.Lock()
        #: Fetches made (discovery plus JWKS count as one): the rate limit's witness.
        self.fetches = 0

    def _cached(self, kid: str | None) -> Key | None:
        if self._keys is None or self._clock() - self._fetched_at > JWKS_MAX_AGE_S:
            return None
        try:
            return self._keys.get_by_kid(kid)
        except (JoseError, ValueError):
            return None

    async def key(self, kid: str | None) -> Key:
        """The key for ``kid``, fetching the JWKS once if it is unknown (rate-limited)."""
        found = self._cached(kid)
        if found is not None:
            return found
        async with self._lock:  # one fetch in flight; the others then look again
            found = self._cached(kid)
            if found is not None:
                return found
            # Missing, stale or without this kid: fetch, but never twice within the
            # interval, whether the last fetch worked or not (a provider that is down is
            # asked again only after it; meanwhile the answer is an immediate 401).
            if not self._static and self._clock() - self._attempted_at >= MIN_REFETCH_INTERVAL_S:
                await self._refresh()
        if self._keys is None:
            raise TokenRefused("The token could not be verified: the issuer's keys are unavailable")
        try:
            return self._keys.get_by_kid(kid)
        except (JoseError, ValueError):
            raise TokenRefused("The token's key id is not one of the issuer's keys") from None

    async def _refresh(self) -> None:
        self._attempted_at = self._clock()
        self.fetches += 1
        try:
            async with asyncio.timeout(self._fetch_timeout_s):
                jwks_uri: Any = self._jwks_uri
                if not jwks_uri:
                    discovery = await self._get_json(self.issuer.rstrip("/") + DISCOVERY_PATH)
                    if discovery.get("issuer") != self.issuer:
                        raise _FetchProblem("its discovery document names another issuer")
                    jwks_uri = discovery.get("jwks_uri")
                    if not isinstance(jwks_uri, str):
                        raise _FetchProblem("its discovery document has no jwks_uri")
                keys = KeySet.import_key_set(await self._get_json(jwks_uri))  # type: ignore[arg-type]
        except (TimeoutError, _FetchProblem, OutboundError) as exc:
            reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            log.warning("could not fetch the keys of issuer %s: %s", self.issuer, reason)
            return  # keep what we had: a rotation must not lose the keys still valid
        except (JoseError, ValueError, TypeError):
            reason = "its JWKS is not valid"
            log.warning("could not fetch the keys of issuer %s: %s", self.issuer, reason)
            return  # keep what we had: a rotation must not lose the keys still valid
        self._keys, self._fetched_at = keys, self._clock()

    async def _get_json(self, url: str) -> dict[str, Any]:
        answer = await self._outbound.get(
            url,
            headers={"Accept": "application/json"},
            timeout_s=self._fetch_timeout_s,
            max_response_bytes=MAX_DOCUMENT_BYTES,
        )
        if answer.status != 200:
            raise _FetchProblem(f"it answered {answer.status}")
        try:
            value = json.loads(answer.body)
        except ValueError:
            raise _FetchProblem("it answered with something that is not JSON") from None
        if not isinstance(value, dict):
            raise _FetchProblem("it answered with something that is not a JSON object")
        return value


class _FetchProblem(Exception):
    pass


@dataclass(slots=True)
class _Verified:
    claims: dict[str, Any]
    expires: float


@dataclass(slots=True)
class JwtVerifier:
    """Verifies tokens of any issuer it is asked about; one per server.

    ``wall_clock`` judges ``exp``/``nbf`` (seconds since the epoch); ``clock`` paces the
    JWKS fetches. Both are injectable for tests.
    """

    outbound: OutboundClient
    #: For issuers whose entries say ``allow_private`` (made on first use).
    private_outbound: OutboundClient | None = None
    leeway_s: float = DEFAULT_LEEWAY_S
    fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S
    clock: Clock = time.monotonic
    wall_clock: Clock = time.time
    _issuers: dict[tuple[str, KeySource], IssuerKeys] = field(default_factory=dict)
    _verified: OrderedDict[bytes, _Verified] = field(default_factory=OrderedDict)

    def issuer_keys(
        self, issuer: str, *, allow_private: bool = False, source: KeySource | None = None
    ) -> IssuerKeys:
        source = source or KeySource(allow_private)
        keys = self._issuers.get((issuer, source))
        if keys is None:
            outbound = self.outbound
            if source.allow_private and not outbound.allow_private_urls:
                if self.private_outbound is None:
                    self.private_outbound = OutboundClient(
                        allow_private_urls=True, timeout_s=outbound.timeout_s
                    )
                outbound = self.private_outbound
            keys = IssuerKeys(
                issuer,
                outbound,
                clock=self.clock,
                fetch_timeout_s=self.fetch_timeout_s,
                source=source,
            )
            self._issuers[issuer, source] = keys
        return keys

    async def aclose(self) -> None:
        await self.outbound.aclose()
        if self.private_outbound is not None:
            await self.private_outbound.aclose()

    async def verify(self, token: str, issuers: Mapping[str, bool | KeySource]) -> dict[str, Any]:
        """The token's claims once its ``iss`` is one of ``issuers`` (each mapped to
        whether its keys may be fetched from a private address, or to where its keys
        are) and its signature and time claims hold; the audience and the subject are
        the caller entry's to check. Raises :class:`TokenRefused`. The issuer is
        checked before anything is fetched: a token must not make us ask a URL it
        names."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self.wall_clock()
        seen = self._verified.get(digest)
        if seen is not None:
            if now <= seen.expires and seen.claims.get("iss") in issuers:
                check_time_claims(seen.claims, now, self.leeway_s)
                self._verified.move_to_end(digest)
                return seen.claims
            del self._verified[digest]
        token_info = peek(token)
        issuer = token_info.issuer
        if issuer not in issuers:
            raise TokenRefused("The token's issuer is not accepted")
        given = issuers[issuer]
        source = given if isinstance(given, KeySource) else KeySource(given)
        keys = self.issuer_keys(issuer, source=source)
        key = await keys.key(token_info.header.get("kid"))
        alg = token_info.header["alg"]
        _check_key_fits(key, alg)
        try:
            if alg == "EdDSA":  # RFC 9864 deprecates the name, not the algorithm
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    jws.deserialize_compact(token, key, [alg], _REGISTRY)
            else:
                jws.deserialize_compact(token, key, [alg], _REGISTRY)
        except JoseError:
            raise TokenRefused("The token's signature is not valid") from None
        claims = token_info.claims
        if claims.get("iss") != issuer:
            raise TokenRefused("The token's issuer is not accepted")
        check_time_claims(claims, now, self.leeway_s)
        self._verified[digest] = _Verified(claims, float(claims["exp"]) + self.leeway_s)
        while len(self._verified) > MAX_VERIFIED_TOKENS:
            self._verified.popitem(last=False)
        return claims


def _check_key_fits(key: Key, alg: str) -> None:
    """The JWK's own ``alg`` and ``use``, when it states them, must allow this use."""
    stated_alg = key.get("alg")
    if stated_alg is not None and stated_alg != alg:
        raise TokenRefused("The token's algorithm does not match its key")
    use = key.get("use")
    if use is not None and use != "sig":
        raise TokenRefused("The token's key is not a signing key")


__all__ = [
    "ALLOWED_ALGORITHMS",
    "IssuerKeys",
    "JwtVerifier",
    "KeySource",
    "TokenRefused",
    "Unverified",
    "audience_contains",
    "check_time_claims",
    "inline_keys",
    "is_number",
    "looks_like_jwt",
    "peek",
]
