"""A throwaway PostgreSQL cluster for tests and for trying ``--store postgres``.

:class:`LocalPostgres` runs ``initdb`` in a fresh temporary folder, starts ``postgres``
on a free port of 127.0.0.1 (its unix socket in the same folder, so it never meets a
system cluster's socket), and stops it by its process id (a fast shutdown, SIGINT,
then SIGKILL if it does not exit in time), removing the folder.

- The server binaries are found on ``PATH`` or in Debian's
  ``/usr/lib/postgresql/<major>/bin`` (``make test`` installs ``postgresql-15`` when
  neither has them).
- ``initdb`` refuses to run as root: as root the cluster runs as the ``postgres``
  system user (else ``nobody``), which owns the folder.
- Password authentication (SCRAM) on TCP with a random password (:attr:`url` carries
  it); the unix socket trusts its local user. Durability is off (``fsync=off``,
  ``full_page_writes=off``): the cluster is thrown away (``durable=True`` turns them
  on, for benchmarks of what a commit costs on a production cluster). A commit still
  waits for its WAL written to the OS (``synchronous_commit=on``, the default), as the
  file store's write without ``--fsync`` does; with it off every commit woke the WAL
  writer (a signal), which cost PostgreSQL more than the write (docs/performance.md).

``python -m a2a_gateway.server.pg_local`` (``make pg``) starts one, prints its URL and
keeps it until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
USER = "a2a"
DATABASE = "postgres"


class PostgresUnavailable(RuntimeError):
    """The server binaries are missing, or the cluster did not start."""


def find_bin_dir() -> Path:
    """The folder holding ``initdb`` and ``postgres`` (PATH first, newest Debian next)."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(os.path.realpath(on_path)).parent

    def major(path: str) -> int:
        name = Path(path).parent.parent.name
        return int(name) if name.isdigit() else 0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=major)
    if not found:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (apt-get install postgresql-15)"
        )
    return Path(found[-1]).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> tuple[int, int] | None:
    """The (uid, gid) to run the cluster as when we are root, else None."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise PostgresUnavailable("running as root and no 'postgres' or 'nobody' user exists")


class LocalPostgres:
    """One throwaway cluster (see the module docstring). Use :meth:`start` and
    :meth:`stop`, or ``with LocalPostgres() as pg:``."""

    def __init__(self, parent: Path | None = None, *, durable: bool = False) -> None:
        self._parent = parent
        self._durability = "on" if durable else "off"
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self.folder: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> str:
        """initdb, then start the server; the URL once it accepts connections."""
        bin_dir = find_bin_dir()
        owner = _run_as()
        folder = Path(tempfile.mkdtemp(prefix="a2a-pg-", dir=self._parent))
        self.folder = folder
        try:
            if owner is not None:
                os.chown(folder, *owner)
            data = folder / "data"
            pwfile = folder / "pwfile"
            pwfile.write_text(self.password + "\n", encoding="utf-8")
            if owner is not None:
                os.chown(pwfile, *owner)
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    USER,
                    "--pwfile",
                    str(pwfile),
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ],
                owner,
                folder,
            )
            pwfile.unlink()
            self._launch(bin_dir, data, folder, owner)
        except BaseException:
            self.stop()
            raise
        return self.url

    @staticmethod
    def _run(argv: list[str], owner: tuple[int, int] | None, cwd: Path) -> None:
        done = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            timeout=START_TIMEOUT_S,
            check=False,
            user=None if owner is None else owner[0],
            group=None if owner is None else owner[1],
        )
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip()[-2000:]
            raise PostgresUnavailable(f"{Path(argv[0]).name} failed: {tail}")

    def _launch(
        self,
        bin_dir: Path,
        data: Path,
        folder: Path,
        owner: tuple[int, int] | None,
        port: int | None = None,
    ) -> None:
        # Another process may take a free port before we bind it: try a few. A port
        # asked for (a restart) is tried once.
        for _ in range(1 if port else 5):
            self.port = port or free_port()
            argv = [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-k",
                str(folder),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"fsync={self._durability}",
                # A commit waits for its WAL written to the OS (flushed to disk only
                # with fsync on): the default, as on a production cluster.
                "-c",
                "synchronous_commit=on",
                "-c",
                f"full_page_writes={self._durability}",
                "-c",
                "max_connections=200",
            ]
            log = open(folder / "server.log", "ab")  # noqa: SIM115 - handed to the child
            try:
                self.process = subprocess.Popen(
                    argv,
                    cwd=folder,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    user=None if owner is None else owner[0],
                    group=None if owner is None else owner[1],
                )
            finally:
                log.close()
            if self._wait_ready(data):
                return
            self._stop_process()
        raise PostgresUnavailable(f"postgres did not start; see {folder / 'server.log'}")

    def _wait_ready(self, data: Path) -> bool:
        """Until postmaster.pid says "ready" (True) or the server exited (False)."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        pid_file = data / "postmaster.pid"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                lines = pid_file.read_text(encoding="utf-8").splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready":
                    return True
            time.sleep(0.05)
        return False

    def _stop_process(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGINT)  # fast shutdown
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT_S)

    def stop_server(self) -> None:
        """Stop the server by its pid (a fast shutdown: its sessions are told it is
        shutting down), keeping the cluster: :meth:`start_server` starts it again."""
        self._stop_process()

    def start_server(self) -> None:
        """Start the stopped server again, on the port it had (a database that comes
        back after an outage)."""
        if self.folder is None or self.process is not None:
            raise PostgresUnavailable("start_server: the cluster is gone or still running")
        self._launch(find_bin_dir(), self.folder / "data", self.folder, _run_as(), self.port)

    def stop(self) -> None:
        """Stop the server (by its pid) and remove the folder (idempotent)."""
        self._stop_process()
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with LocalPostgres() as pg:
        print(f"PostgreSQL {pg.folder} (pid {pg.pid}) until Ctrl-C:", flush=True)
        print(f"A2A_GATEWAY_DATABASE_URL={pg.url}", flush=True)
        while not stop and pg.process is not None and pg.process.poll() is None:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
