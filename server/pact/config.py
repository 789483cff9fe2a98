"""``<workspace>/.a2a/pact.json``: which personal agents may speak for their users.

::

    {"audience": "acme-support",                 # the aud every token must carry
     "personalAgents": [
       {"issuer": "https://pa.example",          # the token's iss, matched exactly
        "jwksUri": "https://pa.example/jwks.json",   # or "jwks": {"keys": [...]}
        "enabled": true,                         # optional (true); false refuses it
        "allowPrivate": false}                   # optional: its jwksUri may be on a
     ]}                                          # private address (or plain http)

Read fresh like callers.json (:mod:`..fresh_file`). A file that is not such an object
(an unknown top-level field included: a misspelt ``audience`` must not open a door)
means no personal agents here, with a warning naming the file; a bad entry is skipped
with a warning naming its index. Nothing here is secret: issuers, an audience and
public keys (an inline JWKS holding a private member is refused, unlogged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ..fresh_file import FreshFile
from ..identity.jwt import KeySource, inline_keys

PACT_FILE = Path(".a2a") / "pact.json"
MAX_TEXT_CHARS = 1024
MAX_AGENTS = 256
_TOP_FIELDS = frozenset({"audience", "personalAgents"})
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
class PactConfig:
    """One workspace's pact.json."""

    audience: str
    agents: tuple[PersonalAgent, ...]

    def agent(self, issuer: str) -> PersonalAgent | None:
        for agent in self.agents:
            if agent.issuer == issuer:
                return agent
        return None


def _text(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT_CHARS and value.isprintable()


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
    try:
        inline_keys(jwks)
    except ValueError as exc:
        return f"jwks is {exc}"
    text = json.dumps(jwks, sort_keys=True, separators=(",", ":"))
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
    return PactConfig(audience, tuple(agents)), warnings


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
    "PactConfig",
    "PersonalAgent",
    "pact_file",
    "parse_agent",
    "parse_pact",
]
