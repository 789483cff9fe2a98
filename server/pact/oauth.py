"""PACT Delegated: an OAuth 2.0 authorization server under ``<PACT URL>/oauth/``.

A user lets their personal agent act on their account with the company (the workspace
whose pact.json has a ``delegation``; exactly one workspace may have one) through the
device authorization grant (RFC 8628):

1. The personal agent asks ``POST oauth/device_authorization`` (form: ``client_id`` =
   its issuer, ``scope``) and gets a ``device_code``, a ``user_code`` and the
   verification URLs; it shows the user ``verification_uri_complete``.
2. ``GET oauth/device?user_code=…`` sends the user's browser to the company's
   ``loginUrl`` with ``return_to`` = our consent URL (``oauth/consent?user_code=…``).
3. The company signs the user in and POSTs a form field ``assertion`` to that URL: a
   JWT by ``loginIssuer`` (its keys: ``loginJwksUri`` or ``loginJwks``) with ``aud`` =
   the consent URL, ``sub`` (their user id), ``jti`` (once only), ``iat``, ``exp`` (at
   most five minutes after ``iat``) and the ``user_code``. A refusal is a page naming
   the OAuth error (``invalid_grant``, ``invalid_request``) and nothing changes.
4. The consent page (server-rendered, no external assets, a CSRF token in the form and
   a same-site cookie) shows the brand and the scopes asked for; the user allows some
   or denies, and lands on ``connectedUrl`` with ``status``, ``scope`` and ``client``.
5. The personal agent polls ``POST oauth/token`` (``grant_type`` =
   ``urn:ietf:params:oauth:grant-type:device_code``, ``device_code``, ``client_id``)
   and gets ``authorization_pending``, ``slow_down`` (polling faster than the
   interval, which then grows by 5 s), ``access_denied``, ``expired_token`` or
   ``invalid_grant`` (unknown or already used: a device code is good once), or the
   delegation token: a JWT access token (RFC 9068: ``typ: at+jwt``, ``iss`` the oauth
   URL, ``aud`` the PACT URL, ``sub`` the company's user id, ``client_id``, ``scope``,
   ``iat``, ``exp``, ``jti``) signed with the workspace's key (:mod:`.keys`), whose
   public half is at ``oauth/jwks.json``; the metadata (RFC 8414) is at
   ``oauth/.well-known/oauth-authorization-server``.

Pending authorizations live in the process (bounded); device codes are kept by their
SHA-256 only. Tokens, codes and assertions are never logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import logging
import secrets
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from ..identity.jwt import (
    Clock,
    JwtVerifier,
    KeySource,
    TokenRefused,
    audience_contains,
    is_number,
    peek,
)
from .config import Delegation, PactConfig
from .keys import SigningKey, load_or_create
from .replay import ReplayGuard

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEVICE_CODE_LIFETIME_S = 600
POLL_INTERVAL_S = 5
SLOW_DOWN_STEP_S = 5
TOKEN_LIFETIME_S = 3600
MAX_ASSERTION_LIFETIME_S = 300
MAX_GRANTS = 10_000
#: RFC 8628 §6.1: no vowels (no words), no look-alikes.
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
TOKEN_TYPE = "at+jwt"
RECEIPT_TYPE = "pact-receipt+jwt"
COOKIE = "pact_consent"

OAUTH = "/oauth"
METADATA_PATH = OAUTH + "/.well-known/oauth-authorization-server"
JWKS_PATH = OAUTH + "/jwks.json"
DEVICE_AUTHORIZATION_PATH = OAUTH + "/device_authorization"
TOKEN_PATH = OAUTH + "/token"
DEVICE_PATH = OAUTH + "/device"
CONSENT_PATH = OAUTH + "/consent"
DECISION_PATH = CONSENT_PATH + "/decision"


class OAuthError(Exception):
    """An OAuth error (RFC 6749 §5.2, RFC 8628 §3.5): its registered name and a fixed
    description (never a token or a code)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status


