"""Bodies that cannot be decoded are the caller's mistake (issue 10, item 2).

One table of undecodable bodies (a Content-Encoding that does not match the bytes or is
unknown, a truncated gzip, bytes that are not UTF-8), sent to every HTTP binding: 1.0
JSON-RPC, 1.0 HTTP+JSON, and their 0.3 forms. Each must be JSON-RPC -32700 (HTTP 200,
``id`` null: the envelope was never read) or HTTP 400 with a google.rpc.Status (0.3
REST: its own 400 shape), never -32603 or a 500, and the service is never called.
Raw-socket cases: a body cut short (its Content-Length never arrives), a broken chunked
body, and malformed HTTP (one WARNING line, no traceback, an answer quoting nothing).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import zlib
from typing import Any

import pytest

from a2a_gateway.server.config import ServerConfig

from .conftest import TIMEOUT_S, Http, Starter, text_message

SEND_10 = text_message("hello")
SEND_03 = {
    "message": {
        "kind": "message",
        "messageId": "m-03",
        "role": "user",
        "parts": [{"kind": "text", "text": "hello"}],
    }
}


def _jsonrpc(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 41, "method": method, "params": params}).encode()


#: name -> (path, body, version header, how errors look: "jsonrpc" | "rest" | "rest03")
SURFACES: dict[str, tuple[str, bytes, str | None, str]] = {
    "jsonrpc": ("/a2a", _jsonrpc("SendMessage", SEND_10), "1.0", "jsonrpc"),
    "rest": ("/a2a/v1/message:send", json.dumps(SEND_10).encode(), "1.0", "rest"),
    "jsonrpc-0.3": ("/a2a", _jsonrpc("message/send", SEND_03), None, "jsonrpc"),
    "rest-0.3": ("/a2a/v1/v1/message:send", json.dumps(SEND_03).encode(), None, "rest03"),
}


def _not_utf8(body: bytes) -> bytes:
    return body.replace(b"hello", b"hel\xfflo")


def _surrogate(body: bytes) -> bytes:
    return body.replace(b"hello", b"hel\xed\xa0\x80lo")  # an encoded lone surrogate


#: name -> (Content-Encoding or None, how the body is mangled, a word the message has)
BAD_BODIES: dict[str, tuple[str | None, Any, str]] = {
    "plain labelled gzip": ("gzip", lambda b: b, "gzip"),
    "plain labelled x-gzip": ("x-gzip", lambda b: b, "gzip"),
    "plain labelled deflate": ("deflate", lambda b: b, "deflate"),
    "empty body labelled gzip": ("gzip", lambda b: b"", "gzip"),
    "gzip cut in its trailer": ("gzip", lambda b: gzip.compress(b)[:-4], "gzip"),
    "gzip cut in its data": ("gzip", lambda b: gzip.compress(b)[: len(b) // 3], "gzip"),
    "gzip then garbage": ("gzip", lambda b: gzip.compress(b) + b"garbage", "gzip"),
    "deflate cut short": ("deflate", lambda b: zlib.compress(b)[:-6], "deflate"),
    "deflate then garbage": ("deflate", lambda b: zlib.compress(b) + b"xx", "deflate"),
    "gzip labelled deflate": ("deflate", gzip.compress, "deflate"),
    "unknown coding": ("zzz", lambda b: b, "zzz"),
    "brotli (not served)": ("br", lambda b: b, "br"),
    "zstd (not served)": ("zstd", lambda b: b, "zstd"),
    "a known and an unknown": ("gzip, compress", gzip.compress, "compress"),
    "not UTF-8": (None, _not_utf8, "UTF-8"),
    "an encoded surrogate": (None, _surrogate, "UTF-8"),
    "not UTF-8 inside gzip": ("gzip", lambda b: gzip.compress(_not_utf8(b)), "UTF-8"),
    "UTF-16": (None, lambda b: b.decode().encode("utf-16"), "JSON"),
}


def _raw_deflate(body: bytes) -> bytes:
    encoder = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return encoder.compress(body) + encoder.flush()


#: Encodings that must work: (Content-Encoding, encoder).
GOOD_CODINGS: dict[str, tuple[str, Any]] = {
    "gzip": ("gzip", gzip.compress),
    "x-gzip": ("x-gzip", gzip.compress),
    "GZIP upper case": ("GZIP", gzip.compress),
    "two gzip members": ("gzip", lambda b: gzip.compress(b[:10]) + gzip.compress(b[10:])),
    "deflate (zlib)": ("deflate", zlib.compress),
    "deflate (raw, as some clients send it)": ("deflate", _raw_deflate),
    "identity": ("identity", lambda b: b),
    "gzip then identity": ("gzip, identity", gzip.compress),
    "deflate then gzip": ("deflate, gzip", lambda b: gzip.compress(zlib.compress(b))),
}


async def _post(
    http: Http, surface: str, body: bytes, coding: str | None
) -> tuple[int, dict[str, Any]]:
    path, _, version, _ = SURFACES[surface]
    headers = {"Content-Type": "application/json"}
    if version is not None:
        headers["A2A-Version"] = version
    if coding is not None:
        headers["Content-Encoding"] = coding
    async with asyncio.timeout(TIMEOUT_S):
        response = await http.client.post(path, data=body, headers=headers)
        async with response:
            return response.status, await response.json(content_type=None)


def _assert_parse_error(surface: str, status: int, answer: dict[str, Any], word: str) -> None:
    shape = SURFACES[surface][3]
    if shape == "jsonrpc":
        assert status == 200, answer
        assert answer["id"] is None, answer
        assert answer["error"]["code"] == -32700, answer
        message = answer["error"]["message"]
    elif shape == "rest":
        assert status == 400, answer
        assert answer["error"]["status"] == "INVALID_ARGUMENT", answer
        assert answer["error"]["code"] == 400, answer
        message = answer["error"]["message"]
    else:
        assert status == 400, answer
        assert answer["code"] == -32700, answer
        message = answer["message"]
    assert word.lower() in message.lower(), message


@pytest.mark.parametrize("surface", SURFACES)
async def test_undecodable_bodies_are_parse_errors(
    http: Http, surface: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    body = SURFACES[surface][1]
    failures = []
    for name, (coding, mangle, word) in BAD_BODIES.items():
        status, answer = await _post(http, surface, mangle(body), coding)
        try:
            _assert_parse_error(surface, status, answer, word)
        except AssertionError as exc:
            failures.append(f"{name}: {exc}")
    assert not failures, "\n".join(failures)
    assert http.service.calls == []
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("surface", SURFACES)
async def test_encoded_bodies_are_decoded(http: Http, surface: str) -> None:
    body = SURFACES[surface][1]
    for name, (coding, encode) in GOOD_CODINGS.items():
        status, answer = await _post(http, surface, encode(body), coding)
        assert status == 200, (name, answer)
        assert "error" not in answer, (name, answer)
    assert len(http.service.calls) == len(GOOD_CODINGS)


async def test_a_small_body_that_expands_past_the_cap_is_too_large(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(max_body_bytes=64 * 1024))
    padded = text_message("x" * (200 * 1024))
    bomb = gzip.compress(json.dumps(padded).encode())
    assert len(bomb) < 64 * 1024
    for surface in ("jsonrpc", "rest"):
        path = SURFACES[surface][0]
        data = _jsonrpc("SendMessage", padded) if surface == "jsonrpc" else None
        raw = gzip.compress(data) if data is not None else bomb
        response = await http.client.post(
            path,
            data=raw,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        answer = await response.json(content_type=None)
        code = answer["error"]["code"]
        assert code == (-32600 if surface == "jsonrpc" else 400), answer
        assert "larger than 65536 bytes" in answer["error"]["message"]
    assert http.service.calls == []


# --- raw sockets: bodies cut short, broken framing, malformed HTTP -----------------------


async def _exchange(http: Http, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; the one answer it gets."""
    url = http.client.make_url("")
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(data)
        await writer.drain()
        return await _read_answer(reader)
    finally:
        writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    """One HTTP answer (status line, headers, Content-Length bytes of body)."""
    async with asyncio.timeout(TIMEOUT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head + await reader.readexactly(length)


def _head(path: str, extra: str = "", version: str | None = "1.0") -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: test",
        "Content-Type: application/json",
        "Connection: close",
    ]
    if version is not None:
        lines.append(f"A2A-Version: {version}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n").encode()


