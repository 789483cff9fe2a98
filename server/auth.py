"""Who is calling: authentication and admission, shared by every binding.

Bindings hand the request's headers (HTTP) or metadata (gRPC) and the client address
to :meth:`Authenticator.admit` before they read the body. It applies the per-address
rate limit, finds the :class:`Caller` (or raises :class:`UnauthenticatedError`),
applies the caller's rate limit, and returns an :class:`Identity`: the caller plus its
:class:`CallerPolicy` (limits, signing secret) from ``callers.json``. Keys are compared
in constant time and never logged or echoed.

``callers.json`` (one per workspace, ``<workspace>/.a2a/callers.json``) is an array of::

    {"name": "travel-bot",              # [a-z0-9-]{1,40}, unique in the file
     "key": "k_3f9c..." | "sha256:<64 hex>",   # or "jwt": {...} or "basic": {...}
     "mode": "isolated",                # the default; other modes are skipped
     "note": "Alice's trip planner",    # optional
     "rate_limit_per_minute": 60,       # optional overrides (0 = unlimited)
     "max_running_tasks": 4,
     "max_open_contexts": 20,
     "signing_secret": "...",           # optional: requests must be signed (local/signing.py)
     "delegate": true}                  # optional: its assistant turns get the a2a tool

An entry names exactly one identity: a ``key``, a ``jwt`` rule (tokens of an OpenID
Connect issuer) or ``basic`` credentials (see :mod:`.identity.rules`). Whatever the
scheme, exactly one entry across every workspace must match a request's credentials.

A bad entry is skipped with a warning naming the entry (never its key); the rest still
work. An unknown field also skips its entry: a misspelt ``signing_secret`` must not
silently turn signing off. A file that is not a JSON array means no callers, with a
warning naming the file. The file is re-read whenever its stat changes (and on every
request while it is younger than :data:`.fresh_file.FRESH_S`, because an edit within the same
timestamp tick and of the same size would otherwise go unnoticed).
"""

from __future__ import annotations

import abc
import asyncio
import functools
import hashlib
import hmac
import json
import logging
import re
import secrets
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias

from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.local.redaction import register_secret
from a2a_gateway.protocol.closing import AsyncCloseable
from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.errors import UnauthenticatedError

from .fresh_file import FreshFile, read_file
from .identity.basic import CHALLENGE as BASIC_CHALLENGE
from .identity.basic import (
    DEFAULT_LOG2_N,
    BasicRefused,
    PasswordChecker,
    hash_password,
    parse_basic,
)
from .identity.introspection import Introspector
from .identity.jwt import MAX_TOKEN_CHARS, JwtVerifier, TokenRefused, looks_like_jwt, peek
from .identity.rules import (
    BasicRule,
    IntrospectionRule,
    JwtRule,
    MtlsRule,
    PresentedCertificate,
    parse_basic_rule,
    parse_introspection,
    parse_jwt,
    parse_mtls,
)
from .limits import NO_OVERRIDES, CallerLimits, RateLimits, RequestLimiter
from .publication import Publication

log = logging.getLogger(__name__)

#: Reads one header / metadata value by case-insensitive name (None when absent).
HeaderGetter = Callable[[str], str | None]
#: Reads every value of one header / metadata key.
HeaderListGetter = Callable[[str], Iterable[str]]

API_KEY_HEADER = "X-API-Key"
AUTHORIZATION_HEADER = "Authorization"
CALLERS_FILE = RELATIVE.callers
MAX_KEY_CHARS = 4096
MIN_SIGNING_SECRET_CHARS = 16
HASH_PREFIX = "sha256:"
MODE_ISOLATED = "isolated"

NAME_PATTERN = re.compile(r"^[a-z0-9-]{1,40}$")
_HASHED = re.compile(r"^sha256:[0-9a-fA-F]{64}$")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,39}$")
_LIMIT_FIELDS = ("rate_limit_per_minute", "max_running_tasks", "max_open_contexts")
#: The fields that say who the caller is: an entry has exactly one.
IDENTITY_FIELDS = ("key", "jwt", "basic", "introspection", "mtls")
KNOWN_FIELDS = frozenset(
    {
        "name",
        "key_prefix",
        "mode",
        "note",
        "signing_secret",
        "delegate",
        *IDENTITY_FIELDS,
        *_LIMIT_FIELDS,
    }
)
#: The 401 challenge while keys (and JWT bearer tokens) are the only schemes in use.
BEARER_CHALLENGE = 'Bearer realm="a2a"'
#: ``key_prefix``: the first characters of a hashed key, shown by ``callers list``.
MAX_KEY_PREFIX_CHARS = 12