@dataclass(slots=True)
class Grant:
    """One device authorization, from its request to the token (or its refusal)."""

    device_hash: bytes
    user_code: str
    client_id: str
    scopes: tuple[str, ...]
    expires: float
    interval: float = POLL_INTERVAL_S
    last_poll: float = float("-inf")
    status: str = "pending"  # pending -> consenting -> approved | denied
    expected_sub: str = ""  # asked from a delegated turn: the same user must sign in
    sub: str = ""
    granted: tuple[str, ...] = ()
    csrf: str = field(default="", repr=False)
    cookie_hash: bytes = b""


@dataclass(frozen=True, slots=True)
class Started:
    """What the device authorization endpoint answers (RFC 8628 §3.2)."""

    device_code: str
    grant: Grant

    def __repr__(self) -> str:  # never the device code
        return f"Started(user_code={self.grant.user_code!r})"


def _hash(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def normalize_user_code(value: str) -> str:
    """``bcdf-ghjk``, ``BCDFGHJK`` → ``BCDF-GHJK`` (RFC 8628 §6.1: forgiving input)."""
    letters = "".join(c for c in value.upper() if c.isalnum())[:16]
    return f"{letters[:4]}-{letters[4:]}" if len(letters) == 8 else letters


def add_query(url: str, params: Iterable[tuple[str, str]]) -> str:
    parts = urllib.parse.urlsplit(url)
    extra = urllib.parse.urlencode(list(params), quote_via=urllib.parse.quote)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urllib.parse.urlunsplit(parts._replace(query=query))


class DelegationServer:
    """The authorization server (see the module docstring); one per gateway.

    ``configs`` gives the workspaces' pact.json (read fresh); ``verifier`` is the
    gateway's one JWT verifier (login assertions, delegation tokens) and its wall clock
    dates the tokens; ``wall_clock`` (the verifier's unless given) times the device
    codes, and is injectable for tests.
    """

    def __init__(
        self,
        configs: Callable[[], list[tuple[Path, PactConfig]]],
        verifier: JwtVerifier,
        *,
        wall_clock: Clock | None = None,
    ) -> None:
        self.configs = configs
        self.verifier = verifier
        self.wall_clock = wall_clock or verifier.wall_clock
        self.assertions = ReplayGuard(wall_clock=self.wall_clock)
        self._grants: dict[bytes, Grant] = {}
        self._by_user_code: dict[str, Grant] = {}
        self._keys: dict[Path, SigningKey] = {}
        self._key_lock = asyncio.Lock()
        self._warned = ""

    # --- configuration and keys ---------------------------------------------------------

    def delegating(self) -> tuple[Path, PactConfig, Delegation] | None:
        """The one workspace that offers delegation (None: none, or several)."""
        found = [(w, c, c.delegation) for w, c in self.configs() if c.delegation is not None]
        if len(found) != 1:
            where = ", ".join(sorted(str(w) for w, _, _ in found))
            if found and where != self._warned:  # once per such set of workspaces
                log.warning("PACT delegation is configured in several workspaces: %s", where)
            self._warned = where
            return None
        workspace, config, delegation = found[0]
        assert delegation is not None
        return workspace, config, delegation

    def required(self) -> tuple[Path, PactConfig, Delegation]:
        found = self.delegating()
        if found is None:
            raise OAuthError("invalid_request", "Delegation is not offered here", 404)
        return found

    async def signing_key(self, workspace: Path) -> SigningKey:
        key = self._keys.get(workspace)
        if key is None:
            async with self._key_lock:
                key = self._keys.get(workspace)
                if key is None:
                    key = await asyncio.to_thread(load_or_create, workspace)
                    self._keys[workspace] = key
        return key

    # --- the grant's steps --------------------------------------------------------------

    def start(
        self,
        delegation: Delegation,
        client_id: str,
        scopes: Sequence[str],
        *,
        expected_sub: str = "",
    ) -> Started:
        """A new device authorization for ``client_id`` asking ``scopes``."""
        now = self.wall_clock()
        self._sweep(now)
        if len(self._grants) >= MAX_GRANTS:
            log.warning("PACT: %d device authorizations pending; refusing more", MAX_GRANTS)
            raise OAuthError("slow_down", "Too many pending authorizations; retry later", 429)
        unknown = [s for s in scopes if delegation.scope(s) is None]
        if unknown or not scopes:
            raise OAuthError("invalid_scope", "A requested scope is not offered here")
        device_code = secrets.token_urlsafe(32)
        while True:
            letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
            user_code = f"{letters[:4]}-{letters[4:]}"
            if user_code not in self._by_user_code:
                break
        grant = Grant(
            device_hash=_hash(device_code),
            user_code=user_code,
            client_id=client_id,
            scopes=tuple(dict.fromkeys(scopes)),
            expires=now + DEVICE_CODE_LIFETIME_S,
            expected_sub=expected_sub,
        )
        self._grants[grant.device_hash] = grant
        self._by_user_code[user_code] = grant
        return Started(device_code, grant)

    def _forget(self, grant: Grant) -> None:
        self._grants.pop(grant.device_hash, None)
        if self._by_user_code.get(grant.user_code) is grant:
            del self._by_user_code[grant.user_code]

    def _sweep(self, now: float) -> None:
        # Kept a while past expiry, so that a late poll still hears expired_token.
        stale = [g for g in self._grants.values() if now > g.expires + DEVICE_CODE_LIFETIME_S]
        for grant in stale:
            self._forget(grant)

    def pending(self, user_code: str) -> Grant:
        """The grant a user code names, waiting for the user (else ``invalid_grant``)."""
        grant = self._by_user_code.get(normalize_user_code(user_code))
        if grant is None or grant.status not in ("pending", "consenting"):
            raise OAuthError("invalid_grant", "The code is not valid (unknown or already used)")
        if self.wall_clock() > grant.expires:
            raise OAuthError("expired_token", "The code has expired; ask your agent for a new one")
        return grant

    async def check_assertion(
        self, delegation: Delegation, assertion: str, user_code: str, consent_url: str
    ) -> Grant:
        """The grant the company's login assertion signs the user in for; OAuthError
        (``invalid_grant``) for an assertion that is not good, nothing changed."""
        grant = self.pending(user_code)
        try:
            if peek(assertion).issuer != delegation.login_issuer:
                raise TokenRefused("The assertion's issuer is not the login issuer")
            claims = await self.verifier.verify(
                assertion, {delegation.login_issuer: delegation.login_keys}
            )
        except TokenRefused as exc:
            raise OAuthError("invalid_grant", str(exc)) from None
        if not audience_contains(claims, consent_url):
            raise OAuthError("invalid_grant", "The assertion's aud is not this consent URL")
        sub, jti, iat = claims.get("sub"), claims.get("jti"), claims.get("iat")
        if not isinstance(sub, str) or not 0 < len(sub) <= 256:
            raise OAuthError("invalid_grant", "The assertion has no sub (the user)")
        if not isinstance(jti, str) or not 0 < len(jti) <= 256:
            raise OAuthError("invalid_grant", "The assertion has no jti")
        if not is_number(iat):
            raise OAuthError("invalid_grant", "The assertion has no iat")
        if claims["exp"] - iat > MAX_ASSERTION_LIFETIME_S:
            raise OAuthError("invalid_grant", "The assertion lives longer than five minutes")
        if claims.get("user_code") != grant.user_code:
            raise OAuthError("invalid_grant", "The assertion's user_code is not this code")
        if grant.expected_sub and sub != grant.expected_sub:
            raise OAuthError("invalid_grant", "Sign in as the same user as before")
        try:
            self.assertions.spend(delegation.login_issuer, jti, float(claims["exp"]) + 60)
        except TokenRefused as exc:
            raise OAuthError("invalid_grant", str(exc)) from None
        grant.status, grant.sub = "consenting", sub
        return grant

    def open_consent(self, grant: Grant) -> tuple[str, str]:
        """A fresh CSRF token and consent cookie for ``grant``'s page."""
        cookie = secrets.token_urlsafe(24)
        grant.csrf = secrets.token_urlsafe(24)
        grant.cookie_hash = _hash(cookie)
        return grant.csrf, cookie

    def decide(
        self, user_code: str, csrf: str, cookie: str, allow: bool, chosen: Iterable[str]
    ) -> Grant:
        """The user's decision on the consent page (OAuthError when the form is not the
        one this browser was shown)."""
        grant = self.pending(user_code)
        if (
            grant.status != "consenting"
            or not grant.csrf
            or not hmac.compare_digest(grant.csrf.encode(), csrf.encode())
            or not hmac.compare_digest(grant.cookie_hash, _hash(cookie))
        ):
            raise OAuthError("invalid_request", "The consent form is stale or not from this page")
        if allow:
            picked = set(chosen)
            granted = tuple(s for s in grant.scopes if s in picked)
            if not granted:
                raise OAuthError("invalid_scope", "Choose at least one permission, or deny")
            grant.status, grant.granted = "approved", granted
        else:
            grant.status = "denied"
        grant.csrf, grant.cookie_hash = "", b""
        return grant

    def poll(self, client_id: str, device_code: str) -> Grant:
        """The token endpoint's checks (RFC 8628 §3.5); the approved grant is spent."""
        now = self.wall_clock()
        grant = self._grants.get(_hash(device_code))
        if grant is None or grant.client_id != client_id:
            raise OAuthError("invalid_grant", "The device code is not valid (unknown or used)")
        if now > grant.expires:
            self._forget(grant)
            raise OAuthError("expired_token", "The device code has expired")
        if grant.status == "denied":
            self._forget(grant)
            raise OAuthError("access_denied", "The user denied the authorization")
        if grant.status == "approved":
            self._forget(grant)
            return grant
        too_soon = now - grant.last_poll < grant.interval
        grant.last_poll = now
        if too_soon:
            grant.interval += SLOW_DOWN_STEP_S
            raise OAuthError("slow_down", f"Poll at most every {grant.interval:g} s")
        raise OAuthError("authorization_pending", "The user has not decided yet")

    async def token(self, workspace: Path, grant: Grant, issuer: str, audience: str) -> str:
        """The delegation token of an approved grant."""
        key = await self.signing_key(workspace)
        now = int(self.verifier.wall_clock())  # the clock tokens are judged by
        claims = {
            "iss": issuer,
            "aud": audience,
            "sub": grant.sub,
            "client_id": grant.client_id,
            "scope": " ".join(grant.granted),
            "iat": now,
            "exp": now + TOKEN_LIFETIME_S,
            "jti": str(uuid.uuid4()),
        }
        return key.sign(claims, TOKEN_TYPE)

    async def verify_token(
        self, token: str, issuer: str, audience: str
    ) -> tuple[Path, Delegation, dict[str, Any]]:
        """A delegation token's workspace, delegation and claims (TokenRefused)."""
        found = self.delegating()
        if found is None:
            raise TokenRefused("Delegation is not offered here")
        workspace, _, delegation = found
        if peek(token).header.get("typ") != TOKEN_TYPE:
            raise TokenRefused("The delegation token is not a JWT access token (typ)")
        key = await self.signing_key(workspace)
        claims = await self.verifier.verify(token, {issuer: KeySource(jwks=key.jwks_text)})
        if not audience_contains(claims, audience):
            raise TokenRefused("The delegation token is for another audience")
        for name in ("sub", "client_id", "scope"):
            if not isinstance(claims.get(name), str) or not claims[name]:
                raise TokenRefused(f"The delegation token has no {name} claim")
        return workspace, delegation, claims

    async def receipt(self, workspace: Path, claims: dict[str, Any]) -> str:
        """``claims`` signed as a receipt with the workspace's key."""
        key = await self.signing_key(workspace)
        return key.sign(claims, RECEIPT_TYPE)


# --- HTTP -------------------------------------------------------------------------------

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;"
    "color:#222}h1{font-size:1.4rem}fieldset{border:1px solid #ccc;border-radius:.4rem;"
    "margin:1rem 0}label{display:block;margin:.5rem 0}code{color:#555}"
    "button{font-size:1rem;padding:.4rem 1.2rem;margin-right:.6rem}"
)


