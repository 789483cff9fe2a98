"""The one guarded HTTP client for addresses strangers supply (push webhooks, file URLs).

Every such request is a potential SSRF, so this client:

- accepts ``https`` URLs only (``http`` too with ``allow_private_urls``), without
  user info, at most 2048 characters;
- never follows redirects (a 3xx answer is :class:`RedirectRefused`), never uses a
  proxy from the environment, keeps no cookies;
- checks every connection target **at connect time**: the resolver's answers are
  filtered, and the socket factory refuses any address before the socket exists, so
  the address checked is the address connected to. There is no DNS cache, so a DNS
  answer that changes between an early check and the connection (rebinding) is
  checked again where it matters. IP-literal hosts (which skip the resolver) meet
  the socket factory;
- bounds every request (``timeout_s`` for the whole exchange, body included) and
  caps the response body (:class:`ResponseTooLarge`).

The address policy (which addresses are refused, how host names are normalised) is
:mod:`a2a_gateway.local.addresses`, which ``client/`` applies too.

Error messages name the host and the reason, never the URL's path or query (webhook
URLs often carry secrets), so they are safe to log and to show to the caller.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from a2a_gateway.local.addresses import (
    forbidden_reason,
    host_address,
    loopback_name,
    normalise_host,
)
from a2a_gateway.protocol.closing import AsyncCloseable

log = logging.getLogger(__name__)

MAX_URL_CHARS = 2048
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
#: Bound on closing the connections: a TLS peer that never answers the close would
#: otherwise hold shutdown for asyncio's 30 s SSL shutdown timeout.
CLOSE_TIMEOUT_S = 2.0
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
USER_AGENT = "a2a-gateway"
_CHUNK = 64 * 1024

# --- errors ----------------------------------------------------------------------------


class OutboundError(Exception):
    """An outbound request did not produce a usable answer. ``str(error)`` names the
    host and the reason only (no path, query or credentials): safe to log and show."""

    #: Whether trying again later may succeed (connection problems, timeouts).
    retryable = False


class UrlRefused(OutboundError):
    """The URL, or an address its host resolved to, is not allowed by the guard."""


class RedirectRefused(OutboundError):
    """The server answered with a redirect; redirects are never followed."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ResponseTooLarge(OutboundError):
    """The response body is larger than the cap."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class OutboundConnectionError(OutboundError):
    """DNS failure, refused or reset connection, TLS failure: worth a retry."""

    retryable = True


class OutboundTimeout(OutboundConnectionError):
    """The request did not complete within its time bound."""


def _host_label(url: URL) -> str:
    """``host:port`` as shown in messages and logs (never path or query)."""
    host = url.raw_host or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{url.port}" if url.port is not None else host


def check_url(url: str, *, allow_private_urls: bool = False) -> URL:
    """Parse ``url`` and apply the static part of the guard (scheme, shape, IP-literal
    hosts); the parsed URL, or :class:`UrlRefused` with a message fit for the caller."""
    if len(url) > MAX_URL_CHARS:
        raise UrlRefused(f"URL is longer than {MAX_URL_CHARS} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UrlRefused("URL contains whitespace or control characters")
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        raise UrlRefused("not a valid URL") from None
    scheme = parsed.scheme.lower()
    allowed = ("https", "http") if allow_private_urls else ("https",)
    if scheme not in allowed:
        if scheme == "http":
            raise UrlRefused("only https URLs are allowed (http needs allow_private_urls)")
        raise UrlRefused("only https URLs are allowed")
    if not parsed.raw_host:
        raise UrlRefused("URL has no host")
    if parsed.raw_user is not None or parsed.raw_password is not None:
        raise UrlRefused("URL must not contain user info (credentials)")
    try:
        port = parsed.port
    except ValueError:
        raise UrlRefused("URL has an invalid port") from None
    if port is not None and not 0 < port < 65536:
        raise UrlRefused("URL has an invalid port")
    try:
        ip = host_address(parsed.raw_host)
    except ValueError:
        raise UrlRefused("URL host is numeric but not a valid IP address") from None
    if ip is not None:
        reason = forbidden_reason(ip, allow_private=allow_private_urls)
        if reason is not None:
            raise UrlRefused(f"address {ip} is not allowed ({reason})")
        return parsed
    try:
        host = normalise_host(parsed.raw_host)
    except ValueError:
        raise UrlRefused("URL host is not a valid host name") from None
    if loopback_name(host) and not allow_private_urls:
        raise UrlRefused(f"host {host} is not allowed (loopback)")
    return parsed if host == parsed.raw_host else parsed.with_host(host)


def url_label(url: str) -> str:
    """``scheme://host:port`` of ``url`` for logs and messages, or ``"(invalid URL)"``."""
    try:
        parsed = URL(url)
        return f"{parsed.scheme}://{_host_label(parsed)}" if parsed.raw_host else "(no host)"
    except (ValueError, TypeError):
        return "(invalid URL)"


