"""The outbound address policy: which addresses a request to an address a stranger
supplies (a push webhook, a file URL, an agent's URL) may connect to. The server's
guarded HTTP client (``server/outbound.py``) and the client's (``client/guarded_http.py``)
both apply it, at connect time.

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
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
