"""Who is calling: authentication shared by every binding.

Bindings hand the request's headers (HTTP) or metadata (gRPC) to an
:class:`Authenticator` before they parse the body; it returns the :class:`Caller` or
raises :class:`UnauthenticatedError`. Keys are compared in constant time and never
logged or echoed.
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from a2a_gateway.logs import register_secret
from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.errors import UnauthenticatedError

log = logging.getLogger(__name__)

#: Reads one header / metadata value by case-insensitive name (None when absent).
HeaderGetter = Callable[[str], str | None]

API_KEY_HEADER = "X-API-Key"
CALLERS_FILE = Path(".a2a") / "callers.json"
_NAME = re.compile(r"^[a-z0-9-]{1,40}$")
_HASHED = re.compile(r"^sha256:[0-9a-f]{64}$")


def presented_key(get: HeaderGetter) -> str | None:
    """The key from ``X-API-Key`` or ``Authorization: Bearer``; None when neither is sent."""
    key = get(API_KEY_HEADER)
    if key is not None:
        return key
    authorization = get("Authorization")
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        raise UnauthenticatedError("Authorization must use the Bearer scheme")
    return token


class Authenticator(abc.ABC):
    @abc.abstractmethod
    def authenticate(self, get: HeaderGetter) -> Caller:
        """The caller for these headers, or raise UnauthenticatedError."""


class AllowAnonymous(Authenticator):
    """Everyone is the anonymous caller (``serve --allow-anonymous`` on loopback)."""

    def authenticate(self, get: HeaderGetter) -> Caller:
        return ANONYMOUS


@dataclass(frozen=True, slots=True)
class CallerEntry:
    name: str
    workspace: str
    key: str  # plaintext, or "sha256:<hex>"

    def matches(self, presented: str) -> bool:
        if self.key.startswith("sha256:"):
            digest = "sha256:" + hashlib.sha256(presented.encode()).hexdigest()
            return hmac.compare_digest(digest.encode(), self.key.encode())
        return hmac.compare_digest(presented.encode(), self.key.encode())


class _Cached:
    """callers.json of one workspace, re-read whenever its stat changes."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.path = workspace / CALLERS_FILE
        self._stamp: tuple[int, int, int] | None = None
        self._entries: list[CallerEntry] = []

    def entries(self) -> list[CallerEntry]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._entries = None, []
            return []
        except OSError:
            log.warning("callers file unreadable: %s", self.path)
            return []
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._entries = self._load()
            self._stamp = stamp
        return self._entries

    def _load(self) -> list[CallerEntry]:
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            log.warning("callers file is not valid JSON, no callers loaded: %s", self.path)
            return []
        if not isinstance(data, list):
            log.warning("callers file is not a JSON array, no callers loaded: %s", self.path)
            return []
        entries: list[CallerEntry] = []
        seen: set[str] = set()
        for index, item in enumerate(data):
            label = f"{self.path} entry {index}"
            if not isinstance(item, dict):
                log.warning("skipping %s: not an object", label)
                continue
            name, key, mode = item.get("name"), item.get("key"), item.get("mode", "isolated")
            if not isinstance(name, str) or not _NAME.match(name):
                log.warning("skipping %s: name must match [a-z0-9-]{1,40}", label)
                continue
            label = f"{self.path} caller {name!r}"
            if name in seen:
                log.warning("skipping %s: duplicate name", label)
                continue
            if not isinstance(key, str) or not key or key != key.strip():
                log.warning("skipping %s: key must be a non-empty string without spaces", label)
                continue
            if key.startswith("sha256:") and not _HASHED.match(key):
                log.warning("skipping %s: hashed key must be sha256:<64 hex>", label)
                continue
            if mode != "isolated":
                log.warning("skipping %s: unknown mode", label)
                continue
            seen.add(name)
            if not key.startswith("sha256:"):
                register_secret(key)
            entries.append(CallerEntry(name, str(self.workspace), key))
        return entries


class WorkspaceCallers(Authenticator):
    """Callers from ``<workspace>/.a2a/callers.json`` across every workspace.

    Exactly one entry in all workspaces must match the presented key; none or several
    is a 401. With ``allow_anonymous``, a request that presents no key at all is the
    anonymous caller (local development); a wrong key is still refused.
    """

    def __init__(self, workspaces: Sequence[Path], *, allow_anonymous: bool = False) -> None:
        self._files = [_Cached(Path(w)) for w in workspaces]
        self.allow_anonymous = allow_anonymous

    def authenticate(self, get: HeaderGetter) -> Caller:
        key = presented_key(get)
        if key:
            register_secret(key)
        if key is None or key == "":
            if self.allow_anonymous and key is None:
                return ANONYMOUS
            raise UnauthenticatedError(
                "An API key is required (X-API-Key or Authorization: Bearer)"
            )
        matches = [e for f in self._files for e in f.entries() if e.matches(key)]
        if len(matches) == 1:
            entry = matches[0]
            return Caller(name=entry.name, workspace=entry.workspace)
        if len(matches) > 1:
            owners = ", ".join(sorted({f"{m.name}@{m.workspace}" for m in matches}))
            log.warning(
                "presented key matches %d callers (owners: %s); refused", len(matches), owners
            )
        raise UnauthenticatedError("The API key is not valid")
