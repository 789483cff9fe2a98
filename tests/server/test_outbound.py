"""The guarded outbound client against real local servers: address policy, connect-time
checks (a scripted resolver stands in for DNS), redirects, size caps, timeouts, proxies."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer

from a2a_gateway.local.addresses import forbidden_reason, host_address, normalise_host
from a2a_gateway.server.outbound import (
    OutboundClient,
    OutboundConnectionError,
    OutboundTimeout,
    RedirectRefused,
    ResponseTooLarge,
    UrlRefused,
    check_url,
    guarded_socket_factory,
    url_label,
)
from tests.support.ports import free_port

TIMEOUT_S = 5.0


class ScriptedResolver(AbstractResolver):
    """DNS stand-in: each resolve() returns the next scripted answer (the last one
    repeats) and records the host asked for."""

    def __init__(self, *answers: Iterable[str]) -> None:
        self.answers = [list(a) for a in answers]
        self.asked: list[str] = []
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        addresses = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        self.closed = True


class Listener:
    """A plain TCP listener on 127.0.0.1 that counts connections (and closes them)."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Listener:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    started = await Listener().start()
    yield started
    await started.close()


Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[dict[str, Route]], Awaitable[str]]]:
    """Start an aiohttp app on 127.0.0.1 with the given GET/POST routes; its base URL."""
    servers: list[TestServer] = []

    async def start(routes: dict[str, Route]) -> str:
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_route("*", path, handler)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}"

    yield start
    for server in servers:
        await server.close()


# --- the address policy ----------------------------------------------------------------

FORBIDDEN = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "CGNAT shared address space"),
    ("100.127.255.254", "CGNAT shared address space"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.254", "benchmarking"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.10", "documentation"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "unique-local"),
    ("fd12:3456::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%lo", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped private"),
    ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("::ffff:0:127.0.0.1", "IPv4-translated loopback"),
    ("::ffff:0:a9fe:a9fe", "IPv4-translated link-local"),
    ("64:ff9b::7f00:1", "NAT64 loopback"),
    ("2002:7f00:1::1", "6to4 loopback"),
    ("2001:db8::1", "documentation"),
    ("2001::1", "IETF protocol assignment"),
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "::ffff:0:808:808",
]


@pytest.mark.parametrize(("address", "reason"), FORBIDDEN)
def test_each_forbidden_range_has_its_reason(address: str, reason: str) -> None:
    assert forbidden_reason(address) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert forbidden_reason(address) is None


def test_allow_private_still_refuses_non_unicast() -> None:
    for address in ("127.0.0.1", "10.0.0.1", "::1", "fc00::1", "169.254.169.254"):
        assert forbidden_reason(address, allow_private=True) is None
    for address in ("0.0.0.0", "224.0.0.1", "ff02::1", "255.255.255.255", "::ffff:0.0.0.0"):
        assert forbidden_reason(address, allow_private=True) == "not a unicast address"
    assert forbidden_reason("not-an-ip") == "not an IP address"


def test_static_url_checks() -> None:
    with pytest.raises(UrlRefused, match="only https"):
        check_url("http://example.com/hook")
    assert check_url("http://example.com/hook", allow_private_urls=True).host == "example.com"
    with pytest.raises(UrlRefused, match="only https"):
        check_url("ftp://example.com/x", allow_private_urls=True)
    with pytest.raises(UrlRefused, match="user info"):
        check_url("https://user:pw@example.com/")
    with pytest.raises(UrlRefused, match="no host"):
        check_url("https:///path")
    with pytest.raises(UrlRefused, match="longer than"):
        check_url("https://example.com/" + "a" * 3000)
    with pytest.raises(UrlRefused, match="whitespace or control"):
        check_url("https://example.com/a b")
    with pytest.raises(UrlRefused, match=r"127\.0\.0\.1 is not allowed \(loopback\)"):
        check_url("https://127.0.0.1/hook")
    with pytest.raises(UrlRefused, match="IPv4-mapped loopback"):
        check_url("https://[::ffff:127.0.0.1]/hook")
    with pytest.raises(UrlRefused, match="link-local"):
        check_url("https://169.254.169.254/latest/meta-data/")
    assert check_url("https://8.8.8.8/x").host == "8.8.8.8"


