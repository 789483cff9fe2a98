"""``--log-format json``: every line on stderr one JSON object, gRPC's own lines included.

gRPC's C core logs through absl straight to file descriptor 2, below Python's logging
(``E1204 09:09:45.571531   26673 chttp2_server.cc:1120] ...``, and with ``GRPC_TRACE``
or ``GRPC_VERBOSITY`` a line per call); so does the interpreter when it prints a
traceback at exit, and so does anything a library or a child process writes there.
:func:`relay_stderr` points descriptor 2 at a pipe read by a small process of its own
(this module, run with ``python -m``), which writes each line to the real stderr:

- a line that is already a JSON object (ours, from ``logs.JsonFormatter``) unchanged;
- gRPC's lines (absl's ``[IWEF]mmdd hh:mm:ss.uuuuuu thread file:line] text``) as
  ``{"ts", "level", "logger": "grpc", "message", "source": "file:line"}``, the level
  from the line's letter;
- a Python traceback as one object (``"logger": "stderr"``, ``"level": "error"``, the
  whole traceback in ``message``), any other line as one object with the level
  ``warning``.

Why a process and not a thread: it outlives the gateway. A line written just before the
gateway dies (the traceback of a crash, gRPC's fatal line before ``abort()``, a signal)
is in the pipe already, and the relay writes it after the gateway is gone: it reads
until every writer has closed the pipe (children of the gateway write there too). It
ignores SIGINT, SIGTERM and SIGHUP: a Ctrl-C or a supervisor's stop reaches the whole
process group, and the relay must stay for the gateway's last lines. At a normal exit
the gateway closes its end and waits for the relay (up to :data:`EXIT_WAIT_S`), so
nothing is lost when whatever started it kills what is left at once (a container whose
first process exited).

Bounds: a line is at most :data:`MAX_LINE` bytes (a longer one is cut into several
objects, each marked ``"cut": true``), a traceback at most :data:`MAX_TRACEBACK_LINES`
lines. A writer waits only while the pipe is full, i.e. while the relay waits for the
real stderr, as it would writing there itself. The relay does not know the redaction
registry (``logs.register_secret``): it sees only what reached descriptor 2 without our
logging, which never carries a secret of ours (gRPC's ``GRPC_TRACE=http`` would print
metadata, keys included: a debugging switch, not for production).

The relay imports only what it uses of the standard library: ~11 MB resident, started in
a few tens of milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

#: Bytes of one line; a longer one is written as several objects.
MAX_LINE = 64 * 1024
#: Lines of one traceback kept in one object (any more come as objects of their own).
MAX_TRACEBACK_LINES = 400
#: Seconds the gateway waits at exit for the relay to write the last lines.
EXIT_WAIT_S = 2.0

#: absl's prefix: severity letter, date, time, thread id, ``file:line]``.
_ABSL = re.compile(rb"^([IWEF])(\d{4}) ([\d:.]+)\s+\d+ ([^\s\]]+)\] ?(.*)$", re.DOTALL)
_LEVELS = {b"I": "info", b"W": "warning", b"E": "error", b"F": "critical"}
_TRACEBACK = b"Traceback (most recent call last):"


def _stamp(when: float) -> str:
    millis = int(when * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{millis:03d}Z"


def absl_time(date: bytes, clock: bytes, now: float) -> float:
    """When absl says a line was written: ``mmdd hh:mm:ss.uuuuuu`` in local time (the year
    is this one, or the last one just after new year), or ``0000 00:00:<epoch seconds>``
    before absl knows the time zone; ``now`` when it is neither."""
    try:
        if date == b"0000":
            return float(clock.rsplit(b":", 1)[1])
        hours, minutes, seconds = clock.split(b":")
        year = time.localtime(now).tm_year
        fields = (int(date[:2]), int(date[2:]), int(hours), int(minutes), int(float(seconds)))
        when = time.mktime((year, *fields, 0, 0, -1)) + float(seconds) % 1
        if when > now + 86400:  # written in December, read in January
            when = time.mktime((year - 1, *fields, 0, 0, -1)) + float(seconds) % 1
        return when
    except (ValueError, IndexError, OverflowError):
        return now


def _entry(level: str, logger: str, message: bytes, when: float = 0.0, **more: object) -> bytes:
    entry: dict[str, object] = {
        "ts": _stamp(when or time.time()),
        "level": level,
        "logger": logger,
        "message": message.decode("utf-8", "replace"),
        **more,
    }
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _is_json_object(line: bytes) -> bool:
    if not line.startswith(b"{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def wrap(line: bytes) -> bytes:
    """One line (without its newline, not a traceback's) as a JSON line."""
    if _is_json_object(line):
        return line + b"\n"
    found = _ABSL.match(line)
    if found is not None:
        level, date, clock, source, text = found.groups()
        when = absl_time(date, clock, time.time())
        return _entry(_LEVELS[level], "grpc", text, when, source=source.decode("utf-8", "replace"))
    if b"absl::" in line or b"] RAW: " in line:  # absl's own notes (before its set-up)
        return _entry("warning", "grpc", line)
    return _entry("warning", "stderr", line)


class Relay:
    """What the relay process does with the bytes it reads: whole lines out as JSON."""

    def __init__(self) -> None:
        self._partial = b""
        self._cut = False
        self._traceback: list[bytes] = []
        self.out: list[bytes] = []

    def feed(self, data: bytes) -> None:
        """Take bytes read from the pipe; complete lines go to :attr:`out`."""
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            self._line(line.removesuffix(b"\r"))
        while len(self._partial) > MAX_LINE:  # bounded: a long line goes out in pieces
            piece, self._partial = self._partial[:MAX_LINE], self._partial[MAX_LINE:]
            self._end_traceback()
            self.out.append(_entry("warning", "stderr", piece, cut=True))
            self._cut = True

    def close(self) -> None:
        """End of input: what is left (a line without its newline, a traceback)."""
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        self._end_traceback()

    def _line(self, line: bytes) -> None:
        if self._cut or len(line) > MAX_LINE:  # (the end of) a line too long: in pieces
            self._cut = False
            self._end_traceback()
            for start in range(0, len(line), MAX_LINE):
                self.out.append(
                    _entry("warning", "stderr", line[start : start + MAX_LINE], cut=True)
                )
            return
        if self._traceback:
            if line[:1] in (b" ", b"\t") and len(self._traceback) < MAX_TRACEBACK_LINES:
                self._traceback.append(line)
                return
            if not line or _is_json_object(line) or _ABSL.match(line) is not None:
                self._end_traceback()  # a traceback cut short by another writer
            else:  # its last line: the exception
                self._traceback.append(line)
                self._end_traceback()
                return
        if line == _TRACEBACK:
            self._traceback.append(line)
            return
        if line:
            self.out.append(wrap(line))

    def _end_traceback(self) -> None:
        if self._traceback:
            self.out.append(_entry("error", "stderr", b"\n".join(self._traceback)))
            self._traceback = []


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main() -> None:
    """The relay process: stdin is the pipe, stdout the real stderr. When nobody reads
    the real stderr any more (a closed pipe), the lines are dropped, and the writers
    never wait on a full pipe for it."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # it ends at EOF (the module doc)
    relay = Relay()
    reader_gone = False
    while data := os.read(0, 65536):
        relay.feed(data)
        if relay.out and not reader_gone:
            reader_gone = _write_lines(relay.out)
        relay.out.clear()
    relay.close()
    if relay.out and not reader_gone:
        _write_lines(relay.out)


def _write_lines(lines: list[bytes]) -> bool:
    """Write ``lines`` to stdout; True when nobody reads it any more."""
    try:
        _write_all(1, b"".join(lines))
    except OSError:  # EPIPE: SIGPIPE is ignored by Python
        return True
    return False


_started: subprocess.Popen[bytes] | None = None


def relay_stderr() -> None:
    """Point descriptor 2 of this process at a relay process (the module doc); once."""
    global _started
    if _started is not None:
        return
    import atexit  # here, not above: the relay process itself needs none of these
    import logging
    import subprocess

    sys.stderr.flush()
    read, write = os.pipe()
    original = os.dup(2)
    try:
        _started = subprocess.Popen(
            [sys.executable, "-P", "-m", __spec__.name if __spec__ else __name__],
            stdin=read,
            stdout=original,
            stderr=original,
        )
    except OSError as exc:  # no process to spare: our own lines are JSON still
        os.close(write)
        os.close(original)
        logging.getLogger(__name__).warning("stderr stays as it is: no relay (%s)", exc)
        return
    finally:
        os.close(read)
    os.dup2(write, 2)
    os.close(write)
    atexit.register(_finish, _started, original)


def _finish(relay: subprocess.Popen[bytes], original: int) -> None:
    """At exit: close our end of the pipe and let the relay write the last lines."""
    import contextlib
    import subprocess

    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os.dup2(original, 2)  # later writes (interpreter shutdown) go to the real stderr
    os.close(original)
    with contextlib.suppress(subprocess.TimeoutExpired):  # a child still holds the pipe
        relay.wait(EXIT_WAIT_S)


if __name__ == "__main__":
    main()
