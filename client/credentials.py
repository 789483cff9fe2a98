"""How credentials are presented to an agent, read from its card's security schemes.

A key: ``Authorization: Bearer <key>`` when every scheme the card declares is HTTP
bearer; otherwise the header the card's API-key scheme names (``X-API-Key`` when it names
none). With a signing secret every request also carries ``X-A2A-Signature`` over its body
(``x-a2a-signature`` metadata on gRPC), as :mod:`a2a_gateway.local.signing` checks.

Beyond a key (:class:`ClientAuth`): HTTP Basic; an OAuth 2.0 access token from the client
credentials grant (RFC 6749 §4.4; the token URL from the settings or from the card's
OAuth2 scheme), cached until shortly before it expires; or a token printed by a command
(an OIDC ID token from a CLI, for instance), cached for :data:`COMMAND_TOKEN_TTL_S`. A
token source is asked again once when the agent answers 401 (see
:class:`a2a_gateway.client.remote.RemoteService`). Every secret, and every token
obtained, is registered with the log redaction.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import json
import shlex
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.redaction import register_secret
from a2a_gateway.local.signing import SIGNATURE_HEADER, signature_header

from .errors import AuthRejected

DEFAULT_API_KEY_HEADER = "X-API-Key"
#: A token is fetched again this long before its ``expires_in`` runs out.
EXPIRY_MARGIN_S = 30.0
#: How long a token printed by ``token_command`` is reused (it says nothing of expiry).
COMMAND_TOKEN_TTL_S = 300.0
COMMAND_TIMEOUT_S = 30.0
MAX_TOKEN_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """What the owner configured for one agent beyond a key; ``repr`` shows no secret."""

    basic_user: str = ""
    basic_password: str = field(default="", repr=False)
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    token_url: str = ""  # empty: the card's OAuth2 client-credentials token URL
    token_command: str = ""  # a command printing a bearer token on stdout
    client_cert: str = ""  # PEM file: our TLS client certificate (mTLS), with client_key
    client_key: str = ""
    ca_cert: str = ""  # PEM file: trust this CA for the agent's TLS (else the system's)

    def secrets(self) -> list[str]:
        return [s for s in (self.basic_password, self.client_secret) if s]

    @property
    def has_tls(self) -> bool:
        return bool(self.client_cert or self.ca_cert)

    def ssl_context(self) -> ssl.SSLContext:
        """For HTTPS: the CA to trust and our certificate (OSError/SSLError if unusable)."""
        context = ssl.create_default_context(cafile=self.ca_cert or None)
        if self.client_cert:
            context.load_cert_chain(self.client_cert, self.client_key or None)
        return context

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        """The same for a TLS gRPC channel."""
        return grpc.ssl_channel_credentials(
            root_certificates=Path(self.ca_cert).read_bytes() if self.ca_cert else None,
            private_key=Path(self.client_key).read_bytes() if self.client_key else None,
            certificate_chain=Path(self.client_cert).read_bytes() if self.client_cert else None,
        )


class TokenSource(abc.ABC):
    """A bearer token that is obtained, cached, and obtained again when refused."""

    def __init__(self) -> None:
        self.current = ""
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def ensure(self, *, fresh: bool = False) -> None:
        """A current token (a new one with ``fresh``); raises AuthRejected if none."""
        async with self._lock:
            if self.current and not fresh and time.monotonic() < self._expires:
                return
            token, lifetime_s = await self._obtain()
            if not token or len(token) > MAX_TOKEN_CHARS or any(c.isspace() for c in token):
                raise AuthRejected("the token source gave no usable token")
            register_secret(token)
            self.current, self._expires = token, time.monotonic() + lifetime_s

    @abc.abstractmethod
    async def _obtain(self) -> tuple[str, float]:
        """A new token and how long it may be reused (seconds)."""


class ClientCredentialsToken(TokenSource):
    """OAuth 2.0 client credentials grant at ``token_url``, through ``http``."""

    def __init__(
        self, token_url: str, client_id: str, client_secret: str, http: httpx.AsyncClient
    ) -> None:
        super().__init__()
        self.token_url = token_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._http = http

    async def _obtain(self) -> tuple[str, float]:
        # RFC 6749 §2.3.1: both parts form-encoded, then HTTP Basic.
        pair = f"{urllib.parse.quote(self._client_id)}:{urllib.parse.quote(self._client_secret)}"
        host = urllib.parse.urlsplit(self.token_url).hostname or "the token URL"
        try:
            response = await self._http.post(
                self.token_url,
                data={"grant_type": "client_credentials"},
                headers={
                    "Authorization": "Basic " + base64.b64encode(pair.encode()).decode(),
                    "Accept": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            raise AuthRejected(f"no token from {host}: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise AuthRejected(f"no token from {host}: it answered {response.status_code}")
        try:
            answer = json.loads(response.content)
            token = answer["access_token"]
            lifetime = float(answer.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError):
            raise AuthRejected(f"no token from {host}: not an OAuth 2.0 token answer") from None
        if not isinstance(token, str):
            raise AuthRejected(f"no token from {host}: not an OAuth 2.0 token answer")
        return token, max(0.0, lifetime - EXPIRY_MARGIN_S)


class CommandToken(TokenSource):
    """The first line a command prints (run without a shell, bounded in time)."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.argv = shlex.split(command)

    async def _obtain(self) -> tuple[str, float]:
        if not self.argv:
            raise AuthRejected("token_command is empty")
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            raise AuthRejected(f"token_command could not run: {exc.strerror}") from None
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                out, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AuthRejected(f"token_command gave no token in {COMMAND_TIMEOUT_S:g} s") from None
        if process.returncode != 0:
            raise AuthRejected(f"token_command failed (exit {process.returncode})")
        lines = out.decode(errors="replace").strip().splitlines()
        return (lines[0].strip() if lines else ""), COMMAND_TOKEN_TTL_S