# Every numeric spelling a resolver or browser reads as an IPv4 address: (host, the
# address it is, the reason it is refused). check_url canonicalises and judges them
# without DNS, so registration refuses what delivery would refuse.
NUMERIC_SPELLINGS = [
    ("127.1", "127.0.0.1", "loopback"),
    ("127.0.1", "127.0.0.1", "loopback"),
    ("0x7f000001", "127.0.0.1", "loopback"),
    ("0X7F000001", "127.0.0.1", "loopback"),
    ("2130706433", "127.0.0.1", "loopback"),
    ("0177.0.0.1", "127.0.0.1", "loopback"),
    ("017700000001", "127.0.0.1", "loopback"),
    ("0x7f.1", "127.0.0.1", "loopback"),
    ("0x7f.0.0.0x1", "127.0.0.1", "loopback"),
    ("127.0.0.1.", "127.0.0.1", "loopback"),
    ("0", "0.0.0.0", "unspecified"),
    ("0x", "0.0.0.0", "unspecified"),
    ("10.1", "10.0.0.1", "private"),
    ("167772161", "10.0.0.1", "private"),
    ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254", "link-local"),
    ("2852039166", "169.254.169.254", "link-local"),
    ("0251.0376.0251.0376", "169.254.169.254", "link-local"),
    ("192.168.257", "192.168.1.1", "private"),
    ("[::ffff:127.0.0.1]", "::ffff:7f00:1", "IPv4-mapped loopback"),
    ("[::ffff:7f00:1]", "::ffff:7f00:1", "IPv4-mapped loopback"),
    ("[::ffff:a9fe:a9fe]", "::ffff:a9fe:a9fe", "IPv4-mapped link-local"),
    ("[0:0:0:0:0:ffff:10.0.0.1]", "::ffff:a00:1", "IPv4-mapped private"),
]


@pytest.mark.parametrize(("host", "address", "reason"), NUMERIC_SPELLINGS)
def test_numeric_host_spellings_are_canonicalised_and_refused(
    host: str, address: str, reason: str
) -> None:
    with pytest.raises(UrlRefused) as refused:
        check_url(f"https://{host}:8443/hook?token=s3cr3t")
    assert str(refused.value) == f"address {address} is not allowed ({reason})"


@pytest.mark.parametrize(
    ("host", "address"),
    [("134744072", "8.8.8.8"), ("0x8.0x8.0x8.0x8", "8.8.8.8"), ("8.8.2056", "8.8.8.8")],
)
def test_public_numeric_spellings_pass(host: str, address: str) -> None:
    assert check_url(f"https://{host}/hook").host == host
    assert str(host_address(host)) == address


@pytest.mark.parametrize(
    "host", ["1.2.3.4.5", "08.1.1.1", "0x100000000", "256.1.1.1", "1.16777216", "a.1", "0xg.1"]
)
def test_numeric_hosts_that_are_no_address_are_refused(host: str) -> None:
    # No DNS name ends in a number: such a host is a malformed address, never a name.
    with pytest.raises(UrlRefused, match="numeric but not a valid IP address"):
        check_url(f"https://{host}/hook")


def test_names_are_not_numeric() -> None:
    for host in ("hooks.example.com", "1.2.3.a", "0x7f.example", "example.0x7g"):
        assert host_address(host) is None


@pytest.mark.parametrize(
    ("host", "normal"),
    [
        ("Hooks.Example.COM.", "hooks.example.com"),
        ("hooks.example.com", "hooks.example.com"),
        ("Bücher.Example.", "xn--bcher-kva.example"),
        ("_svc.example", "_svc.example"),
        ("::1", "::1"),
        ("[::1]", "[::1]"),
    ],
)
def test_host_names_have_one_spelling(host: str, normal: str) -> None:
    assert normalise_host(host) == normal


@pytest.mark.parametrize("host", ["a..b", ".", "a.b..", "-a.b", "a b", "a%2e", "x" * 64 + ".b"])
def test_malformed_host_names_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="not a valid host name"):
        normalise_host(host)