def _page(title: str, body: str, *, status: int = 200, form_action: str = "'self'") -> web.Response:
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )
    headers = {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'unsafe-inline'; form-action {form_action};"
            " frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }
    return web.Response(
        text=text, status=status, content_type="text/html", charset="utf-8", headers=headers
    )


def _error_page(brand: str, exc: OAuthError) -> web.Response:
    body = (
        f"<h1>{html.escape(brand)}</h1><p>This request cannot be completed.</p>"
        f'<p>Error: <code id="error">{html.escape(exc.error)}</code></p>'
        f'<p id="error_description">{html.escape(exc.description)}</p>'
    )
    return _page(f"{brand}: not completed", body, status=400 if exc.status < 500 else exc.status)


def _json_error(exc: OAuthError) -> web.Response:
    return web.json_response(
        {"error": exc.error, "error_description": exc.description},
        status=exc.status,
        headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
    )


def _see_other(url: str) -> web.Response:
    """A 303 to ``url`` exactly as written (aiohttp's own would re-quote its query)."""
    return web.Response(status=303, headers={"Location": url, "Cache-Control": "no-store"})


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True, slots=True)
class Urls:
    """The URLs of one request's view of the server (its base URL and the PACT path)."""

    endpoint: str  # the PACT URL: a delegation token's aud

    @property
    def issuer(self) -> str:
        return self.endpoint + OAUTH

    def path(self, path: str) -> str:
        return self.endpoint + path


