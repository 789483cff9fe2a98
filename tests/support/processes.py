"""Server subprocesses and the official SDK's client as a driver (the launchers of the
interop, client and e2e suites).

The SDK lives in ``.venv-peer`` (it pins its own protobuf); nothing here imports it. Its
scripts in ``tests/interop/peers/`` run as subprocesses and speak JSON lines (see their
docstrings).

- :class:`ServerProcess`: any server subprocess (ours by :func:`gateway_command`, the
  SDK's echo server by :func:`sdk_server_command`, the 0.3 SDK's agent by
  :func:`sdk03_agent_running`), ready when its card answers; a traceback fails the test.
- :class:`DriverProcess` / :class:`SdkClient`: one ``sdk_client.py --stdin`` process runs
  every driver command of a module, so a command costs a card fetch and a call, not an
  interpreter start-up; :func:`run_script` runs a fixed-script driver to its end.

Everything is synchronous (``subprocess`` + ``selectors``); every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from .ports import HOST, free_ports
from .workspace import write_callers

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "interop" / "peers"
PEER_PYTHON = ROOT / ".venv-peer" / "bin" / "python"
SDK_CLIENT = PEERS / "sdk_client.py"
SDK_SERVER = PEERS / "sdk_server.py"
#: The newest a2a-sdk 0.3.x release (``requirements/peer03.txt``): 0.3 as deployed.
PEER03_PYTHON = ROOT / ".venv-peer03" / "bin" / "python"
SDK03_SERVER = PEERS / "sdk03_server.py"
SDK03_CLIENT = PEERS / "sdk03_client.py"
#: The start of every command line that runs our gateway (``*GATEWAY, "serve", ...``).
GATEWAY = (sys.executable, "-P", "-m", "a2a_gateway")
CARD_PATH = "/.well-known/agent-card.json"
TRANSPORTS = ("jsonrpc", "rest", "grpc")


READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 30.0  # hard bound on one driver command, enforced here
DRIVER_DEADLINE_S = 20.0  # the driver's own bound (it then reports a TimeoutError, exit 3)
CALL_TIMEOUT_S = 15.0  # the SDK client's per-call timeout

JSON = dict[str, Any]


def gateway_command(workspace: Path, port: int, grpc_port: int) -> list[str]:
    """How our gateway is started for interop (the faux agent, anonymous callers allowed)."""
    return [
        *GATEWAY,
        "serve",
        "--faux",
        "--workspace",
        str(workspace),
        "--allow-anonymous",
        "--host",
        HOST,
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
    ]


def sdk_server_command(
    port: int,
    grpc_port: int,
    *,
    transports: Sequence[str] = TRANSPORTS,
    api_key: str | None = None,
    allow_anonymous: bool = False,
    push: bool = False,
) -> list[str]:
    """How the official SDK's echo server (``peers/sdk_server.py``) is started."""
    command = [
        str(PEER_PYTHON),
        str(SDK_SERVER),
        "--host",
        HOST,
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
        "--transports",
        ",".join(transports),
    ]
    if api_key is not None:
        command.append(f"--api-key={api_key}")  # (a key may start with "-")
    if allow_anonymous:
        command.append("--allow-anonymous")
    if push:
        command.append("--push")
    return command


def require_peer_venv() -> None:
    if not PEER_PYTHON.exists():
        pytest.skip(f"the official a2a-sdk venv is missing ({PEER_PYTHON}): run `make peer`")


def require_peer03_venv() -> None:
    if not PEER03_PYTHON.exists():
        pytest.skip(f"the a2a-sdk 0.3 venv is missing ({PEER03_PYTHON}): run `make peer`")


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