@pytest.mark.parametrize(
    "url",
    [
        "https://LocalHost./h",
        "https://LOCALHOST/h",
        "https://api.localhost./h",
        "https://localhost。/h",
    ],
)
def test_loopback_names_are_refused_without_dns(url: str) -> None:
    with pytest.raises(UrlRefused, match=r"host (api\.)?localhost is not allowed \(loopback\)"):
        check_url(url)
    assert check_url(url, allow_private_urls=True).raw_host in ("localhost", "api.localhost")


def test_the_checked_url_carries_the_normal_host() -> None:
    # Delivery connects to what check_url returns: the same host the check judged.
    checked = check_url("https://Hooks.Example.COM.:8443/p?q=1")
    assert (checked.raw_host, checked.port, checked.path_qs) == (
        "hooks.example.com",
        8443,
        "/p?q=1",
    )
    with pytest.raises(UrlRefused, match="not a valid host name"):
        check_url("https://hooks..example/h")


async def test_the_early_check_resolves_the_normal_host() -> None:
    resolver = ScriptedResolver(["10.0.0.1"])
    async with OutboundClient(resolver=resolver) as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(UrlRefused, match=r"10\.0\.0\.1 \(private\)"):
            await client.check_url_resolved("https://Inside.Example./hook")
    assert resolver.asked == ["inside.example"]


def test_messages_never_show_path_or_query() -> None:
    assert url_label("https://hooks.example.com:8443/p/secret-path?token=s3cr3t") == (
        "https://hooks.example.com:8443"
    )
    with pytest.raises(UrlRefused) as refused:
        check_url("https://10.0.0.1/secret-path?token=s3cr3t")
    assert "secret" not in str(refused.value)


def test_socket_factory_refuses_before_creating_a_socket() -> None:
    factory = guarded_socket_factory(False)
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with pytest.raises(UrlRefused, match="loopback"):
            factory((family, socket.SOCK_STREAM, 6, "", (address, 80)))
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", 443)))
    sock.close()
    sock = guarded_socket_factory(True)(
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 1))
    )
    sock.close()


# --- connect-time checks with a real client ---------------------------------------------


@pytest.mark.parametrize(("address", "reason"), FORBIDDEN)
async def test_each_forbidden_answer_is_refused_at_connect_time(
    address: str, reason: str, listener: Listener
) -> None:
    resolver = ScriptedResolver([address])
    async with OutboundClient(resolver=resolver) as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(UrlRefused, match="not allowed") as refused:
            await client.get(f"https://victim.test:{listener.port}/hook?token=s3cr3t")
    assert reason in str(refused.value)
    assert "s3cr3t" not in str(refused.value)
    assert resolver.asked == ["victim.test"]
    assert resolver.closed
    assert listener.connections == 0


async def test_dns_rebinding_is_refused_at_connect_time(listener: Listener) -> None:
    # The first answer (an early check) is public; the answer at connect time is not.
    resolver = ScriptedResolver(["93.184.216.34"], ["127.0.0.1"])
    url = f"https://rebind.test:{listener.port}/hook"
    async with OutboundClient(resolver=resolver) as client, asyncio.timeout(TIMEOUT_S):
        assert (await client.check_url_resolved(url)).host == "rebind.test"
        with pytest.raises(UrlRefused, match=r"127\.0\.0\.1 \(loopback\)"):
            await client.post(url, b"{}")
    assert resolver.asked == ["rebind.test", "rebind.test"]
    assert listener.connections == 0


async def test_every_answer_is_checked(listener: Listener) -> None:
    resolver = ScriptedResolver(["10.0.0.1", "127.0.0.1", "fd00::1"])
    async with OutboundClient(resolver=resolver) as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(UrlRefused) as refused:
            await client.get(f"https://multi.test:{listener.port}/")
    message = str(refused.value)
    assert "10.0.0.1 (private)" in message
    assert "127.0.0.1 (loopback)" in message
    assert "fd00::1 (unique-local)" in message
    assert listener.connections == 0


