"""Who is calling: authentication and admission, shared by every binding.

Bindings hand the request's headers (HTTP) or metadata (gRPC) and the client address
to :meth:`Authenticator.admit` before they read the body. It applies the per-address
rate limit, finds the :class:`Caller` (or raises :class:`UnauthenticatedError`),
applies the caller's rate limit, and returns an :class:`Identity`: the caller plus its
:class:`CallerPolicy` (limits, signing secret) from ``callers.json``. Keys are compared
in constant time and never logged or echoed.

``callers.json`` (one per workspace, ``<workspace>/.a2a/callers.json``) is an array of::

    {"name": "travel-bot",              # [a-z0-9-]{1,40}, unique in the file
     "key": "k_3f9c..." | "sha256:<64 hex>",
     "mode": "isolated",                # the default; other modes are skipped
     "note": "Alice's trip planner",    # optional
     "rate_limit_per_minute": 60,       # optional overrides (0 = unlimited)
     "max_running_tasks": 4,
     "max_open_contexts": 20,
     "signing_secret": "..."}           # optional: requests must be signed (signing.py)

A bad entry is skipped with a warning naming the entry (never its key); the rest still
work. An unknown field also skips its entry: a misspelt ``signing_secret`` must not
silently turn signing off. A file that is not a JSON array means no callers, with a
warning naming the file. The file is re-read whenever its stat changes (and on every
request while it is younger than :data:`FRESH_S`, because an edit within the same
timestamp tick and of the same size would otherwise go unnoticed).
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2a_gateway.logs import register_secret
from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.errors import UnauthenticatedError

from .limits import NO_OVERRIDES, CallerLimits, RateLimits, RequestLimiter

log = logging.getLogger(__name__)

#: Reads one header / metadata value by case-insensitive name (None when absent).
HeaderGetter = Callable[[str], str | None]
#: Reads every value of one header / metadata key.
HeaderListGetter = Callable[[str], Iterable[str]]

API_KEY_HEADER = "X-API-Key"
AUTHORIZATION_HEADER = "Authorization"
CALLERS_FILE = Path(".a2a") / "callers.json"
#: A callers.json younger than this is re-read on every request (see the module doc).
FRESH_S = 2.0
MAX_KEY_CHARS = 4096
MIN_SIGNING_SECRET_CHARS = 16
HASH_PREFIX = "sha256:"
MODE_ISOLATED = "isolated"

NAME_PATTERN = re.compile(r"^[a-z0-9-]{1,40}$")
_HASHED = re.compile(r"^sha256:[0-9a-fA-F]{64}$")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,39}$")
_LIMIT_FIELDS = ("rate_limit_per_minute", "max_running_tasks", "max_open_contexts")
KNOWN_FIELDS = frozenset(
    {"name", "key", "key_prefix", "mode", "note", "signing_secret", *_LIMIT_FIELDS}
)
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


def presented_key(get: HeaderGetter) -> str | None:
    """The key from ``X-API-Key`` or ``Authorization: Bearer``; None when neither is sent.

    Both headers with different keys is ambiguous and refused; an empty key is ``""``.
    """
    api_key = get(API_KEY_HEADER)
    authorization = get(AUTHORIZATION_HEADER)
    bearer: str | None = None
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise UnauthenticatedError("Authorization must use the Bearer scheme")
        bearer = token.strip()
    if api_key is not None and bearer is not None and api_key.strip() != bearer:
        raise UnauthenticatedError("X-API-Key and Authorization carry different keys")
    key = api_key if api_key is not None else bearer
    if key is not None and len(key) > MAX_KEY_CHARS:
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


#: The identity of every anonymous request (immutable, so one is enough).
ANONYMOUS_IDENTITY = Identity(ANONYMOUS)


class Authenticator(abc.ABC):
    """Finds the caller of a request; :meth:`admit` adds the rate limits.

    ``limits`` are the server-wide request rates; they are shared by every binding
    that uses this authenticator (one bucket per caller and per address).
    """

    def __init__(self, *, limits: RateLimits | None = None) -> None:
        self.limiter = RequestLimiter(limits)

    @abc.abstractmethod
    def authenticate(self, get: HeaderGetter) -> Caller:
        """The caller for these headers, or raise UnauthenticatedError."""

    def identify(self, get: HeaderGetter) -> Identity:
        """The caller and its policy, or raise UnauthenticatedError."""
        return Identity(self.authenticate(get))

    def limits_for(self, caller: Caller) -> CallerLimits:
        """The caller's own limits (for the task engine's caps)."""
        return NO_OVERRIDES

    def admit(self, get: HeaderGetter, client_address: str | None) -> Identity:
        """Rate-limit the address, authenticate, then rate-limit the caller."""
        self.limiter.check_address(client_address)
        identity = self.identify(get)
        self.limiter.check_caller(identity.caller, identity.policy.limits)
        return identity


class AllowAnonymous(Authenticator):
    """Everyone is the anonymous caller (``serve --allow-anonymous`` on loopback)."""

    def authenticate(self, get: HeaderGetter) -> Caller:
        return ANONYMOUS


@dataclass(frozen=True, slots=True)
class CallerEntry:
    """One valid entry of a callers.json. ``key`` is plaintext or ``sha256:<hex>``."""

    name: str
    workspace: str
    key: str = field(repr=False)
    mode: str = MODE_ISOLATED
    note: str = ""
    policy: CallerPolicy = DEFAULT_POLICY
    digest: bytes = field(default=b"", repr=False, compare=False)
    key_prefix: str = ""

    @property
    def hashed(self) -> bool:
        return self.key.startswith(HASH_PREFIX)

    @property
    def caller(self) -> Caller:
        return Caller(name=self.name, workspace=self.workspace)

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


def parse_entry(item: Any, workspace: str) -> CallerEntry | str:
    """A valid entry, or the reason it is skipped (never containing a key or secret)."""
    if not isinstance(item, dict):
        return "not an object"
    unknown = sorted(str(k) for k in item if k not in KNOWN_FIELDS)
    if unknown:
        shown = repr(unknown[0]) if _FIELD_NAME.match(unknown[0]) else "a field"
        return f"unknown field {shown}"
    name, key, mode, note = item.get("name"), item.get("key"), item.get("mode"), item.get("note")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return "name must match [a-z0-9-]{1,40}"
    if not isinstance(key, str) or not key:
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
        digest=_entry_digest(key),
        key_prefix=prefix,
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


def read_callers(path: Path, workspace: str) -> tuple[list[CallerEntry], list[str]]:
    """Entries and warnings of one callers.json; a missing file is no callers."""
    try:
        # O_NONBLOCK: a FIFO in the file's place must not hang the server.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"callers file unreadable ({exc.strerror}), no callers loaded: {path}"]
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], [f"callers file is not a regular file, no callers loaded: {path}"]
        with open(fd, "rb", closefd=False) as file:
            raw = file.read()
    except OSError as exc:
        return [], [f"callers file unreadable ({exc.strerror}), no callers loaded: {path}"]
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return [], [f"callers file is not valid JSON, no callers loaded: {path}"]
    return parse_callers(data, workspace, str(path))


class _Cached:
    """callers.json of one workspace, re-read whenever its stat changes (or is fresh).

    Warnings are logged once per version of the file, not on every request.
    """

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.path = workspace / CALLERS_FILE
        self._stamp: tuple[int, int, int, int] | None = None
        self._warned: tuple[int, int, int, int] | None = None
        self._entries: list[CallerEntry] = []

    def entries(self) -> list[CallerEntry]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._entries = None, []
            return []
        except OSError as exc:
            self._stamp, self._entries = None, []
            self._warn_once(
                (0, 0, 0, 0), [f"callers file unreadable ({exc.strerror}): {self.path}"]
            )
            return []
        stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        fresh = abs(time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns)) < FRESH_S * 1e9
        if stamp != self._stamp or fresh:
            entries, warnings = read_callers(self.path, str(self.workspace))
            for entry in entries:
                if not entry.hashed:
                    register_secret(entry.key)
                if entry.policy.signing_secret is not None:
                    register_secret(entry.policy.signing_secret)
            self._warn_once(stamp, warnings)
            self._entries, self._stamp = entries, stamp
        return self._entries

    def _warn_once(self, stamp: tuple[int, int, int, int], warnings: list[str]) -> None:
        if stamp == self._warned:
            return
        self._warned = stamp
        for warning in warnings:
            log.warning("%s", warning)


class WorkspaceCallers(Authenticator):
    """Callers from ``<workspace>/.a2a/callers.json`` across every workspace.

    Exactly one entry in all workspaces must match the presented key; none or several
    is a 401. With ``allow_anonymous``, a request that presents no key at all is the
    anonymous caller (local development); a wrong or empty key is still refused.
    """

    def __init__(
        self,
        workspaces: Sequence[Path],
        *,
        allow_anonymous: bool = False,
        limits: RateLimits | None = None,
    ) -> None:
        super().__init__(limits=limits)
        self._files = [_Cached(Path(w)) for w in workspaces]
        self.allow_anonymous = allow_anonymous

    def entries(self) -> list[CallerEntry]:
        return [entry for cached in self._files for entry in cached.entries()]

    def authenticate(self, get: HeaderGetter) -> Caller:
        return self.identify(get).caller

    def identify(self, get: HeaderGetter) -> Identity:
        key = presented_key(get)
        if key is None and self.allow_anonymous:
            return ANONYMOUS_IDENTITY
        if not key:
            raise UnauthenticatedError(
                "An API key is required (X-API-Key or Authorization: Bearer)"
            )
        digest = key_digest(key)
        matches = [entry for entry in self.entries() if entry.matches(digest)]
        if len(matches) == 1:
            entry = matches[0]
            return Identity(entry.caller, entry.policy)
        if len(matches) > 1:
            owners = ", ".join(sorted({f"{m.name}@{m.workspace}" for m in matches}))
            log.warning(
                "presented key matches %d callers (owners: %s); refused", len(matches), owners
            )
        raise UnauthenticatedError("The API key is not valid")

    def limits_for(self, caller: Caller) -> CallerLimits:
        for entry in self.entries():
            if entry.name == caller.name and entry.workspace == caller.workspace:
                return entry.policy.limits
        return NO_OVERRIDES


__all__ = [
    "API_KEY_HEADER",
    "AUTHORIZATION_HEADER",
    "CALLERS_FILE",
    "DEFAULT_POLICY",
    "AllowAnonymous",
    "Authenticator",
    "CallerEntry",
    "CallerPolicy",
    "HeaderGetter",
    "Identity",
    "WorkspaceCallers",
    "parse_callers",
    "presented_key",
    "read_callers",
    "single_values",
]
