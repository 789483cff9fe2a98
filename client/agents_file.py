"""``<workspace>/.a2a/agents.json``: the agents the owner's assistant may call.

    [{"name": "travel-bot", "url": "https://travel.example/", "key": "k_...",
      "description": "Plans trips", "allow_private": false}]

Read fresh on every call (an edit applies to the next call). Rules:

- ``name`` matches ``[a-z0-9-]{1,40}`` and is unique in the file;
- ``url`` is an absolute ``http(s)`` URL without user info; one whose path ends in
  ``.json`` is the agent card itself, any other is the agent's base URL;
- ``key`` (optional) is a non-empty string; or, instead of a key, one of ``basic_user``
  (with ``basic_password``), ``client_id`` (OAuth 2.0 client credentials, with
  ``client_secret`` or ``client_secret_env``, and ``token_url`` unless the card names one)
  or ``token_command`` (a command printing a bearer token); with any of them,
  ``client_cert`` and ``client_key`` (PEM files: mTLS) and ``ca_cert`` (a CA to trust for
  the agent's TLS); ``description`` (optional)
  replaces the card's description in listings; ``allow_private`` (optional, boolean)
  lets this entry reach loopback and private addresses (otherwise only
  ``--allow-private-urls`` does); ``card_keys`` (optional, a JWKS object) makes the a2a
  tool refuse the agent unless its card is signed by one of those keys; ``transport``
  (optional: ``jsonrpc``, ``rest`` or ``grpc``) picks that binding of the card.

A missing (or blank) file is no agents. A file that is not JSON, or not an array, is no agents and
:attr:`AgentsFile.error` says the file could not be read. A bad entry (bad name or url,
duplicate name, wrong types) is skipped and listed in :attr:`AgentsFile.skipped`; the
others still work. Nothing here ever puts a key in a message, and every read registers
each entry's ``key`` (of skipped entries too) with the log redaction
(:func:`a2a_gateway.local.redaction.register_secret`), so a key an agent echoes back
cannot reach a log line whole.
"""

from __future__ import annotations

import json
import os
import re
import stat
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joserfc.jwk import KeySet

from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.local.redaction import register_secret
from a2a_gateway.protocol.card_signature import trusted_keys

from .credentials import ClientAuth

AGENTS_FILE = RELATIVE.agents
NAME_PATTERN = re.compile(r"^[a-z0-9-]{1,40}$")
#: Key hints show this many trailing characters, and only of keys at least HINT_MIN long.
HINT_CHARS = 4
HINT_MIN = 12
#: agents.json larger than this is not read (it is a short list edited by hand).
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One callable agent. ``repr`` never shows the key."""

    name: str
    url: str
    key: str | None = field(default=None, repr=False)
    description: str = ""
    allow_private: bool = False
    #: How to prove who we are beyond a key (Basic, client credentials, a token command).
    auth: ClientAuth | None = None
    #: With ``card_keys``: the keys the agent's card must be signed by.
    card_keys: KeySet | None = field(default=None, repr=False, compare=False)
    #: ``jsonrpc``, ``rest`` or ``grpc``: the binding to use (None: the card's first).
    transport: str | None = None

    @property
    def is_card_url(self) -> bool:
        return urllib.parse.urlsplit(self.url).path.lower().endswith(".json")

    def key_hint(self) -> str:
        return key_hint(self.key)


@dataclass(frozen=True, slots=True)
class AgentsFile:
    """What one read of agents.json gave."""

    path: Path
    agents: dict[str, AgentEntry]
    skipped: tuple[str, ...] = ()
    error: str | None = None  # the file could not be read: why (never its contents)
    #: False when the file is missing, blank or could not be read: a reading that may
    #: catch an edit half-way (an editor that truncates, then writes). "No agents" to
    #: the tool, but a watch keeps its last good reading (see :mod:`.watches`).
    conclusive: bool = True

    @property
    def names(self) -> list[str]:
        return list(self.agents)

    def notes(self) -> list[str]:
        """Lines for the tool's listings: the read error, then each skipped entry."""
        lines = [self.error] if self.error else []
        lines += [f"skipped: {reason}" for reason in self.skipped]
        return lines


def key_hint(key: str | None) -> str:
    """What may be shown of a key: its last 4 characters, only when it has 12 or more."""
    if not key:
        return "(none)"
    if len(key) < HINT_MIN:
        return "(hidden: shorter than 12)"
    return "..." + key[-HINT_CHARS:]


def agents_path(workspace: Path) -> Path:
    return workspace / AGENTS_FILE


def url_problem(url: Any) -> str | None:
    """Why ``url`` cannot be an agent URL, or None."""
    if not isinstance(url, str) or not url.strip():
        return "url must be a non-empty string"
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        return "url contains whitespace or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return "url is not a valid URL"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return "url must be an absolute http(s) URL"
    if parts.username is not None or parts.password is not None:
        return "url must not contain user info"
    return None