@pytest.mark.parametrize(
    "answers",
    [["93.184.216.34", "127.0.0.1"], ["10.0.0.1", "93.184.216.34"], ["8.8.8.8", "fd00::1"]],
)
async def test_the_early_check_refuses_a_host_with_any_forbidden_answer(
    answers: list[str],
) -> None:
    # A connection would use the allowed answers only; registration is stricter.
    resolver = ScriptedResolver(answers)
    async with OutboundClient(resolver=resolver) as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(UrlRefused, match="resolves to addresses that are not allowed"):
            await client.check_url_resolved("https://mixed.test/hook")
        resolver.answers = [[a for a in answers if forbidden_reason(a) is None]]
        assert (await client.check_url_resolved("https://mixed.test/hook")).host == "mixed.test"


async def test_the_early_check_judges_numeric_spellings_without_dns() -> None:
    resolver = ScriptedResolver(["8.8.8.8"])
    async with OutboundClient(resolver=resolver) as client, asyncio.timeout(TIMEOUT_S):
        for host, _, reason in NUMERIC_SPELLINGS:
            with pytest.raises(UrlRefused, match=reason):
                await client.check_url_resolved(f"https://{host}/hook")
        await client.check_url_resolved("https://134744072/hook")
    assert resolver.asked == []


async def test_allowed_answers_are_the_ones_connected_to(listener: Listener) -> None:
    # With the guard relaxed, a forbidden non-unicast answer is dropped and the
    # connection goes to the remaining (checked) address: our listener.
    resolver = ScriptedResolver(["224.0.0.1", "127.0.0.1"])
    async with OutboundClient(resolver=resolver, allow_private_urls=True) as client:
        async with asyncio.timeout(TIMEOUT_S):
            with pytest.raises(OutboundConnectionError):
                await client.get(f"http://mixed.test:{listener.port}/")
    assert listener.connections >= 1


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "localhost",
        "LocalHost.",
        "127.0.0.1.",
        "2130706433",
        "0x7f.1",
        "127.1",
    ],
)
async def test_loopback_spellings_are_refused(host: str, listener: Listener) -> None:
    # The real system resolver: numeric tricks and /etc/hosts names end up checked too.
    async with OutboundClient() as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(UrlRefused):
            await client.get(f"https://{host}:{listener.port}/")
    assert listener.connections == 0


async def test_http_is_refused_without_the_flag(
    serve: Callable[[dict[str, Route]], Awaitable[str]],
) -> None:
    hits: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="ok")

    base = await serve({"/hook": hook})
    async with OutboundClient() as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(UrlRefused, match="only https"):
            await client.get(f"{base}/hook")
    async with OutboundClient(allow_private_urls=True) as client, asyncio.timeout(TIMEOUT_S):
        response = await client.get(f"{base}/hook")
    assert (response.status, response.body) == (200, b"ok")
    assert hits == ["/hook"]


async def test_a_redirect_is_refused_and_not_followed(
    serve: Callable[[dict[str, Route]], Awaitable[str]],
) -> None:
    hits: list[str] = []

    async def moved(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPTemporaryRedirect("/target")

    async def target(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="followed")

    base = await serve({"/moved": moved, "/target": target})
    async with OutboundClient(allow_private_urls=True) as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(RedirectRefused, match="redirect") as refused:
            await client.post(f"{base}/moved", b"{}")
    assert refused.value.status == 307
    assert not refused.value.retryable
    assert hits == ["/moved"]


async def test_response_size_is_capped(serve: Callable[[dict[str, Route]], Awaitable[str]]) -> None:
    async def sized(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 5000)

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # chunked: no Content-Length to go by
        await response.prepare(request)
        for _ in range(10):
            await response.write(b"y" * 1000)
        await response.write_eof()
        return response

    base = await serve({"/sized": sized, "/streamed": streamed})
    async with OutboundClient(allow_private_urls=True) as client, asyncio.timeout(TIMEOUT_S):
        for path in ("/sized", "/streamed"):
            with pytest.raises(ResponseTooLarge, match="more than 1000 bytes"):
                await client.get(base + path, max_response_bytes=1000)
        cut = await client.get(f"{base}/streamed", max_response_bytes=1500, truncate=True)
        assert (len(cut.body), cut.truncated) == (1500, True)
        whole = await client.get(f"{base}/sized", max_response_bytes=5000)
        assert (len(whole.body), whole.truncated) == (5000, False)


async def test_a_slow_server_times_out(serve: Callable[[dict[str, Route]], Awaitable[str]]) -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TIMEOUT_S):
                await release.wait()
        return web.Response(text="late")

    base = await serve({"/slow": slow})
    try:
        async with OutboundClient(allow_private_urls=True) as client:
            async with asyncio.timeout(TIMEOUT_S):
                with pytest.raises(OutboundTimeout, match="did not answer") as slow_error:
                    await client.get(f"{base}/slow", timeout_s=0.2)
        assert slow_error.value.retryable
    finally:
        release.set()