# --- connect-time enforcement ----------------------------------------------------------


class GuardedResolver(AbstractResolver):
    """Resolves with ``inner`` and keeps only the allowed answers; refuses the host
    when none is left. The socket factory checks again, on the very address used."""

    def __init__(
        self, inner: AbstractResolver, *, allow_private: bool, every_answer: bool = False
    ) -> None:
        self.inner = inner
        self.allow_private = allow_private
        #: Refuse the host when any answer is forbidden (not only when all are).
        self.every_answer = every_answer

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self.inner.resolve(host, port, family)
        allowed: list[ResolveResult] = []
        reasons: list[str] = []
        for answer in answers:
            reason = forbidden_reason(answer["host"], allow_private=self.allow_private)
            if reason is None:
                allowed.append(answer)
            else:
                reasons.append(f"{answer['host']} ({reason})")
        if not allowed or (reasons and self.every_answer):
            found = ", ".join(reasons) or "no address"
            raise UrlRefused(f"host {host} resolves to addresses that are not allowed: {found}")
        return allowed

    async def close(self) -> None:
        await self.inner.close()


def guarded_socket_factory(
    allow_private: bool,
) -> Callable[[tuple[Any, ...]], socket.socket]:
    """aiohttp's ``socket_factory``: called with the exact address about to be
    connected to; refuses before any socket exists. (``UrlRefused`` is not an
    ``OSError``, so aiohttp passes it through instead of trying further addresses.)"""

    def create(addr_info: tuple[Any, ...]) -> socket.socket:
        family, kind, proto, _, sockaddr = addr_info
        reason = forbidden_reason(str(sockaddr[0]), allow_private=allow_private)
        if reason is not None:
            raise UrlRefused(f"address {sockaddr[0]} is not allowed ({reason})")
        return socket.socket(family=family, type=kind, proto=proto)

    return create