# --- presented credentials ---------------------------------------------------------------


def single_values(get_all: HeaderListGetter) -> HeaderGetter:
    """A :data:`HeaderGetter` that refuses a credential header sent more than once
    (ambiguous credentials) instead of silently picking one."""

    def get(name: str) -> str | None:
        values = list(get_all(name))
        if len(values) > 1:
            raise UnauthenticatedError(f"{name} must be sent once")
        return values[0] if values else None

    return get


@dataclass(frozen=True, slots=True)
class BasicCredentials:
    """``Authorization: Basic`` as sent (RFC 7617)."""

    username: str
    password: str = field(repr=False)


#: What :func:`presented_credentials` gives: a key or token, Basic credentials, or None.
Presented: TypeAlias = str | BasicCredentials | None


class NotRead:
    """(:data:`NOT_READ`) The credentials not parsed yet: parse them."""

    __slots__ = ()


NOT_READ: Final = NotRead()


def presented_credentials(get: HeaderGetter) -> Presented:
    """A key or bearer token (see :func:`presented_key`), Basic credentials, or None."""
    authorization = get(AUTHORIZATION_HEADER)
    if authorization is not None:
        scheme, _, rest = authorization.strip().partition(" ")
        if scheme.lower() == "basic":
            if get(API_KEY_HEADER) is not None:
                raise UnauthenticatedError("Send X-API-Key or Basic credentials, not both")
            return BasicCredentials(*parse_basic(rest))
    # The Authorization header already read: one lookup less on every admission.
    return _presented_key(get(API_KEY_HEADER), authorization)


def presented_key(get: HeaderGetter) -> str | None:
    """The key from ``X-API-Key`` or ``Authorization: Bearer``; None when neither is sent.

    Both headers with different keys is ambiguous and refused; an empty key is ``""``.
    A JWT bearer token is a key here too (the authenticator tells them apart).
    """
    return _presented_key(get(API_KEY_HEADER), get(AUTHORIZATION_HEADER))


def _presented_key(api_key: str | None, authorization: str | None) -> str | None:
    bearer: str | None = None
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise UnauthenticatedError("Authorization must use the Bearer or Basic scheme")
        bearer = token.strip()
    if api_key is not None and bearer is not None and api_key.strip() != bearer:
        raise UnauthenticatedError("X-API-Key and Authorization carry different keys")
    key = api_key if api_key is not None else bearer
    if key is not None and len(key) > MAX_TOKEN_CHARS:
        raise UnauthenticatedError("The API key is not valid")
    return key


def key_digest(key: str) -> bytes:
    # surrogateescape: HTTP servers decode undecodable header bytes that way.
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


# --- who may call, and on what terms ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallerPolicy:
    """What ``callers.json`` says about one caller beyond its key."""

    limits: CallerLimits = NO_OVERRIDES
    signing_secret: str | None = field(default=None, repr=False)


DEFAULT_POLICY = CallerPolicy()


@dataclass(frozen=True, slots=True)
class Identity:
    """An admitted request's caller and its policy."""

    caller: Caller
    policy: CallerPolicy = DEFAULT_POLICY


@dataclass(frozen=True, slots=True)
class SchemesInUse:
    """Which schemes callers can use now: what the card advertises (never a credential)."""

    keys: bool = True
    basic: bool = False
    issuers: tuple[str, ...] = ()  # of jwt callers, sorted
    introspection: bool = False  # opaque bearer tokens, checked by introspection
    token_url: str = ""  # where introspection callers get tokens (client credentials)
    mtls: bool = False  # client certificates


KEYS_ONLY = SchemesInUse()


#: The identity of every anonymous request (immutable, so one is enough).
ANONYMOUS_IDENTITY = Identity(ANONYMOUS)