async def test_a_refused_connection_is_retryable() -> None:
    port = free_port()  # nothing listens there
    async with OutboundClient(allow_private_urls=True) as client, asyncio.timeout(TIMEOUT_S):
        with pytest.raises(OutboundConnectionError, match="could not connect") as failed:
            await client.get(f"http://127.0.0.1:{port}/")
    assert failed.value.retryable


async def test_no_proxy_from_the_environment(
    serve: Callable[[dict[str, Route]], Awaitable[str]],
    listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = f"http://127.0.0.1:{listener.port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def direct(request: web.Request) -> web.Response:
        return web.Response(text="direct")

    base = await serve({"/": direct})
    async with OutboundClient(allow_private_urls=True) as client, asyncio.timeout(TIMEOUT_S):
        response = await client.get(f"{base}/")
    assert response.body == b"direct"
    assert listener.connections == 0


async def test_a_closed_client_refuses_requests() -> None:
    client = OutboundClient(allow_private_urls=True)
    await client.aclose()
    with pytest.raises(Exception, match="closed"):
        await client.get("http://127.0.0.1:1/")


# --- the DNS bound -----------------------------------------------------------------------
#
# aiohttp's resolvers cannot be pointed at a chosen nameserver without aiodns (not a
# dependency), so these tests use a minimal real DNS client: it sends an A query over
# UDP to the nameserver it is given and parses the answer. The nameservers are local UDP
# sockets: one answers, one never does.


def _dns_query(query_id: int, host: str) -> bytes:
    header = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0)  # recursion desired
    name = b"".join(bytes([len(label)]) + label for label in host.encode().split(b".")) + b"\0"
    return header + name + struct.pack("!HH", 1, 1)  # type A, class IN


def _skip_name(packet: bytes, offset: int) -> int:
    while True:
        length = packet[offset]
        if length >= 0xC0:  # a compression pointer ends the name
            return offset + 2
        offset += length + 1
        if length == 0:
            return offset


def _dns_addresses(packet: bytes, query_id: int) -> list[str]:
    answer_id, flags, questions, answers = struct.unpack_from("!HHHH", packet)
    if answer_id != query_id or flags & 0x000F:
        raise OSError(f"DNS answer refused (rcode {flags & 0x000F})")
    offset = 12
    for _ in range(questions):
        offset = _skip_name(packet, offset) + 4
    found = []
    for _ in range(answers):
        offset = _skip_name(packet, offset)
        kind, _, _, length = struct.unpack_from("!HHIH", packet, offset)
        offset += 10
        if kind == 1 and length == 4:
            found.append(socket.inet_ntoa(packet[offset : offset + 4]))
        offset += length
    return found


class UdpDnsResolver(AbstractResolver):
    """A stub DNS resolver (A records only) asking one nameserver over UDP. It waits as
    long as the nameserver does: bounding the wait is the caller's job."""

    def __init__(self, nameserver: tuple[str, int]) -> None:
        self.nameserver = nameserver
        self._next_id = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        loop = asyncio.get_running_loop()
        self._next_id = query_id = (self._next_id + 1) & 0xFFFF
        answer: asyncio.Future[bytes] = loop.create_future()

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
                if not answer.done():
                    answer.set_result(data)

        transport, _ = await loop.create_datagram_endpoint(
            Client, remote_addr=self.nameserver, family=socket.AF_INET
        )
        try:
            transport.sendto(_dns_query(query_id, host))
            addresses = _dns_addresses(await answer, query_id)
        finally:
            transport.close()
        if not addresses:
            raise OSError(f"no address for {host}")
        return [
            ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET, proto=0, flags=0)
            for a in addresses
        ]

    async def close(self) -> None:
        pass


