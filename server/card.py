"""Agent cards: the public card (served with ETag and Cache-Control) and the per-caller
extended card.

The public card shows nothing private: its name, description and skills come from the
settings (``--card-name``, ``--card-description``, ``--card-skills``), else from the
hosted agent's :meth:`~a2a_gateway.agent.base.Agent.profile`, else defaults; its
extensions from ``--card-extensions``. The workspace files (``PERSONA.md``,
``.a2a/card.json``) feed only the caller's extended card, built fresh on every call so
edits apply at once: its description is the first non-empty line of the caller's
``PERSONA.md``, else the public one; card.json's name, description and skills override.
Both cards name the icon (``iconUrl``, :mod:`.icon`) while there is one; card.json's
``published`` (:mod:`.publication`) decides whether the public card is served.
Nothing here depends on the task engine: it receives :meth:`CardProvider.extended_card`
as a plain function.

Base URL of the interfaces: ``config.public_url`` when set, else the request's own
scheme and ``Host``. ``X-Forwarded-Proto``/``X-Forwarded-Host`` are deliberately NOT
honoured: any client can send them, and the card is served ``Cache-Control: public``,
so a shared cache could keep a card pointing at a host of the attacker's choosing.
Behind a reverse proxy, set ``public_url``.

A2A 0.3 peers (digest §13, §14.3): the card lists 0.3 JSON-RPC, HTTP+JSON and gRPC
interfaces last (same URLs as the 1.0 ones; clients take the first compatible entry, so
1.0 clients keep 1.0). A card for each reader: a request for the public card declaring
``A2A-Version: 1.x`` (header or query) gets the pure 1.0 card; one without (0.3 clients
send none) gets the SDK's hybrid: 1.0 ProtoJSON plus the 0.3 keys (``url``,
``preferredTransport``, ``protocolVersion``, flat security schemes, ...), which 1.0
clients ignore. ``--card-format 1.0|hybrid`` forces either. The response carries
``ETag``, ``Last-Modified`` (when this process first served that card body) and
``Vary: A2A-Version``. The extended card (a 1.0 operation) stays plain 1.0.
"""

from __future__ import annotations

import collections
import contextvars
import email.utils
import hashlib
import logging
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import hdrs, web
from joserfc.jwk import Key

from a2a_gateway.agent.base import AgentProfile
from a2a_gateway.local.redaction import register_secret
from a2a_gateway.protocol import codec, compat03, versioning
from a2a_gateway.protocol.card_signature import load_signing_key, public_jwks, sign_card
from a2a_gateway.protocol.context import PROTOCOL_VERSION, CallContext
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.resume import RESUME_EXTENSION
from lf.a2a.v1 import a2a_pb2 as pb

from .auth import API_KEY_HEADER, KEYS_ONLY, SchemesInUse
from .config import ServerConfig
from .icon import PNG, CardIcon, icon_path
from .identity.jwt import DISCOVERY_PATH
from .publication import CARD_FILE, PUBLISHED_KEY

log = logging.getLogger(__name__)

PERSONA_FILE = "PERSONA.md"
DEFAULT_NAME = "a2a-gateway agent"
DEFAULT_DESCRIPTION = "A conversational agent reachable over the A2A protocol."
DEFAULT_INPUT_MODES = ("text/plain", "application/json", "application/octet-stream")
DEFAULT_OUTPUT_MODES = ("text/plain", "application/json", "application/octet-stream")
CARD_CONTENT_TYPE = "application/json"
#: Where the key that signs our cards is published (the JWS header's ``jku``).
JWKS_PATH = "/.well-known/jwks.json"

API_KEY_SCHEME = "apiKey"
BEARER_SCHEME = "bearer"
BASIC_SCHEME = "basic"
OIDC_SCHEME = "oidc"
OAUTH2_SCHEME = "oauth2"
MTLS_SCHEME = "mtls"

_MAX_FILE_BYTES = 1024 * 1024
_MAX_DESCRIPTION_CHARS = 512
_CARD_KEYS = frozenset({"name", "description", "skills", PUBLISHED_KEY})
# A Host header we are willing to put in a card: a DNS name or IPv4 (or [IPv6]) and a port.
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$"
)

#: Base URL of the HTTP request being served, set by the HTTP bindings so the extended
#: card (built inside the service call) advertises the same URLs as the public one.
_REQUEST_BASE_URL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "a2a_request_base_url", default=None
)


