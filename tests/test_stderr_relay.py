"""``--log-format json``'s stderr relay (gateway/stderr_relay.py): every line written to
descriptor 2 comes out as one JSON object, ours unchanged, gRPC's with their level, a
traceback whole; and the last lines of a process that dies still come out (real
subprocesses). The whole ``serve`` path: tests/e2e/test_quiet_logs.py."""

from __future__ import annotations

import json
import subprocess
import sys

from a2a_gateway.stderr_relay import MAX_LINE, Relay

OURS = (
    b'{"ts":"2026-12-04T09:09:45.576Z","level":"info","logger":"a2a_gateway.serve","message":"x"}'
)
GRPC_LINE = (
    b"E1204 09:09:45.571435   26673 chttp2_server.cc:1120] UNKNOWN:No address added out of"
    b" total 1 resolved for '127.0.0.1:1'"
)


def relayed(*chunks: bytes) -> list[bytes]:
    relay = Relay()
    for chunk in chunks:
        relay.feed(chunk)
    relay.close()
    return b"".join(relay.out).splitlines()


def test_lines_become_json_objects_and_ours_pass_unchanged() -> None:
    data = OURS + b"\n" + GRPC_LINE + b"\n" + b"plain words\r\n" + b"\n" + b"{not json\n"
    # Cut at every byte: a line split across reads is still one line.
    out = relayed(*(data[i : i + 1] for i in range(len(data))))
    assert out[0] == OURS
    entries = [json.loads(line) for line in out]
    assert len(entries) == 4  # the empty line is dropped
    grpc = entries[1]
    assert (grpc["level"], grpc["logger"], grpc["source"]) == (
        "error",
        "grpc",
        "chttp2_server.cc:1120",
    )
    assert grpc["message"].startswith("UNKNOWN:No address added")
    assert grpc["ts"].endswith("Z")
    assert [(e["logger"], e["level"], e["message"]) for e in entries[2:]] == [
        ("stderr", "warning", "plain words"),
        ("stderr", "warning", "{not json"),
    ]


def test_absl_levels_and_notes() -> None:
    lines = [
        b"I0000 00:00:1758272687.581987 37923224 fork_posix.cc:71] Other threads ...",
        b"W1204 09:09:45.571435   26673 log.cc:110] Log level DEBUG is not suitable",
        b"F1204 09:09:45.571435   26673 x.cc:1] assertion failed",
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    ]
    entries = [json.loads(line) for line in relayed(b"\n".join(lines) + b"\n")]
    assert [(e["logger"], e["level"]) for e in entries] == [
        ("grpc", "info"),
        ("grpc", "warning"),
        ("grpc", "critical"),
        ("grpc", "warning"),
    ]
    assert entries[0]["message"] == "Other threads ..."
    assert entries[0]["ts"] == "2025-09-19T09:04:47.581Z"  # the line's own time


def test_a_traceback_is_one_object_and_a_long_line_is_cut() -> None:
    traceback = (
        b"Traceback (most recent call last):\n"
        b'  File "x.py", line 1, in <module>\n'
        b"    boom()\n"
        b"RuntimeError: boom\n"
    )
    long = b"y" * (MAX_LINE * 2 + 10)
    out = relayed(
        traceback + OURS + b"\n" + long + b"\n" + b"Traceback (most recent call last):\n  cut"
    )
    entries = [json.loads(line) for line in out]
    assert entries[0]["logger"] == "stderr" and entries[0]["level"] == "error"
    assert entries[0]["message"] == traceback.decode().rstrip("\n")
    assert out[1] == OURS
    pieces = entries[2:5]
    assert all(e["cut"] is True for e in pieces)
    assert "".join(e["message"] for e in pieces) == long.decode()
    assert all(len(line) < MAX_LINE + 200 for line in out)
    # A traceback the input ended in the middle of still comes out, whole as far as it got.
    assert entries[5]["message"] == "Traceback (most recent call last):\n  cut"
    assert len(entries) == 6


def _run(code: str) -> subprocess.CompletedProcess[bytes]:
    prelude = "from a2a_gateway.stderr_relay import relay_stderr; relay_stderr(); import os, sys\n"
    return subprocess.run(
        [sys.executable, "-P", "-c", prelude + code], capture_output=True, timeout=30
    )


def test_the_last_lines_of_a_crash_still_reach_stderr() -> None:
    # gRPC's fatal line, then abort(): the process is gone before anyone reads the pipe.
    done = _run(f"os.write(2, {GRPC_LINE.replace(b'E1204', b'F1204')!r} + b'\\n'); os.abort()")
    assert done.returncode < 0
    (fatal,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert (fatal["level"], fatal["logger"]) == ("critical", "grpc")
    # An exception nobody caught: the interpreter's traceback, as one object.
    done = _run("print('to stdout'); raise RuntimeError('boom at exit')")
    assert done.returncode == 1
    assert done.stdout == b"to stdout\n"
    (crash,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert crash["level"] == "error"
    assert crash["message"].startswith("Traceback (most recent call last):")
    assert crash["message"].endswith("RuntimeError: boom at exit")


def test_a_stderr_nobody_reads_never_blocks_the_writer() -> None:
    # 1 MiB of lines (pipes hold 64 KiB) to a stderr whose reader has gone: the relay
    # drops them, the writer finishes and exits normally.
    code = "for _ in range(16384): os.write(2, b'x' * 63 + b'\\n')\nprint('done')"
    prelude = "from a2a_gateway.stderr_relay import relay_stderr; relay_stderr(); import os\n"
    with subprocess.Popen(
        [sys.executable, "-P", "-c", prelude + code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stderr is not None and process.stdout is not None
        process.stderr.close()
        assert process.stdout.read() == b"done\n"
        assert process.wait(timeout=30) == 0
