"""PACT Delegated test parts: a company (its login page, login assertions signed by its
own identity provider, its connected page and an account API that checks our tokens),
a personal agent (our identity provider) and one gateway in process (``serve --llm``
on the scripted model, with two scoped account-API tools).

Every token, code and key these parts make is a secret the suite's log scan looks for.
"""

from __future__ import annotations

import html
import json
import re
import time
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from joserfc import jwt
from joserfc.jwk import KeySet

from a2a_gateway.account_api import AccountApiTool
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.pact import PACT_FILE
from a2a_gateway.server.pact.keys import SIGNING_KEY_FILE
from a2a_gateway.server.pact.oauth import DEVICE_GRANT
from a2a_gateway.settings import resolve
from tests.support.idp import IdentityProvider, running_provider
from tests.support.secrets import use_secret

from ..agent.fake_llm import FakeLLM
from ..agent.llm_support import API_KEY

AUDIENCE = "acme-support"
ACCOUNT = "u-1234"
READ, CANCEL = "orders:read", "orders:cancel"
PACT = "/a2a/pact"
OAUTH = PACT + "/oauth"


def verify_ours(token: str, jwks: dict[str, Any], typ: str) -> dict[str, Any]:
    """The claims of a token the gateway signed, checked against its published JWKS."""
    keys = KeySet.import_key_set(jwks)  # type: ignore[arg-type]
    decoded = jwt.decode(token, keys, algorithms=["ES256"])
    assert decoded.header["typ"] == typ, decoded.header
    return dict(decoded.claims)


