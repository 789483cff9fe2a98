"""Traces end to end: real gateways export over OTLP/HTTP to a real receiver (aiohttp,
decoding the OTLP protobuf), and the spans of one task delegated between two agents
form one trace with intact parent links.

- ``serve --llm`` (the scripted model) called with a caller's ``traceparent`` on each
  binding: its call span continues the caller's trace, the run is the call's child and
  the model's call is the run's child; the model's server receives the trace context.
- ``chat --message`` whose scripted model calls the a2a tool, against a ``serve --faux``
  gateway reached over JSON-RPC, HTTP+JSON and gRPC: the owner's turn, the model's call,
  the tool, our client's outbound call, the remote's call span and its run share one
  trace, each span the child of the one before.
- a message sent to gateway A (``serve --llm``) by a caller whose callers.json entry says
  ``"delegate": true``, whose assistant delegates to gateway B with the a2a tool, over
  JSON-RPC and gRPC: A's call span, A's run, the model's calls, the tool, our client's
  outbound call, B's call span and B's run are one trace, each the child of the one
  before; a caller without the flag is offered no a2a tool.
- ``--log-format json`` lines written inside a traced call carry its trace id.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from a2a_gateway.chat import run_chat
from a2a_gateway.chat_settings import ChatSettings
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.logs import JsonFormatter
from a2a_gateway.settings import load
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.secrets import use_secret

from ..agent.fake_llm import Calls, FakeLLM, Reply, Say
from ..agent.llm_support import API_KEY, llm
from ..client.delegation_support import REMOTE_KEY, faux_gateway, workspace_calling
from .conftest import BINDINGS, KEY_ALICE, Driver
from .outbound_support import webhook_receiver
from .test_assistant_e2e import start_gateway

__all__ = ["llm"]  # the scripted model, a fixture

#: A caller's own span: the trace the gateway's spans must join.
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
#: The card's name of each driver binding (the spans' ``a2a.binding``).
CARD_BINDING = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}


def chain(receiver: OtlpReceiver, *names: str) -> list[ReceivedSpan]:
    """The spans named, each the child of the one before, all in one trace."""
    spans = [receiver.one(name) for name in names]
    for parent, child in itertools.pairwise(spans):
        assert child.parent_id == parent.span_id, (parent.name, child.name)
        assert child.trace_id == parent.trace_id
    return spans


class TracedDriver(Driver):
    """The e2e driver, sending the caller's ``traceparent`` on every call."""

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "traceparent": TRACEPARENT}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_call_continues_the_callers_trace_through_the_run_and_the_model(
    tmp_path: Path, llm: FakeLLM, binding: str
) -> None:
    llm.script(Say("hello from the model"))
    async with otlp_receiver() as receiver:
        gateway = await start_gateway(tmp_path / "ws", llm, otlp_endpoint=receiver.url)
        try:
            async with (
                aiohttp.ClientSession() as http,
                grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
            ):
                driver = TracedDriver(
                    binding, http, f"http://127.0.0.1:{gateway.http_port}", channel
                )
                message = {"messageId": "m-traced", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
                answer = await driver.call("SendMessage", {"message": message})
        finally:
            await gateway.stop()  # exports what is batched
        task_id = answer["task"]["id"]
        call, run, model = chain(receiver, "A2A SendMessage", "A2A run", "chat fake-model")
    assert (call.trace_id, call.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    assert call.kind == "SERVER" and model.kind == "CLIENT"
    assert call.attributes["a2a.binding"] == CARD_BINDING[binding]
    assert call.attributes["a2a.caller"] == "alice"
    assert call.attributes["a2a.task_id"] == run.attributes["a2a.task_id"] == task_id
    assert run.attributes["a2a.state"] == "TASK_STATE_COMPLETED"
    assert not call.error
    # alice's entry does not say "delegate": her turns are offered no a2a tool.
    assert "a2a" not in tool_names(llm.requests[0])
    # The model's own server was told which span asked it.
    sent = llm.headers[-1]["traceparent"]
    assert sent.split("-")[1:3] == [CALLER_TRACE, model.span_id]


async def test_an_unsampled_call_exports_nothing_and_passes_its_context_on(
    tmp_path: Path, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The standard sampler setting, read by the SDK: a trace the sampler drops makes no
    # span at all (not the call's, nor the run's or the model's), and the model's
    # request still carries the trace's context, marked not sampled.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    llm.script(Say("hello"))
    async with otlp_receiver() as receiver:
        gateway = await start_gateway(tmp_path / "ws", llm, otlp_endpoint=receiver.url)
        try:
            async with aiohttp.ClientSession() as http:
                driver = Driver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", None)
                message = {
                    "messageId": "m-unsampled",
                    "role": "ROLE_USER",
                    "parts": [{"text": "hi"}],
                }
                answer = await driver.call("SendMessage", {"message": message})
        finally:
            await gateway.stop()
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert receiver.spans == []
    version, trace_id, _, flags = llm.headers[-1]["traceparent"].split("-")
    assert version == "00" and trace_id != "0" * 32
    assert int(flags, 16) & 1 == 0  # the sampled flag is off


def _delegating_script(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Say("the remote said: " + (last.get("content") or ""))
    return Calls([("a2a", {"action": "send", "agent": "assistant-a", "message": "hello"})])


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_delegated_task_is_one_trace_across_two_agents(
    tmp_path: Path, llm: FakeLLM, binding: str
) -> None:
    llm.responder = _delegating_script
    async with (
        otlp_receiver() as receiver,
        faux_gateway(tmp_path / "remote", otlp_endpoint=receiver.url, grpc_port=0) as remote,
    ):
        workspace = workspace_calling(tmp_path / "owner", remote, transport=binding)
        use_secret(API_KEY)
        settings = load(
            ChatSettings,
            {
                "workspace": str(workspace),
                "llm_model": "fake-model",
                "llm_base_url": llm.base_url,
                "llm_max_retries": 0,
                "allow_private_urls": True,
                "otlp_endpoint": receiver.url,
            },
            environ={"A2A_GATEWAY_LLM_API_KEY": API_KEY},
        )
        out = io.StringIO()
        assert await run_chat(settings, message="ask the remote", stdout=out) == 0
        assert "the remote said:" in out.getvalue()
        await remote.stop()  # exports the remote's spans
    spans = chain(
        receiver,
        "owner turn",
        "tool a2a",
        "A2A client SendMessage",
        "A2A SendMessage",
        "A2A run",
    )
    turn, _, outbound, inbound, _ = spans
    assert turn.parent_id == ""  # the owner's turn starts the trace
    assert outbound.kind == "CLIENT" and outbound.attributes["a2a.binding"] == CARD_BINDING[binding]
    assert inbound.kind == "SERVER" and inbound.attributes["a2a.binding"] == CARD_BINDING[binding]
    assert inbound.attributes["a2a.caller"] == "assistant-b"
    assert {s.service for s in spans} == {"a2a-gateway"}
    models = receiver.named("chat fake-model")
    assert len(models) == 2  # the call of the tool, and the answer after its result
    assert {m.parent_id for m in models} == {turn.span_id}
    assert len({s.trace_id for s in receiver.spans}) == 1


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def child(receiver: OtlpReceiver, parent: ReceivedSpan, name: str) -> ReceivedSpan:
    """The one span named ``name`` whose parent is ``parent``, in its trace."""
    found = [s for s in receiver.named(name) if s.parent_id == parent.span_id]
    assert len(found) == 1, (name, parent.name, [(s.name, s.parent_id) for s in receiver.spans])
    assert found[0].trace_id == parent.trace_id
    return found[0]


@pytest.mark.parametrize("binding", ["jsonrpc", "grpc"])
async def test_a_message_to_a_whose_assistant_delegates_to_b_is_one_trace(
    tmp_path: Path, llm: FakeLLM, binding: str
) -> None:
    llm.responder = _delegating_script
    async with (
        otlp_receiver() as receiver,
        faux_gateway(tmp_path / "b", otlp_endpoint=receiver.url, grpc_port=0) as b,
    ):
        workspace = workspace_calling(tmp_path / "a", b, transport=binding)
        a = await start_gateway(workspace, llm, otlp_endpoint=receiver.url)
        try:
            # alice may have A's assistant call A's agents (opt-in, for her alone).
            callers = [{"name": "alice", "key": KEY_ALICE, "delegate": True}]
            WorkspaceLayout(workspace).callers.write_text(json.dumps(callers))
            async with (
                aiohttp.ClientSession() as http,
                grpc.aio.insecure_channel(f"127.0.0.1:{a.grpc_port}") as channel,
            ):
                driver = TracedDriver(binding, http, f"http://127.0.0.1:{a.http_port}", channel)
                message = {"messageId": "m-deleg", "role": "ROLE_USER", "parts": [{"text": "go"}]}
                answer = await driver.call("SendMessage", {"message": message})
        finally:
            await a.stop()  # exports A's spans
        await b.stop()  # and B's
    task = answer["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "the remote said:" in json.dumps(task["artifacts"])
    assert "a2a" in tool_names(llm.requests[0])
    (call,) = [s for s in receiver.named("A2A SendMessage") if s.parent_id == CALLER_SPAN]
    run = child(receiver, call, "A2A run")
    tool = child(receiver, run, "tool a2a")
    outbound = child(receiver, tool, "A2A client SendMessage")
    b_call = child(receiver, outbound, "A2A SendMessage")
    b_run = child(receiver, b_call, "A2A run")
    assert call.trace_id == CALLER_TRACE and b_run.trace_id == CALLER_TRACE
    assert (call.kind, outbound.kind, b_call.kind) == ("SERVER", "CLIENT", "SERVER")
    assert call.attributes["a2a.binding"] == b_call.attributes["a2a.binding"]
    assert call.attributes["a2a.binding"] == CARD_BINDING[binding]
    assert call.attributes["a2a.caller"] == "alice"
    assert b_call.attributes["a2a.caller"] == "assistant-b"  # A's key for B
    models = receiver.named("chat fake-model")
    assert len(models) == 2  # the call of the tool, and the answer after its result
    assert {m.parent_id for m in models} == {run.span_id}
    assert {s.trace_id for s in receiver.spans} == {CALLER_TRACE}


async def test_log_lines_and_push_deliveries_of_a_traced_call_carry_its_trace(
    tmp_path: Path,
) -> None:
    formatter = JsonFormatter()
    lines: list[dict[str, Any]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(formatter.format(record)))

    capture = Capture(logging.INFO)
    logger = logging.getLogger("a2a_gateway.access")
    logger.addHandler(capture)
    try:
        async with (
            otlp_receiver() as receiver,
            webhook_receiver() as webhook,
            faux_gateway(
                tmp_path, otlp_endpoint=receiver.url, access_log=True, allow_private_urls=True
            ) as gateway,
            aiohttp.ClientSession() as http,
        ):
            driver = TracedDriver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", None)
            driver.key = REMOTE_KEY
            message = {"messageId": "m-log", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
            push = {"taskPushNotificationConfig": {"url": webhook.url("/hook")}}
            await driver.call("SendMessage", {"message": message, "configuration": push})
            hits = await webhook.wait_for("/hook", 2)  # WORKING, COMPLETED
            await gateway.stop()
            call, run = chain(receiver, "A2A SendMessage", "A2A run")
    finally:
        logger.removeHandler(capture)
    (line,) = [entry for entry in lines if entry["message"].startswith("access JSONRPC")]
    assert (line["trace_id"], line["span_id"]) == (CALLER_TRACE, call.span_id)
    for hit in hits:  # sent from the run: its span is the parent a webhook would see
        assert hit.headers["traceparent"].split("-")[1:3] == [CALLER_TRACE, run.span_id]