class Nameserver(asyncio.DatagramProtocol):
    """A UDP nameserver on 127.0.0.1 that records each query and answers it with
    ``address`` (an A record), or never answers when ``address`` is None."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.queries: list[bytes] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A datagram endpoint's transport (asyncio's class does not derive from
        # DatagramTransport, hence the cast).
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.queries.append(data)
        if self.address is None or self.transport is None:
            return  # a nameserver that never answers
        question_end = _skip_name(data, 12) + 4
        header = data[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0)
        record = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(self.address)
        self.transport.sendto(header + data[12:question_end] + record, addr)

    @property
    def asked(self) -> list[str]:
        """The host names queried, in order."""
        names = []
        for query in self.queries:
            labels, offset = [], 12
            while query[offset]:
                labels.append(query[offset + 1 : offset + 1 + query[offset]].decode())
                offset += query[offset] + 1
            names.append(".".join(labels))
        return names


@pytest.fixture
async def nameserver() -> AsyncIterator[Callable[[str | None], Awaitable[Nameserver]]]:
    """Start UDP nameservers on 127.0.0.1 (free ports); all are closed after the test."""
    transports: list[asyncio.BaseTransport] = []

    async def start(address: str | None) -> Nameserver:
        loop = asyncio.get_running_loop()
        transport, server = await loop.create_datagram_endpoint(
            lambda: Nameserver(address), local_addr=("127.0.0.1", 0)
        )
        transports.append(transport)
        return server

    yield start
    for transport in transports:
        transport.close()


def _address(server: Nameserver) -> tuple[str, int]:
    assert server.transport is not None
    host, port = server.transport.get_extra_info("sockname")[:2]
    return str(host), int(port)


async def test_the_udp_resolver_answers_and_its_answers_are_checked(
    nameserver: Callable[[str | None], Awaitable[Nameserver]],
) -> None:
    # The resolver used below is a working one: a nameserver's answers reach the guard.
    public = await nameserver("93.184.216.34")
    private = await nameserver("10.1.2.3")
    async with asyncio.timeout(TIMEOUT_S):
        async with OutboundClient(resolver=UdpDnsResolver(_address(public))) as client:
            parsed = await client.check_url_resolved("https://hooks.example.test/in")
        assert parsed.host == "hooks.example.test"
        async with OutboundClient(resolver=UdpDnsResolver(_address(private))) as client:
            with pytest.raises(UrlRefused, match=r"10\.1\.2\.3 \(private\)"):
                await client.check_url_resolved("https://inside.example.test/in")
    assert public.asked == ["hooks.example.test"]
    assert private.asked == ["inside.example.test"]


async def test_a_nameserver_that_never_answers_is_bounded_by_the_connect_timeout(
    nameserver: Callable[[str | None], Awaitable[Nameserver]],
) -> None:
    silent = await nameserver(None)
    resolver = UdpDnsResolver(_address(silent))
    async with OutboundClient(resolver=resolver, connect_timeout_s=0.2) as client:
        async with asyncio.timeout(TIMEOUT_S):  # a hang fails here, not in the client
            with pytest.raises(OutboundTimeout) as timed_out:
                await client.check_url_resolved("https://silent.example.test/hook?token=s3cr3t")
    message = str(timed_out.value)
    assert message == "could not resolve host silent.example.test within 0.2 s"
    assert timed_out.value.retryable
    assert silent.asked == ["silent.example.test"]  # it did ask, and got no answer


async def test_a_request_whose_nameserver_never_answers_times_out(
    nameserver: Callable[[str | None], Awaitable[Nameserver]],
) -> None:
    # At connect time the resolver is aiohttp's to call: the request's bound covers it.
    silent = await nameserver(None)
    async with OutboundClient(resolver=UdpDnsResolver(_address(silent))) as client:
        async with asyncio.timeout(TIMEOUT_S):
            with pytest.raises(OutboundTimeout, match="did not answer"):
                await client.get("https://silent.example.test/hook", timeout_s=0.2)
    assert silent.asked == ["silent.example.test"]
