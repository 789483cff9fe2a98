"""A port that is already taken is a clear one-line error and exit 1, not a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys


def test_port_in_use_is_a_clean_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-P", "-m", "a2a_gateway", "serve", "--port", str(port),
             "--grpc-port", "-1"],
            capture_output=True,
            text=True,
            timeout=30,
        )  # fmt: skip
    assert result.returncode == 1
    assert "cannot start" in result.stderr
    assert "address already in use" in result.stderr
    assert "Traceback" not in result.stderr