class OAuthRoutes:
    """The handlers, on the PACT sub-application (added before its catch-all)."""

    def __init__(
        self,
        server: DelegationServer,
        prefix: str,
        base_url: Callable[[web.Request], str],
        brand: Callable[[web.Request], str],
        client_ok: Callable[[str], bool],
        check_address: Callable[[str | None], None] = lambda address: None,
    ) -> None:
        """``check_address`` counts a request against the per-address rate limit
        (raising the protocol's rate-limit error, a 429 with Retry-After)."""
        self.server = server
        self.check_address = check_address
        self.prefix = prefix
        self.base_url = base_url
        self.brand = brand
        self.client_ok = client_ok

    def add(self, app: web.Application) -> None:
        router = app.router
        router.add_get(METADATA_PATH, self.metadata)
        router.add_get(JWKS_PATH, self.jwks)
        router.add_post(DEVICE_AUTHORIZATION_PATH, self._limited(self.device_authorization))
        router.add_post(TOKEN_PATH, self._limited(self.token))
        router.add_get(DEVICE_PATH, self._limited(self.device))
        router.add_post(CONSENT_PATH, self._limited(self.consent))
        router.add_post(DECISION_PATH, self._limited(self.decision))

    def _limited(self, handler: Handler) -> Handler:
        async def limited(request: web.Request) -> web.StreamResponse:
            self.check_address(request.remote)
            return await handler(request)

        return limited

    def urls(self, request: web.Request) -> Urls:
        return Urls(self.base_url(request) + self.prefix)

    async def metadata(self, request: web.Request) -> web.Response:
        try:
            _, _, delegation = self.server.required()
        except OAuthError as exc:
            return _json_error(exc)
        urls = self.urls(request)
        return web.json_response(
            {
                "issuer": urls.issuer,
                "device_authorization_endpoint": urls.path(DEVICE_AUTHORIZATION_PATH),
                "token_endpoint": urls.path(TOKEN_PATH),
                "jwks_uri": urls.path(JWKS_PATH),
                "grant_types_supported": [DEVICE_GRANT],
                "scopes_supported": [s.id for s in delegation.scopes],
                "token_endpoint_auth_methods_supported": ["none"],
                "response_types_supported": [],
            }
        )

    async def jwks(self, request: web.Request) -> web.Response:
        try:
            workspace, _, _ = self.server.required()
        except OAuthError as exc:
            return _json_error(exc)
        key = await self.server.signing_key(workspace)
        return web.json_response(key.jwks, headers={"Cache-Control": "max-age=300"})

    async def device_authorization(self, request: web.Request) -> web.Response:
        form = await request.post()
        client_id, scope = form.get("client_id"), form.get("scope", "")
        try:
            _, _, delegation = self.server.required()
            if not isinstance(client_id, str) or not client_id:
                raise OAuthError("invalid_request", "client_id is required")
            if not self.client_ok(client_id):
                raise OAuthError("invalid_client", "client_id is not a known personal agent", 401)
            if not isinstance(scope, str):
                raise OAuthError("invalid_request", "scope must be text")
            scopes = scope.split() or [s.id for s in delegation.scopes]
            started = self.server.start(delegation, client_id, scopes)
        except OAuthError as exc:
            return _json_error(exc)
        urls = self.urls(request)
        grant = started.grant
        verification = urls.path(DEVICE_PATH)
        return web.json_response(
            {
                "device_code": started.device_code,
                "user_code": grant.user_code,
                "verification_uri": verification,
                "verification_uri_complete": add_query(
                    verification, [("user_code", grant.user_code)]
                ),
                "expires_in": DEVICE_CODE_LIFETIME_S,
                "interval": POLL_INTERVAL_S,
            },
            headers={"Cache-Control": "no-store"},
        )

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        grant_type = form.get("grant_type")
        device_code, client_id = form.get("device_code"), form.get("client_id")
        try:
            workspace, _, _ = self.server.required()
            if grant_type != DEVICE_GRANT:
                raise OAuthError("unsupported_grant_type", f"grant_type must be {DEVICE_GRANT}")
            if not isinstance(device_code, str) or not device_code:
                raise OAuthError("invalid_request", "device_code is required")
            if not isinstance(client_id, str) or not client_id:
                raise OAuthError("invalid_request", "client_id is required")
            grant = self.server.poll(client_id, device_code)
        except OAuthError as exc:
            return _json_error(exc)
        urls = self.urls(request)
        token = await self.server.token(workspace, grant, urls.issuer, urls.endpoint)
        return web.json_response(
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": TOKEN_LIFETIME_S,
                "scope": " ".join(grant.granted),
            },
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )

    async def device(self, request: web.Request) -> web.StreamResponse:
        """The verification URI: a form for the code, or off to the company's login."""
        brand = self.brand(request)
        user_code = request.query.get("user_code", "")
        if not user_code:
            body = (
                f"<h1>{html.escape(brand)}</h1><p>Enter the code your agent shows you.</p>"
                '<form method="get"><label>Code <input name="user_code" id="user_code"'
                ' autocomplete="off" required></label><button type="submit">Continue</button>'
                "</form>"
            )
            return _page(f"{brand}: connect your agent", body)
        try:
            _, _, delegation = self.server.required()
            grant = self.server.pending(user_code)
        except OAuthError as exc:
            return _error_page(brand, exc)
        urls = self.urls(request)
        return_to = add_query(urls.path(CONSENT_PATH), [("user_code", grant.user_code)])
        return _see_other(add_query(delegation.login_url, [("return_to", return_to)]))

    async def consent(self, request: web.Request) -> web.Response:
        """The company's site POSTs its login assertion here: the consent page."""
        brand = self.brand(request)
        form = await request.post()
        assertion = form.get("assertion")
        user_code = request.query.get("user_code", "")
        urls = self.urls(request)
        try:
            _, _, delegation = self.server.required()
            if not isinstance(assertion, str) or not assertion:
                raise OAuthError("invalid_request", "The login assertion is missing")
            grant = await self.server.check_assertion(
                delegation, assertion, user_code, urls.path(CONSENT_PATH)
            )
        except OAuthError as exc:
            return _error_page(brand, exc)
        csrf, cookie = self.server.open_consent(grant)
        response = self._consent_page(brand, delegation, grant, csrf, urls)
        response.set_cookie(
            COOKIE,
            cookie,
            path=self.prefix + CONSENT_PATH,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            max_age=DEVICE_CODE_LIFETIME_S,
        )
        return response

    def _consent_page(
        self, brand: str, delegation: Delegation, grant: Grant, csrf: str, urls: Urls
    ) -> web.Response:
        esc = html.escape
        rows = []
        for scope_id in grant.scopes:
            scope = delegation.scope(scope_id)
            if scope is None:
                continue
            rows.append(
                f'<label><input type="checkbox" name="scope" value="{esc(scope.id)}"'
                f' id="scope-{esc(scope.id)}"> {esc(scope.description)}'
                f" <code>{esc(scope.id)}</code></label>"
            )
        body = (
            f"<h1>{esc(brand)}</h1>"
            f'<p>The personal agent <b id="client">{esc(grant.client_id)}</b> asks to act on'
            f" your {esc(brand)} account. Choose what it may do.</p>"
            f'<form method="post" action="{esc(urls.path(DECISION_PATH))}">'
            f'<input type="hidden" name="user_code" value="{esc(grant.user_code)}">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            f"<fieldset><legend>Allow it to</legend>{''.join(rows)}</fieldset>"
            '<button type="submit" name="action" value="allow" id="allow">Allow</button>'
            '<button type="submit" name="action" value="deny" id="deny">Deny</button>'
            "</form>"
        )
        action = "'self'"
        if delegation.connected_url:  # the redirect after the form is a form action too
            action += " " + _origin(delegation.connected_url)
        return _page(f"{brand}: allow your agent", body, form_action=action)

    async def decision(self, request: web.Request) -> web.Response:
        brand = self.brand(request)
        form = await request.post()
        values = {name: form.get(name) for name in ("user_code", "csrf", "action")}
        chosen = [s for s in form.getall("scope", []) if isinstance(s, str)]
        try:
            _, _, delegation = self.server.required()
            user_code, csrf, action = values["user_code"], values["csrf"], values["action"]
            if not isinstance(user_code, str) or not isinstance(csrf, str):
                raise OAuthError("invalid_request", "The consent form is incomplete")
            if action not in ("allow", "deny"):
                raise OAuthError("invalid_request", "Choose allow or deny")
            cookie = request.cookies.get(COOKIE, "")
            grant = self.server.decide(user_code, csrf, cookie, action == "allow", chosen)
        except OAuthError as exc:
            return _error_page(brand, exc)
        status = "approved" if grant.status == "approved" else "denied"
        scope = " ".join(grant.granted)
        if delegation.connected_url:
            target = add_query(
                delegation.connected_url,
                [("status", status), ("scope", scope), ("client", grant.client_id)],
            )
            return _see_other(target)
        said = "connected" if status == "approved" else "not connected"
        body = (
            f"<h1>{html.escape(brand)}</h1>"
            f'<p id="status" data-status="{status}">Your agent is {said}.</p>'
            "<p>You can close this page.</p>"
        )
        return _page(f"{brand}: {said}", body)


__all__ = [
    "CONSENT_PATH",
    "DECISION_PATH",
    "DEVICE_AUTHORIZATION_PATH",
    "DEVICE_GRANT",
    "DEVICE_PATH",
    "JWKS_PATH",
    "METADATA_PATH",
    "OAUTH",
    "RECEIPT_TYPE",
    "TOKEN_PATH",
    "TOKEN_TYPE",
    "DelegationServer",
    "Grant",
    "OAuthError",
    "OAuthRoutes",
    "Started",
    "Urls",
    "add_query",
    "normalize_user_code",
]
