"""Agent card resolution: where the card lives, 0.3-style cards, and interface choice.

The card is ``<url>/.well-known/agent-card.json``, or the URL itself when it ends in
``.json``. Cards are parsed leniently (unknown fields ignored, as the official SDK does
for cards); 0.3-style keys (``url``, ``preferredTransport``, ``additionalInterfaces``,
``protocolVersion``, ``supportsAuthenticatedExtendedCard``, ``security``, flat
``type``/``in`` schemes) are mapped to their 1.0 form when the 1.0 key is absent.
An agent that offers only A2A 0.3 interfaces is called over 0.3 (JSON-RPC, then REST, then
gRPC).
"""

from __future__ import annotations

import copy
import urllib.parse
from typing import Any

import httpx
from google.protobuf import json_format

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol.compat03 import is_legacy_version
from a2a_gateway.protocol.context import PROTOCOL_VERSION
from a2a_gateway.protocol.versioning import VERSION_HEADER

from . import http_calls
from .errors import AuthRejected, CardError, quote
from .transport import GRPC, HTTP_JSON, JSONRPC

WELL_KNOWN_PATH = "/.well-known/agent-card.json"

#: Transport names users may force, and the card binding each means.
TRANSPORT_NAMES: dict[str, str] = {
    "jsonrpc": JSONRPC,
    "json-rpc": JSONRPC,
    "rest": HTTP_JSON,
    "http+json": HTTP_JSON,
    "http": HTTP_JSON,
    "grpc": GRPC,
}
SUPPORTED_BINDINGS = (JSONRPC, HTTP_JSON, GRPC)
#: Bindings we speak A2A 0.3 over, in order of preference (gRPC last: the SDK's 0.3 gRPC
#: carries file bytes oddly, see compat03.rest_server._file_bytes_in).
LEGACY_BINDINGS = (JSONRPC, HTTP_JSON, GRPC)

_LEGACY_SCHEME_TYPES = {
    "apiKey": "apiKeySecurityScheme",
    "http": "httpAuthSecurityScheme",
    "oauth2": "oauth2SecurityScheme",
    "openIdConnect": "openIdConnectSecurityScheme",
    "mutualTLS": "mtlsSecurityScheme",
}
_LEGACY_SCHEME_KEYS = frozenset({"type", "in"})


def card_url(url: str) -> str:
    """The card's URL for an agent URL (a URL whose path ends in ``.json`` is the card)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.path.lower().endswith(".json"):
        return url.strip()
    path = parts.path.rstrip("/") + WELL_KNOWN_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def binding_for(transport: str) -> str:
    """The card binding for a user's transport name (``jsonrpc``, ``rest``, ``grpc``, ...)."""
    binding = TRANSPORT_NAMES.get(transport.strip().lower())
    if binding is None:
        names = ", ".join(sorted({"jsonrpc", "rest", "grpc"}))
        raise ValueError(f"unknown transport {transport[:40]!r} (expected one of: {names})")
    return binding


# --- parsing ------------------------------------------------------------------------------


def _major_minor(version: Any) -> str:
    if not isinstance(version, str):
        return "0.3"
    parts = version.strip().split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else version.strip()


