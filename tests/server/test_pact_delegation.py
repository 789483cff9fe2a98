"""PACT Delegated over HTTP (the consent page driven by a real HTTP client here; the
browser walks it in tests/e2e/test_pact_browser.py): the device authorization grant,
the login assertion's checks, the consent page, the delegation token, a delegated turn
with a scoped tool, AUTH_REQUIRED for a missing scope, and receipts."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.server.identity import JwtVerifier
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.pact import PACT_FILE, DelegationServer
from a2a_gateway.server.pact.config import parse_delegation, parse_pact
from a2a_gateway.server.pact.keys import SIGNING_KEY_FILE
from tests.support.idp import running_provider

from ..agent.fake_llm import Calls, FakeLLM, Say, tool_results
from ..agent.llm_support import llm
from ..conftest import captured_logs
from .pact_delegation_support import (
    ACCOUNT,
    AUDIENCE,
    CANCEL,
    PACT,
    READ,
    Stack,
    delegation_stack,
    verify_ours,
)

__all__ = ["llm"]  # the scripted provider fixture


@pytest.fixture
async def stack(tmp_path: Path, llm: FakeLLM) -> AsyncIterator[Stack]:
    async with delegation_stack(tmp_path, llm) as running:
        yield running


async def test_device_code_login_consent_and_token(stack: Stack) -> None:
    http, oauth = stack.http, stack.oauth
    async with http.get(oauth + "/.well-known/oauth-authorization-server") as got:
        metadata = await got.json()
    assert metadata["issuer"] == oauth
    assert metadata["device_authorization_endpoint"] == oauth + "/device_authorization"
    assert metadata["token_endpoint"] == oauth + "/token"
    assert metadata["jwks_uri"] == oauth + "/jwks.json"
    assert metadata["scopes_supported"] == [READ, CANCEL]
    async with http.get(stack.base + PACT + "/.well-known/agent-card.json") as got:
        card = await got.json()
    flow = card["securitySchemes"]["pactDelegation"]["oauth2SecurityScheme"]["flows"]
    assert flow["deviceCode"]["tokenUrl"] == oauth + "/token"
    assert flow["deviceCode"]["scopes"] == {READ: "See your orders", CANCEL: "Cancel your orders"}

    status, started = await stack.device_authorization()
    assert status == 200
    code = started["user_code"]
    assert started["verification_uri"] == oauth + "/device"
    assert started["verification_uri_complete"] == f"{oauth}/device?user_code={code}"
    assert (started["expires_in"], started["interval"]) == (600, 5)
    device_code = started["device_code"]
    assert (await stack.poll(device_code))[1]["error"] == "authorization_pending"
    status, answer = await stack.poll(device_code)  # at once: too fast
    assert (status, answer["error"]) == (400, "slow_down")
    assert (await stack.poll(device_code, advance=11))[1]["error"] == "authorization_pending"

    # The verification URL sends the browser to the company's login, back to consent.
    return_to = await stack.return_to(code.lower().replace("-", ""))  # typed loosely
    assert return_to == f"{oauth}/consent?user_code={code}"
    status, page = await stack.post_assertion(return_to, stack.company.assertion(return_to))
    assert status == 200, page
    assert "Acme" in page and "See your orders" in page and "Cancel your orders" in page
    assert stack.pa.issuer in page
    assert not any(tag in page for tag in ("<script", "<link", "<img", "src=", "url("))
    # A form posted without this browser's cookie (another site's forgery) changes nothing.
    status, _, body = await stack.decide(page, "allow", [READ], cookies=False)
    assert status == 400 and 'id="error">invalid_request<' in body
    assert (await stack.poll(device_code, advance=11))[1]["error"] == "authorization_pending"

    status, location, _ = await stack.decide(page, "allow", [READ])
    assert status == 303
    assert location.startswith(stack.company.base + "/connected?")
    landed = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    assert landed == {"status": "approved", "scope": READ, "client": stack.pa.issuer}

    status, answer = await stack.poll(device_code, advance=11)
    assert status == 200, answer
    assert (answer["token_type"], answer["scope"], answer["expires_in"]) == ("Bearer", READ, 3600)
    claims = verify_ours(answer["access_token"], await stack.jwks(), "at+jwt")
    assert claims["iss"] == oauth and claims["aud"] == stack.base + PACT
    assert claims["sub"] == ACCOUNT and claims["scope"] == READ
    assert claims["client_id"] == stack.pa.issuer and claims["exp"] - claims["iat"] == 3600
    # A device code is good once.
    assert (await stack.poll(device_code, advance=11))[1]["error"] == "invalid_grant"
    # The private key stays in the workspace; only the public half is served.
    assert all("d" not in key for key in (await stack.jwks())["keys"])


async def test_refusals_carry_the_oauth_error_names(stack: Stack) -> None:
    http, oauth = stack.http, stack.oauth
    form = {"grant_type": "client_credentials", "client_id": stack.pa.issuer}
    async with http.post(oauth + "/token", data=form) as got:
        assert (got.status, (await got.json())["error"]) == (400, "unsupported_grant_type")
    status, answer = await stack.poll("no-such-code")
    assert (status, answer["error"]) == (400, "invalid_grant")
    status, answer = await stack.device_authorization(client_id="https://stranger.example")
    assert (status, answer["error"]) == (401, "invalid_client")
    status, answer = await stack.device_authorization(scope="orders:delete")
    assert (status, answer["error"]) == (400, "invalid_scope")

    # Deny: the user lands on the connected page with status=denied; the poll hears it.
    status, started = await stack.device_authorization()
    return_to = await stack.return_to(started["user_code"])
    _, page = await stack.post_assertion(return_to, stack.company.assertion(return_to))
    status, location, _ = await stack.decide(page, "deny", [READ])
    assert status == 303 and "status=denied" in location
    assert (await stack.poll(started["device_code"]))[1]["error"] == "access_denied"
    assert (await stack.poll(started["device_code"], advance=11))[1]["error"] == "invalid_grant"

    # Expired: ten minutes on, the code is gone for the poll and for the browser.
    status, started = await stack.device_authorization()
    status, answer = await stack.poll(started["device_code"], advance=601)
    assert answer["error"] == "expired_token"
    async with http.get(f"{oauth}/device?user_code={started['user_code']}") as got:
        assert got.status == 400 and 'id="error">invalid_grant<' in await got.text()

    # The login assertion: each bad one is refused and the grant stays as it was.
    status, started = await stack.device_authorization()
    device_code = started["device_code"]
    return_to = await stack.return_to(started["user_code"])
    company = stack.company
    other_issuer = stack.pa.token(ACCOUNT, audience=return_to.split("?")[0], user_code="X")
    bad = {
        "a wrong aud": company.assertion(return_to, audience=oauth + "/elsewhere"),
        "over five minutes": company.assertion(return_to, lifetime_s=301),
        "another user_code": company.assertion(return_to, user_code="BCDF-GHJK"),
        "another issuer": other_issuer,
        "expired": company.assertion(return_to, lifetime_s=-120),
    }
    for why, assertion in bad.items():
        status, page = await stack.post_assertion(return_to, assertion)
        assert status == 400 and 'id="error">invalid_grant<' in page, why
        assert (await stack.poll(device_code, advance=11))[1]["error"] == "authorization_pending"
    status, page = await stack.post_assertion(return_to, "")
    assert status == 400 and 'id="error">invalid_request<' in page
    good = company.assertion(return_to)
    assert (await stack.post_assertion(return_to, good))[0] == 200
    status, page = await stack.post_assertion(return_to, good)  # the same jti again
    assert status == 400 and 'id="error">invalid_grant<' in page and "replayed" in page
    # Allowing nothing is not allowing: the page says so and the grant waits.
    first = await stack.post_assertion(return_to, company.assertion(return_to))
    status, _, body = await stack.decide(first[1], "allow", [])
    assert status == 400 and 'id="error">invalid_scope<' in body
    assert (await stack.poll(device_code, advance=11))[1]["error"] == "authorization_pending"


async def test_a_delegated_turn_runs_the_granted_tool_and_asks_for_the_other(
    stack: Stack, llm: FakeLLM
) -> None:
    token = await stack.delegation_token([READ])
    llm.script(
        Calls([("list_orders", {})]),
        Say("You have two orders."),
        Calls([("cancel_order", {"order": "42"})]),
    )
    headers = stack.pa_headers(token)
    status, answer = await stack.send("What are my orders?", "m-1", headers)
    assert status == 200, answer
    reply = answer["message"]
    assert reply["parts"] == [{"text": "You have two orders."}]
    # The tool called the account API with the user's token, which verified there.
    assert [name for name, _ in stack.company.api_calls] == ["orders"]
    seen = stack.company.api_calls[0][1]
    assert (seen["sub"], seen["scope"], seen["aud"]) == (ACCOUNT, READ, stack.base + PACT)
    assert '"orders"' in tool_results(llm.requests[1])[0]
    jwks = await stack.jwks()
    receipt = verify_ours(reply["metadata"]["pact.receipt"], jwks, "pact-receipt+jwt")
    assert receipt["tools"] == ["list_orders"] and receipt["sub"] == ACCOUNT
    assert receipt["aud"] == stack.pa.issuer and receipt["iss"] == stack.oauth
    assert receipt["contextId"] == reply["contextId"] and receipt["messageId"] == "m-1"

    # Cancelling needs orders:cancel, not granted: AUTH_REQUIRED with a sign-in link.
    status, answer = await stack.send(
        "Cancel order 42", "m-2", stack.pa_headers(token), reply["contextId"]
    )
    assert status == 200, answer
    task = answer["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    metadata = task["metadata"]
    assert metadata["pact.missingScopes"] == [CANCEL]
    link = metadata["pact.verificationUriComplete"]
    assert link.startswith(stack.oauth + "/device?user_code=")
    receipt = verify_ours(metadata["pact.receipt"], jwks, "pact-receipt+jwt")
    assert receipt["tools"] == []
    assert [name for name, _ in stack.company.api_calls] == ["orders"]  # never called

    # The link asks for both scopes, for the same account, and its device code polls.
    user_code = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["user_code"][0]
    return_to = await stack.return_to(user_code)
    stack.company.account = "u-someone-else"
    status, page = await stack.post_assertion(return_to, stack.company.assertion(return_to))
    assert status == 400 and 'id="error">invalid_grant<' in page
    stack.company.account = ACCOUNT
    status, page = await stack.post_assertion(return_to, stack.company.assertion(return_to))
    assert status == 200 and "See your orders" in page and "Cancel your orders" in page
    await stack.decide(page, "allow", [READ, CANCEL])
    status, granted = await stack.poll(str(metadata["pact.deviceCode"]))
    assert status == 200 and granted["scope"] == f"{READ} {CANCEL}"

    # Keys and tokens never in the logs (the suite's scan checks every test's too).
    logs = "\n".join(captured_logs())
    key = json.loads((stack.workspace / SIGNING_KEY_FILE).read_text())["d"]
    secrets = (token, granted["access_token"], metadata["pact.deviceCode"], key)
    assert "assistant" in logs  # the gateway logged (its start at least)
    assert [s[:6] for s in secrets if s in logs] == []


async def test_tokens_are_bound_to_their_user_agent_and_audience(
    stack: Stack, llm: FakeLLM
) -> None:
    token = await stack.delegation_token([READ])
    llm.script(Say("Hello."), Calls([("list_orders", {})]))
    # JSON-RPC too: the reply under a token, with its receipt.
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    }
    async with stack.http.post(
        stack.base + PACT, json=body, headers=stack.pa_headers(token)
    ) as got:
        answer = (await got.json())["result"]
    receipt = verify_ours(
        answer["message"]["metadata"]["pact.receipt"], await stack.jwks(), "pact-receipt+jwt"
    )
    assert receipt["tools"] == [] and receipt["scope"] == READ
    context_id = answer["message"]["contextId"]
    # Another account's token (same personal agent user) does not continue it.
    stack.company.account = "u-5678"
    other = await stack.delegation_token([READ])
    status, answer = await stack.send("and?", "m-2", stack.pa_headers(other), context_id)
    assert status == 400 and "contextId" in json.dumps(answer)
    # Nor does the same user without the token.
    status, answer = await stack.send("and?", "m-3", stack.pa_headers(), context_id)
    assert status == 400 and "contextId" in json.dumps(answer)
    # Tampered, or not a delegation token of ours: 401.
    for bad in (token[:-4] + "AAAA", stack.pa.token("alice", audience=stack.base + PACT)):
        status, answer = await stack.send("x", "m-4", stack.pa_headers(bad))
        assert status == 401, answer
    # Another personal agent cannot use this one's token.
    async with running_provider() as other:
        pact_file = stack.workspace / PACT_FILE
        config = json.loads(pact_file.read_text())
        config["personalAgents"].append(other.personal_agent())
        pact_file.write_text(json.dumps(config))
        headers = {
            "Authorization": f"Bearer {other.token('alice', audience=AUDIENCE)}",
            "X-A2A-User-Delegation": f"Bearer {token}",
        }
        status, answer = await stack.send("x", "m-6", headers)
        assert status == 401 and "issued to another personal agent" in json.dumps(answer)
    # Without a token, a scoped tool asks for the sign-in too.
    status, answer = await stack.send("my orders?", "m-5", stack.pa_headers())
    assert answer["task"]["metadata"]["pact.missingScopes"] == [READ]
    assert "pact.receipt" not in answer["task"]["metadata"]


async def test_without_a_delegation_block_there_is_no_authorization_server(
    stack: Stack,
) -> None:
    token = await stack.delegation_token([READ])
    pact_file = stack.workspace / PACT_FILE
    config = json.loads(pact_file.read_text())
    del config["delegation"]
    pact_file.write_text(json.dumps(config))  # read fresh: applies at once
    for path in ("/.well-known/oauth-authorization-server", "/jwks.json"):
        async with stack.http.get(stack.oauth + path) as got:
            assert (got.status, (await got.json())["error"]) == (404, "invalid_request")
    status, answer = await stack.device_authorization()
    assert status == 404, answer
    async with stack.http.get(stack.base + PACT + "/.well-known/agent-card.json") as got:
        assert "pactDelegation" not in (await got.json())["securitySchemes"]
    status, answer = await stack.send("hi", "m-1", stack.pa_headers(token))
    assert status == 401, answer  # its tokens are no longer accepted
    stack.llm.script(Say("Hello."))
    status, answer = await stack.send("hi", "m-2", stack.pa_headers())
    assert status == 200 and "pact.receipt" not in answer["message"].get("metadata", {})


def test_the_delegation_block_is_checked() -> None:
    good: dict[str, Any] = {
        "loginUrl": "https://acme.example/login",
        "loginIssuer": "https://acme.example",
        "loginJwksUri": "https://acme.example/jwks",
        "scopes": [{"id": READ, "description": "See", "tools": ["list_orders"]}],
    }
    assert not isinstance(parse_delegation(good), str)
    assert not isinstance(parse_delegation({**good, "loginUrl": "http://localhost:9/l"}), str)
    for change, why in (
        ({"loginUrl": "http://acme.example/login"}, "loginUrl"),
        ({"connectedUrl": "ftp://acme.example/"}, "connectedUrl"),
        ({"loginJwksUri": "http://acme.example/jwks"}, "loginJwksUri"),
        ({"scopes": []}, "scopes"),
        ({"scopes": [{"id": "a b", "description": "x", "tools": []}]}, "scopes[0]: id"),
        ({"loginJwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}}, "exactly one"),
        ({"colour": "red"}, "unknown field"),
    ):
        problem = parse_delegation({**good, **change})
        assert isinstance(problem, str) and why in problem, (change, problem)
    # A bad block leaves the personal agents working, with a warning.
    config, warnings = parse_pact(
        {"audience": "a", "personalAgents": [], "delegation": {"scopes": 1}}, "pact.json"
    )
    assert config is not None and config.delegation is None
    assert warnings and "no delegation" in warnings[0]


async def test_one_workspace_may_offer_delegation(tmp_path: Path) -> None:
    block = {
        "loginUrl": "https://acme.example/login",
        "loginIssuer": "https://acme.example",
        "loginJwksUri": "https://acme.example/jwks",
        "scopes": [{"id": READ, "description": "See", "tools": []}],
    }
    config, _ = parse_pact({"audience": "a", "personalAgents": [], "delegation": block}, "x")
    assert config is not None
    verifier = JwtVerifier(OutboundClient(timeout_s=1))
    try:
        both = [(tmp_path / "a", config), (tmp_path / "b", config)]
        server = DelegationServer(lambda: both, verifier)
        assert server.delegating() is None  # two: neither (and a warning, once)
        server.configs = lambda: both[:1]
        assert server.delegating() == (tmp_path / "a", config, config.delegation)
    finally:
        await verifier.aclose()