class Authenticator(AsyncCloseable, abc.ABC):
    """Finds the caller of a request; :meth:`admit` adds the rate limits.

    ``limits`` are the server-wide request rates; they are shared by every binding
    that uses this authenticator (one bucket per caller and per address).
    :meth:`identify` is a coroutine because some schemes ask someone else (an issuer's
    keys, an introspection endpoint); a key is checked without suspending.
    """

    #: Whether callers may present client certificates (TLS with a client CA): only
    #: then do bindings look up the peer's certificate for :meth:`admit`.
    certificates: bool = False

    def __init__(self, *, limits: RateLimits | None = None) -> None:
        self.limiter = RequestLimiter(limits)

    @abc.abstractmethod
    async def identify(self, get: HeaderGetter, certificate: bytes | None = None) -> Identity:
        """The caller and its policy, or raise UnauthenticatedError. ``certificate``
        is the DER of the client certificate the TLS handshake verified."""

    def limits_for(self, caller: Caller) -> CallerLimits:
        """The caller's own limits (for the task engine's caps)."""
        return NO_OVERRIDES

    def schemes(self) -> SchemesInUse:
        """The schemes callers may use now: the card's ``securitySchemes``."""
        return KEYS_ONLY

    def serving(self) -> bool:
        """Whether the public card is served now (:mod:`.publication`)."""
        return True

    async def admit(
        self, get: HeaderGetter, client_address: str | None, certificate: bytes | None = None
    ) -> Identity:
        """Rate-limit the address, authenticate, then rate-limit the caller."""
        self.limiter.check_address(client_address)
        identity = await self.identify(get, certificate)
        self.limiter.check_caller(identity.caller, identity.policy.limits)
        return identity

    def admit_now(
        self,
        get: HeaderGetter,
        client_address: str | None,
        certificate: bytes | None = None,
        presented: Presented | NotRead = NOT_READ,
    ) -> Identity | Coroutine[Any, Any, Identity]:
        """:meth:`admit`, as the identity when it is known without waiting, or as the
        coroutine to await for it (here always the coroutine). ``presented``: what
        :func:`presented_credentials` gave for these same headers before, if known."""
        return self.admit(get, client_address, certificate)

    async def aclose(self) -> None:  # most authenticators hold nothing
        """Release what the schemes hold (connections to identity providers)."""


class AllowAnonymous(Authenticator):
    """Everyone is the anonymous caller (``serve --allow-anonymous`` on loopback)."""

    async def identify(self, get: HeaderGetter, certificate: bytes | None = None) -> Identity:
        return ANONYMOUS_IDENTITY


@dataclass(frozen=True, slots=True)
class CallerEntry:
    """One valid entry of a callers.json, with exactly one identity: ``key`` (plaintext
    or ``sha256:<hex>``; ``""`` for the other schemes), ``jwt`` or ``basic``."""

    name: str
    workspace: str
    key: str = field(default="", repr=False)
    mode: str = MODE_ISOLATED
    note: str = ""
    policy: CallerPolicy = DEFAULT_POLICY
    digest: bytes = field(default=b"", repr=False, compare=False)
    key_prefix: str = ""
    jwt: JwtRule | None = None
    basic: BasicRule | None = field(default=None, repr=False)
    introspection: IntrospectionRule | None = None
    mtls: MtlsRule | None = None
    delegate: bool = False

    @property
    def hashed(self) -> bool:
        return self.key.startswith(HASH_PREFIX)

    @property
    def scheme(self) -> str:
        """``key``, ``jwt``, ``basic``, ``introspection`` or ``mtls``."""
        for scheme in ("jwt", "basic", "introspection", "mtls"):
            if getattr(self, scheme) is not None:
                return scheme
        return "key"

    @property
    def caller(self) -> Caller:
        return Caller(name=self.name, workspace=self.workspace, delegate=self.delegate)

    def matches(self, presented_digest: bytes) -> bool:
        """Constant-time: both sides are SHA-256 digests, whatever the key lengths."""
        return hmac.compare_digest(presented_digest, self.digest)


def _entry_digest(key: str) -> bytes:
    if key.startswith(HASH_PREFIX):
        return bytes.fromhex(key[len(HASH_PREFIX) :])
    return key_digest(key)


def _has_space(text: str) -> bool:
    return any(ch.isspace() for ch in text)


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: The parser of each identity field other than ``key`` (a rule, or why it is skipped).
_RULE_PARSERS: dict[str, Callable[[Any], Any]] = {
    "jwt": parse_jwt,
    "basic": parse_basic_rule,
    "introspection": parse_introspection,
    "mtls": parse_mtls,
}


