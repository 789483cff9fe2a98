"""PACT Delegated end to end in a real browser (headless Chromium, tests/browser.py):
the personal agent asks for a device code, the user opens the link, signs in on the
company's page, allows one of the two scopes on our consent page and lands on the
company's connected page; the personal agent's token then runs the allowed tool (whose
API verifies it against our jwks.json) and gets AUTH_REQUIRED for the other, with a
receipt that verifies and lists the tool that ran."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from ..agent.fake_llm import Calls, FakeLLM, Say
from ..agent.llm_support import llm
from ..browser import chromium
from ..server.pact_delegation_support import (
    ACCOUNT,
    CANCEL,
    PACT,
    READ,
    delegation_stack,
    verify_ours,
)

__all__ = ["llm"]  # the scripted provider fixture


async def test_consent_in_the_browser_then_a_delegated_turn(tmp_path: Path, llm: FakeLLM) -> None:
    async with delegation_stack(tmp_path, llm) as stack:
        status, started = await stack.device_authorization()
        assert status == 200, started
        device_code = started["device_code"]
        async with chromium() as page:
            # The user opens the link: the company's login page, then our consent page.
            await page.goto(started["verification_uri_complete"])
            assert (await page.url()).startswith(stack.company.base + "/login?return_to=")
            await page.click("#signin")
            await page.wait_for("document.querySelector('#allow') !== null")
            assert (await page.url()).startswith(stack.oauth + "/consent?user_code=")
            shown = await page.text()
            assert "Acme" in shown and "See your orders" in shown and "Cancel your orders" in shown
            assert await page.evaluate("document.cookie") == ""  # HttpOnly: not for scripts
            assert (await stack.poll(device_code))[1]["error"] == "authorization_pending"
            await page.click(f"input[name=scope][value='{READ}']")
            await page.click("#allow")
            await page.wait_for("document.querySelector('#connected') !== null")
            landed = urllib.parse.urlsplit(await page.url())

            # Another request, denied in the browser: the poll hears access_denied.
            status, denied = await stack.device_authorization()
            assert status == 200, denied
            await page.goto(denied["verification_uri_complete"])
            await page.click("#signin")
            await page.wait_for("document.querySelector('#deny') !== null")
            await page.click("#deny")
            await page.wait_for("document.querySelector('#connected') !== null")
            assert "status=denied" in await page.url()
        status, answer = await stack.poll(denied["device_code"])
        assert (status, answer["error"]) == (400, "access_denied")
        assert landed.path == "/connected"
        assert dict(urllib.parse.parse_qsl(landed.query)) == {
            "status": "approved",
            "scope": READ,
            "client": stack.pa.issuer,
        }

        status, answer = await stack.poll(device_code, advance=11)
        assert status == 200 and answer["scope"] == READ, answer
        token = answer["access_token"]
        jwks = await stack.jwks()
        claims = verify_ours(token, jwks, "at+jwt")
        assert (claims["sub"], claims["scope"]) == (ACCOUNT, READ)
        assert claims["aud"] == stack.base + PACT and claims["iss"] == stack.oauth

        # A turn with the token: the allowed tool runs, the other asks for its scope.
        llm.script(
            Calls([("list_orders", {})]),
            Say("Orders 42 and 43."),
            Calls([("cancel_order", {"order": "42"})]),
        )
        status, first = await stack.send("My orders?", "m-1", stack.pa_headers(token))
        assert status == 200, first
        reply = first["message"]
        assert reply["parts"] == [{"text": "Orders 42 and 43."}]
        assert [name for name, _ in stack.company.api_calls] == ["orders"]
        seen = stack.company.api_calls[0][1]  # verified there against our jwks.json
        assert (seen["aud"], seen["scope"], seen["sub"]) == (stack.base + PACT, READ, ACCOUNT)
        receipt = verify_ours(reply["metadata"]["pact.receipt"], jwks, "pact-receipt+jwt")
        assert receipt["tools"] == ["list_orders"] and receipt["sub"] == ACCOUNT

        headers = stack.pa_headers(token)
        status, second = await stack.send("Cancel 42", "m-2", headers, reply["contextId"])
        assert status == 200, second
        task = second["task"]
        assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
        assert task["metadata"]["pact.missingScopes"] == [CANCEL]
        link = task["metadata"]["pact.verificationUriComplete"]
        assert link.startswith(stack.oauth + "/device?user_code=")
        assert [name for name, _ in stack.company.api_calls] == ["orders"]
