"""What the JSON-RPC and HTTP+JSON transports share: bounded httpx requests, network
failures as readable typed errors, capped bodies, and SSE event iteration."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import ssl
import uuid
from collections.abc import AsyncGenerator
from typing import Any, TypeVar, cast

import httpx
import orjson
from google.protobuf import json_format, message

from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol import sse
from a2a_gateway.protocol.codec import MAX_ANSWER_BYTES, dumps
from a2a_gateway.protocol.errors import A2AError, InvalidAgentResponseError
from a2a_gateway.protocol.versioning import EXTENSIONS_HEADER, parse_extensions

from .credentials import Credentials
from .errors import Timeout, Unreachable, build, explain_auth, quote
from .transport import CallOptions, Transport

M = TypeVar("M", bound=message.Message)


def new_http_client(timeout: float, *, tls: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """The client both HTTP transports and card resolution use (``tls``: a CA to trust
    and our client certificate, see :class:`~.credentials.ClientAuth`).

    No redirects (a 3xx is reported, never followed with our credentials) and no proxy
    settings from the environment: the peer is exactly the URL the user gave.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        verify=tls if tls is not None else True,
        # Each open SSE stream holds a connection: a proxy relays many at once.
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=32),
    )


class HttpTransport(Transport):
    """What both HTTP transports hold: the shared httpx client and a checked URL."""

    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        credentials: Credentials | None = None,
        redact: Redactor | None = None,
    ) -> None:
        super().__init__(url, credentials=credentials, redact=redact or Redactor())
        self._http = http
        self._url = checked_url(url, redact=self.redact)
        self._base = url.strip().rstrip("/")  # HTTP+JSON paths are appended to it

    def _ok(self, status: int) -> bool:
        """Whether ``status`` carries a result (JSON-RPC narrows this to 200)."""
        return 200 <= status < 300

    def _build(
        self,
        method: str,
        url: httpx.URL | str,
        headers: dict[str, str],
        options: CallOptions,
        *,
        stream: bool,
        content: bytes | None = None,
        params: Any = None,
    ) -> httpx.Request:
        """An httpx request bounded by ``options``: ``timeout`` to connect and, for a
        unary call, to read; ``idle_timeout`` between two reads of a stream."""
        read = options.idle_timeout if stream else options.timeout
        if self.credentials is not None:
            headers.update(self.credentials.signature(content or b""))
        return self._http.build_request(
            method,
            url,
            params=params,
            content=content,
            headers=headers,
            timeout=request_timeout(options.timeout, read),
        )

    def _post_rpc(
        self,
        method: str,
        params: Any,
        headers: dict[str, str],
        options: CallOptions,
        *,
        stream: bool,
    ) -> httpx.Request:
        """A JSON-RPC 2.0 request (a fresh id) to the interface URL."""
        envelope = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        headers["Content-Type"] = "application/json"
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        content = dumps(envelope)
        return self._build("POST", self._url, headers, options, stream=stream, content=content)

    def _explained(self, error: A2AError) -> A2AError:
        """``error``, with what to check when it is an authentication failure."""
        return explain_auth(
            error, self.target, has_key=self.credentials is not None, redact=self.redact
        )

    def _not_a_stream(self, status: int, body: bytes) -> A2AError:
        """For a transport whose results come with any 2xx: a 2xx that is not SSE is an
        invalid answer, anything else the answer's own error."""
        if self._ok(status):
            what = "expected text/event-stream"
            return invalid_response(self.target, "stream", what, self.redact)
        return self._error(status, body)

    @abc.abstractmethod
    def _error(self, status: int, body: bytes) -> A2AError:
        """The error of an answer with ``status`` that carries no result."""

    def _refused(self, status: int, body: bytes) -> A2AError:
        """The error of a stream request answered with ``status`` and a non-SSE ``body``."""
        return self._error(status, body)

    async def _body(self, request: httpx.Request, options: CallOptions) -> bytes:
        """The body of a unary answer that carries a result, within the call timeout;
        any other status is raised as this binding's error."""
        response, body = await fetch(
            self._http, request, target=self.target, bound=options.timeout, redact=self.redact
        )
        if not self._ok(response.status_code):
            raise self._error(response.status_code, body)
        options.on_extensions(reported_extensions(response))
        return body

    async def _events(
        self, request: httpx.Request, options: CallOptions
    ) -> AsyncGenerator[sse.Event, None]:
        """SSE events of ``request``: opened within the call timeout, each read bounded by
        the idle timeout, the response closed when the caller stops (or is cancelled).
        Errors sent before the stream starts come back as a plain body (§16.17)."""
        response = await open_stream(
            self._http, request, target=self.target, bound=options.timeout, redact=self.redact
        )
        try:
            if not self._ok(response.status_code) or not is_event_stream(response):
                body = await read_error_body(
                    response, target=self.target, bound=options.timeout, redact=self.redact
                )
                raise self._refused(response.status_code, body)
            options.on_extensions(reported_extensions(response))
            stream = events(
                response, target=self.target, idle_timeout=options.idle_timeout, redact=self.redact
            )
            on_event_id = options.on_event_id
            async with contextlib.aclosing(stream):
                async for event in stream:
                    if on_event_id is not None and event.id:
                        on_event_id(event.id)
                    yield event
        finally:
            await response.aclose()