# --- servers ---------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A server subprocess; stdout/stderr go to files so a chatty server never blocks.

    ``strict_shutdown``: a traceback printed while stopping counts too (ours: shutdown
    must be clean). Off for SDK peers, whose grpc library logs one for every stream that
    is still open when it stops; a traceback while serving counts for every server.
    """

    name: str
    command: list[str]
    log_dir: Path
    card_url: str
    grpc_port: int | None
    strict_shutdown: bool = True
    proc: subprocess.Popen[bytes] | None = None

    @property
    def stderr_path(self) -> Path:
        return self.log_dir / f"{self.name}.stderr"

    @property
    def stdout_path(self) -> Path:
        return self.log_dir / f"{self.name}.stdout"

    def start(self) -> None:
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                self.command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """The card answers 200 and, when served, the gRPC port accepts connections."""
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"{self.name} exited with {self.proc.returncode} during start-up:\n"
                    f"{_tail(self.stderr_path)}"
                )
            if self._card_answers() and self._grpc_accepts():
                return
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{self.name} not ready after {READY_TIMEOUT_S}s:\n{_tail(self.stderr_path)}"
                )
            time.sleep(0.05)

    def _card_answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.card_url, timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _grpc_accepts(self) -> bool:
        if self.grpc_port is None:
            return True
        try:
            with socket.create_connection((HOST, self.grpc_port), timeout=1.0):
                return True
        except OSError:
            return False

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Started for the ``with`` body, then stopped; a complaint fails the test."""
        self.start()
        try:
            yield
        finally:
            complaint = self.stop()
        if complaint:
            pytest.fail(complaint)

    def stop(self) -> str | None:
        """Stop it (SIGTERM, then SIGKILL after a while); return a complaint when it died
        early, ignored SIGTERM or printed a traceback. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        serving_bytes = self.stderr_path.stat().st_size
        complaint = ""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
                complaint = f"{self.name} ignored SIGTERM for {STOP_TIMEOUT_S}s\n"
        else:
            complaint = f"{self.name} had exited with {proc.returncode} before the end\n"
        stderr = self.stderr_path.read_bytes()
        checked = stderr if self.strict_shutdown else stderr[:serving_bytes]
        if b"Traceback (most recent call last)" in checked:
            complaint += f"{self.name} printed a traceback:\n"
        if complaint:
            return complaint + stderr[-4000:].decode(errors="replace")
        return None


@contextlib.contextmanager
def proxy_running(
    root: Path,
    upstream: str,
    key: str,
    callers: Sequence[dict[str, Any]],
    *,
    binding: str,
    upstream_transport: str | None = None,
    name: str = "proxy",
) -> Iterator[ServerProcess]:
    """Our gateway in proxy mode (``serve --upstream``, debug log) before ``upstream``
    with ``key``, ``callers`` in its workspace under ``root``, started for the ``with``
    body. On the way out: the key never reached its log, which says it proxied over
    ``binding``; a complaint from stopping fails the test."""
    workspace = root / "ws"
    write_callers(workspace, list(callers))
    port, grpc_port = free_ports(2)
    base = f"http://{HOST}:{port}"
    command = [*GATEWAY, "serve", "--upstream", upstream, f"--upstream-key={key}"]
    if upstream_transport is not None:
        command += ["--upstream-transport", upstream_transport]
    command += ["--workspace", str(workspace), "--host", HOST, "--port", str(port)]
    command += ["--grpc-port", str(grpc_port), "--log-level", "debug"]
    server = ServerProcess(name, command, root, base + CARD_PATH, grpc_port=grpc_port)
    server.start()
    try:
        yield server
    finally:
        complaint = server.stop()
    log = server.stderr_path.read_text(errors="replace")
    assert key not in log, "the upstream key reached the proxy's log"
    assert f"proxying 'a2a-sdk echo peer' over {binding}" in log
    if complaint:
        pytest.fail(complaint)


# --- the SDK client driver -------------------------------------------------------------


class LineReader:
    """Bounded line reads from a pipe (``readline`` on a pipe can block forever)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._fd = stream.fileno()
        os.set_blocking(self._fd, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)
        self._buffer = b""
        self.eof = False

    def readline(self, deadline: float) -> bytes | None:
        """The next line without its newline; None at EOF; TimeoutError at the deadline."""
        while b"\n" not in self._buffer:
            if self.eof:
                rest, self._buffer = self._buffer, b""
                return rest or None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no complete line before the deadline")
            if not self._selector.select(remaining):
                continue
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                self._buffer += chunk
            else:
                self.eof = True
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        self._selector.close()


