"""``<workspace>/.a2a/pact.json``: which personal agents may speak for their users.

::

    {"audience": "acme-support",                 # the aud every token must carry
     "personalAgents": [
       {"issuer": "https://pa.example",          # the token's iss, matched exactly
        "jwksUri": "https://pa.example/jwks.json",   # or "jwks": {"keys": [...]}
        "enabled": true,                         # optional (true); false refuses it
        "allowPrivate": false}                   # optional: its jwksUri may be on a
     ],                                          # private address (or plain http)
     "delegation": {                             # optional: PACT Delegated (oauth.py)
       "brandName": "Acme",                      # optional: the consent page's name
       "loginUrl": "https://acme.example/pact/login",   # the company's login page
       "loginIssuer": "https://acme.example",    # the login assertion's iss
       "loginJwksUri": "https://acme.example/jwks.json",  # or "loginJwks": {...}
       "connectedUrl": "https://acme.example/pact/connected",  # optional
       "allowPrivate": false,                    # optional: loginJwksUri on a private
       "scopes": [                               # address (or plain http)
         {"id": "orders:read", "description": "See your orders",
          "tools": ["list_orders"]}]}}

Read fresh like callers.json (:mod:`..fresh_file`). A file that is not such an object
(an unknown top-level field included: a misspelt ``audience`` must not open a door)
means no personal agents here, with a warning naming the file; a bad entry is skipped
with a warning naming its index. Nothing here is secret: issuers, an audience and
public keys (an inline JWKS holding a private member is refused, unlogged). A
``delegation`` that cannot be used is dropped with a warning (the personal agents
stay): no delegation tokens, no scoped tool is ever granted. Login and connected pages
may be plain http on a loopback host only.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from a2a_gateway.local.layout import RELATIVE

from ..fresh_file import FreshFile
from ..identity.jwt import KeySource, inline_keys

PACT_FILE = RELATIVE.pact
MAX_TEXT_CHARS = 1024
MAX_AGENTS = 256
MAX_SCOPES = 64
MAX_TOOLS = 64
_TOP_FIELDS = frozenset({"audience", "personalAgents", "delegation"})
_DELEGATION_FIELDS = frozenset(
    {
        "brandName",
        "loginUrl",
        "loginIssuer",
        "loginJwksUri",
        "loginJwks",
        "connectedUrl",
        "allowPrivate",
        "scopes",
    }
)
_SCOPE_FIELDS = frozenset({"id", "description", "tools"})
#: An OAuth scope token (RFC 6749 §3.3), kept short and plain.
_SCOPE_ID = re.compile(r"^[A-Za-z0-9:._/-]{1,64}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_AGENT_FIELDS = frozenset({"issuer", "jwksUri", "jwks", "enabled", "allowPrivate"})
#: JWK members that only a private key has (RFC 7518 §6.2.2, §6.3.2, §6.4; RFC 8037).
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


@dataclass(frozen=True, slots=True)
class PersonalAgent:
    """One personal agent: its exact ``iss`` and where its public keys are."""

    issuer: str
    keys: KeySource
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class Scope:
    """One permission a user may grant: its id, what the user reads, the tools it opens."""

    id: str
    description: str
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Delegation:
    """PACT Delegated: the company's login, its assertion keys and the scopes offered."""

    brand_name: str
    login_url: str
    login_issuer: str
    login_keys: KeySource
    connected_url: str
    scopes: tuple[Scope, ...]

    def scope(self, scope_id: str) -> Scope | None:
        for scope in self.scopes:
            if scope.id == scope_id:
                return scope
        return None

    def tool_scopes(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Each scoped tool and the scopes that open it (any one of them will do)."""
        found: dict[str, list[str]] = {}
        for scope in self.scopes:
            for tool in scope.tools:
                found.setdefault(tool, []).append(scope.id)
        return tuple((tool, tuple(ids)) for tool, ids in found.items())


@dataclass(frozen=True, slots=True)
class PactConfig:
    """One workspace's pact.json."""

    audience: str
    agents: tuple[PersonalAgent, ...]
    delegation: Delegation | None = None

    def agent(self, issuer: str) -> PersonalAgent | None:
        for agent in self.agents:
            if agent.issuer == issuer:
                return agent
        return None


def _text(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT_CHARS and value.isprintable()


def _public_jwks(jwks: Any) -> str | None:
    """The inline JWKS as canonical JSON text, or None when it is not one of public keys."""
    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    if not isinstance(keys, list) or not keys:
        return None
    if any(not isinstance(key, dict) or _PRIVATE_MEMBERS & set(key) for key in keys):
        return None
    try:
        inline_keys(jwks)
    except ValueError:
        return None
    return json.dumps(jwks, sort_keys=True, separators=(",", ":"))


def page_url_ok(value: Any) -> TypeGuard[str]:
    """An https URL, or http on a loopback host (the login and connected pages)."""
    if not _text(value):
        return False
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        return False
    if not parts.hostname or parts.fragment:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS)


def parse_scope(item: Any) -> Scope | str:
    if not isinstance(item, dict):
        return "not an object"
    unknown = sorted(str(name)[:40] for name in item if name not in _SCOPE_FIELDS)
    if unknown:
        return f"unknown field {unknown[0]!r}"
    scope_id, description, tools = item.get("id"), item.get("description"), item.get("tools")
    if not isinstance(scope_id, str) or not _SCOPE_ID.match(scope_id):
        return "id must be 1 to 64 of A-Z a-z 0-9 : . _ / -"
    if not _text(description):
        return "description must be a non-empty string"
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        return f"tools must be an array of at most {MAX_TOOLS} tool names"
    if not all(isinstance(t, str) and _TOOL_NAME.match(t) for t in tools):
        return "tools must be tool names (A-Z a-z 0-9 _ -)"
    return Scope(scope_id, description, tuple(dict.fromkeys(tools)))


def parse_delegation(item: Any) -> Delegation | str:
    """The delegation block, or why it cannot be used (never quoting a key)."""
    if not isinstance(item, dict):
        return "not an object"
    unknown = sorted(str(name)[:40] for name in item if name not in _DELEGATION_FIELDS)
    if unknown:
        return f"unknown field {unknown[0]!r}"
    brand = item.get("brandName", "")
    login_url, issuer = item.get("loginUrl"), item.get("loginIssuer")
    connected = item.get("connectedUrl", "")
    jwks_uri, jwks = item.get("loginJwksUri"), item.get("loginJwks")
    allow_private, scopes = item.get("allowPrivate", False), item.get("scopes")
    if brand != "" and not _text(brand):
        return "brandName must be a string"
    if not page_url_ok(login_url):
        return "loginUrl must be an https URL (http on localhost only)"
    if connected != "" and not page_url_ok(connected):
        return "connectedUrl must be an https URL (http on localhost only)"
    if not _text(issuer):
        return "loginIssuer must be a non-empty string"
    if not isinstance(allow_private, bool):
        return "allowPrivate must be true or false"
    if (jwks_uri is None) == (jwks is None):
        return "needs exactly one of loginJwksUri and loginJwks"
    if jwks_uri is not None:
        schemes = ("https://", "http://") if allow_private else ("https://",)
        if not _text(jwks_uri) or not jwks_uri.startswith(schemes):
            return "loginJwksUri must be an https URL (http only with allowPrivate)"
        keys = KeySource(allow_private, jwks_uri=jwks_uri)
    else:
        text = _public_jwks(jwks)
        if text is None:
            return "loginJwks must be a JWKS of public keys"
        keys = KeySource(allow_private, jwks=text)
    if not isinstance(scopes, list) or not scopes or len(scopes) > MAX_SCOPES:
        return f"scopes must be an array of 1 to {MAX_SCOPES} scopes"
    parsed: list[Scope] = []
    for index, entry in enumerate(scopes):
        scope = parse_scope(entry)
        if isinstance(scope, str):
            return f"scopes[{index}]: {scope}"
        if any(s.id == scope.id for s in parsed):
            return f"scopes[{index}]: the id is listed twice"
        parsed.append(scope)
    return Delegation(brand, login_url, issuer, keys, connected, tuple(parsed))


def parse_agent(item: Any) -> PersonalAgent | str:
    """A personal agent, or why its entry is skipped (never quoting a key)."""
    if not isinstance(item, dict):
        return "not an object"
    unknown = sorted(str(name)[:40] for name in item if name not in _AGENT_FIELDS)
    if unknown:
        return f"unknown field {unknown[0]!r}"
    issuer, jwks_uri, jwks = item.get("issuer"), item.get("jwksUri"), item.get("jwks")
    enabled, allow_private = item.get("enabled", True), item.get("allowPrivate", False)
    if not _text(issuer):
        return "issuer must be a non-empty string"
    if not isinstance(enabled, bool) or not isinstance(allow_private, bool):
        return "enabled and allowPrivate must be true or false"
    if (jwks_uri is None) == (jwks is None):
        return "needs exactly one of jwksUri and jwks"
    if jwks_uri is not None:
        schemes = ("https://", "http://") if allow_private else ("https://",)
        if not _text(jwks_uri) or not jwks_uri.startswith(schemes):
            return "jwksUri must be an https URL (http only with allowPrivate)"
        return PersonalAgent(issuer, KeySource(allow_private, jwks_uri=jwks_uri), enabled)
    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    if not isinstance(keys, list) or not keys:
        return "jwks must be a JWKS object with a non-empty keys array"
    if any(not isinstance(key, dict) or _PRIVATE_MEMBERS & set(key) for key in keys):
        return "jwks must hold public keys only"
    text = _public_jwks(jwks)
    if text is None:
        return "jwks is not a JWKS of public keys"
    return PersonalAgent(issuer, KeySource(allow_private, jwks=text), enabled)


def parse_pact(data: Any, label: str) -> tuple[PactConfig | None, list[str]]:
    """The configuration of a decoded pact.json (None: no personal agents), and one
    warning per problem; ``label`` names the file. Never raises on bad content."""
    refused = f"PACT file {label} is not usable, no personal agents: "
    if not isinstance(data, dict):
        return None, [refused + "not a JSON object"]
    unknown = sorted(str(name)[:40] for name in data if name not in _TOP_FIELDS)
    if unknown:
        return None, [refused + f"unknown field {unknown[0]!r}"]
    audience, items = data.get("audience"), data.get("personalAgents")
    if not _text(audience):
        return None, [refused + "audience must be a non-empty string"]
    if not isinstance(items, list) or len(items) > MAX_AGENTS:
        return None, [refused + f"personalAgents must be an array of at most {MAX_AGENTS}"]
    agents: list[PersonalAgent] = []
    warnings: list[str] = []
    for index, item in enumerate(items):
        got = parse_agent(item)
        if isinstance(got, PersonalAgent) and any(a.issuer == got.issuer for a in agents):
            got = "the issuer is listed twice"
        if isinstance(got, str):
            warnings.append(f"skipping {label} personalAgents[{index}]: {got}")
            continue
        agents.append(got)
    delegation: Delegation | None = None
    if "delegation" in data:
        found = parse_delegation(data["delegation"])
        if isinstance(found, str):
            warnings.append(f"PACT file {label}: no delegation, its block is not usable: {found}")
        else:
            delegation = found
    return PactConfig(audience, tuple(agents), delegation), warnings


def pact_file(workspace: Path) -> FreshFile[PactConfig | None]:
    """The workspace's pact.json, read fresh."""
    path = workspace / PACT_FILE

    def parse(raw: bytes) -> tuple[PactConfig | None, list[str]]:
        try:
            data = json.loads(raw)
        except ValueError:
            return None, [f"PACT file {path} is not usable, no personal agents: not valid JSON"]
        return parse_pact(data, str(path))

    return FreshFile(path, parse, None, "PACT file", "no personal agents")


__all__ = [
    "PACT_FILE",
    "Delegation",
    "PactConfig",
    "PersonalAgent",
    "Scope",
    "pact_file",
    "page_url_ok",
    "parse_agent",
    "parse_delegation",
    "parse_pact",
]