def checked_url(url: str, *, redact: Redactor) -> httpx.URL:
    """``url`` as an absolute http(s) URL, or Unreachable naming what is wrong with it."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise Unreachable(
            f"Could not reach {redact(url)}: invalid URL ({quote(str(exc), redact)})"
        ) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise Unreachable(f"Could not reach {redact(url)}: not an absolute http(s) URL")
    return parsed


def request_timeout(timeout: float, read: float | None = None) -> httpx.Timeout:
    return httpx.Timeout(timeout, read=timeout if read is None else read)


def network_error(exc: httpx.HTTPError, target: str, timeout: float, redact: Redactor) -> A2AError:
    """A transport failure as Unreachable or Timeout, with a readable, redacted reason."""
    where = redact(target)
    if isinstance(exc, httpx.ConnectTimeout):
        return Unreachable(f"Could not reach {where}: connection timed out after {timeout:g} s")
    if isinstance(exc, httpx.TimeoutException):
        return Timeout(f"{where} did not answer within {timeout:g} s")
    reason = quote(str(exc), redact) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return Unreachable(f"Could not reach {where}: {reason}")
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return Unreachable(f"Could not reach {where}: invalid URL ({reason})")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return Unreachable(f"Connection to {where} was lost: {reason}")
    return Unreachable(f"Could not reach {where}: {reason}")


async def read_capped(response: httpx.Response, max_bytes: int = MAX_ANSWER_BYTES) -> bytes:
    """The response body, refusing more than ``max_bytes``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise InvalidAgentResponseError(f"response body is larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch(
    http: httpx.AsyncClient,
    request: httpx.Request,
    *,
    target: str,
    bound: float,
    redact: Redactor,
) -> tuple[httpx.Response, bytes]:
    """Send ``request`` and read its body, all within ``bound`` seconds."""
    try:
        async with asyncio.timeout(bound):
            response = await http.send(request, stream=True)
            try:
                body = await read_capped(response)
            finally:
                await response.aclose()
    except TimeoutError:
        raise Timeout(f"{redact(target)} did not answer within {bound:g} s") from None
    except httpx.HTTPError as exc:
        raise network_error(exc, target, bound, redact) from None
    return response, body


async def open_stream(
    http: httpx.AsyncClient,
    request: httpx.Request,
    *,
    target: str,
    bound: float,
    redact: Redactor,
) -> httpx.Response:
    """Send ``request`` and return once its headers arrived (within ``bound``).

    The caller must ``aclose()`` the response.
    """
    try:
        async with asyncio.timeout(bound):
            return await http.send(request, stream=True)
    except TimeoutError:
        raise Timeout(f"{redact(target)} did not answer within {bound:g} s") from None
    except httpx.HTTPError as exc:
        raise network_error(exc, target, bound, redact) from None


async def read_error_body(
    response: httpx.Response, *, target: str, bound: float, redact: Redactor
) -> bytes:
    """The (capped) body of a streaming response that turned out not to be a stream."""
    try:
        async with asyncio.timeout(bound):
            return await read_capped(response)
    except TimeoutError:
        raise Timeout(f"{redact(target)} did not answer within {bound:g} s") from None
    except httpx.HTTPError as exc:
        raise network_error(exc, target, bound, redact) from None


def is_event_stream(response: httpx.Response) -> bool:
    content_type = str(response.headers.get("content-type", ""))
    return content_type.split(";", 1)[0].strip().lower() == sse.CONTENT_TYPE


async def events(
    response: httpx.Response,
    *,
    target: str,
    idle_timeout: float,
    redact: Redactor,
    max_event_bytes: int = MAX_ANSWER_BYTES,
) -> AsyncGenerator[sse.Event, None]:
    """SSE events of an open response. Each network read is bounded by the request's read
    timeout (keep-alive comments count); an event larger than ``max_event_bytes`` is refused.
    """
    decoder = sse.Decoder()
    pending = 0
    chunks = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
    try:
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except httpx.ReadTimeout:
                raise Timeout(
                    f"{redact(target)} sent nothing for {idle_timeout:g} s; the stream was closed"
                ) from None
            except httpx.HTTPError as exc:
                raise network_error(exc, target, idle_timeout, redact) from None
            pending += len(chunk)
            for event in decoder.feed(chunk):
                pending = 0
                yield event
            if pending > max_event_bytes:
                raise InvalidAgentResponseError(
                    f"{redact(target)} sent an event larger than {max_event_bytes} bytes"
                )
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()


def invalid_response(target: str, what: str, detail: Any, redact: Redactor) -> A2AError:
    return build(
        InvalidAgentResponseError, f"{redact(target)} sent an invalid {what}: {detail}", redact
    )


def parse_message(response_type: type[M], value: Any, *, target: str, redact: Redactor) -> M:
    """A response message from its ProtoJSON value, ignoring unknown fields (a newer
    agent may add some); ``null`` is accepted for ``google.protobuf.Empty`` only."""
    name = response_type.DESCRIPTOR.name
    if value is None and response_type.DESCRIPTOR.full_name == "google.protobuf.Empty":
        return response_type()
    if not isinstance(value, dict):
        raise invalid_response(target, name, "expected a JSON object", redact)
    try:
        return json_format.ParseDict(value, response_type(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        text = str(exc).split("\n", 1)[0]
        raise invalid_response(target, name, text, redact) from None


def stream_error_status(value: Any) -> int:
    """The HTTP status a mid-stream REST error stands for (its ``error.code`` when that is
    an HTTP status, else 500): the response itself was already 200."""
    error = value.get("error") if isinstance(value, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else 500


def load_json(data: bytes | str, *, target: str, what: str, redact: Redactor) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise invalid_response(target, what, f"not JSON ({exc})", redact) from None


def reported_extensions(response: httpx.Response) -> frozenset[str]:
    """Extensions the agent says it activated (``A2A-Extensions`` response header)."""
    return parse_extensions(response.headers.get_list(EXTENSIONS_HEADER))
