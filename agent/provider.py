"""The model provider: any OpenAI-compatible Chat Completions endpoint, streamed.

:class:`ChatProvider` wraps the official ``openai`` package (``AsyncOpenAI`` with a base
URL: Ollama, vLLM, llama.cpp's server, a hosted endpoint). :meth:`ChatProvider.stream`
yields :class:`Delta` items as the answer's text arrives, then one :class:`Reply` (the
whole text, the tool calls, the finish reason).

``ProviderConfig.stream`` (``--llm-stream``): ``on`` streams every request; ``off``
asks for whole answers (``stream: false``; the text comes as one Delta), for servers
that cannot stream; ``auto`` (the default) streams, and when the provider fails a
streamed request that offers tools before any text came (HTTP 400, 405, 415, 422 or
501, an answer that is not an event stream, or an error event), asks again once
without streaming; that working, the provider's later requests with tools are not
streamed either.

Every failure the provider can cause (connection, HTTP status, timeout, a malformed
answer) raises :class:`ProviderError` whose message is short and redacted: never the
key, never credentials or query strings from the base URL. Closing the generator (a
cancelled turn) closes the HTTP response.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import orjson
from yarl import URL

from a2a_gateway.local.redaction import redact_error
from a2a_gateway.protocol import tracing

from .defaults import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_TOKENS,
    DEFAULT_STREAM,
    DEFAULT_TIMEOUT_S,
    STREAM_MODES,
)

log = logging.getLogger("a2a_gateway.agent.provider")

#: ``--llm-stream`` values (see the module docstring).
#: HTTP statuses of a streamed request that a whole-answer request may not get: the
#: server's own refusal or failure (not the key, the model name, a rate limit).
_STREAM_REFUSALS = frozenset({400, 405, 415, 422, 501})

#: Where a local Ollama listens.
_NO_KEY = "no-key"  # AsyncOpenAI insists on a key; local servers ignore it


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """How to reach the model. ``max_tokens`` 0 and ``temperature`` ``None`` leave
    the provider's defaults."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str = field(default="", repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    stream: str = DEFAULT_STREAM  # one of STREAM_MODES

    def public_url(self) -> str:
        """The base URL without user, password, query or fragment (for messages)."""
        try:
            url = URL(self.base_url)
            return str(url.with_user(None).with_query(None).with_fragment(None))
        except (ValueError, TypeError):
            return "the configured base URL"