def parse_entry(value: Any, index: int) -> tuple[AgentEntry | None, str | None]:
    """An entry, or None and why it is skipped (naming the entry, never its key)."""
    where = f"entry {index + 1}"
    if not isinstance(value, dict):
        return None, f"{where} is not an object"
    name = value.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        shown = name[:40] if isinstance(name, str) else type(name).__name__
        return None, f"{where} has a bad name {shown!r} (expected [a-z0-9-]{{1,40}})"
    where = f"{where} ({name})"
    problem = url_problem(value.get("url"))
    if problem:
        return None, f"{where}: {problem}"
    key = value.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        return None, f"{where}: key must be a non-empty string"
    description = value.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        return None, f"{where}: description must be a string"
    allow_private = value.get("allow_private", False)
    if not isinstance(allow_private, bool):
        return None, f"{where}: allow_private must be true or false"
    transport = value.get("transport")
    if transport is not None and transport not in TRANSPORTS:
        return None, f"{where}: transport must be one of {', '.join(TRANSPORTS)}"
    auth = _auth(value)
    if isinstance(auth, str):
        return None, f"{where}: {auth}"
    keys: KeySet | None = None
    if "card_keys" in value:
        try:
            keys = trusted_keys(value["card_keys"])
        except ValueError as exc:
            return None, f"{where}: card_keys: {exc}"
    entry = AgentEntry(
        name, value["url"].strip(), key, description.strip(), allow_private, auth, keys, transport
    )
    return entry, None


#: Fields of an entry that prove who we are beyond a key (all strings).
AUTH_FIELDS = (
    "basic_user",
    "basic_password",
    "client_id",
    "client_secret",
    "client_secret_env",
    "token_url",
    "token_command",
)
TRANSPORTS = ("jsonrpc", "rest", "grpc")
#: TLS fields (paths of PEM files): a client certificate goes with any credential.
TLS_FIELDS = ("client_cert", "client_key", "ca_cert")
SECRET_FIELDS = ("key", "basic_password", "client_secret")


def _auth(value: dict[str, Any]) -> ClientAuth | str | None:
    """The entry's :class:`ClientAuth`, None without one, or why it is unusable."""
    given = {name: value[name] for name in AUTH_FIELDS if name in value}
    tls = {name: value[name] for name in TLS_FIELDS if name in value}
    if not given and not tls:
        return None
    for name, text in {**given, **tls}.items():
        if not isinstance(text, str) or not text.strip():
            return f"{name} must be a non-empty string"
    if ("client_key" in tls) != ("client_cert" in tls):
        return "client_cert and client_key go together"
    if "key" in value and given:
        return "a key and " + " and ".join(given) + " are two ways in; keep one"
    secret = given.get("client_secret", "")
    if "client_secret_env" in given:
        secret = secret or os.environ.get(given["client_secret_env"], "")
    auth = ClientAuth(
        basic_user=given.get("basic_user", ""),
        basic_password=given.get("basic_password", ""),
        client_id=given.get("client_id", ""),
        client_secret=secret,
        token_url=given.get("token_url", ""),
        token_command=given.get("token_command", ""),
        client_cert=tls.get("client_cert", ""),
        client_key=tls.get("client_key", ""),
        ca_cert=tls.get("ca_cert", ""),
    )
    ways = [bool(auth.basic_user), bool(auth.client_id), bool(auth.token_command)]
    if given and sum(ways) != 1:
        return "name one of basic_user, client_id and token_command"
    if auth.client_id and not auth.client_secret:
        return "client_id needs client_secret (or client_secret_env naming a set variable)"
    return auth


def parse_agents(data: Any, path: Path) -> AgentsFile:
    if not isinstance(data, list):
        error = f"{AGENTS_FILE} could not be read: not a JSON array"
        return AgentsFile(path, {}, error=error, conclusive=False)
    agents: dict[str, AgentEntry] = {}
    skipped: list[str] = []
    for value in data:
        for name in SECRET_FIELDS:
            secret = value.get(name) if isinstance(value, dict) else None
            if isinstance(secret, str):
                register_secret(secret)
    for index, value in enumerate(data):
        entry, reason = parse_entry(value, index)
        if entry is None:
            skipped.append(reason or f"entry {index + 1}")
        elif entry.name in agents:
            skipped.append(f"entry {index + 1} ({entry.name}): duplicate name")
        else:
            agents[entry.name] = entry
    return AgentsFile(path, agents, tuple(skipped))


def read_raw(path: Path, *, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of a regular file of at most ``limit`` bytes, None when it does not
    exist; OSError otherwise (not a regular file, larger than ``limit``, unreadable).

    Opened non-blocking, so a FIFO in its place cannot hang the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file")
        if info.st_size > limit:
            raise OSError(0, f"larger than {limit} bytes")
        with open(fd, "rb", closefd=False) as file:
            data = file.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while we read it
        raise OSError(0, f"larger than {limit} bytes")
    return data


def read_agents(workspace: Path) -> AgentsFile:
    """agents.json of ``workspace``, read now (see the module docstring)."""
    path = agents_path(workspace)
    try:
        raw = read_raw(path)
    except OSError as exc:
        error = f"{AGENTS_FILE} could not be read: {exc.strerror}"
        return AgentsFile(path, {}, error=error, conclusive=False)
    if raw is None or not raw.strip():
        return AgentsFile(path, {}, conclusive=False)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        error = f"{AGENTS_FILE} could not be read: not valid JSON"
        return AgentsFile(path, {}, error=error, conclusive=False)
    return parse_agents(data, path)
