"""The PACT URL on the gateway's HTTP app: ``<JSON-RPC mount>/pact``.

A sub-application with the same two bindings as the ordinary URL (the same handlers:
JSON-RPC on ``POST <mount>/pact``, HTTP+JSON below it, e.g. ``POST
<mount>/pact/message:send``) but its own service (:class:`.service.PactService`) and
authenticator (:class:`.tokens.PactAuthenticator`), and its own card at
``<mount>/pact/.well-known/agent-card.json``: the agent's public card with this URL's
two interfaces, the personal agent's bearer JWT as its only scheme, the PACT Identity
profile as a required extension, and no streaming, push or extended card. With a
``delegation`` in pact.json the card also names the OAuth 2.0 device-code scheme of
the authorization server below it (``<mount>/pact/oauth/``, :mod:`.oauth`), whose
routes come before the sub-application's catch-all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import hdrs, web

from a2a_gateway.protocol.context import PROTOCOL_VERSION
from lf.a2a.v1 import a2a_pb2 as pb

from .. import jsonrpc, rest
from ..card import CARDS, mount_path
from ..config import ServerConfig
from ..http_request import AUTHENTICATOR, CONFIG, METRICS, SERVICE
from ..http_sse import STREAM_WATCH
from .oauth import (
    DEVICE_AUTHORIZATION_PATH,
    METADATA_PATH,
    TOKEN_PATH,
    OAuthRoutes,
)
from .service import PactService
from .tokens import DELEGATION_HEADER, PactAuthenticator

#: The PACT Identity profile, as the card's extension names it.
PACT_PROFILE_URI = "https://openpactprotocol.org/spec#identity"
#: The card's name for the personal agent's bearer JWT.
PACT_SCHEME = "platformJwt"
#: The card's name for the delegation token (OAuth 2.0 device code, RFC 8628).
DELEGATION_SCHEME = "pactDelegation"
CARD_PATH = "/.well-known/agent-card.json"


@dataclass(frozen=True, slots=True)
class PactMount:
    """What the PACT URL serves with."""

    service: PactService
    authenticator: PactAuthenticator


def pact_path(config: ServerConfig) -> str:
    """``/a2a/pact`` for the default JSON-RPC mount (``/pact`` for one at the root)."""
    return mount_path(config.mounts.jsonrpc) + "/pact"


def _adjust(url: str, scopes: dict[str, str] | None) -> Callable[[pb.AgentCard], None]:
    def adjust(card: pb.AgentCard) -> None:
        del card.supported_interfaces[:]
        for binding in ("JSONRPC", "HTTP+JSON"):
            card.supported_interfaces.add(
                url=url, protocol_binding=binding, protocol_version=PROTOCOL_VERSION
            )
        capabilities = card.capabilities
        capabilities.streaming = False
        capabilities.push_notifications = False
        capabilities.extended_agent_card = False
        extension = capabilities.extensions.add(
            uri=PACT_PROFILE_URI,
            description=(
                "PACT Identity: a personal agent calls for one of its users with a"
                " short-lived JWT (ES256 or RS256; iss, aud, sub, iat, exp, jti). Replies"
                " are Messages: no tasks, streaming or push notifications here."
            ),
            required=True,
        )
        extension.params.update({"profile": "identity", "tasks": False})
        card.security_schemes.clear()
        card.security_schemes[PACT_SCHEME].http_auth_security_scheme.CopyFrom(
            pb.HTTPAuthSecurityScheme(
                scheme="Bearer",
                bearer_format="JWT",
                description="A JWT its personal agent signs for the user (sub).",
            )
        )
        del card.security_requirements[:]
        card.security_requirements.add().schemes[PACT_SCHEME].SetInParent()
        if scopes is not None:
            flow = pb.DeviceCodeOAuthFlow(
                device_authorization_url=url + DEVICE_AUTHORIZATION_PATH,
                token_url=url + TOKEN_PATH,
                scopes=scopes,
            )
            card.security_schemes[DELEGATION_SCHEME].oauth2_security_scheme.CopyFrom(
                pb.OAuth2SecurityScheme(
                    description=(
                        f"PACT Delegated: the user's delegation token, sent beside the"
                        f" personal agent's JWT as {DELEGATION_HEADER}: Bearer <token>."
                    ),
                    flows=pb.OAuthFlows(device_code=flow),
                    oauth2_metadata_url=url + METADATA_PATH,
                )
            )
            extension.params.update({"delegation": True})

    return adjust


def mount(app: web.Application, pact: PactMount) -> None:
    """Add the PACT URL to ``app`` (before a catch-all that would shadow it)."""
    config = app[CONFIG]
    prefix = pact_path(config)
    sub = web.Application()
    sub[SERVICE] = pact.service
    sub[CONFIG] = config
    sub[AUTHENTICATOR] = pact.authenticator
    sub[CARDS] = app[CARDS]
    sub[METRICS] = app[METRICS]
    sub[STREAM_WATCH] = app[STREAM_WATCH]
    sub[rest.REST_PREFIX] = prefix

    cards = app[CARDS]
    server = pact.authenticator.delegation
    pact.authenticator.endpoint = lambda: cards.base_url() + prefix
    pact.service.delegation = server
    pact.service.endpoint = pact.authenticator.endpoint

    async def handle_card(request: web.Request) -> web.StreamResponse:
        base = cards.base_url(request)
        found = server.delegating()
        scopes = {s.id: s.description for s in found[2].scopes} if found else None
        card = cards.derived_card(base, _adjust(base + prefix, scopes))
        return cards.card_response(request, card, hybrid=False)

    def brand(request: web.Request) -> str:
        found = server.delegating()
        if found is not None and found[2].brand_name:
            return found[2].brand_name
        return cards.public_card(cards.base_url(request)).name

    def client_ok(client_id: str) -> bool:
        return any(
            (agent := config.agent(client_id)) is not None and agent.enabled
            for _, config in pact.authenticator.configs()
        )

    sub.router.add_get(CARD_PATH, handle_card)
    limiter = pact.authenticator.limiter
    OAuthRoutes(server, prefix, cards.base_url, brand, client_ok, limiter.check_address).add(sub)
    for path in ("", "/"):
        sub.router.add_post(path, jsonrpc.handle)
        sub.router.add_route(hdrs.METH_ANY, path, jsonrpc.not_post)
    sub.router.add_route(hdrs.METH_ANY, "/{tail:.*}", rest.handle)
    app.add_subapp(prefix, sub)


__all__ = [
    "DELEGATION_SCHEME",
    "PACT_PROFILE_URI",
    "PACT_SCHEME",
    "PactMount",
    "mount",
    "pact_path",
]