def parse_entry(item: Any, workspace: str) -> CallerEntry | str:
    """A valid entry, or the reason it is skipped (never containing a key or secret)."""
    if not isinstance(item, dict):
        return "not an object"
    unknown = sorted(str(k) for k in item if k not in KNOWN_FIELDS)
    if unknown:
        shown = repr(unknown[0]) if _FIELD_NAME.match(unknown[0]) else "a field"
        return f"unknown field {shown}"
    name, mode, note = item.get("name"), item.get("mode"), item.get("note")
    key: Any = item.get("key")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return "name must match [a-z0-9-]{1,40}"
    named = [field_name for field_name in IDENTITY_FIELDS if field_name in item]
    if len(named) > 1:
        return f"an entry has one identity, not {' and '.join(named)}"
    # The identity other than a key, as CallerEntry's field of the same name.
    rule: dict[str, Any] = {}
    if named and named != ["key"]:
        (scheme,) = named
        got = _RULE_PARSERS[scheme](item[scheme])
        if isinstance(got, str):
            return got
        rule[scheme], key = got, ""
        if "key_prefix" in item:
            return "key_prefix belongs to an entry with a key"
    elif not isinstance(key, str) or not key:
        return "key must be a non-empty string"
    if _has_space(key):
        return "key must not contain whitespace"
    if len(key) > MAX_KEY_CHARS:
        return f"key must be at most {MAX_KEY_CHARS} characters"
    if key.startswith(HASH_PREFIX) and not _HASHED.match(key):
        return "hashed key must be sha256:<64 hex digits>"
    if mode is None:
        mode = MODE_ISOLATED
    if mode != MODE_ISOLATED:
        return "unknown mode (only 'isolated' is implemented)"
    if note is not None and not isinstance(note, str):
        return "note must be a string"
    delegate = item.get("delegate", False)
    if not isinstance(delegate, bool):
        return "delegate must be true or false"
    limits: dict[str, int] = {}
    for limit in _LIMIT_FIELDS:
        if limit in item:
            if not _non_negative_int(item[limit]):
                return f"{limit} must be a non-negative integer"
            limits[limit] = item[limit]
    secret = item.get("signing_secret")
    if secret is not None:
        if not isinstance(secret, str) or len(secret) < MIN_SIGNING_SECRET_CHARS:
            return f"signing_secret must be a string of {MIN_SIGNING_SECRET_CHARS}+ characters"
        if _has_space(secret):
            return "signing_secret must not contain whitespace"
    if key.startswith(HASH_PREFIX):
        key = key.lower()
    policy = CallerPolicy(CallerLimits(**limits), secret) if limits or secret else DEFAULT_POLICY
    prefix = item.get("key_prefix", "")
    if not isinstance(prefix, str) or len(prefix) > MAX_KEY_PREFIX_CHARS or _has_space(prefix):
        return f"key_prefix must be a string of at most {MAX_KEY_PREFIX_CHARS} characters"
    return CallerEntry(
        name,
        workspace,
        key,
        MODE_ISOLATED,
        note or "",
        policy,
        digest=_entry_digest(key) if key else b"",
        key_prefix=prefix,
        delegate=delegate,
        **rule,
    )


def parse_callers(data: Any, workspace: str, label: str) -> tuple[list[CallerEntry], list[str]]:
    """Valid entries of a decoded callers.json, and one warning per problem.

    ``label`` names the file in warnings. Never raises on bad content.
    """
    if not isinstance(data, list):
        return [], [f"callers file is not a JSON array, no callers loaded: {label}"]
    entries: list[CallerEntry] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(data):
        got = parse_entry(item, workspace)
        name = item.get("name") if isinstance(item, dict) else None
        shown = (
            f"caller {name!r}"
            if isinstance(name, str) and NAME_PATTERN.match(name)
            else f"entry {index}"
        )
        if isinstance(got, str):
            warnings.append(f"skipping {label} {shown}: {got}")
            continue
        if got.name in seen:
            warnings.append(f"skipping {label} {shown}: duplicate name")
            continue
        seen.add(got.name)
        entries.append(got)
    return entries, warnings


