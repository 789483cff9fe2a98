"""The 0.3 agent card for a 1.0 card, and the hybrid card both versions read (digest §14.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shared import copy_fields
from .tables import JSON
from .version import LEGACY_CARD_VERSION, is_legacy_version

#: 1.0 security scheme member -> 0.3 ``type``.
_SCHEME_TYPES = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}
#: 0.3 OAuth flows (1.0 ``deviceCode`` has none and is dropped).
_OAUTH_FLOWS = ("authorizationCode", "clientCredentials", "implicit", "password")


def _security_out(requirements: Any) -> list[dict[str, list[str]]]:
    """1.0 ``[{schemes:{name:{list:[…]}}}]`` as 0.3 ``[{name:[…]}]``."""
    return [
        {name: list(scopes.get("list", ())) for name, scopes in req.get("schemes", {}).items()}
        for req in requirements
    ]


def _scheme_out(scheme: Mapping[str, Any]) -> JSON | None:
    """A 1.0 SecurityScheme (one wrapper member) as a flat 0.3 scheme with ``type``."""
    for member, kind in _SCHEME_TYPES.items():
        if member not in scheme:
            continue
        body = dict(scheme[member])
        out: JSON = {"type": kind}
        if kind == "apiKey":
            out["in"] = body.pop("location", "")
        elif kind == "oauth2":
            flows = body.pop("flows", {})
            out["flows"] = {
                name: {k: v for k, v in flows[name].items() if k != "pkceRequired"}
                for name in _OAUTH_FLOWS
                if name in flows
            }
        out.update(body)
        return out
    return None


def agent_card(card: Mapping[str, Any]) -> JSON | None:
    """The 0.3 AgentCard for a 1.0 card's ProtoJSON, or None when no interface speaks
    0.3 (the SDK's ``to_compat_agent_card``). The first 0.3 interface is the primary
    (``url`` + ``preferredTransport``); the others become ``additionalInterfaces``."""
    legacy = [
        i
        for i in card.get("supportedInterfaces", ())
        if not i.get("protocolVersion") or is_legacy_version(str(i["protocolVersion"]))
    ]
    if not legacy:
        return None
    primary = legacy[0]
    out: JSON = {
        "name": card.get("name", ""),
        "description": card.get("description", ""),
        "version": card.get("version", ""),
        "url": primary.get("url", ""),
        "preferredTransport": primary.get("protocolBinding", "JSONRPC"),
        "protocolVersion": LEGACY_CARD_VERSION,
    }
    if len(legacy) > 1:
        out["additionalInterfaces"] = [
            {"url": i.get("url", ""), "transport": i.get("protocolBinding", "")} for i in legacy[1:]
        ]
    copy_fields(card, out, "provider", "documentationUrl", "iconUrl")
    capabilities = card.get("capabilities", {})
    out["capabilities"] = {
        k: v for k, v in capabilities.items() if k in ("streaming", "pushNotifications")
    }
    if capabilities.get("extensions"):
        # 0.3 wrote ``required`` even when false (the SDK's 0.3 card does too).
        out["capabilities"]["extensions"] = [
            {**e, "required": e.get("required", False)} for e in capabilities["extensions"]
        ]
    if capabilities.get("extendedAgentCard"):
        out["supportsAuthenticatedExtendedCard"] = True
    schemes = card.get("securitySchemes")
    if schemes:
        flat = {name: _scheme_out(s) for name, s in schemes.items()}
        out["securitySchemes"] = {k: v for k, v in flat.items() if v is not None}
    if card.get("securityRequirements"):
        out["security"] = _security_out(card["securityRequirements"])
    out["defaultInputModes"] = list(card.get("defaultInputModes", ()))
    out["defaultOutputModes"] = list(card.get("defaultOutputModes", ()))
    skills = []
    for skill in card.get("skills", ()):
        item = {k: v for k, v in skill.items() if k != "securityRequirements"}
        item.setdefault("tags", [])
        if skill.get("securityRequirements"):
            item["security"] = _security_out(skill["securityRequirements"])
        skills.append(item)
    out["skills"] = skills
    copy_fields(card, out, "signatures")
    return out


def _merge(target: JSON, extra: Mapping[str, Any]) -> None:
    """Add ``extra``'s keys that ``target`` lacks, recursing into objects and into
    arrays of objects element by element (the SDK's ``agent_card_to_dict`` merge)."""
    for key, value in extra.items():
        if key not in target:
            target[key] = value
            continue
        mine = target[key]
        if isinstance(value, dict) and isinstance(mine, dict):
            _merge(mine, value)
        elif isinstance(value, list) and isinstance(mine, list):
            for a, b in zip(mine, value, strict=False):
                if isinstance(a, dict) and isinstance(b, dict):
                    _merge(a, b)


def hybrid_card(card: JSON) -> JSON:
    """A 1.0 card's ProtoJSON with the 0.3 keys merged in (in place; returned).

    1.0 clients ignore the extra keys; 0.3 clients read ``url``, ``preferredTransport``,
    ``protocolVersion`` and the flat security schemes. Without a 0.3 interface the card
    is returned unchanged.
    """
    legacy = agent_card(card)
    if legacy is not None:
        _merge(card, legacy)
    return card
