"""Start-up mistakes, reported the same way everywhere: one line on stderr, exit status 2.

Any check that refuses to start (a bad setting, a workspace that cannot be used, an agent
that cannot be loaded, an unsafe bind) raises :class:`StartupError` or calls
:func:`report`; no traceback is ever shown for a mistake the user can fix.
"""

from __future__ import annotations

import errno
import sys
from typing import TextIO

EXIT_STARTUP = 2


class StartupError(Exception):
    """A mistake in how the gateway was started; the message is one line for the user."""


def one_line(text: str) -> str:
    """``text`` with its line breaks folded, so the report stays one line."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def report(
    message: str | BaseException, *, prog: str = "a2a-gateway", err: TextIO | None = None
) -> int:
    """Print ``prog: message`` on one line on stderr; returns :data:`EXIT_STARTUP`."""
    print(f"{prog}: {one_line(str(message))}", file=err or sys.stderr)
    return EXIT_STARTUP


def bind_failure(exc: OSError, host: str, port: int, flag: str) -> StartupError:
    """A port that cannot be listened on, as the start-up mistake naming the flag that
    chose it (``cannot listen on 127.0.0.1:8080 (--port): address already in use``)."""
    if exc.errno == errno.EADDRINUSE:
        why = "address already in use"
    elif exc.errno == errno.EACCES:
        why = "permission denied (ports below 1024 need privileges)"
    else:
        why = exc.strerror or one_line(str(exc))
    return StartupError(f"cannot listen on {host}:{port} ({flag}): {why}")


__all__ = ["EXIT_STARTUP", "StartupError", "bind_failure", "one_line", "report"]