def _callers_parser(
    path: Path, workspace: str
) -> Callable[[bytes], tuple[list[CallerEntry], list[str]]]:
    def parse(raw: bytes) -> tuple[list[CallerEntry], list[str]]:
        try:
            data = json.loads(raw)
        except ValueError:
            return [], [f"callers file is not valid JSON, no callers loaded: {path}"]
        return parse_callers(data, workspace, str(path))

    return parse


def read_callers(path: Path, workspace: str) -> tuple[list[CallerEntry], list[str]]:
    """Entries and warnings of one callers.json; a missing file is no callers."""
    parse = _callers_parser(path, workspace)
    return read_file(path, parse, [], "callers file", "no callers loaded")


class _Cached(FreshFile[list[CallerEntry]]):
    """callers.json of one workspace, read fresh (:mod:`.fresh_file`); the keys and
    signing secrets of each version read are registered for redaction."""

    def __init__(self, workspace: Path) -> None:
        path = workspace / CALLERS_FILE
        parse = _callers_parser(path, str(workspace))

        def parse_and_register(raw: bytes) -> tuple[list[CallerEntry], list[str]]:
            entries, warnings = parse(raw)
            for entry in entries:
                if not entry.hashed:
                    register_secret(entry.key)
                if entry.policy.signing_secret is not None:
                    register_secret(entry.policy.signing_secret)
            return entries, warnings

        super().__init__(path, parse_and_register, [], "callers file", "no callers loaded")

    def entries(self) -> list[CallerEntry]:
        return self.value()


