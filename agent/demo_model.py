"""The demo model (``--llm-demo``): a few rules standing in for a language model, so that
the assistant, ``chat``, the Telegram host and delegation can be tried with no model at
hand. It is not an AI and says so.

It speaks the OpenAI-compatible Chat Completions protocol in-process: :func:`demo_client`
is an ``httpx2`` client whose transport answers ``POST /chat/completions`` itself (a
stream of chunks, or a whole answer for ``stream: false``), and the assistant's
:class:`~.provider.ChatProvider` uses it as it would a server's, through the real
``openai`` client. Its rules, on the last message it is sent:

- ``ask me QUESTION`` calls ``request_input`` with the question (when offered: an
  inbound caller's session), else asks it as its answer (the owner's own chat);
  ``ask me for a secret: QUESTION`` calls it with ``secret`` (the owner is asked), and
  a given secret is acknowledged, never repeated;
- ``ask AGENT MESSAGE`` calls ``a2a`` (``action=send``) with the message (when offered);
- ``use TOOL`` calls that tool without arguments (when offered: e.g. a host's account
  API tool under PACT delegation);
- a tool's result is answered with that result (``a2a``: the agent's answer as is);
- a question about what it can do gets the list of these rules; anything else is echoed.

Headers the assistant adds to a message (the untrusted-caller header, the owner's local
time) are skipped: the rules read the text the person or agent wrote.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import orjson

#: The model name the demo goes by (in requests, logs and the chat banner).
DEMO_MODEL = "a2a-gateway-demo"
#: A base URL never looked up: the demo client's transport answers every request.
DEMO_BASE_URL = "http://demo-model.invalid/v1"

CAPABILITIES = (
    "I am the a2a-gateway demo model: a few rules, not a language model. I echo what you"
    ' say; "ask AGENT MESSAGE" sends MESSAGE to that agent of your agents.json with the'
    ' a2a tool; "ask me QUESTION" asks you back (request_input); "use TOOL" calls that'
    " tool. Give --llm-model (and --llm-base-url) to talk to a real model."
)
_ASK_ME = re.compile(r"^ask\s+me\s+(?P<question>.+)$", re.I | re.S)
_ASK_SECRET = re.compile(r"^ask\s+me\s+for\s+a\s+secret:?\s+(?P<question>.+)$", re.I | re.S)
#: How the runtime's result of a given secret starts (``runtime.SECRET_GIVEN``).
_SECRET_GIVEN = "The owner gave the value"
SECRET_THANKS = "Thank you: I have the value (and keep it to myself)."
_ASK_AGENT = re.compile(r"^ask\s+(?P<agent>[a-z0-9][a-z0-9._-]*)\s+(?P<message>.+)$", re.I | re.S)
_USE = re.compile(r"^use\s+(?P<tool>[A-Za-z0-9_-]{1,64})\.?$", re.I)
_ABOUT = re.compile(
    r"\b(what (can|could) (you|it) do|what (you|it) can do|what do you do|who are you|help)\b",
    re.I,
)
_WORDS = re.compile(r"\s*\S+\s*")


def _spoken(text: str) -> str:
    """The text a person or agent wrote: the assistant's ``[...]`` header paragraphs off."""
    blocks = text.strip().split("\n\n")
    while len(blocks) > 1 and blocks[0].startswith("[") and blocks[0].rstrip().endswith("]"):
        blocks.pop(0)
    return "\n\n".join(blocks).strip()


def _tool_names(body: Mapping[str, Any], *, secret_only: bool = False) -> set[str]:
    """The tools offered, but for ``request_input`` when it only takes secrets (the
    owner's own chat in a terminal), where an ordinary question is simply the answer
    (``secret_only``: that one too)."""
    names = set()
    for tool in body.get("tools") or ():
        function = tool.get("function", {})
        required = function.get("parameters", {}).get("required", ())
        if function.get("name") == "request_input" and "secret" in required and not secret_only:
            continue
        names.add(function.get("name", ""))
    return names


