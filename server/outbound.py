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

Refused addresses: loopback, private (RFC 1918), link-local (incl. cloud metadata
169.254.169.254), unique-local, site-local, CGNAT 100.64.0.0/10, benchmarking
198.18.0.0/15, documentation and IETF-reserved ranges, multicast, broadcast,
unspecified, and IPv6 forms that embed an IPv4 address (mapped ``::ffff:a.b.c.d``,
compatible ``::a.b.c.d``, SIIT's IPv4-translated ``::ffff:0:a.b.c.d``, NAT64
``64:ff9b::/96``, 6to4 ``2002::/16``) judged by that address; anything else that
Python does not consider globally routable too. With ``allow_private_urls`` only
non-unicast targets (multicast, broadcast, unspecified) are refused.

Host names are normalised before anything judges or resolves them
(:func:`normalise_host`): lower case, IDNA (``xn--``), one trailing dot dropped, so
``https://LocalHost./h`` is the same host as ``https://localhost/h`` at registration
and at delivery (a resolver asked for ``localhost.`` may not answer, which registration
would take for "unresolvable for now"). ``localhost`` and ``*.localhost`` are loopback
by definition (RFC 6761) and refused without DNS; a host that is neither an address nor
a valid DNS name is refused.

Error messages name the host and the reason, never the URL's path or query (webhook
URLs often carry secrets), so they are safe to log and to show to the caller.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

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

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


# --- the address policy ----------------------------------------------------------------

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

_FORBIDDEN_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "CGNAT shared address space"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "IETF protocol assignment"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "6to4 relay anycast"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
)
_FORBIDDEN_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("::/96"), "IPv4-compatible"),
    (_V6("64:ff9b:1::/48"), "local-use NAT64"),
    (_V6("100::/64"), "discard-only"),
    (_V6("2001::/23"), "IETF protocol assignment"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("5f00::/16"), "segment routing"),
    (_V6("fc00::/7"), "unique-local"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local"),
    (_V6("ff00::/8"), "multicast"),
)
_NAT64 = _V6("64:ff9b::/96")
#: RFC 2765's IPv4-translated addresses: a stateless translator (SIIT) sends them on as
#: the IPv4 address in their last 32 bits.
_TRANSLATED = _V6("::ffff:0:0:0/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 form stands for (mapped, NAT64, translated, 6to4), if
    any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
    if address in _TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "IPv4-translated"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    return None


def _parse_address(address: str | IPAddress) -> IPAddress | None:
    if not isinstance(address, str):
        return address
    text = address.strip("[]").split("%", 1)[0]  # no brackets, no IPv6 zone id
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class _NotAnAddress(ValueError):
    """A host that looks numeric (its last label is a number) but is no IPv4 address."""


_HEX_PART = re.compile(r"0[xX][0-9a-fA-F]*")
_DECIMAL_PART = re.compile(r"[0-9]+")


def _is_number(label: str) -> bool:
    return bool(_DECIMAL_PART.fullmatch(label) or _HEX_PART.fullmatch(label))


def _numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a numeric host spelling stands for, as resolvers and browsers
    read it (``127.1``, ``0x7f000001``, ``2130706433``, ``0177.0.0.1``, a trailing dot);
    None for a host name. A host whose last label is a number but that is no valid
    address raises :class:`_NotAnAddress` (no DNS name ends in a number)."""
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()  # one trailing dot
    if not labels or not _is_number(labels[-1]):
        return None
    if len(labels) > 4:
        raise _NotAnAddress(host)
    numbers: list[int] = []
    for label in labels:
        if _HEX_PART.fullmatch(label):
            numbers.append(int(label[2:] or "0", 16))
        elif len(label) > 1 and label.startswith("0") and label.isdigit():
            if not set(label) <= set("01234567"):
                raise _NotAnAddress(host)
            numbers.append(int(label, 8))
        elif _DECIMAL_PART.fullmatch(label):
            numbers.append(int(label))
        else:
            raise _NotAnAddress(host)
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise _NotAnAddress(host)
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def host_address(host: str) -> IPAddress | None:
    """The IP address ``host`` (a URL's raw host) denotes without DNS: an IP literal
    or any numeric IPv4 spelling, canonicalised; None for a host name. Raises
    ValueError for a numeric-looking host that is no valid address."""
    literal = _parse_address(host)
    if literal is not None:
        return literal
    return _numeric_ipv4(host)


#: One DNS label as it stands after IDNA (letters, digits, hyphen; underscore for SRV-
#: style names some webhooks use).
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
MAX_HOST_CHARS = 253


def normalise_host(host: str) -> str:
    """The one spelling of a host name that policy and resolver see: lower case, IDNA
    (``xn--``) for non-ASCII, one trailing dot dropped. ValueError for a host that is no
    valid DNS name (an empty label, a character DNS names do not have). IP literals
    (bracketed or not) are returned as they are: :func:`host_address` reads them."""
    if host.startswith("[") or ":" in host:
        return host
    name = host.lower()
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"host {host!r} is not a valid host name") from None
    if name.endswith("."):
        name = name[:-1]
    labels = name.split(".")
    if len(name) > MAX_HOST_CHARS or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"host {host[:64]!r} is not a valid host name")
    return name


def loopback_name(host: str) -> bool:
    """Whether a normalised host name is ``localhost`` or under it (RFC 6761 §6.3)."""
    return host == "localhost" or host.endswith(".localhost")


def forbidden_reason(address: str | IPAddress, *, allow_private: bool = False) -> str | None:
    """Why ``address`` may not be connected to (e.g. ``"loopback"``), or None.

    With ``allow_private`` only non-unicast addresses (unspecified, multicast,
    broadcast) are refused. A string that is not an IP address is refused ("not an IP
    address"): callers pass resolved addresses.
    """
    ip = _parse_address(address)
    if ip is None:
        return "not an IP address"
    if allow_private:
        effective = ip
        if isinstance(ip, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(ip)
            effective = embedded[0] if embedded is not None else ip
        if effective.is_unspecified or effective.is_multicast:
            return "not a unicast address"
        if effective == ipaddress.IPv4Address("255.255.255.255"):
            return "not a unicast address"
        return None
    return _reason(ip)


def _reason(ip: IPAddress) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner, form = embedded
            inner_reason = _reason(inner)
            return f"{form} {inner_reason}" if inner_reason else None
        for network6, label in _FORBIDDEN_V6:
            if ip in network6:
                return label
    else:
        for network4, label in _FORBIDDEN_V4:
            if ip in network4:
                return label
    if not ip.is_global:
        return "not globally routable"
    return None


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