# --- the client ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutboundResponse:
    """A complete (non-redirect) answer; ``body`` is capped (see ``request``)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    truncated: bool = False

    @property
    def media_type(self) -> str:
        """The Content-Type without parameters, lower-cased (``""`` when absent)."""
        return self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


class OutboundClient(AsyncCloseable):
    """The guarded HTTP client (see the module docstring). One per server; share it.

    ``resolver`` replaces the system DNS resolver (tests inject scripted answers);
    the guard applies to its answers like to any other. ``ssl_context`` replaces
    the default verifying context (e.g. a private CA). Use as an async context
    manager or call :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        allow_private_urls: bool = False,
        resolver: AbstractResolver | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        connection_limit: int = 64,
    ) -> None:
        self.allow_private_urls = allow_private_urls
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self._resolver = resolver
        self._ssl_context = ssl_context
        self._connection_limit = connection_limit
        self._session: aiohttp.ClientSession | None = None
        self._guarded: GuardedResolver | None = None
        self._closed = False

    def check_url(self, url: str) -> URL:
        """The static guard with this client's setting (see :func:`check_url`)."""
        return check_url(url, allow_private_urls=self.allow_private_urls)

    async def check_url_resolved(self, url: str) -> URL:
        """:meth:`check_url`, then resolve the host now (within ``connect_timeout_s``)
        and refuse it if *any* answer is not allowed: stricter than a connection, which
        uses the allowed answers only, so that a URL accepted now is never one that
        could reach a forbidden address later. The connection checks again (DNS can
        change)."""
        parsed = self.check_url(url)
        host = parsed.raw_host or ""
        if host_address(host) is not None:
            return parsed
        resolver = GuardedResolver(
            self._resolver or aiohttp.DefaultResolver(),
            allow_private=self.allow_private_urls,
            every_answer=True,
        )
        try:
            # Bounded like a connection: a resolver that never answers must not hold
            # the caller (the system resolver runs in a thread with its own timeouts).
            async with asyncio.timeout(self.connect_timeout_s):
                await resolver.resolve(host, parsed.port or 443, socket.AF_UNSPEC)
        except TimeoutError:
            raise OutboundTimeout(
                f"could not resolve host {host} within {self.connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            reason = _os_reason(exc)
            raise OutboundConnectionError(f"could not resolve host {host}: {reason}") from None
        finally:
            if self._resolver is None:
                await resolver.close()
        return parsed

    def _session_now(self) -> aiohttp.ClientSession:
        if self._closed:
            raise OutboundError("the outbound client is closed")
        if self._session is None:
            inner = self._resolver or aiohttp.DefaultResolver()
            # The connector does not close a resolver it was given: aclose does.
            self._guarded = GuardedResolver(inner, allow_private=self.allow_private_urls)
            connector = aiohttp.TCPConnector(
                resolver=self._guarded,
                use_dns_cache=False,  # resolve (and check) for every new connection
                socket_factory=guarded_socket_factory(self.allow_private_urls),
                happy_eyeballs_delay=None,  # one address at a time, each checked
                limit=self._connection_limit,
                ssl=self._ssl_context if self._ssl_context is not None else True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # no proxy, no .netrc from the environment
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout_s, sock_connect=self.connect_timeout_s
                ),
            )
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        timeout_s: float | None = None,
        max_response_bytes: int | None = None,
        truncate: bool = False,
    ) -> OutboundResponse:
        """One guarded request. The body is read up to ``max_response_bytes``: beyond
        it :class:`ResponseTooLarge`, or with ``truncate`` the first bytes only
        (``truncated`` set). ``timeout_s`` bounds the whole exchange.

        Raises :class:`UrlRefused`, :class:`RedirectRefused`,
        :class:`ResponseTooLarge`, :class:`OutboundConnectionError` (retryable;
        :class:`OutboundTimeout` among them). Any other status is returned.
        """
        target = self.check_url(url)
        label = _host_label(target)
        limit = self.max_response_bytes if max_response_bytes is None else max_response_bytes
        total = self.timeout_s if timeout_s is None else timeout_s
        session = self._session_now()
        try:
            async with asyncio.timeout(total):
                async with session.request(
                    method,
                    target,
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(
                        total=total, sock_connect=min(total, self.connect_timeout_s)
                    ),
                ) as response:
                    if 300 <= response.status < 400:
                        raise RedirectRefused(
                            f"{label} answered with a redirect ({response.status}); "
                            "redirects are not followed",
                            response.status,
                        )
                    body, truncated = await _read_capped(response, limit, truncate, label)
                    return OutboundResponse(
                        response.status,
                        CIMultiDictProxy(CIMultiDict(response.headers)),
                        body,
                        truncated,
                    )
        except OutboundError:
            raise
        except TimeoutError:
            raise OutboundTimeout(f"{label} did not answer within {total:g} s") from None
        except aiohttp.ClientConnectorDNSError as exc:
            raise OutboundConnectionError(
                f"could not resolve {label}: {_os_reason(exc.os_error)}"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            raise OutboundConnectionError(
                f"could not connect to {label}: {_os_reason(exc.os_error)}"
            ) from None
        except aiohttp.InvalidURL:
            raise UrlRefused(f"{label}: not a valid URL") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise OutboundConnectionError(
                f"request to {label} failed: {type(exc).__name__}"
            ) from None

    async def get(self, url: str, **kwargs: Any) -> OutboundResponse:
        return await self.request("GET", url, **kwargs)

    async def post(self, url: str, data: bytes, **kwargs: Any) -> OutboundResponse:
        return await self.request("POST", url, data=data, **kwargs)

    async def aclose(self) -> None:
        """Close the connections (and the injected resolver); later requests fail."""
        self._closed = True
        session, self._session = self._session, None
        guarded, self._guarded = self._guarded, None
        if session is not None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await session.close()
            except TimeoutError:
                # The transports finish closing (or are aborted) by themselves.
                log.warning("outbound connections did not close within %gs", CLOSE_TIMEOUT_S)
        if guarded is not None:
            await guarded.close()
        elif self._resolver is not None:
            await self._resolver.close()

    def __repr__(self) -> str:
        return f"OutboundClient(allow_private_urls={self.allow_private_urls})"


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


async def _read_capped(
    response: aiohttp.ClientResponse, limit: int, truncate: bool, label: str
) -> tuple[bytes, bool]:
    declared = response.content_length
    if declared is not None and declared > limit and not truncate:
        raise ResponseTooLarge(f"{label} sent more than {limit} bytes", limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > limit:
            if not truncate:
                raise ResponseTooLarge(f"{label} sent more than {limit} bytes", limit)
            chunks.append(chunk[: len(chunk) - (size - limit)])
            response.close()  # stop reading: the connection is not reused
            return b"".join(chunks), True
        chunks.append(chunk)
    return b"".join(chunks), False


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "GuardedResolver",
    "OutboundClient",
    "OutboundConnectionError",
    "OutboundError",
    "OutboundResponse",
    "OutboundTimeout",
    "RedirectRefused",
    "ResponseTooLarge",
    "UrlRefused",
    "check_url",
    "forbidden_reason",
    "guarded_socket_factory",
    "host_address",
    "loopback_name",
    "normalise_host",
    "url_label",
]