def _answer(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize("surface", SURFACES)
async def test_a_body_cut_short_is_a_parse_error(start_http: Starter, surface: str) -> None:
    http = await start_http(config=ServerConfig(body_read_timeout_s=0.2))
    path, body, version, _ = SURFACES[surface]
    head = _head(path, f"Content-Length: {len(body) + 100}", version)
    status, answer = _answer(await _exchange(http, head + b"\r\n" + body))
    _assert_parse_error(surface, status, json.loads(answer), "did not arrive")
    assert http.service.calls == []


@pytest.mark.parametrize("surface", SURFACES)
async def test_a_broken_chunked_body_is_a_parse_error(start_http: Starter, surface: str) -> None:
    """The framing breaks after the handler started reading (a second packet): aiohttp
    stops feeding the body, which then never ends (the body timeout answers)."""
    http = await start_http(config=ServerConfig(body_read_timeout_s=0.3))
    path, body, version, _ = SURFACES[surface]
    url = http.client.make_url("")
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(_head(path, "Transfer-Encoding: chunked", version) + b"\r\n")
        writer.write(f"{len(body) // 2:x}\r\n".encode() + body[: len(body) // 2] + b"\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # the handler is waiting for the rest
        writer.write(b"zz-not-a-size\r\n")
        await writer.drain()
        raw = await _read_answer(reader)
    finally:
        writer.close()
    status, answer = _answer(raw)
    _assert_parse_error(surface, status, json.loads(answer), "request body")
    assert http.service.calls == []


#: Malformed HTTP, refused by the connection handler before any binding sees it.
MALFORMED_HTTP = {
    "broken chunk size": _head("/a2a", "Transfer-Encoding: chunked")
    + b"\r\nzz-secret-bytes\r\nabc\r\n0\r\n\r\n",
    "header without a colon": b"POST /a2a HTTP/1.1\r\nHost: t\r\nsecret-bytes-no-colon\r\n\r\n",
    "two Content-Lengths": _head("/a2a", "Content-Length: 2\r\nContent-Length: 3")
    + b"\r\nsecret-bytes",
    "control byte in a header": _head("/a2a", "X-API-Key: secret-bytes\x01") + b"\r\n",
    "header line over 16 KiB": _head("/a2a", "A2A-Extensions: secret-bytes" + "x" * 17_000)
    + b"\r\n",
    "request line over 16 KiB": b"GET /a2a/v1/tasks?secret-bytes"
    + b"y" * 17_000
    + b" HTTP/1.1\r\n\r\n",
    "not HTTP at all": b"\x16\x03\x01secret-bytes TLS hello\r\n\r\n",
}


@pytest.mark.parametrize("name", MALFORMED_HTTP)
async def test_malformed_http_is_one_warning_and_quotes_nothing(
    http: Http, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, body = _answer(await _exchange(http, MALFORMED_HTTP[name]))
    assert 400 <= status < 500
    assert b"secret-bytes" not in body
    assert body.startswith(b"malformed HTTP request"), body
    records = [
        r for r in caplog.records if r.levelno >= logging.INFO and r.name != "aiohttp.access"
    ]
    if name == "not HTTP at all":
        assert records == []  # aiohttp logs a first line that is not HTTP at DEBUG only
        return
    assert len(records) == 1, [r.getMessage() for r in records]
    (record,) = records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None and record.exc_text is None
    assert "malformed HTTP request" in record.getMessage()
    assert "secret-bytes" not in record.getMessage()
    assert http.service.calls == []