@dataclass
class DriverResult:
    """The JSON lines one driver command printed, and its exit status."""

    argv: list[str]
    exit_code: int
    lines: list[JSON] = field(default_factory=list)

    @property
    def only(self) -> JSON:
        assert len(self.lines) == 1, f"expected one line from {self.argv}, got {self.lines}"
        return self.lines[0]

    @property
    def error(self) -> JSON | None:
        """The ``error`` object when the command ended in an error line."""
        if self.lines and "error" in self.lines[-1]:
            error: JSON = self.lines[-1]["error"]
            return error
        return None

    def result(self, key: str) -> JSON:
        """The single line's ``key`` member, failing with the error when there is one."""
        assert self.error is None, f"{self.argv} failed: {self.error}"
        line = self.only
        assert key in line, f"expected {key!r} from {self.argv}, got {line}"
        value: JSON = line[key]
        return value


def _parse_line(raw: bytes, argv: Sequence[str]) -> JSON:
    try:
        value = json.loads(raw)
    except ValueError:
        pytest.fail(f"driver printed a non-JSON line for {list(argv)}: {raw[:500]!r}")
    if not isinstance(value, dict):
        pytest.fail(f"driver printed a non-object line for {list(argv)}: {raw[:500]!r}")
    return value


class DriverProcess:
    """One ``sdk_client.py --stdin`` process: runs commands one after another."""

    def __init__(self, log_dir: Path) -> None:
        self._stderr_path = log_dir / "sdk_client.stderr"
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: LineReader | None = None

    def _ensure(self) -> tuple[subprocess.Popen[bytes], LineReader]:
        if self._proc is None or self._proc.poll() is not None or self._reader is None:
            self.close()
            with self._stderr_path.open("ab") as err:
                self._proc = subprocess.Popen(
                    [str(PEER_PYTHON), str(SDK_CLIENT), "--stdin"],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                )
            assert self._proc.stdout is not None
            self._reader = LineReader(self._proc.stdout)
        return self._proc, self._reader

    def run(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> DriverResult:
        proc, reader = self._ensure()
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(argv).encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        lines: list[JSON] = []
        while True:
            try:
                raw = reader.readline(deadline)
            except TimeoutError:
                self.close()  # the next command gets a fresh process
                pytest.fail(f"driver gave no answer in {timeout}s to {argv}; got {lines}")
            if raw is None:
                self.close()
                pytest.fail(f"driver exited during {argv}:\n{_tail(self._stderr_path)}")
            line = _parse_line(raw, argv)
            if set(line) == {"done"}:
                return DriverResult(argv, int(line["done"]), lines)
            lines.append(line)

    def stderr_tail(self) -> str:
        return _tail(self._stderr_path)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()


class OneShot:
    """One driver command in its own process, read line by line (e.g. a subscription
    that must stay open while another command runs)."""

    def __init__(self, argv: list[str], log_dir: Path) -> None:
        self.argv = argv
        self._stderr_path = log_dir / f"oneshot-{secrets.token_hex(4)}.stderr"
        with self._stderr_path.open("wb") as err:
            self._proc = subprocess.Popen(
                [str(PEER_PYTHON), str(SDK_CLIENT), *argv],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        assert self._proc.stdout is not None
        self._reader = LineReader(self._proc.stdout)
        self.lines: list[JSON] = []

    def next_line(self, timeout: float = COMMAND_TIMEOUT_S) -> JSON | None:
        """The next JSON line, or None once the driver closed its output."""
        try:
            raw = self._reader.readline(time.monotonic() + timeout)
        except TimeoutError:
            pytest.fail(f"no line in {timeout}s from {self.argv}; so far {self.lines}")
        if raw is None:
            return None
        line = _parse_line(raw, self.argv)
        self.lines.append(line)
        return line

    def finish(self, timeout: float = COMMAND_TIMEOUT_S) -> DriverResult:
        """Read to the end and wait for the exit status (bounded)."""
        deadline = time.monotonic() + timeout
        while self.next_line(max(0.0, deadline - time.monotonic())) is not None:
            pass
        try:
            code = self._proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.argv} did not exit in {timeout}s")
        return DriverResult(self.argv, code, list(self.lines))

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait(timeout=STOP_TIMEOUT_S)
        self._reader.close()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def stderr_tail(self) -> str:
        return _tail(self._stderr_path)


@dataclass
class SdkClient:
    """The official SDK client, forced onto one transport, pointed at one server; with
    ``api_key`` it presents that key (``auth_header``: ``x-api-key`` or ``bearer``)."""

    driver: DriverProcess
    card_url: str
    transport: str
    log_dir: Path
    api_key: str | None = None
    auth_header: str | None = None
    _spawned: list[OneShot] = field(default_factory=list)

    def keyed(self, api_key: str, auth_header: str = "x-api-key") -> SdkClient:
        """The same client presenting ``api_key``."""
        return dataclasses.replace(self, api_key=api_key, auth_header=auth_header)

    def argv(self, scenario: Sequence[str]) -> list[str]:
        argv = ["--card-url", self.card_url, "--transport", self.transport]
        argv += ["--timeout", str(CALL_TIMEOUT_S), "--deadline", str(DRIVER_DEADLINE_S)]
        if self.api_key is not None:
            argv.append(f"--api-key={self.api_key}")  # (a key may start with "-")
        if self.auth_header is not None:
            argv.append(f"--auth-header={self.auth_header}")
        return [*argv, *scenario]

    def __call__(self, *scenario: str, timeout: float = COMMAND_TIMEOUT_S) -> DriverResult:
        """Run one scenario; the driver must have worked (exit 0), whatever the server said."""
        argv = self.argv(scenario)
        result = self.driver.run(argv, timeout=timeout)
        assert result.exit_code == 0, (
            f"driver exit {result.exit_code} for {argv}: {result.lines}\n"
            f"{self.driver.stderr_tail()}"
        )
        return result

    def spawn(self, *scenario: str) -> OneShot:
        """Run one scenario in its own process, to read while other commands run."""
        process = OneShot(self.argv(scenario), self.log_dir)
        self._spawned.append(process)  # shared with keyed() copies: closed at teardown
        return process

    def close(self) -> None:
        for process in self._spawned:
            process.close()


@dataclass(frozen=True)
class SdkPeer:
    """A running ``peers/sdk_server.py``."""

    base_url: str
    card_url: str
    grpc_port: int
    api_key: str | None


# --- one gateway command run to its end ------------------------------------------------


def run_gateway(
    *args: str, cwd: Path = ROOT, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """``python -P -m a2a_gateway *args`` run to its end (bounded by ``timeout``), in
    ``cwd``, with no ``A2A_GATEWAY_*`` setting inherited from the test's environment;
    its exit status and text output (e.g. a start-up that must refuse)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    return subprocess.run(
        [*GATEWAY, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


# --- fixed-script drivers (one JSON line per scenario) -------------------------------------

#: Every scenario's line of a fixed-script driver, by scenario name.
Results = dict[str, JSON]


def run_script(command: list[str], timeout: float) -> Results:
    """Run a fixed-script driver (``sdk_client03.py``, ``sdk03_client.py``) to its end;
    its lines by scenario name. The driver must exit 0 (A2A errors are results)."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    return {line["scenario"]: line for line in lines}


def scenario_result(results: Results, scenario: str) -> Any:
    """The scenario's result, failing with its error when it has one."""
    assert scenario in results, f"{scenario} did not run: {sorted(results)}"
    line = results[scenario]
    assert "error" not in line, f"{scenario} failed: {line['error']}"
    return line["result"]


# --- the a2a-sdk 0.3.x release as an agent ------------------------------------------------


@dataclass(frozen=True)
class Sdk03Agent:
    """A running ``peers/sdk03_server.py``: the 0.3 SDK's echo agent on JSON-RPC,
    HTTP+JSON and gRPC (``a2a.v1.A2AService``), push on, no key."""

    base_url: str
    card_url: str
    grpc_port: int


@contextlib.contextmanager
def sdk03_agent_running(log_dir: Path, preferred: str = "jsonrpc") -> Iterator[Sdk03Agent]:
    """Start ``peers/sdk03_server.py`` for the ``with`` body (``preferred``: the binding its
    card names in ``url``/``preferredTransport``)."""
    require_peer03_venv()
    port, grpc_port = free_ports(2)
    base_url = f"http://{HOST}:{port}"
    command = [str(PEER03_PYTHON), str(SDK03_SERVER), "--host", HOST, "--port", str(port)]
    command += ["--grpc-port", str(grpc_port), "--preferred", preferred, "--push"]
    server = ServerProcess(
        f"sdk03-agent-{preferred}",
        command,
        log_dir,
        base_url + CARD_PATH,
        grpc_port=grpc_port,
        strict_shutdown=False,
    )
    with server.running():
        yield Sdk03Agent(base_url, base_url + CARD_PATH, grpc_port)
