"""Blocking sends on the PostgreSQL store inside one process: CPU per send of this
process (engine, store, driver) and of PostgreSQL, without HTTP.

    .venv/bin/python -P tools/bench_pg_sends.py [--sends 2000] [--clients 1 16]
        [--base REV] [--rounds 2]

A throwaway cluster (``server/pg_local.py``), then per round and per ``--clients``
value: an engine (faux agent) on a fresh store of one database, a warm-up of
``--sends`` sends, then ``--sends`` blocking sends from that many concurrent callers
(unique messageIds, new tasks), and this process's CPU time (``time.process_time``)
and PostgreSQL's (every backend, from /proc) per send. ``--base REV`` runs the same
in a child process on revision REV's package tree (laid out as ``bench_compare.py``
does), interleaved with this tree, on the same cluster. Measurements for
docs/performance.md, never tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # python -P leaves the script's folder out
sys.path.insert(1, str(ROOT))  # tests.server.engine.engine_helpers


async def measure(url: str, postmaster: int, sends: int, clients: int) -> str:
    """One row: sends/s, this process's and PostgreSQL's CPU per send."""
    from bench_replicas import _postgres_cpu_s

    from a2a_gateway.agent.faux import FauxAgent
    from a2a_gateway.server.engine import TaskEngine
    from a2a_gateway.server.pg_store import PostgresTaskStore
    from a2a_gateway.server.secret_box import SecretBox
    from tests.server.engine.engine_helpers import ctx, request

    with tempfile.TemporaryDirectory() as workspace:
        store = PostgresTaskStore(url, box=SecretBox(Path(workspace)), lease_s=600)
        engine = TaskEngine(FauxAgent(), store)
        try:
            await store.truncate()

            async def load() -> None:
                left = iter(range(sends))

                async def caller() -> None:
                    for _ in left:
                        await engine.send_message(request("hi"), ctx())

                await asyncio.gather(*(caller() for _ in range(clients)))

            await load()  # warm: connections, prepared statements, plans
            statements0 = _statements(store)
            pg0, cpu0, wall0 = _postgres_cpu_s(postmaster), time.process_time(), time.monotonic()
            await load()
            pg1, cpu1, wall1 = _postgres_cpu_s(postmaster), time.process_time(), time.monotonic()
            statements = _statements(store) - statements0
        finally:
            await engine.aclose()
    return (
        f"{sends / (wall1 - wall0):7,.0f} sends/s  cpu/send: this process"
        f" {1e6 * (cpu1 - cpu0) / sends:5.0f} us, PostgreSQL {1e6 * (pg1 - pg0) / sends:5.0f} us,"
        f" {statements / sends:.2f} grouped statements/send"
    )


def _statements(store: object) -> int:
    """The group commits' statements so far (saves and lookups; 0 where none)."""
    return sum(
        getattr(getattr(store, name, None), "statements", 0) for name in ("_saves", "_lookups")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base", help="a revision measured too, interleaved")
    parser.add_argument("--child", type=int, metavar="POSTMASTER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one row for the parent, on the tree PYTHONPATH names
        url = os.environ["A2A_BENCH_DATABASE_URL"]
        print(asyncio.run(measure(url, args.child, args.sends, args.clients[0])), flush=True)
        return
    from a2a_gateway.server.pg_local import LocalPostgres

    trees: list[tuple[str, dict[str, str]]] = [("this tree", {})]
    if args.base:
        from bench_compare import package_tree, resolve

        trees.append((args.base, {"PYTHONPATH": str(package_tree(resolve(args.base)))}))
    with LocalPostgres() as pg:
        assert pg.pid is not None
        env = {**os.environ, "A2A_BENCH_DATABASE_URL": pg.url}  # (a password: not in argv)
        for n in range(args.rounds):
            for clients in args.clients:
                for name, extra in trees if n % 2 == 0 else trees[::-1]:
                    argv = [sys.executable, "-P", __file__, "--sends", str(args.sends)]
                    argv += ["--clients", str(clients), "--child", str(pg.pid)]
                    row = subprocess.run(
                        argv,
                        env={**env, **extra},
                        capture_output=True,
                        text=True,
                        check=True,
                        timeout=600,
                    ).stdout.strip()
                    print(f"round {n + 1}, {clients:2} clients, {name:12} {row}", flush=True)


if __name__ == "__main__":
    main()
