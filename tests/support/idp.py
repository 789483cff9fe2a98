"""A real OpenID Connect identity provider of our own, on 127.0.0.1, for tests; also a
PACT personal agent (:meth:`IdentityProvider.personal_agent`: its JWKS without
discovery, tokens for its users with ``token(sub, audience=...)``).

An aiohttp server with discovery (``/.well-known/openid-configuration``), a JWKS
(``/jwks``) whose keys rotate on request, signing real tokens with joserfc, an OAuth 2.0
token endpoint (``/token``, client credentials grant, opaque tokens) and an RFC 7662
introspection endpoint (``/introspect``). It counts JWKS fetches, token requests and
introspections (the gateway's bounds are asserted on them) and can stop answering
(``hang``) or fail (``fail``) to play an identity provider that is down. Every token it
mints is a secret the suite's log scan looks for.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from joserfc import jwt
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey

from .secrets import use_secret

AUDIENCE = "a2a-gateway-tests"


def new_key(alg: str) -> Key:
    if alg.startswith(("RS", "PS")):
        return RSAKey.generate_key(2048, private=True)
    if alg.startswith("ES"):
        return ECKey.generate_key({"ES256": "P-256", "ES384": "P-384"}.get(alg, "P-521"))
    return OKPKey.generate_key("Ed25519")


class IdentityProvider:
    """Keys by kid; ``issuer`` is known once started (``http://127.0.0.1:<port>``)."""

    def __init__(self) -> None:
        self.issuer = ""
        self.keys: dict[str, tuple[str, Key]] = {}  # kid -> (alg, private key)
        self.jwks_fetches = 0
        self.hang = False
        self.fail = False
        self.rotate("RS256")
        #: OAuth 2.0 clients (client credentials grant) and who may introspect.
        self.clients: dict[str, str] = {}
        self.introspectors: dict[str, str] = {}
        self.opaque: dict[str, dict[str, Any]] = {}  # issued opaque token -> its claims
        self.token_requests = 0
        self.introspections = 0

    def rotate(self, alg: str = "RS256", *, keep_old: bool = True) -> str:
        """A new signing key (its kid); the old ones stay published with ``keep_old``."""
        kid = f"{alg.lower()}-{uuid.uuid4().hex[:8]}"
        if not keep_old:
            self.keys.clear()
        key = new_key(alg)
        self.keys[kid] = (alg, key)
        private = key.as_dict(private=True)
        use_secret(*(str(private[name]) for name in ("d", "p", "q") if name in private))
        return kid

    @property
    def jwks_uri(self) -> str:
        """Its JWKS, for whoever takes keys without discovery (a PACT personal agent)."""
        return f"{self.issuer}/jwks"

    def personal_agent(self, **entry: Any) -> dict[str, Any]:
        """This provider as a pact.json personal agent (its keys by ``jwksUri`` on our
        private address; ``entry`` adds or replaces fields, e.g. ``enabled``)."""
        return {"issuer": self.issuer, "jwksUri": self.jwks_uri, "allowPrivate": True, **entry}

    @property
    def current_kid(self) -> str:
        return next(reversed(self.keys))

    def token(
        self,
        sub: str = "alice",
        *,
        kid: str | None = None,
        audience: Any = AUDIENCE,
        issuer: str | None = None,
        lifetime_s: float = 300,
        not_before_s: float | None = None,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token signed by ``kid`` (default: the newest key)."""
        kid = kid or self.current_kid
        alg, key = self.keys[kid]
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": self.issuer if issuer is None else issuer,
            "sub": sub,
            "aud": audience,
            "iat": now,
            "exp": int(now + lifetime_s),
            "jti": uuid.uuid4().hex,
            **claims,
        }
        if not_before_s is not None:
            body["nbf"] = int(now + not_before_s)
        with warnings.catch_warnings():
            # joserfc warns that RFC 9864 deprecates the name EdDSA; peers still use it.
            warnings.simplefilter("ignore")
            token = jwt.encode(
                {"alg": alg, "kid": kid, **(header or {})}, body, key, algorithms=[alg]
            )
        use_secret(token)  # the session's scan checks that no log line holds it
        return token

    def opaque_token(self, sub: str, *, lifetime_s: float = 300, **claims: Any) -> str:
        """An opaque access token that only introspection can explain."""
        token = "opq_" + uuid.uuid4().hex + uuid.uuid4().hex
        now = int(time.time())
        self.opaque[token] = {
            "active": True,
            "sub": sub,
            "client_id": sub,
            "iss": self.issuer,
            "exp": int(now + lifetime_s),
            "iat": now,
            **claims,
        }
        use_secret(token)
        return token

    def revoke(self, token: str) -> None:
        self.opaque[token]["active"] = False

    @staticmethod
    def _client(request: web.Request, form: Mapping[str, str], table: dict[str, str]) -> str:
        """The authenticated client id (Basic, or client_id/client_secret in the form)."""
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            pair = base64.b64decode(header[6:]).decode()
            client_id, _, secret = pair.partition(":")
            client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if not client_id or table.get(client_id) != secret:
            raise web.HTTPUnauthorized(
                text='{"error":"invalid_client"}', content_type="application/json"
            )
        return client_id

    async def _token(self, request: web.Request) -> web.Response:
        await self._gate()
        form = {k: str(v) for k, v in (await request.post()).items()}
        client_id = self._client(request, form, self.clients)
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        self.token_requests += 1
        token = self.opaque_token(client_id, lifetime_s=120)
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": 120})

    async def _introspect(self, request: web.Request) -> web.Response:
        await self._gate()
        form = {k: str(v) for k, v in (await request.post()).items()}
        self._client(request, form, self.introspectors)
        self.introspections += 1
        claims = self.opaque.get(form.get("token", ""))
        if claims is None or not claims["active"] or claims["exp"] < time.time():
            return web.json_response({"active": False})
        return web.json_response(claims)

    def public_jwks(self) -> dict[str, Any]:
        keys = []
        for kid, (alg, key) in self.keys.items():
            keys.append({**key.as_dict(private=False), "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": keys}

    def public_key(self, kid: str) -> dict[str, Any]:
        return self.keys[kid][1].as_dict(private=False)

    async def _gate(self) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail:
            raise web.HTTPServiceUnavailable()

    async def _discovery(self, request: web.Request) -> web.Response:
        await self._gate()
        return web.json_response(
            {
                "issuer": self.issuer,
                "jwks_uri": f"{self.issuer}/jwks",
                "token_endpoint": f"{self.issuer}/token",
                "introspection_endpoint": f"{self.issuer}/introspect",
            }
        )

    async def _jwks(self, request: web.Request) -> web.Response:
        await self._gate()
        self.jwks_fetches += 1
        return web.json_response(self.public_jwks())

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_post("/token", self._token)
        app.router.add_post("/introspect", self._introspect)
        return app


@asynccontextmanager
async def running_provider() -> AsyncIterator[IdentityProvider]:
    provider = IdentityProvider()
    server = TestServer(provider.app(), host="127.0.0.1", port=0)
    await server.start_server()
    provider.issuer = str(server.make_url("")).rstrip("/")
    try:
        yield provider
    finally:
        provider.hang = False
        await server.close()


@contextmanager
def provider_in_thread() -> Iterator[IdentityProvider]:
    """:func:`running_provider` on its own event loop in a thread, for synchronous tests
    whose servers are subprocesses (the interop suite)."""
    loop = asyncio.new_event_loop()
    ready: concurrent.futures.Future[IdentityProvider] = concurrent.futures.Future()
    stop = asyncio.Event()

    async def serve() -> None:
        try:
            async with running_provider() as provider:
                ready.set_result(provider)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        yield ready.result(timeout=10)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


# --- forged tokens (what a verifier must refuse) ------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(provider: IdentityProvider, sub: str = "alice") -> str:
    """``alg: none`` with claims that would otherwise be accepted."""
    claims = {"iss": provider.issuer, "sub": sub, "aud": AUDIENCE, "exp": int(time.time()) + 300}
    header = _b64url(json.dumps({"alg": "none"}).encode())
    return f"{header}.{_b64url(json.dumps(claims).encode())}."


def hs256_with_public_key(provider: IdentityProvider) -> str:
    """The key-confusion attack: an HMAC whose secret is the RSA public key's JSON."""
    kid = provider.current_kid
    secret = json.dumps(provider.public_key(kid), sort_keys=True).encode()
    claims = json.loads(base64.urlsafe_b64decode(provider.token().split(".")[1] + "=="))
    header = _b64url(json.dumps({"alg": "HS256", "kid": kid}).encode())
    body = _b64url(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64url(mac)}"