def _legacy_interfaces(card: dict[str, Any]) -> None:
    main = card.pop("url", None)
    preferred = card.pop("preferredTransport", None) or JSONRPC
    version = _major_minor(card.pop("protocolVersion", None))
    additional = card.pop("additionalInterfaces", None) or []
    if "supportedInterfaces" in card or not isinstance(main, str) or not main:
        return
    interfaces: list[dict[str, str]] = [
        {"url": main, "protocolBinding": str(preferred), "protocolVersion": version}
    ]
    seen = {(main, str(preferred))}
    for item in additional if isinstance(additional, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        key = (item["url"], str(item.get("transport") or JSONRPC))
        if key not in seen:
            seen.add(key)
            interfaces.append(
                {"url": key[0], "protocolBinding": key[1], "protocolVersion": version}
            )
    card["supportedInterfaces"] = interfaces


def _legacy_security(card: dict[str, Any]) -> None:
    def requirements(value: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for entry in value if isinstance(value, list) else []:
            if isinstance(entry, dict):
                out.append({"schemes": {str(k): {"list": v} for k, v in entry.items()}})
        return out

    legacy = card.pop("security", None)
    if "securityRequirements" not in card and legacy is not None:
        card["securityRequirements"] = requirements(legacy)
    for skill in card.get("skills") or []:
        if isinstance(skill, dict):
            legacy_skill = skill.pop("security", None)
            if "securityRequirements" not in skill and legacy_skill is not None:
                skill["securityRequirements"] = requirements(legacy_skill)
    schemes = card.get("securitySchemes")
    if not isinstance(schemes, dict):
        return
    for name, scheme in list(schemes.items()):
        if not isinstance(scheme, dict):
            continue
        if any(key in scheme for key in _LEGACY_SCHEME_TYPES.values()):
            # A hybrid card: the 1.0 member is there, drop the flat 0.3 keys.
            schemes[name] = {k: v for k, v in scheme.items() if k not in _LEGACY_SCHEME_KEYS}
            continue
        wrapper = _LEGACY_SCHEME_TYPES.get(str(scheme.get("type")))
        if wrapper is None:
            continue
        body = {k: v for k, v in scheme.items() if k != "type"}
        if "in" in body:
            body["location"] = body.pop("in")
        flows = body.get("flows")
        if isinstance(flows, dict) and len(flows) > 1:
            body["flows"] = _one_oauth_flow(flows)
        schemes[name] = {wrapper: body}


#: 0.3 OAuth flows in the order the SDK's 0.3 conversion sets them (the last one set wins).
_OAUTH_FLOW_ORDER = ("authorizationCode", "clientCredentials", "implicit", "password")


def _one_oauth_flow(flows: dict[str, Any]) -> dict[str, Any]:
    """1.0 ``OAuthFlows`` is a oneof: of several 0.3 flows keep the one the SDK keeps
    (the last present in :data:`_OAUTH_FLOW_ORDER`), so the card still parses."""
    kept = [name for name in _OAUTH_FLOW_ORDER if name in flows]
    return {kept[-1]: flows[kept[-1]]} if kept else flows


def _legacy_capabilities(card: dict[str, Any]) -> None:
    if card.pop("supportsAuthenticatedExtendedCard", None) is True:
        capabilities = card.setdefault("capabilities", {})
        if isinstance(capabilities, dict):
            capabilities.setdefault("extendedAgentCard", True)


def parse_card(value: Any, *, source: str, redact: Redactor | None = None) -> pb.AgentCard:
    """An AgentCard from its JSON value; relative HTTP interface URLs resolve against
    ``source`` (the card's own URL)."""
    redact = redact or Redactor()
    if not isinstance(value, dict):
        raise CardError(f"the agent card at {redact(source)} is not a JSON object")
    data = copy.deepcopy(value)
    try:
        _legacy_capabilities(data)
        _legacy_interfaces(data)
        _legacy_security(data)
        card = json_format.ParseDict(data, pb.AgentCard(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        detail = quote(str(exc).split("\n", 1)[0], redact)
        raise CardError(f"the agent card at {redact(source)} is invalid: {detail}") from None
    for interface in card.supported_interfaces:
        if interface.protocol_binding.upper() in (JSONRPC, HTTP_JSON):
            interface.url = urllib.parse.urljoin(source, interface.url.strip())
    return card


async def fetch_card(
    url: str,
    *,
    http: httpx.AsyncClient,
    timeout: float,  # noqa: ASYNC109 (bounds the fetch)
    redact: Redactor | None = None,
) -> pb.AgentCard:
    """The public card of the agent at ``url`` (no credentials are sent)."""
    redact = redact or Redactor()
    source, value = await fetch_card_value(url, http=http, timeout=timeout, redact=redact)
    return parse_card(value, source=source, redact=redact)


async def fetch_card_value(
    url: str,
    *,
    http: httpx.AsyncClient,
    timeout: float,  # noqa: ASYNC109 (bounds the fetch)
    redact: Redactor | None = None,
) -> tuple[str, Any]:
    """The card's URL and its JSON value as served, unchecked (``card --validate``)."""
    redact = redact or Redactor()
    source = card_url(url)
    request = http.build_request(
        "GET",
        http_calls.checked_url(source, redact=redact),
        headers={"Accept": "application/json", VERSION_HEADER: PROTOCOL_VERSION},
        timeout=http_calls.request_timeout(timeout),
    )
    response, body = await http_calls.fetch(
        http, request, target=source, bound=timeout, redact=redact
    )
    status = response.status_code
    if status == 401:
        raise AuthRejected(f"{redact(source)} requires credentials for the agent card")
    if status != 200:
        raise CardError(f"no agent card at {redact(source)} (HTTP {status})")
    value = http_calls.load_json(body, target=source, what="agent card", redact=redact)
    return source, value


# --- interface choice ---------------------------------------------------------------------


def speaks_1x(version: str) -> bool:
    """True for an interface this client can call: protocol major 1 (or unstated)."""
    text = version.strip()
    return not text or text.split(".", 1)[0] == "1"


def speaks_03(version: str) -> bool:
    """True for an A2A 0.3 interface (``0.3`` or ``0.3.x``)."""
    return is_legacy_version(version)


def _usable(interface: pb.AgentInterface, binding: str | tuple[str, ...]) -> bool:
    wanted = (binding,) if isinstance(binding, str) else binding
    return interface.protocol_binding.upper() in wanted and bool(interface.url.strip())


def _chosen(interface: pb.AgentInterface) -> pb.AgentInterface:
    chosen = pb.AgentInterface()
    chosen.CopyFrom(interface)
    chosen.protocol_binding = interface.protocol_binding.upper()
    return chosen


def choose_interface(card: pb.AgentCard, transport: str | None = None) -> pb.AgentInterface:
    """The interface to call, restricted to ``transport`` (``jsonrpc``/``rest``/``grpc``)
    when the user forces one: the first (card order) whose binding we speak over A2A
    1.x; failing that, an A2A 0.3 one, JSON-RPC before HTTP+JSON before gRPC (we never downgrade
    while a 1.x interface is usable)."""
    wanted = (binding_for(transport),) if transport else SUPPORTED_BINDINGS
    for interface in card.supported_interfaces:
        if _usable(interface, wanted) and speaks_1x(interface.protocol_version):
            return _chosen(interface)
    for binding in LEGACY_BINDINGS:
        if binding not in wanted:
            continue
        for interface in card.supported_interfaces:
            if _usable(interface, binding) and speaks_03(interface.protocol_version):
                return _chosen(interface)
    offered = ", ".join(
        f"{i.protocol_binding or '?'} {i.protocol_version or '?'}"
        for i in card.supported_interfaces
    )
    want = " or ".join(wanted)
    raise CardError(
        f"agent {card.name!r} offers no A2A 1.x or A2A 0.3 interface over {want}"
        + (f" (it offers: {offered})" if offered else " (it lists no interfaces)")
    )
