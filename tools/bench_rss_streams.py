"""RSS per held stream, as the side-by-side bench's ``mem_streams`` measures it, for several
revisions in interleaved rounds.

Each round starts a fresh ``serve --faux`` of each revision (its package tree laid out
by ``tools/bench_compare.py``, the starting revision rotating), pinned to one core as
the bench pins it, on a fresh workspace; reads the server's RSS (``VmRSS``) once its card
answered, opens N JSON-RPC SendStreamingMessage ``hold:S`` streams in waves of 100 (one
connection each, every stream's first event read and checked), reads the RSS 1 s after
the last wave, and prints (RSS with the streams - RSS before) / N, with the growth of
the glibc heap (``[heap]``) and of the anonymous mappings (pymalloc's arenas) per stream
from ``/proc/<pid>/smaps``.

    .venv/bin/python -P tools/bench_rss_streams.py c28507f HEAD --rounds 3
    .venv/bin/python -P tools/bench_rss_streams.py HEAD \
        --env GLIBC_TUNABLES=glibc.malloc.arena_max=1

Without revisions it measures the working tree. RSS does not mind other work on the
machine (the rounds' spread is ~0.1-0.2 KiB per stream at 1,000 streams).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compare import ROOT, WORK, package_tree, resolve

HEADERS = {"A2A-Version": "1.0", "Accept": "text/event-stream"}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit(f"no VmRSS for {pid}")


def smaps_kib(pid: int) -> dict[str, int]:
    """Resident KiB by kind of mapping: the glibc heap, anonymous, the rest."""
    out: dict[str, int] = {}
    kind = "other"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            name = parts[5] if len(parts) > 5 else ""
            kind = "heap" if name == "[heap]" else ("anon" if not name else "other")
        elif parts and parts[0] == "Rss:":
            out[kind] = out.get(kind, 0) + int(parts[1])
    return out


def wait_card(port: int, bound_s: float = 60.0) -> None:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=2
            ) as answer:
                answer.read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the server's card never answered")


async def first_event(response: aiohttp.ClientResponse) -> str | None:
    data: list[str] = []
    while line := await response.content.readline():
        line = line.rstrip(b"\r\n")
        if not line and data:
            return "\n".join(data)
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip().decode())
    return None


async def hold(port: int, pid: int, count: int, hold_s: float) -> tuple[float, dict[str, float]]:
    """Open ``count`` held streams; the KiB per stream (RSS, and by mapping kind)."""
    url = f"http://127.0.0.1:{port}/a2a"
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=hold_s + 30)
    held: list[aiohttp.ClientResponse] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(index: int) -> None:
            message = {
                "role": "ROLE_USER",
                "messageId": f"mh-{uuid.uuid4()}",
                "parts": [{"text": f"hold:{hold_s:g}"}],
            }
            body = {
                "jsonrpc": "2.0",
                "id": f"h-{index}",
                "method": "SendStreamingMessage",
                "params": {"message": message},
            }
            response = await session.post(url, json=body, headers=HEADERS)
            held.append(response)
            event = await asyncio.wait_for(first_event(response), 30)
            if not event or "task" not in json.loads(event).get("result", {}):
                raise SystemExit(f"stream {index}: not a task event: {event!r}")

        before, maps_before = rss_kib(pid), smaps_kib(pid)
        for start in range(0, count, 100):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 100))))
        await asyncio.sleep(1.0)
        after, maps_after = rss_kib(pid), smaps_kib(pid)
        if any(r.content.at_eof() or r.closed for r in held):
            raise SystemExit("a stream ended before the reading")
        for response in held:
            response.close()
    kinds = {k: (maps_after.get(k, 0) - maps_before.get(k, 0)) / count for k in maps_after}
    return (after - before) / count, kinds


def one_round(name: str, tree: Path | None, args: argparse.Namespace) -> float:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    for assignment in args.env:
        key, _, value = assignment.partition("=")
        env[key] = value
    workspace = WORK / "rss-workspaces" / f"{name}-{uuid.uuid4().hex[:8]}"
    workspace.mkdir(parents=True)
    command = [
        str(ROOT / ".venv/bin/python"), "-P", "-m", "a2a_gateway", "serve", "--faux",
        "--workspace", str(workspace), "--allow-anonymous", "--port", str(args.port),
        "--grpc-port", str(args.port + 1), "--log-level", "warning",
    ]  # fmt: skip
    if args.pin != "none":
        command = ["taskset", "-c", args.pin, *command]
    server = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_card(args.port)
        time.sleep(0.5)
        per_stream, kinds = asyncio.run(hold(args.port, server.pid, args.streams, args.hold))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items()))
    print(f"  {name}: {per_stream:.2f} KiB per held stream ({shown})", flush=True)
    return per_stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs="*", help="revisions (the working tree if none)")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=60.0, help="hold:S of each stream")
    parser.add_argument("--port", type=int, default=19460)
    parser.add_argument("--pin", default="1", help="the server's CPU (taskset), or 'none'")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the servers")
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [
        (rev, package_tree(resolve(rev))) for rev in args.revisions
    ] or [("worktree", None)]
    results: dict[str, list[float]] = {name: [] for name, _ in trees}
    for number in range(args.rounds):
        print(f"round {number + 1}", flush=True)
        shift = number % len(trees)
        for name, tree in trees[shift:] + trees[:shift]:
            results[name].append(one_round(name, tree, args))
    for name, values in results.items():
        listed = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name}: median {statistics.median(values):.2f} KiB per held stream [{listed}]")


if __name__ == "__main__":
    main()