def _after_tools(messages: Sequence[Mapping[str, Any]]) -> str:
    """The answer to the tool results that end the conversation."""
    results: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(str(message.get("content") or ""))
    return "\n\n".join(reversed(results)).strip() or "The tool returned nothing."


def demo_reply(body: Mapping[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """What the demo answers to a Chat Completions request: (text, tool calls)."""
    messages: Sequence[Mapping[str, Any]] = body.get("messages") or ()
    if not messages:
        return CAPABILITIES, []
    last = messages[-1]
    if last.get("role") == "tool":
        if str(last.get("content") or "").startswith(_SECRET_GIVEN):
            return SECRET_THANKS, []
        return _after_tools(messages), []
    text = _spoken(str(last.get("content") or ""))
    tools = _tool_names(body)
    secret = _ASK_SECRET.match(text)
    if secret and "request_input" in _tool_names(body, secret_only=True):
        return "", [("request_input", {"question": secret["question"].strip(), "secret": True})]
    asked_me = _ASK_ME.match(text)
    if asked_me:
        question = asked_me["question"].strip()
        if "request_input" in tools:
            return "", [("request_input", {"question": question})]
        # The owner's own chat has no request_input: the question is the answer.
        return question if question.endswith("?") else f"{question}?", []
    asked = _ASK_AGENT.match(text)
    if asked:
        agent, message = asked["agent"].rstrip(".,:"), asked["message"].strip()
        if "a2a" in tools:
            return "", [("a2a", {"action": "send", "agent": agent, "message": message})]
        return f"I cannot ask {agent}: here I have no a2a tool (the owner's chat has it).", []
    used = _USE.match(text)
    if used:
        name = used["tool"]
        if name in tools:
            return "", [(name, {})]
        return f"I have no tool named {name} here.", []
    if not text or _ABOUT.search(text):
        return CAPABILITIES, []
    return f"You said: {text}", []


def _completion(kind: str, choice: Mapping[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` (``kind``) or ``chat.completion.chunk`` with one choice."""
    return {
        "id": "chatcmpl-demo",
        "object": kind,
        "created": 0,
        "model": DEMO_MODEL,
        "choices": [{"index": 0, **choice}],
    }


def _chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
    body = _completion("chat.completion.chunk", {"delta": delta, "finish_reason": finish})
    return b"data: " + orjson.dumps(body) + b"\n\n"


class DemoTransport(httpx2.AsyncBaseTransport):
    """Answers Chat Completions requests with :func:`demo_reply`, in-process."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            missing = {"error": {"message": "the demo model has no such path"}}
            return httpx2.Response(404, json=missing)
        try:
            body = orjson.loads(await request.aread())
        except orjson.JSONDecodeError:
            return httpx2.Response(400, json={"error": {"message": "the body is not JSON"}})
        text, calls = demo_reply(body)
        tool_calls = [
            {
                "id": f"call_demo_{next(self._ids)}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
            for name, arguments in calls
        ]
        finish = "tool_calls" if tool_calls else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            answer = _completion("chat.completion", {"message": message, "finish_reason": finish})
            return httpx2.Response(200, json=answer)
        events = bytearray(_chunk({"role": "assistant", "content": ""}))
        for word in _WORDS.findall(text):  # a word a chunk, as a model streams tokens
            events += _chunk({"content": word})
        for index, call in enumerate(tool_calls):
            events += _chunk({"tool_calls": [{"index": index, **call}]})
        events += _chunk({}, finish) + b"data: [DONE]\n\n"
        return httpx2.Response(
            200, headers={"Content-Type": "text/event-stream"}, content=bytes(events)
        )


def demo_client(timeout_s: float) -> httpx2.AsyncClient:
    """The HTTP client the provider is given for ``--llm-demo``."""
    return httpx2.AsyncClient(transport=DemoTransport(), timeout=timeout_s)


__all__ = [
    "CAPABILITIES",
    "DEMO_BASE_URL",
    "DEMO_MODEL",
    "DemoTransport",
    "demo_client",
    "demo_reply",
]
