"""``serve --llm`` with a personal agent: the PACT URL of the whole gateway (settings,
wiring), the assistant's framing header naming the personal agent and its user, and a
conversation continued in its context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import keyless_problem, server_config
from a2a_gateway.settings import resolve
from tests.support.idp import running_provider

from ..agent.fake_llm import FakeLLM, Say, user_texts
from ..agent.llm_support import llm
from ..server.test_pact import send_request as send
from .test_assistant_e2e import start_gateway

__all__ = ["llm"]  # the scripted provider fixture
AUDIENCE = "acme-support"


async def test_the_assistant_hears_the_personal_agent_and_its_user(
    tmp_path: Path, llm: FakeLLM
) -> None:
    workspace = tmp_path / "ws"
    async with running_provider() as idp:
        WorkspaceLayout(workspace).state.mkdir(parents=True)
        WorkspaceLayout(workspace).pact.write_text(
            json.dumps({"audience": AUDIENCE, "personalAgents": [idp.personal_agent()]})
        )
        gateway = await start_gateway(workspace, llm, pact_token_max_lifetime=120)
        try:
            llm.script(Say("Your order ships today."), Say("It is order 42."))
            url = f"http://127.0.0.1:{gateway.http_port}/a2a/pact/message:send"
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:

                async def ask(body: dict[str, Any], lifetime_s: float = 60) -> tuple[int, Any]:
                    token = idp.token("alice", audience=AUDIENCE, lifetime_s=lifetime_s)
                    headers = {"Authorization": f"Bearer {token}"}
                    async with http.post(url, json=body, headers=headers) as got:
                        return got.status, await got.json(content_type=None)

                status, first = await ask(send("Where is my order?", "m-1"))
                assert status == 200, first
                reply = first["message"]
                assert reply["parts"] == [{"text": "Your order ships today."}]
                context_id = reply["contextId"]
                status, second = await ask(send("Which one?", "m-2", context_id))
                assert status == 200 and second["message"]["parts"] == [{"text": "It is order 42."}]
                # The setting bounds the lifetime: 121 s is one too many here.
                status, _ = await ask(send("x", "m-3"), lifetime_s=121)
                assert status == 401
        finally:
            await gateway.stop()
    first_text = user_texts(llm.requests[0])[0]
    assert first_text.startswith(
        f"[A2A message from the personal agent {idp.issuer!r}, speaking for its user 'alice'."
    )
    assert first_text.endswith("\n\nWhere is my order?")
    # The second turn is in the same session: the model sees the first exchange.
    texts = user_texts(llm.requests[1])
    assert texts[0].endswith("Where is my order?") and texts[-1].endswith("Which one?")


def test_an_enabled_personal_agent_is_a_caller_off_loopback(tmp_path: Path) -> None:
    pact = WorkspaceLayout(tmp_path).pact
    pact.parent.mkdir(parents=True)
    agent = {"issuer": "https://pa.example", "jwksUri": "https://pa.example/jwks"}
    flags = {"host": "0.0.0.0", "workspace": [str(tmp_path)]}
    for agents, refused in (([agent], False), ([{**agent, "enabled": False}], True)):
        pact.write_text(json.dumps({"audience": AUDIENCE, "personalAgents": agents}))
        problem = keyless_problem(server_config(resolve(flags, environ={})))
        assert (problem is not None) == refused, agents
