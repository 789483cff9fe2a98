"""SSE framing: the encoder and the tolerant incremental decoder."""

from __future__ import annotations

import subprocess
import sys

import pytest

from a2a_gateway.protocol import sse


def decode(*chunks: bytes) -> list[sse.Event]:
    decoder = sse.Decoder()
    events: list[sse.Event] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_encode_one_line() -> None:
    assert sse.encode(b'{"a":1}') == b'data: {"a":1}\n\n'


def test_encode_with_event_and_id() -> None:
    assert sse.encode(b"x", event="error", event_id="7") == b"event: error\nid: 7\ndata: x\n\n"


def test_encode_splits_multiline_data() -> None:
    assert sse.encode(b"a\r\nb\rc\nd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"


def test_comment() -> None:
    assert sse.comment() == b": keep-alive\n\n"
    assert sse.comment("ping") == b": ping\n\n"


def test_round_trip() -> None:
    raw = sse.encode(b'{"x":"y"}') + sse.comment() + sse.encode(b"two\nlines", event="error")
    assert decode(raw) == [
        sse.Event(data='{"x":"y"}'),
        sse.Event(data="two\nlines", event="error"),
    ]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_line_endings(newline: bytes) -> None:
    raw = newline.join([b"event: e", b"data: 1", b"", b"data: 2", b"", b""])
    assert decode(raw) == [sse.Event(data="1", event="e"), sse.Event(data="2")]


def test_every_split_point_gives_the_same_events() -> None:
    raw = b': ping - 2025\r\n\r\nevent: error\r\ndata: {"\xc3\xa9":1}\r\n\r\ndata: b\r\rdata: c\n\n'
    expected = decode(raw)
    assert expected == [
        sse.Event(data='{"é":1}', event="error"),
        sse.Event(data="b"),
        sse.Event(data="c"),
    ]
    for cut in range(1, len(raw)):
        assert decode(raw[:cut], raw[cut:]) == expected, cut


def test_byte_by_byte() -> None:
    raw = sse.encode("naïve ✓".encode()) + sse.encode(b"2")
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == [
        sse.Event(data="naïve ✓"),
        sse.Event(data="2"),
    ]


def test_comments_and_empty_events_are_not_dispatched() -> None:
    assert decode(b": keep-alive\n\n:\n\nevent: lonely\n\n") == []


def test_event_name_resets_after_dispatch() -> None:
    assert [e.event for e in decode(b"event: error\ndata: 1\n\ndata: 2\n\n")] == [
        "error",
        "message",
    ]


def test_fields_without_space_and_without_colon() -> None:
    assert decode(b"data:x\ndata\n\n") == [sse.Event(data="x\n")]


def test_id_persists_and_retry_is_read() -> None:
    events = decode(b"id: 1\nretry: 500\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\n")
    assert [(e.data, e.id) for e in events] == [("a", "1"), ("b", "1"), ("c", "1")]
    assert events[0].retry == 500


def test_a_retry_that_is_not_ascii_digits_is_ignored() -> None:
    events = decode("retry: 300\nretry: \u00b2\nretry: 1x\ndata: a\n\n".encode())
    assert events == [sse.Event(data="a", retry=300)]


def test_unknown_fields_are_ignored() -> None:
    assert decode(b"foo: bar\ndata: ok\n\n") == [sse.Event(data="ok")]


def test_an_unterminated_event_waits_for_more() -> None:
    decoder = sse.Decoder()
    assert list(decoder.feed(b"data: partial")) == []
    assert list(decoder.feed(b"\n")) == []
    assert list(decoder.feed(b"\n")) == [sse.Event(data="partial")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    events = decode(b"data: \xff\xfe\xfd\xfc ok\n\n")
    assert len(events) == 1 and events[0].data.endswith("ok")


def test_a_big_event_in_small_chunks_decodes_in_linear_time() -> None:
    # 8 MB in 64-byte chunks: rescanning the unterminated line on every chunk (as a
    # growing buffer does) reads ~1 TB, about a minute; joining it once, milliseconds.
    # Run apart so that a regression fails on the bound instead of stalling the suite.
    script = (
        "from a2a_gateway.protocol import sse\n"
        "raw = b'data: ' + b'x' * 8_000_000 + b'\\n\\n'\n"
        "decoder = sse.Decoder()\n"
        "events = [e for i in range(0, len(raw), 64) for e in decoder.feed(raw[i : i + 64])]\n"
        "assert [len(e.data) for e in events] == [8_000_000], events\n"
    )
    done = subprocess.run([sys.executable, "-P", "-c", script], timeout=20, check=False)
    assert done.returncode == 0


def test_lines_left_by_an_iteration_stopped_early_come_first() -> None:
    decoder = sse.Decoder()
    events = decoder.feed(b"data: 1\n\ndata: 2\n\ndata: 3")
    assert next(events) == sse.Event(data="1")
    events.close()
    assert list(decoder.feed(b"x")) == [sse.Event(data="2")]
    assert list(decoder.feed(b"\n\n")) == [sse.Event(data="3x")]