class WorkspaceCallers(Authenticator):
    """Callers from ``<workspace>/.a2a/callers.json`` across every workspace.

    Exactly one entry in all workspaces must match the presented credentials, whatever
    their scheme; none or several is a 401. With ``allow_anonymous``, a request that
    presents no credentials at all is the anonymous caller (local development); a wrong
    or empty one is still refused.

    ``verifier`` checks JWT bearer tokens (without one, ``jwt`` entries match nothing);
    ``basic_allowed`` is False off loopback without TLS, where a Basic password would
    cross the network in the clear: such credentials are refused.
    """

    def __init__(
        self,
        workspaces: Sequence[Path],
        *,
        allow_anonymous: bool = False,
        limits: RateLimits | None = None,
        verifier: JwtVerifier | None = None,
        introspector: Introspector | None = None,
        token_url: str = "",
        basic_allowed: bool = True,
        certificates: bool = False,
    ) -> None:
        super().__init__(limits=limits)
        self._files = [_Cached(Path(w)) for w in workspaces]
        self.allow_anonymous = allow_anonymous
        self.verifier = verifier
        self.introspector = introspector
        self.token_url = token_url
        self.basic_allowed = basic_allowed
        self.certificates = certificates
        self._passwords = PasswordChecker()
        self.publication = Publication([Path(w) for w in workspaces])

    def entries(self) -> list[CallerEntry]:
        return [entry for cached in self._files for entry in cached.entries()]

    def schemes(self) -> SchemesInUse:
        entries = self.entries()
        issuers = sorted({entry.jwt.issuer for entry in entries if entry.jwt is not None})
        keys = any(entry.scheme == "key" for entry in entries)
        basic = any(entry.basic is not None for entry in entries)
        opaque = self.introspector is not None and any(
            entry.introspection is not None for entry in entries
        )
        mtls = self.certificates and any(entry.mtls is not None for entry in entries)
        # No caller at all (yet): keys are how one is added, so they are what we show.
        return SchemesInUse(
            keys or not (basic or issuers or opaque or mtls),
            basic,
            tuple(issuers),
            opaque,
            self.token_url if opaque else "",
            mtls,
        )

    def serving(self) -> bool:
        return self.publication.any_published()

    async def admit(
        self, get: HeaderGetter, client_address: str | None, certificate: bytes | None = None
    ) -> Identity:
        """:meth:`Authenticator.admit`, then refuse a caller of an unpublished workspace
        (every binding admits here, so every call is refused the same way)."""
        admitted = self.admit_now(get, client_address, certificate)
        return admitted if isinstance(admitted, Identity) else await admitted

    def admit_now(
        self,
        get: HeaderGetter,
        client_address: str | None,
        certificate: bytes | None = None,
        presented: Presented | NotRead = NOT_READ,
    ) -> Identity | Coroutine[Any, Any, Identity]:
        """:meth:`admit` without a coroutine when no scheme asks someone else (a key, a
        certificate, the anonymous caller): the identity, or the coroutine to await
        for it (Basic, a JWT, an introspected token). Raises as :meth:`admit` does, in
        the same order (the address's rate first). ``presented``: what
        :func:`presented_credentials` gave for these same headers before, if known
        (the gRPC binding's kept metadata: not parsed again)."""
        if client_address is not None:  # (None: not counted; no frame)
            self.limiter.check_address(client_address)
        found = self._identify(get, certificate, presented)
        if isinstance(found, Identity):
            return self._admitted(found)
        return self._admitted_later(found)

    async def _admitted_later(self, found: Coroutine[Any, Any, Identity]) -> Identity:
        return self._admitted(await found)

    def _admitted(self, identity: Identity) -> Identity:
        """The caller's rate, and its workspace published."""
        caller = identity.caller
        if caller is not ANONYMOUS:  # (never counted: no frame on its calls)
            self.limiter.check_caller(caller, identity.policy.limits)
        if not self.publication.published(caller.workspace):
            raise UnauthenticatedError(
                "This agent is not published", challenge=self._challenge(self.entries())
            )
        return identity

    def _challenge(self, entries: Sequence[CallerEntry]) -> str:
        if any(entry.basic is not None for entry in entries):
            return f"{BEARER_CHALLENGE}, {BASIC_CHALLENGE}"
        return BEARER_CHALLENGE

    async def identify(self, get: HeaderGetter, certificate: bytes | None = None) -> Identity:
        found = self._identify(get, certificate)
        return found if isinstance(found, Identity) else await found

    def _identify(
        self,
        get: HeaderGetter,
        certificate: bytes | None,
        presented: Presented | NotRead = NOT_READ,
    ) -> Identity | Coroutine[Any, Any, Identity]:
        """The identity, when no one else must be asked; else the coroutine that asks."""
        if isinstance(presented, NotRead):
            try:
                presented = presented_credentials(get)
            except UnauthenticatedError as exc:  # malformed: name the schemes that would do
                exc.challenge = exc.challenge or self._challenge(self.entries())
                raise
        if presented is None and certificate is None and self.allow_anonymous:
            return ANONYMOUS_IDENTITY  # before the file is even looked at: the hot path
        entries = self.entries()
        if presented is None and certificate is not None:
            if any(entry.mtls is not None for entry in entries):
                return self._certified(certificate, entries)
            if self.allow_anonymous:
                return ANONYMOUS_IDENTITY
        if isinstance(presented, BasicCredentials):
            return self._basic(presented, entries)
        if not presented:
            raise UnauthenticatedError(
                "An API key is required (X-API-Key or Authorization: Bearer)",
                challenge=self._challenge(entries),
            )
        digest = key_digest(presented)
        matches = [entry for entry in entries if entry.digest and entry.matches(digest)]
        # Tokens travel as Authorization: Bearer; X-API-Key carries keys only.
        if not matches and get(AUTHORIZATION_HEADER) is not None:
            if self.verifier is not None and self._is_ours_to_verify(presented, entries):
                return self._jwt(presented, entries, self.verifier)
            if self.introspector is not None and any(e.introspection for e in entries):
                return self._introspected(presented, entries, self.introspector)
        refusal = UnauthenticatedError(
            "The API key is not valid", challenge=self._challenge(entries)
        )
        return _exactly_one(matches, "presented key", refusal)

    def _certified(self, certificate: bytes, entries: Sequence[CallerEntry]) -> Identity:
        presented = PresentedCertificate.from_der(certificate)
        matches = [e for e in entries if e.mtls is not None and e.mtls.matches(presented)]
        refusal = UnauthenticatedError(
            "The client certificate is not a caller's", challenge=self._challenge(entries)
        )
        return _exactly_one(matches, "client certificate", refusal)

    def _is_ours_to_verify(self, token: str, entries: Sequence[CallerEntry]) -> bool:
        """A JWT for the JWT path: any JWT while no opaque-token callers exist, else one
        naming an issuer of a jwt caller (introspection gets the rest: an RFC 9068
        access token is a JWT too)."""
        if not looks_like_jwt(token) or not any(e.jwt is not None for e in entries):
            return False
        if not any(e.introspection is not None for e in entries):
            return True
        try:
            issuer = peek(token).issuer
        except TokenRefused:
            return False
        return any(e.jwt is not None and e.jwt.issuer == issuer for e in entries)

    async def _introspected(
        self, token: str, entries: Sequence[CallerEntry], introspector: Introspector
    ) -> Identity:
        claims = await introspector.introspect(token)
        matches = [e for e in entries if e.introspection and e.introspection.matches(claims)]
        return _exactly_one(
            matches, "introspected token", TokenRefused("The token's subject is not a caller")
        )

    async def _jwt(
        self, token: str, entries: Sequence[CallerEntry], verifier: JwtVerifier
    ) -> Identity:
        issuers: dict[str, bool] = {}
        for e in entries:
            if e.jwt is not None:  # private if any entry of the issuer allows it
                issuers[e.jwt.issuer] = issuers.get(e.jwt.issuer, False) or e.jwt.allow_private
        claims = await verifier.verify(token, issuers)
        issuer = claims["iss"]
        rules = [e for e in entries if e.jwt is not None and e.jwt.issuer == issuer]
        audience_ok = [e for e in rules if e.jwt is not None and e.jwt.matches_audience(claims)]
        if not audience_ok:
            raise TokenRefused("The token's audience is not accepted")
        matches = [e for e in audience_ok if e.jwt is not None and e.jwt.matches(claims)]
        return _exactly_one(
            matches, "presented token", TokenRefused("The token's subject is not a caller")
        )

    async def _basic(self, presented: BasicCredentials, entries: Sequence[CallerEntry]) -> Identity:
        if not any(entry.basic is not None for entry in entries):
            raise UnauthenticatedError(
                "HTTP Basic is not accepted here", challenge=self._challenge(entries)
            )
        if not self.basic_allowed:
            raise BasicRefused("HTTP Basic is refused here: it needs TLS off loopback")
        candidates = [
            entry
            for entry in entries
            if entry.basic is not None
            and hmac.compare_digest(entry.basic.username.encode(), presented.username.encode())
        ]
        if not candidates:
            # The same cost as a real check, so the answer's time does not tell whether
            # the username exists.
            stand_in = await asyncio.to_thread(_unknown_user_hash)  # made once, off the loop
            await self._passwords.check(presented.password, stand_in)
        matches = [
            entry
            for entry in candidates
            if entry.basic is not None
            and await self._passwords.check(presented.password, entry.basic.password_hash)
        ]
        return _exactly_one(
            matches, "Basic credentials", BasicRefused("The username or password is not valid")
        )

    def limits_for(self, caller: Caller) -> CallerLimits:
        for entry in self.entries():
            if entry.name == caller.name and entry.workspace == caller.workspace:
                return entry.policy.limits
        return NO_OVERRIDES

    async def aclose(self) -> None:
        if self.verifier is not None:
            await self.verifier.aclose()
        if self.introspector is not None:
            await self.introspector.outbound.aclose()


@functools.cache
def _unknown_user_hash() -> str:
    """A hash no password is checked against for real (see WorkspaceCallers._basic)."""
    return hash_password(secrets.token_urlsafe(16), log2_n=DEFAULT_LOG2_N)


def _exactly_one(
    matches: Sequence[CallerEntry], what: str, refusal: UnauthenticatedError
) -> Identity:
    if len(matches) == 1:
        entry = matches[0]
        return Identity(entry.caller, entry.policy)
    if len(matches) > 1:
        owners = ", ".join(sorted({f"{m.name}@{m.workspace}" for m in matches}))
        log.warning("%s matches %d callers (owners: %s); refused", what, len(matches), owners)
    raise refusal


__all__ = [
    "API_KEY_HEADER",
    "AUTHORIZATION_HEADER",
    "CALLERS_FILE",
    "DEFAULT_POLICY",
    "AllowAnonymous",
    "Authenticator",
    "BasicCredentials",
    "CallerEntry",
    "CallerPolicy",
    "HeaderGetter",
    "Identity",
    "SchemesInUse",
    "WorkspaceCallers",
    "parse_callers",
    "presented_credentials",
    "presented_key",
    "read_callers",
    "single_values",
]