def token_url_of(card: pb.AgentCard) -> str:
    """The client-credentials token URL the card's OAuth2 scheme names ("" if none)."""
    for scheme in card.security_schemes.values():
        if scheme.WhichOneof("scheme") == "oauth2_security_scheme":
            flows = scheme.oauth2_security_scheme.flows
            if flows.WhichOneof("flow") == "client_credentials":
                return flows.client_credentials.token_url
    return ""


def token_source(
    auth: ClientAuth, card: pb.AgentCard, http: httpx.AsyncClient | None
) -> TokenSource | None:
    """The token source ``auth`` asks for with this card, or None (a key or Basic).
    ``http`` fetches client-credentials tokens (a card-less gRPC target has none)."""
    if auth.token_command:
        return CommandToken(auth.token_command)
    if auth.client_id:
        if http is None:
            raise AuthRejected("client credentials need the agent's card (an http(s) URL)")
        url = auth.token_url or token_url_of(card)
        if not url:
            raise AuthRejected(
                "client credentials need a token URL: the card names none (set token_url)"
            )
        if not auth.token_url and not card_may_name_token_url(card, url):
            raise AuthRejected(
                "the card's token URL is neither https nor on the agent's host; our client"
                " secret goes only there when token_url says so"
            )
        return ClientCredentialsToken(url, auth.client_id, auth.client_secret, http)
    return None


def card_may_name_token_url(card: pb.AgentCard, url: str) -> bool:
    """Whether our client secret may go to a token URL the card names: https, or the host
    of one of the card's own interfaces. The card is the agent's to write; a plain-http
    URL elsewhere would hand the secret to whoever the card points at, in the clear."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return True
    hosts = {urllib.parse.urlsplit(i.url).hostname for i in card.supported_interfaces}
    return parts.scheme == "http" and parts.hostname is not None and parts.hostname in hosts


@dataclass(frozen=True, slots=True)
class Credentials:
    """One header carrying the key (none when ``header`` is empty), and the secret that
    signs each request body when the agent asks for signatures. ``repr`` shows neither."""

    header: str
    value: str
    signing_secret: str | None = None
    #: Where a bearer token comes from, when it is not fixed (``value`` is then unused).
    source: TokenSource | None = None
    #: TLS channel credentials for gRPC (our client certificate, a CA to trust).
    channel: grpc.ChannelCredentials | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        signed = ", signed" if self.signing_secret else ""
        return f"Credentials(header={self.header!r}, value=[redacted]{signed})"

    def headers(self) -> dict[str, str]:
        if self.source is not None:
            return {"Authorization": f"Bearer {self.source.current}"}
        return {self.header: self.value} if self.header else {}

    def signature(self, body: bytes) -> dict[str, str]:
        """The signature header for ``body`` (the exact bytes sent; empty without one)."""
        if not self.signing_secret:
            return {}
        return {SIGNATURE_HEADER: signature_header(self.signing_secret, body)}

    def grpc_metadata(self, body: bytes = b"") -> tuple[tuple[str, str], ...]:
        """Metadata for a gRPC call whose serialized request is ``body``."""
        # gRPC metadata keys must be lower case.
        pairs = {**self.headers(), **self.signature(body)}
        return tuple((key.lower(), value) for key, value in pairs.items())


def credentials_for(
    card: pb.AgentCard,
    key: str | None,
    signing_secret: str | None = None,
    *,
    auth: ClientAuth | None = None,
    http: httpx.AsyncClient | None = None,
) -> Credentials | None:
    """The header to send ``key`` in, for this card, and the signing secret (None
    without either). With ``auth`` (and no key): Basic, or a token source (which
    fetches through ``http``)."""
    found = _key_credentials(card, key)
    if found is None and auth is not None:
        found = _auth_credentials(card, auth, http)
    channel = auth.grpc_credentials() if auth is not None and auth.has_tls else None
    if not signing_secret and channel is None:
        return found
    if found is None:
        return Credentials("", "", signing_secret, channel=channel)
    return Credentials(found.header, found.value, signing_secret, found.source, channel)


def _auth_credentials(
    card: pb.AgentCard, auth: ClientAuth, http: httpx.AsyncClient | None
) -> Credentials | None:
    for secret in auth.secrets():
        register_secret(secret)
    if auth.basic_user:
        pair = f"{auth.basic_user}:{auth.basic_password}".encode()
        return Credentials("Authorization", "Basic " + base64.b64encode(pair).decode())
    source = token_source(auth, card, http)
    return Credentials("Authorization", "", source=source) if source is not None else None


def _key_credentials(card: pb.AgentCard, key: str | None) -> Credentials | None:
    if not key:
        return None
    schemes = list(card.security_schemes.values())
    if schemes and all(_is_bearer(s) for s in schemes):
        return Credentials("Authorization", f"Bearer {key}")
    for scheme in schemes:
        if scheme.WhichOneof("scheme") != "api_key_security_scheme":
            continue
        api_key = scheme.api_key_security_scheme
        name = api_key.name.strip()
        if not name:
            break
        if api_key.location.lower() == "cookie":
            return Credentials("Cookie", f"{name}={key}")
        # "header", or "query" which we still send as a header: keys in URLs leak into
        # logs and error texts along the way.
        return Credentials(name, key)
    return Credentials(DEFAULT_API_KEY_HEADER, key)


def _is_bearer(scheme: pb.SecurityScheme) -> bool:
    if scheme.WhichOneof("scheme") != "http_auth_security_scheme":
        return False
    return scheme.http_auth_security_scheme.scheme.strip().lower() == "bearer"