@dataclass
class Company:
    """The company's web site and account API on one aiohttp server."""

    login: IdentityProvider
    base: str = ""
    account: str = ACCOUNT
    gateway_jwks: str = ""  # the gateway's jwks.json, once it runs
    gateway_oauth: str = ""
    gateway_pact: str = ""
    connected: list[dict[str, str]] = field(default_factory=list)
    api_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    assertions: list[str] = field(default_factory=list)

    def assertion(self, return_to: str, **claims: Any) -> str:
        """A login assertion for ``return_to`` (the consent URL with its user_code);
        ``claims`` replace the good ones (``audience``, ``lifetime_s``, ``user_code``)."""
        parts = urllib.parse.urlsplit(return_to)
        consent_url = urllib.parse.urlunsplit(parts._replace(query=""))
        user_code = urllib.parse.parse_qs(parts.query).get("user_code", [""])[0]
        values: dict[str, Any] = {
            "audience": consent_url,
            "lifetime_s": 120,
            "issuer": None,
            "user_code": user_code,
            **claims,
        }
        token = self.login.token(self.account, **values)
        self.assertions.append(token)
        return token

    async def login_page(self, request: web.Request) -> web.Response:
        return_to = request.query.get("return_to", "")
        assertion = self.assertion(return_to)
        body = (
            "<!doctype html><title>Acme login</title><h1>Acme</h1>"
            f'<form method="post" action="{html.escape(return_to)}">'
            f'<input type="hidden" name="assertion" value="{html.escape(assertion)}">'
            '<button type="submit" id="signin">Sign in as the test user</button></form>'
        )
        return web.Response(text=body, content_type="text/html")

    async def connected_page(self, request: web.Request) -> web.Response:
        self.connected.append(dict(request.query))
        return web.Response(text='<p id="connected">connected</p>', content_type="text/html")

    async def _check(self, request: web.Request, scope: str) -> dict[str, Any] | None:
        """The token's claims when it verifies against the gateway's keys for ``scope``."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer":
            return None
        async with aiohttp.ClientSession() as http, http.get(self.gateway_jwks) as got:
            jwks = await got.json()
        try:
            claims = verify_ours(token, jwks, "at+jwt")
        except Exception:
            return None
        ok = (
            claims.get("iss") == self.gateway_oauth
            and claims.get("aud") == self.gateway_pact
            and claims.get("exp", 0) > time.time()
            and scope in str(claims.get("scope", "")).split()
        )
        return claims if ok else None

    async def orders(self, request: web.Request) -> web.Response:
        claims = await self._check(request, READ)
        if claims is None:
            return web.json_response({"error": "forbidden"}, status=403)
        self.api_calls.append(("orders", claims))
        return web.json_response({"orders": [{"id": "42"}, {"id": "43"}]})

    async def cancel(self, request: web.Request) -> web.Response:
        claims = await self._check(request, CANCEL)
        if claims is None:
            return web.json_response({"error": "forbidden"}, status=403)
        self.api_calls.append(("cancel", claims))
        return web.json_response({"cancelled": True})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/login", self.login_page)
        app.router.add_get("/connected", self.connected_page)
        app.router.add_get("/api/orders", self.orders)
        app.router.add_post("/api/orders/cancel", self.cancel)
        return app


@dataclass
class Stack:
    """The gateway, the company and the personal agent, with an HTTP client."""

    gateway: Gateway
    company: Company
    pa: IdentityProvider
    llm: FakeLLM
    http: aiohttp.ClientSession
    base: str
    workspace: Path
    offset: list[float]

    @property
    def oauth(self) -> str:
        return self.base + OAUTH

    def pa_headers(self, delegation: str = "", sub: str = "alice") -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.pa.token(sub, audience=AUDIENCE)}"}
        if delegation:
            headers["X-A2A-User-Delegation"] = f"Bearer {delegation}"
        return headers

    async def device_authorization(
        self, scope: str = f"{READ} {CANCEL}", client_id: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        form = {"client_id": self.pa.issuer if client_id is None else client_id, "scope": scope}
        async with self.http.post(self.oauth + "/device_authorization", data=form) as got:
            answer = await got.json()
        if "device_code" in answer:
            use_secret(answer["device_code"])
        return got.status, answer

    async def poll(
        self, device_code: str, *, advance: float = 0, **form: str
    ) -> tuple[int, dict[str, Any]]:
        """The token endpoint, once the grants' clock has moved ``advance`` seconds."""
        self.offset[0] += advance
        values = {"grant_type": DEVICE_GRANT, "device_code": device_code}
        values["client_id"] = self.pa.issuer
        values.update(form)
        async with self.http.post(self.oauth + "/token", data=values) as got:
            answer = await got.json()
        if "access_token" in answer:
            use_secret(answer["access_token"])
        return got.status, answer

    async def jwks(self) -> dict[str, Any]:
        async with self.http.get(self.oauth + "/jwks.json") as got:
            assert got.status == 200
            return dict(await got.json())

    async def return_to(self, user_code: str) -> str:
        """The verification URL's redirect to the company's login: its return_to."""
        url = self.oauth + "/device?" + urllib.parse.urlencode({"user_code": user_code})
        async with self.http.get(url, allow_redirects=False) as got:
            assert got.status == 303, await got.text()
            location = got.headers["Location"]
        assert location.startswith(self.company.base + "/login?")
        return urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["return_to"][0]

    async def post_assertion(self, return_to: str, assertion: str) -> tuple[int, str]:
        async with self.http.post(
            return_to, data={"assertion": assertion}, allow_redirects=False
        ) as got:
            return got.status, await got.text()

    async def decide(
        self, page: str, action: str, scopes: list[str], *, cookies: bool = True
    ) -> tuple[int, str, str]:
        """Submit the consent page's form: (status, Location, body)."""
        match = re.search(r'name="csrf" value="([^"]+)"', page)
        code = re.search(r'name="user_code" value="([^"]+)"', page)
        assert match and code, page
        use_secret(match.group(1))
        form = [("user_code", code.group(1)), ("csrf", match.group(1)), ("action", action)]
        form += [("scope", s) for s in scopes]
        url = self.oauth + "/consent/decision"
        if cookies:
            async with self.http.post(url, data=form, allow_redirects=False) as got:
                return got.status, got.headers.get("Location", ""), await got.text()
        async with (
            aiohttp.ClientSession() as bare,
            bare.post(url, data=form, allow_redirects=False) as got,
        ):
            return got.status, got.headers.get("Location", ""), await got.text()

    async def delegation_token(self, allow: list[str]) -> str:
        """The whole grant over HTTP: the token for ``allow``."""
        status, started = await self.device_authorization()
        assert status == 200, started
        return_to = await self.return_to(started["user_code"])
        status, page = await self.post_assertion(return_to, self.company.assertion(return_to))
        assert status == 200, page
        status, _, body = await self.decide(page, "allow", allow)
        assert status == 303, body
        status, answer = await self.poll(started["device_code"])
        assert status == 200, answer
        return str(answer["access_token"])

    async def send(
        self, text: str, message_id: str, headers: dict[str, str], context_id: str = ""
    ) -> tuple[int, dict[str, Any]]:
        message: dict[str, Any] = {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if context_id:
            message["contextId"] = context_id
        async with self.http.post(
            self.base + PACT + "/message:send", json={"message": message}, headers=headers
        ) as got:
            return got.status, await got.json(content_type=None)


def pact_json(pa: IdentityProvider, company: Company, login: IdentityProvider) -> dict[str, Any]:
    return {
        "audience": AUDIENCE,
        "personalAgents": [pa.personal_agent()],
        "delegation": {
            "brandName": "Acme",
            "loginUrl": company.base + "/login",
            "loginIssuer": login.issuer,
            "loginJwksUri": login.jwks_uri,
            "allowPrivate": True,
            "connectedUrl": company.base + "/connected",
            "scopes": [
                {"id": READ, "description": "See your orders", "tools": ["list_orders"]},
                {"id": CANCEL, "description": "Cancel your orders", "tools": ["cancel_order"]},
            ],
        },
    }


@asynccontextmanager
async def delegation_stack(tmp_path: Path, llm: FakeLLM) -> AsyncIterator[Stack]:
    """Everything running; the gateway's authorization server on a test clock
    (``stack.offset[0]`` seconds ahead of the wall clock)."""
    async with AsyncExitStack() as stack:
        pa = await stack.enter_async_context(running_provider())
        login = await stack.enter_async_context(running_provider())
        pa.rotate("ES256", keep_old=False)
        company = Company(login)
        site = TestServer(company.app(), host="127.0.0.1", port=0)
        await site.start_server()
        stack.push_async_callback(site.close)
        company.base = str(site.make_url("")).rstrip("/")
        workspace = tmp_path / "ws"
        WorkspaceLayout(workspace).state.mkdir(parents=True)
        (workspace / PACT_FILE).write_text(json.dumps(pact_json(pa, company, login)))
        outbound = OutboundClient(allow_private_urls=True, timeout_s=10)
        stack.push_async_callback(outbound.aclose)
        tools = [
            AccountApiTool(
                "list_orders",
                "List the user's orders.",
                company.base + "/api/orders",
                outbound=outbound,
            ),
            AccountApiTool(
                "cancel_order",
                "Cancel one order.",
                company.base + "/api/orders/cancel",
                outbound=outbound,
                method="POST",
                parameters={"type": "object", "properties": {"order": {"type": "string"}}},
            ),
        ]
        use_secret(API_KEY)
        values = {
            "workspace": [str(workspace)],
            "port": 0,
            "grpc_port": -1,
            "llm": True,
            "llm_model": "fake-model",
            "llm_base_url": llm.base_url,
            "llm_max_retries": 0,
        }
        gateway = Gateway(
            resolve(values, environ={"A2A_GATEWAY_LLM_API_KEY": API_KEY}), tools=tools
        )
        await gateway.start()
        stack.push_async_callback(gateway.stop)
        base = f"http://127.0.0.1:{gateway.http_port}"
        company.gateway_jwks = base + OAUTH + "/jwks.json"
        company.gateway_oauth = base + OAUTH
        company.gateway_pact = base + PACT
        offset = [0.0]
        assert gateway.pact is not None
        gateway.pact.authenticator.delegation.wall_clock = lambda: time.time() + offset[0]
        http = await stack.enter_async_context(
            aiohttp.ClientSession(
                cookie_jar=aiohttp.CookieJar(unsafe=True),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        )
        result = Stack(gateway, company, pa, llm, http, base, workspace, offset)
        await result.jwks()  # makes the key: the scan then knows its private part
        key = json.loads((workspace / SIGNING_KEY_FILE).read_text())
        use_secret(key["d"])
        yield result


__all__ = [
    "ACCOUNT",
    "AUDIENCE",
    "CANCEL",
    "OAUTH",
    "PACT",
    "READ",
    "Company",
    "Stack",
    "delegation_stack",
    "pact_json",
    "verify_ours",
]