def bind_request(request: web.Request) -> None:
    """Remember ``request``'s base URL for cards built during this request."""
    _REQUEST_BASE_URL.set(request_base_url(request))


#: Base URLs made so far, by scheme and Host, so that requests to one host share one
#: string (a held stream's context keeps it for the stream's life). Bounded: the Host is
#: the client's to choose; past the bound, a URL is made per request.
_BASE_URLS: dict[tuple[str, str], str] = {}
_MAX_BASE_URLS = 64


def request_base_url(request: web.Request) -> str | None:
    """``scheme://host[:port]`` of the request, or None when its Host looks wrong."""
    host = request.host
    scheme = request.scheme
    known = _BASE_URLS.get((scheme, host))
    if known is not None:
        return known
    if not _HOST.match(host):
        return None
    url = f"{scheme}://{host}"
    if len(_BASE_URLS) < _MAX_BASE_URLS:
        _BASE_URLS[scheme, host] = url
    return url


def first_line(path: Path) -> str | None:
    """First non-empty line of a text file (heading marks stripped), or None."""
    try:
        with path.open("rb") as handle:
            text = handle.read(_MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return stripped[:_MAX_DESCRIPTION_CHARS]
    return None


#: Encodings of the public card kept (see CardProvider._encoded).
ENCODED_CARDS = 16
#: (body, ETag, first served at, the same as an HTTP date)
_Encoded = tuple[bytes, str, float, str]


class _MalformedCard(Exception):
    pass


@dataclass(frozen=True, slots=True)
class CardSigner:
    """The key that signs our cards and the ``kid`` it is published under."""

    key: Key = field(repr=False)
    kid: str

    @classmethod
    def from_file(cls, path: Path) -> CardSigner:
        """The key in ``path`` (a private JWK or PEM); its ``kid`` is the JWK's own, else
        its RFC 7638 thumbprint. ValueError or OSError naming the problem, never the key."""
        key = load_signing_key(path.read_bytes())
        private = key.as_dict(private=True)
        for name in ("d", "p", "q", "dp", "dq", "qi"):
            if isinstance(private.get(name), str):
                register_secret(str(private[name]))
        return cls(key, key.kid or key.thumbprint())


class CardProvider:
    """Builds agent cards from the configuration; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        push_notifications: bool = False,
        clock: Callable[[], float] = time.time,
        signer: CardSigner | None = None,
    ) -> None:
        self.config = config
        self.push_notifications = push_notifications
        self.streaming = True  # False for an agent that cannot stream (Agent.streaming)
        self.profile: AgentProfile | None = None  # the hosted agent's own (Agent.profile)
        self.clock = clock  # for Last-Modified (tests inject one)
        # The schemes callers can use now (the authenticator's, set by the host).
        self.schemes: Callable[[], SchemesInUse] = lambda: KEYS_ONLY
        # Whether the public card is served now (the authenticator's, set by the host).
        self.serving: Callable[[], bool] = lambda: True
        self.icon = CardIcon(None)  # the host's (--card-icon, a workspace's icon.png)
        self.signer = signer  # --card-signing-key
        self._signed_cards: collections.OrderedDict[bytes, pb.AgentCard] = collections.OrderedDict()
        self._encodings: collections.OrderedDict[bytes, _Encoded] = collections.OrderedDict()

    # --- URLs ---------------------------------------------------------------------

    def base_url(self, request: web.Request | None = None) -> str:
        """Base URL for interface URLs: public_url, else the request, else the bind."""
        if self.config.public_url:
            return self.config.public_url.rstrip("/")
        derived = request_base_url(request) if request is not None else _REQUEST_BASE_URL.get()
        if derived is not None:
            return derived
        host = self.config.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.config.port}"

    def interfaces(self, base_url: str) -> list[pb.AgentInterface]:
        """Every mounted binding: JSON-RPC, then HTTP+JSON, then gRPC (``host:port``),
        all 1.0; then JSON-RPC, HTTP+JSON and gRPC 0.3 on the same URLs."""
        mounts = self.config.mounts
        jsonrpc = mount_path(mounts.jsonrpc) or "/"
        found = [
            pb.AgentInterface(
                url=base_url + jsonrpc,
                protocol_binding="JSONRPC",
                protocol_version=PROTOCOL_VERSION,
            ),
            pb.AgentInterface(
                url=base_url + mount_path(mounts.rest),
                protocol_binding="HTTP+JSON",
                protocol_version=PROTOCOL_VERSION,
            ),
        ]
        address = self.grpc_address(base_url)
        if address:
            found.append(
                pb.AgentInterface(
                    url=address, protocol_binding="GRPC", protocol_version=PROTOCOL_VERSION
                )
            )
        # Last: a client takes the first entry it speaks, so 1.0 clients stay on 1.0.
        # A 0.3 REST client appends "/v1/..." to its URL: the REST binding serves those.
        found += [
            pb.AgentInterface(
                url=base_url + jsonrpc,
                protocol_binding="JSONRPC",
                protocol_version=compat03.LEGACY_VERSION,
            ),
            pb.AgentInterface(
                url=base_url + mount_path(mounts.rest),
                protocol_binding="HTTP+JSON",
                protocol_version=compat03.LEGACY_VERSION,
            ),
        ]
        if address:  # a2a.v1.A2AService, next to lf.a2a.v1.A2AService on the same port
            found.append(
                pb.AgentInterface(
                    url=address, protocol_binding="GRPC", protocol_version=compat03.LEGACY_VERSION
                )
            )
        return found

    def grpc_address(self, base_url: str) -> str:
        """``host:port`` advertised for gRPC ("" when gRPC is off)."""
        if self.config.grpc_port is None:
            return ""
        if self.config.grpc_public_address:
            return self.config.grpc_public_address
        # A bare host:port means plaintext to clients (but on 443): TLS says grpcs://.
        scheme = "grpcs://" if self.config.tls is not None else ""
        host = urllib.parse.urlsplit(base_url).hostname or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{scheme}{host}:{self.config.grpc_port}"

    # --- cards --------------------------------------------------------------------

    def public_card(self, base_url: str | None = None) -> pb.AgentCard:
        """The public card; ``base_url`` defaults to :meth:`base_url` (see module doc).
        Signed with ``--card-signing-key``."""
        base = base_url or self.base_url()
        return self._signed(self._public(base), base)

    def derived_card(self, base_url: str, adjust: Callable[[pb.AgentCard], None]) -> pb.AgentCard:
        """The public card as ``adjust`` changes it (the card of another URL of the
        same agent: PACT's), signed like the public one."""
        card = self._public(base_url)
        adjust(card)
        return self._signed(card, base_url)

    def _signed(self, card: pb.AgentCard, base_url: str) -> pb.AgentCard:
        """``card`` with our signature when we sign cards. ECDSA signatures differ each
        time: the signed card is reused while the card is the same, so its ETag holds."""
        signer = self.signer
        if signer is None:
            return card
        key = card.SerializeToString(deterministic=True) + base_url.encode()
        found = self._signed_cards.get(key)
        if found is None:
            found = sign_card(card, signer.key, kid=signer.kid, jku=base_url + JWKS_PATH)
            self._signed_cards[key] = found
            if len(self._signed_cards) > ENCODED_CARDS:
                self._signed_cards.popitem(last=False)
        else:
            self._signed_cards.move_to_end(key)
        signed = pb.AgentCard()
        signed.CopyFrom(found)
        return signed

    async def handle_jwks(self, request: web.Request) -> web.StreamResponse:
        """``GET /.well-known/jwks.json``: the key that signs our cards (404 without)."""
        if self.signer is None:
            raise web.HTTPNotFound()
        body = orjson.dumps(public_jwks(self.signer.key, self.signer.kid))
        headers = {hdrs.CACHE_CONTROL: f"public, max-age={self.config.card_max_age_s}"}
        return web.Response(body=body, content_type=CARD_CONTENT_TYPE, headers=headers)

    def _public(self, base_url: str) -> pb.AgentCard:
        settings = self.config.card
        profile = self.profile or AgentProfile()
        card = pb.AgentCard(
            name=settings.name or profile.name or DEFAULT_NAME,
            description=settings.description or profile.description or DEFAULT_DESCRIPTION,
            supported_interfaces=self.interfaces(base_url),
            version=settings.version,
            capabilities=pb.AgentCapabilities(
                streaming=self.streaming,
                push_notifications=self.push_notifications,
                extended_agent_card=True,
            ),
            default_input_modes=DEFAULT_INPUT_MODES,
            default_output_modes=DEFAULT_OUTPUT_MODES,
            skills=settings.skills or profile.skills or [_chat_skill()],
        )
        card.capabilities.extensions.extend(settings.extensions)
        if self.streaming and settings.resumable_streams:
            card.capabilities.extensions.add(uri=RESUME_EXTENSION, description=RESUME_DESCRIPTION)
        if settings.provider_organization and settings.provider_url:
            card.provider.organization = settings.provider_organization
            card.provider.url = settings.provider_url
        if settings.documentation_url:
            card.documentation_url = settings.documentation_url
        if self.icon.icon is not None:  # as of the last look at the file
            card.icon_url = base_url + icon_path(self.config.mounts.jsonrpc)
        names = add_security_schemes(card, self.schemes())
        # Any one scheme will do (OR across entries). With anonymous access on, no
        # requirement is listed: credentials are accepted but not needed.
        if not self.config.allow_anonymous:
            for name in names:
                requirement = card.security_requirements.add()
                requirement.schemes[name].SetInParent()
        return card

    def extended_card(self, context: CallContext) -> pb.AgentCard:
        """The caller's extended card: the public card, with the first non-empty line
        of the caller's ``PERSONA.md`` as its description (else the configured one),
        then the workspace's ``.a2a/card.json`` (name, description, skills) over it.

        A malformed card.json is treated like a missing one, with a warning naming the
        file (never its content).
        """
        base = self.base_url()
        card = self._public(base)
        if not context.caller.workspace:
            return self._signed(card, base)
        workspace = Path(context.caller.workspace)
        persona = first_line(workspace / PERSONA_FILE)
        if persona:
            card.description = persona
        path = workspace / CARD_FILE
        try:
            overlay = _read_card_file(path)
        except _MalformedCard as exc:
            log.warning("agent card file %s is malformed (%s); using the default card", path, exc)
            return self._signed(card, base)
        if overlay is None:
            return self._signed(card, base)
        name, description, skills = overlay
        if name is not None:
            card.name = name
        if description is not None:
            card.description = description
        if skills is not None:
            del card.skills[:]
            card.skills.extend(skills)
        return self._signed(card, base)

    # --- serving --------------------------------------------------------------------

    def _encoded(self, card: pb.AgentCard, hybrid: bool) -> _Encoded:
        """The card's JSON (pure 1.0, or the hybrid), its ETag and when this process
        first served that body (seconds, and as an HTTP date). The card is built fresh
        for every request; its encoding (ProtoJSON, the 0.3 keys, the hash: ~45 us, most
        of a card request) is reused while the card is byte for byte the same. A few
        entries: one per Host and format the card is asked under, bounded because Host
        is the client's choice."""
        key = (b"h" if hybrid else b"p") + card.SerializeToString(deterministic=True)
        found = self._encodings.get(key)
        if found is not None:
            self._encodings.move_to_end(key)
            return found
        data = codec.to_dict(card)
        body = orjson.dumps(compat03.hybrid_card(data) if hybrid else data)
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        modified = float(int(self.clock()))  # HTTP dates have whole seconds
        found = body, etag, modified, email.utils.formatdate(modified, usegmt=True)
        self._encodings[key] = found
        if len(self._encodings) > ENCODED_CARDS:
            self._encodings.popitem(last=False)
        return found

    def serves_hybrid(self, request: web.Request) -> bool:
        """Whether ``request`` gets the hybrid card: ``--card-format``, else whether it
        declares no 1.x ``A2A-Version`` (header, else query)."""
        chosen = self.config.card.format
        if chosen != "auto":
            return chosen == "hybrid"
        name = versioning.VERSION_HEADER
        value = request.headers.get(name)
        if value is None and request.query_string:
            value = request.query.get(name) or request.query.get(name.lower())
        return not declares_1x(value)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """``GET`` the public card for its reader, with a content-hash ETag,
        Last-Modified, and 304 revalidation; 404 while no workspace is published."""
        if not self.serving():
            raise web.HTTPNotFound()
        await self.icon.refresh()  # a new or changed icon file shows at once
        card = self.public_card(self.base_url(request))
        hybrid = self.serves_hybrid(request)
        return self.card_response(request, card, hybrid, vary=self.config.card.format == "auto")

    def card_response(
        self, request: web.Request, card: pb.AgentCard, hybrid: bool, *, vary: bool = False
    ) -> web.Response:
        """``card`` as the answer to ``request`` (ETag, Last-Modified, 304)."""
        body, etag, modified, http_date = self._encoded(card, hybrid)
        headers = {
            hdrs.ETAG: etag,
            hdrs.LAST_MODIFIED: http_date,
            hdrs.CACHE_CONTROL: f"public, max-age={self.config.card_max_age_s}",
        }
        if vary:
            headers[hdrs.VARY] = versioning.VERSION_HEADER
        if_none_match = request.headers.get(hdrs.IF_NONE_MATCH)
        if if_none_match is not None:
            fresh = etag_matches(if_none_match, etag)
        else:  # RFC 9110 13.1.3: If-Modified-Since only without If-None-Match
            fresh = not_modified_since(request.headers.get(hdrs.IF_MODIFIED_SINCE), modified)
        if fresh:
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type=CARD_CONTENT_TYPE, headers=headers)

    async def handle_icon(self, request: web.Request) -> web.StreamResponse:
        """``GET <JSON-RPC mount>/icon.png``: the icon (:mod:`.icon`) with an ETag and
        304 revalidation; 404 without one or while no workspace is published."""
        icon = await self.icon.refresh() if self.serving() else None
        if icon is None:
            raise web.HTTPNotFound()
        headers = {
            hdrs.ETAG: icon.etag,
            hdrs.CACHE_CONTROL: f"public, max-age={self.config.card_max_age_s}",
        }
        if etag_matches(request.headers.get(hdrs.IF_NONE_MATCH), icon.etag):
            return web.Response(status=304, headers=headers)
        return web.Response(body=icon.png, content_type=PNG, headers=headers)


CARDS = web.AppKey("a2a_cards", CardProvider)


def add_security_schemes(card: pb.AgentCard, schemes: SchemesInUse) -> list[str]:
    """Describe the schemes in use on ``card``; their names, in the card's order."""
    names: list[str] = []
    if schemes.keys:
        card.security_schemes[API_KEY_SCHEME].api_key_security_scheme.CopyFrom(
            pb.APIKeySecurityScheme(
                location="header", name=API_KEY_HEADER, description="The caller's API key."
            )
        )
        card.security_schemes[BEARER_SCHEME].http_auth_security_scheme.CopyFrom(
            pb.HTTPAuthSecurityScheme(
                scheme="Bearer", description="The caller's API key as a bearer token."
            )
        )
        names += [API_KEY_SCHEME, BEARER_SCHEME]
    for index, issuer in enumerate(schemes.issuers):
        name = OIDC_SCHEME if len(schemes.issuers) == 1 else f"{OIDC_SCHEME}-{index + 1}"
        card.security_schemes[name].open_id_connect_security_scheme.CopyFrom(
            pb.OpenIdConnectSecurityScheme(
                open_id_connect_url=issuer.rstrip("/") + DISCOVERY_PATH,
                description="An ID or access token of this issuer, as a bearer token.",
            )
        )
        names.append(name)
    if schemes.introspection and schemes.token_url:
        card.security_schemes[OAUTH2_SCHEME].oauth2_security_scheme.CopyFrom(
            pb.OAuth2SecurityScheme(
                description="An access token of this authorization server, as a bearer token.",
                flows=pb.OAuthFlows(
                    client_credentials=pb.ClientCredentialsOAuthFlow(token_url=schemes.token_url)
                ),
            )
        )
        names.append(OAUTH2_SCHEME)
    elif schemes.introspection and not schemes.keys:
        card.security_schemes[BEARER_SCHEME].http_auth_security_scheme.CopyFrom(
            pb.HTTPAuthSecurityScheme(scheme="Bearer", description="An OAuth 2.0 access token.")
        )
        names.append(BEARER_SCHEME)
    if schemes.mtls:
        card.security_schemes[MTLS_SCHEME].mtls_security_scheme.CopyFrom(
            pb.MutualTlsSecurityScheme(description="A client certificate of our client CA.")
        )
        names.append(MTLS_SCHEME)
    if schemes.basic:
        card.security_schemes[BASIC_SCHEME].http_auth_security_scheme.CopyFrom(
            pb.HTTPAuthSecurityScheme(scheme="Basic", description="HTTP Basic (RFC 7617).")
        )
        names.append(BASIC_SCHEME)
    return names


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 weak comparison of an ``If-None-Match`` list (or ``*``) with ``etag``."""
    if not if_none_match:
        return False
    bare = etag.removeprefix("W/")
    for item in if_none_match.split(","):
        tag = item.strip()
        if tag == "*" or tag.removeprefix("W/") == bare:
            return True
    return False


def declares_1x(value: str | None) -> bool:
    """Whether an ``A2A-Version`` value names a 1.x version (``1``, ``1.0``, ``1.1.2``)."""
    if not value:
        return False
    parts = value.strip().split(".")
    return (
        len(parts) <= 3 and all(p.isascii() and p.isdigit() for p in parts) and int(parts[0]) == 1
    )


def not_modified_since(header: str | None, modified: float) -> bool:
    """Whether an ``If-Modified-Since`` date is at or after ``modified`` (an unreadable
    date is ignored, as RFC 9110 asks)."""
    if not header:
        return False
    try:
        since = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError):
        return False
    if since.tzinfo is None:
        return False
    return since.timestamp() >= modified


def mount_path(mount: str) -> str:
    """``"a2a/"`` -> ``"/a2a"``; ``""`` and ``"/"`` -> ``""`` (the root)."""
    path = mount.strip().strip("/")
    return "/" + path if path else ""


def _chat_skill() -> pb.AgentSkill:
    return pb.AgentSkill(
        id="chat",
        name="Chat",
        description="Talk with the agent in natural language; it can also read attached files.",
        tags=["chat", "general"],
        examples=["What can you help me with?"],
    )


def _read_card_file(path: Path) -> tuple[str | None, str | None, list[pb.AgentSkill] | None] | None:
    """(name, description, skills) from a card.json; None when there is no file."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _MalformedCard(f"unreadable: {exc.strerror}") from None
    if size > _MAX_FILE_BYTES:
        raise _MalformedCard(f"larger than {_MAX_FILE_BYTES} bytes")
    try:
        data: Any = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise _MalformedCard(f"unreadable: {exc.strerror}") from None
    except orjson.JSONDecodeError:
        raise _MalformedCard("not valid JSON") from None
    if not isinstance(data, dict):
        raise _MalformedCard("not a JSON object")
    unknown = sorted(set(data) - _CARD_KEYS)
    if unknown:
        raise _MalformedCard(
            f"unknown key {unknown[0][:40]!r}; allowed: name, description, skills, published"
        )
    if not isinstance(data.get(PUBLISHED_KEY, True), bool):
        raise _MalformedCard("published must be true or false")
    name = _text(data, "name")
    description = _text(data, "description")
    skills: list[pb.AgentSkill] | None = None
    if "skills" in data:
        try:
            skills = parse_skills(data["skills"], "skills")
        except ValueError as exc:
            raise _MalformedCard(str(exc)) from None
    return name, description, skills


def parse_skills(raw: Any, where: str) -> list[pb.AgentSkill]:
    """A non-empty JSON array of AgentSkill (ProtoJSON, unknown keys refused);
    ValueError naming the first bad entry."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where} must be a non-empty array")
    skills = []
    for index, item in enumerate(raw):
        try:
            skill = codec.parse(pb.AgentSkill, item, path=f"{where}[{index}]", unknown="refuse")
        except A2AError as exc:
            raise ValueError(f"{where}[{index}]: {exc.message}") from None
        skills.append(skill)
    return skills


def read_skills_file(path: Path) -> list[pb.AgentSkill]:
    """The public card's skills from a JSON file (``--card-skills``): an array of
    AgentSkill, or an object with a ``skills`` array. ValueError saying why not."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise ValueError(f"{path} is larger than {_MAX_FILE_BYTES} bytes")
        data: Any = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
    except orjson.JSONDecodeError:
        raise ValueError(f"{path} is not valid JSON") from None
    if isinstance(data, dict) and set(data) == {"skills"}:
        data = data["skills"]
    try:
        return parse_skills(data, "skills")
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


#: How the card describes the resumable-streams extension (docs/streams.md).
RESUME_DESCRIPTION = (
    "Stream events carry ids (SSE id:, gRPC event metadata a2a-gateway.eventId); "
    "SubscribeToTask with Last-Event-ID (gRPC: a2a-last-event-id) resumes after one."
)


def parse_extensions(text: str) -> list[pb.AgentExtension]:
    """The card's extensions from ``--card-extensions``: a JSON array of ``{uri,
    description?, required?, params?}`` objects. ValueError naming the first bad one."""
    try:
        data: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError("must be a JSON array of {uri, description?, required?}") from None
    if not isinstance(data, list):
        raise ValueError("must be a JSON array of {uri, description?, required?}")
    extensions = []
    for index, item in enumerate(data):
        where = f"[{index}]"
        try:
            extension = codec.parse(pb.AgentExtension, item, path=where, unknown="refuse")
        except A2AError as exc:
            raise ValueError(f"{where}: {exc.message}") from None
        if not extension.uri:
            raise ValueError(f"{where}.uri is required")
        extensions.append(extension)
    return extensions


def _text(data: dict[str, Any], key: str) -> str | None:
    if key not in data:
        return None
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise _MalformedCard(f"{key} must be a non-empty string")
    return value.strip()