class ProviderError(Exception):
    """The provider failed; ``str(error)`` is short, redacted and safe to show. ``kind``
    is one of :data:`~a2a_gateway.agent.metering.PROVIDER_ERRORS` (for metrics);
    ``stream_refused``: the failure may be the server's refusal to stream (an ``auto``
    provider asks again without streaming)."""

    def __init__(self, text: str, kind: str = "reported", *, stream_refused: bool = False) -> None:
        super().__init__(text)
        self.kind = kind
        self.stream_refused = stream_refused


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of the answer's text, as it arrived."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the model asked for (``arguments`` is the model's raw JSON)."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class Reply:
    """The end of one model answer: its whole text, tool calls and finish reason
    (``stop``, ``length``, ``tool_calls``, ... as the provider said)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    #: (prompt, completion) tokens, when the provider sent its ``usage``.
    usage: tuple[int, int] | None = None


class ChatProvider:
    """One ``AsyncOpenAI`` client shared by every session."""

    def __init__(
        self, config: ProviderConfig, http_client: httpx2.AsyncClient | None = None
    ) -> None:
        """``http_client``: the client's own HTTP client (the demo model's in-process
        transport); closed with the provider."""
        if config.stream not in STREAM_MODES:
            raise ValueError(f"stream must be one of {', '.join(STREAM_MODES)}")
        self.config = config
        # auto: a whole-answer request worked where a streamed one with tools failed.
        self._tools_unstreamed = False
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or _NO_KEY,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
            http_client=http_client,
        )

    async def aclose(self) -> None:
        await self._client.close()

    def _error(
        self, text: str, kind: str = "malformed", *, stream_refused: bool = False
    ) -> ProviderError:
        secrets = [self.config.api_key] if self.config.api_key else []
        return ProviderError(redact_error(text, secrets), kind, stream_refused=stream_refused)

    def _translate(self, exc: BaseException) -> ProviderError:
        where = self.config.public_url()
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
            return self._error(
                f"The model provider did not answer in time ({self.config.timeout_s:g} s).",
                "timeout",
            )
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            return self._error(f"Cannot reach the model provider at {where}.", "connection")
        if isinstance(exc, openai.APIStatusError):
            detail = _status_detail(exc.body)
            text = f"The model provider answered HTTP {exc.status_code}"
            return self._error(
                f"{text}: {detail}" if detail else f"{text}.",
                "status",
                stream_refused=exc.status_code in _STREAM_REFUSALS,
            )
        return self._error("The model provider sent a malformed answer.", stream_refused=True)

    def stream(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> AsyncGenerator[Delta | Reply, None]:
        """Ask the model; yield text deltas as they come, then the :class:`Reply`
        (``stream`` ``off``, or ``auto`` after a fallback: the text as one delta)."""
        if self.config.stream == "off" or (tools and self._tools_unstreamed):
            return self._whole(messages, tools)
        return self._streamed(messages, tools)

    def _options(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The request's arguments but ``stream``. The conversation is plain JSON
        already: sent as ``extra_body`` it skips the client's per-field transform of
        typed params (it grows with the transcript)."""
        config = self.config
        body: dict[str, Any] = {"messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        headers: dict[str, str] = {}
        tracing.inject(headers)  # the model's own server may trace too
        return {
            "model": config.model,
            "messages": [],
            "max_tokens": config.max_tokens if config.max_tokens > 0 else openai.omit,
            "temperature": config.temperature if config.temperature is not None else openai.omit,
            "extra_body": body,
            "extra_headers": headers or None,
        }

    async def _whole(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AsyncGenerator[Delta | Reply, None]:
        """One request for the whole answer (``stream: false``)."""
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **self._options(messages, tools), stream=False
            )
            reply = _whole_reply(orjson.loads(raw.content))
        except (openai.APIError, httpx2.HTTPError, ValueError, TypeError, KeyError) as exc:
            raise self._translate(exc) from None
        if reply.text:
            yield Delta(reply.text)
        yield reply

    async def _streamed(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AsyncGenerator[Delta | Reply, None]:
        # The answer's events are read as lines and parsed here (orjson, plain dicts):
        # the client's typed chunk objects cost ~0.7 ms per token on the bench host.
        parts = _Parts()
        try:
            async with self._client.chat.completions.with_streaming_response.create(
                **self._options(messages, tools), stream=True
            ) as response:
                done = False
                # Read to the end even after [DONE]: an HTTP/1.1 connection goes back
                # to the pool only when its body was read whole (else a new connection,
                # and its address lookup in a worker thread, for every request).
                async for line in response.iter_lines():
                    if done or not line.startswith("data:"):
                        continue  # blank lines, comments, event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        continue
                    text = parts.add(orjson.loads(data))
                    if text:
                        yield Delta(text)
        except (openai.APIError, httpx2.HTTPError, ValueError, TypeError, KeyError) as exc:
            failure: ProviderError | None = self._translate(exc)
        else:
            failure = None
            if parts.error is not None:
                text = f"The model provider reported an error: {parts.error}"
                failure = self._error(text, "reported", stream_refused=True)
            elif not parts.chunks:
                text = "The model provider sent a malformed answer (no completion chunks)."
                failure = self._error(text, stream_refused=True)
        if failure is None:
            yield parts.reply()
            return
        if self.config.stream != "auto" or not tools or parts.text or not failure.stream_refused:
            raise failure
        # In this generator, not a wrapper around it: no extra hop for every token.
        log.warning(
            "the model provider failed a streamed request with tools (%s): asking again"
            " without streaming (--llm-stream off skips the first try)",
            failure,
        )
        async for item in self._whole(messages, tools):
            yield item
        self._tools_unstreamed = True


class _Parts:
    """What the chunks of one answer said so far (TypeError/KeyError: malformed)."""

    __slots__ = ("calls", "chunks", "error", "finish", "text", "usage")

    def __init__(self) -> None:
        self.usage: tuple[int, int] | None = None  # (prompt, completion) tokens, if told
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self.finish = ""
        self.chunks = 0
        self.error: str | None = None

    def add(self, chunk: Any) -> str:
        """Take one chunk; return its text."""
        if not isinstance(chunk, dict):
            raise TypeError("a chunk must be an object")
        self.chunks += 1
        if chunk.get("error"):
            self.error = _status_detail(chunk) or "no details"
            return ""
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices")
        if not choices:
            return ""  # a usage-only chunk
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError("delta.content must be a string")
        for call in delta.get("tool_calls") or ():
            slot = self.calls.setdefault(int(call.get("index", 0)), ["", "", ""])
            if call.get("id"):
                slot[0] = str(call["id"])
            function = call.get("function") or {}
            slot[1] += str(function.get("name") or "")
            slot[2] += str(function.get("arguments") or "")
        if choice.get("finish_reason"):
            self.finish = str(choice["finish_reason"])
        if content:
            self.text.append(content)
            return content
        return ""

    def reply(self) -> Reply:
        tool_calls = tuple(
            ToolCall(id=slot[0] or f"call_{index}", name=slot[1], arguments=slot[2] or "{}")
            for index, slot in sorted(self.calls.items())
        )
        return Reply("".join(self.text), tool_calls, self.finish or "stop", self.usage)


def _whole_reply(answer: Any) -> Reply:
    """The Reply of a whole (not streamed) completion (TypeError/KeyError: malformed)."""
    if not isinstance(answer, dict):
        raise TypeError("the answer must be an object")
    choice = answer["choices"][0]
    message = choice["message"]
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise TypeError("message.content must be a string")
    calls = tuple(
        ToolCall(
            id=str(call.get("id") or f"call_{index}"),
            name=str(call["function"]["name"]),
            arguments=str(call["function"].get("arguments") or "{}"),
        )
        for index, call in enumerate(message.get("tool_calls") or ())
    )
    finish = str(choice.get("finish_reason") or "stop")
    return Reply(text, calls, finish, _usage(answer.get("usage")))


def _usage(value: object) -> tuple[int, int] | None:
    """(prompt, completion) tokens of an OpenAI ``usage`` object, if it is one."""
    if not isinstance(value, dict):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return (prompt, completion)
    return None


def _status_detail(body: object) -> str:
    """The provider's own error message, if its body has one (redacted later)."""
    message: object = None
    if isinstance(body, Mapping):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, Mapping) else error
    elif isinstance(body, str):
        message = body
    if not isinstance(message, str):
        return ""
    return " ".join(message.split())[:200]


def parse_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as an object; ValueError when they are not one."""
    value = json.loads(call.arguments or "{}")
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value


__all__ = [
    "DEFAULT_BASE_URL",
    "STREAM_MODES",
    "ChatProvider",
    "Delta",
    "ProviderConfig",
    "ProviderError",
    "Reply",
    "ToolCall",
    "parse_arguments",
]
