"""A scripted OpenAI-compatible Chat Completions server (aiohttp, real HTTP, SSE).

The real ``openai`` client talks to it. It answers each ``POST /v1/chat/completions``
with the next scripted reply (or with ``responder(body)`` when the script is empty),
streams text in chunks and tool calls the way OpenAI does, and records every request
body so tests assert on what the model was sent. Replies:

- :class:`Say` text in chunks (``finish``: ``stop`` or ``length``);
- :class:`Calls` tool calls (``finish`` ``tool_calls``), optionally after some text;
- :class:`Status` an HTTP error with a JSON body;
- :class:`Garbage` a 200 answer whose body is not SSE chunks;
- :class:`Stall` one chunk, then nothing until the client goes away (``closed`` is set
  then: cancel tests wait on it), or a chunk every ``every`` seconds.

A request with ``stream: false`` gets :class:`Say` and :class:`Calls` as one whole
``chat.completion`` object. ``refuse_streams = True`` makes it a server that cannot
stream: every ``stream: true`` request gets HTTP 400 (LiteLLM's mock and some proxies
fail streamed requests with tools so).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass(frozen=True)
class Say:
    text: str = "ok"
    chunks: Sequence[str] | None = None
    finish: str = "stop"


@dataclass(frozen=True)
class Calls:
    calls: Sequence[tuple[str, Any]]  # (name, arguments as a dict or a raw string)
    text: str = ""


@dataclass(frozen=True)
class Status:
    status: int
    body: Any = field(default_factory=lambda: {"error": {"message": "boom"}})


@dataclass(frozen=True)
class Garbage:
    body: bytes = b"this is not an event stream\n{{{"
    content_type: str = "text/event-stream"


@dataclass
class Stall:
    first: str = "thinking"
    every: float | None = None  # seconds between chunks; None: one chunk, then silence
    closed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Ticks:
    """``count`` chunks, each written on its own ``interval`` seconds after the last,
    whose text is the ``time.monotonic_ns()`` of its writing and a space (the
    benchmark measures how long a token takes to reach the caller)."""

    count: int
    interval: float = 0.0


Reply = Say | Calls | Status | Garbage | Stall | Ticks


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


class FakeLLM:
    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.responder = responder or (lambda body: Say("ok"))
        self._script: deque[Reply] = deque()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.record = True
        self.received = asyncio.Event()  # set by every request
        #: (prompt, completion) tokens sent as a usage-only last chunk, as OpenAI does
        #: with ``stream_options.include_usage`` (None: no usage chunk).
        self.usage: tuple[int, int] | None = None
        self.refuse_streams = False

    def script(self, *replies: Reply) -> None:
        self._script.extend(replies)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.base_url

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json(loads=orjson.loads)
        if self.record:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        self.received.set()
        if self.refuse_streams and body.get("stream"):
            refusal = {"error": {"message": "streaming is not supported by this server"}}
            return web.json_response(refusal, status=400)
        reply = self._script.popleft() if self._script else self.responder(body)
        if isinstance(reply, Status):
            return web.json_response(reply.body, status=reply.status)
        if not body.get("stream") and isinstance(reply, Say | Calls):
            return web.json_response(self._whole(reply), dumps=lambda v: orjson.dumps(v).decode())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if isinstance(reply, Garbage):
            response.headers["Content-Type"] = reply.content_type
            await response.prepare(request)
            await response.write(reply.body)
            await response.write_eof()
            return response
        await response.prepare(request)
        if isinstance(reply, Stall):
            try:
                await response.write(_chunk({"role": "assistant", "content": reply.first}))
                loop = asyncio.get_running_loop()
                next_chunk = None if reply.every is None else loop.time() + reply.every
                # aiohttp does not cancel a handler whose client left: watch the socket.
                while request.transport is not None and not request.transport.is_closing():
                    await asyncio.sleep(0.02)
                    if next_chunk is not None and loop.time() >= next_chunk:
                        await response.write(_chunk({"content": "."}))
                        next_chunk += reply.every or 0
            except asyncio.CancelledError:
                reply.closed.set()
                raise
            except ConnectionError:
                pass
            reply.closed.set()
            return response
        if isinstance(reply, Ticks):
            with contextlib.suppress(ConnectionError):
                for index in range(reply.count):
                    await asyncio.sleep(reply.interval)
                    delta = {"content": f"{time.monotonic_ns()} "}
                    if index == 0:
                        delta["role"] = "assistant"
                    await response.write(_chunk(delta))
                await response.write(_chunk({}, "stop") + b"data: [DONE]\n\n")
                await response.write_eof()
            return response
        out = bytearray()
        if isinstance(reply, Say):
            pieces = list(reply.chunks) if reply.chunks is not None else [reply.text]
            for index, piece in enumerate(pieces):
                delta: dict[str, Any] = {"content": piece}
                if index == 0:
                    delta["role"] = "assistant"
                out += _chunk(delta)
            out += _chunk({}, reply.finish)
        else:
            if reply.text:
                out += _chunk({"role": "assistant", "content": reply.text})
            for index, (name, arguments) in enumerate(reply.calls):
                raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
                call_id = f"call_{next(self._ids)}"
                # Name first, then the arguments in two pieces, as OpenAI streams them.
                half = len(raw) // 2
                out += _chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": raw[:half]},
                            }
                        ]
                    }
                )
                out += _chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": raw[half:]}}]}
                )
            out += _chunk({}, "tool_calls")
        if self.usage is not None:
            prompt, completion = self.usage
            usage = {"prompt_tokens": prompt, "completion_tokens": completion}
            out += b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
        out += b"data: [DONE]\n\n"
        with contextlib.suppress(ConnectionError):
            await response.write(bytes(out))
            await response.write_eof()
        return response

    def _whole(self, reply: Say | Calls) -> dict[str, Any]:
        """The reply as one ``chat.completion`` (a request with ``stream: false``)."""
        message: dict[str, Any] = {"role": "assistant"}
        if isinstance(reply, Say):
            message["content"] = "".join(reply.chunks) if reply.chunks is not None else reply.text
            finish = reply.finish
        else:
            message["content"] = reply.text or None
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                    },
                }
                for name, args in reply.calls
            ]
            finish = "tool_calls"
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }


def tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of the tool messages a request carried."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]
