"""Memory per held stream: tracemalloc diffs over streams held open by a gateway.

    .venv/bin/python -P tools/bench_held_streams.py [REV ...] [--streams 300] [--top 25]

For each revision (``git rev-parse``; the working tree when none is given), starts
``a2a-gateway serve --faux`` of that revision's package tree (as ``bench_compare``
builds it) with tracemalloc on (``--frames`` frames per allocation), opens
``--warm`` JSON-RPC SendStreamingMessage streams of the faux agent's ``hold:60`` (one
connection each, the first event read), takes a snapshot, opens ``--streams`` more,
takes another, and prints the traced bytes per added stream (the diff of the two
snapshots ÷ ``--streams``) with the lines that allocated most of it. Snapshots are
taken by a thread in the server when a trigger file appears, while the streams are
idle. A measurement, never a test; the load is our own.

``--rpc`` picks the stream: ``jsonrpc-send`` (the default), ``jsonrpc-subscribe``
(SubscribeToTask on a ``hold:60`` task started by a non-blocking SendMessage, one task a
stream), ``rest-send``, ``rest-subscribe`` (the same over HTTP+JSON). ``--by-file``
prints every file's share with its lines (``--top`` lines a file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
import uuid
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # python -P leaves the script's folder out

from bench_compare import WORK, package_tree, resolve  # noqa: E402
from load import free_port, wait_ready  # noqa: E402

#: Run in the server process: tracemalloc on, a thread that dumps a snapshot to
#: ``<trigger>.snap`` when ``<trigger>`` appears (then removes the trigger), then the CLI.
LAUNCH = """
import os, runpy, sys, threading, time, tracemalloc
tracemalloc.start(int(os.environ["HELD_FRAMES"]))
trigger = os.environ["HELD_TRIGGER"]
def watch():
    while True:
        time.sleep(0.05)
        if os.path.exists(trigger):
            tracemalloc.take_snapshot().dump(trigger + ".snap.tmp")
            os.replace(trigger + ".snap.tmp", trigger + ".snap")
            os.unlink(trigger)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["a2a_gateway", *sys.argv[1:]]
runpy.run_module("a2a_gateway", run_name="__main__", alter_sys=True)
"""


def _ask(trigger: Path) -> Path:
    done = Path(f"{trigger}.snap")
    done.unlink(missing_ok=True)
    trigger.touch()
    return done


def _taken(done: Path) -> tracemalloc.Snapshot | None:
    return tracemalloc.Snapshot.load(str(done)) if done.exists() else None


async def snapshot(trigger: Path) -> tracemalloc.Snapshot:
    done = _ask(trigger)
    for _ in range(1200):
        await asyncio.sleep(0.05)
        taken = _taken(done)
        if taken is not None:
            return taken
    raise SystemExit("the server took no snapshot")


HEADERS = {
    "A2A-Version": "1.0",
    "Accept": "text/event-stream",
    "Content-Type": "application/json",
}


def _message() -> dict[str, object]:
    return {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": "hold:60"}]}


async def _started_task(http: aiohttp.ClientSession, base: str, rpc: str) -> str:
    """The id of a new ``hold:60`` task, answered at once (returnImmediately)."""
    params = {"message": _message(), "configuration": {"returnImmediately": True}}
    if rpc.startswith("jsonrpc"):
        body: dict[str, object] = {
            "jsonrpc": "2.0", "id": "s", "method": "SendMessage", "params": params
        }  # fmt: skip
        async with http.post(base + "/a2a", data=json.dumps(body), headers=HEADERS) as answer:
            task_id: str = (await answer.json())["result"]["task"]["id"]
            return task_id
    async with http.post(
        base + "/a2a/v1/message:send", data=json.dumps(params), headers=HEADERS
    ) as answer:
        task_id = (await answer.json())["task"]["id"]
        return task_id


async def hold(
    http: aiohttp.ClientSession, base: str, count: int, rpc: str = "jsonrpc-send"
) -> list[aiohttp.ClientResponse]:
    async def one() -> aiohttp.ClientResponse:
        if rpc == "jsonrpc-send":
            body: object = {
                "jsonrpc": "2.0",
                "id": "h",
                "method": "SendStreamingMessage",
                "params": {"message": _message()},
            }
            url = base + "/a2a"
        elif rpc == "rest-send":
            body, url = {"message": _message()}, base + "/a2a/v1/message:stream"
        elif rpc == "jsonrpc-subscribe":
            task_id = await _started_task(http, base, rpc)
            params = {"id": task_id}
            body = {"jsonrpc": "2.0", "id": "h", "method": "SubscribeToTask", "params": params}
            url = base + "/a2a"
        else:
            task_id = await _started_task(http, base, rpc)
            body, url = {}, f"{base}/a2a/v1/tasks/{task_id}:subscribe"
        response = await http.post(url, data=json.dumps(body), headers=HEADERS)
        line = await asyncio.wait_for(response.content.readline(), 30)
        while line and not line.startswith(b"data:"):
            line = await asyncio.wait_for(response.content.readline(), 30)
        assert b'"task"' in line, line
        return response

    held: list[aiohttp.ClientResponse] = []
    for start in range(0, count, 50):
        held += await asyncio.gather(*(one() for _ in range(min(50, count - start))))
    return held


async def measure(tree: Path | None, name: str, args: argparse.Namespace) -> None:
    workspace = WORK / "held" / name
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    trigger = workspace.parent / f"{name}.trigger"
    port = free_port()
    env = {**os.environ, "HELD_FRAMES": str(args.frames), "HELD_TRIGGER": str(trigger)}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-P", "-c", LAUNCH, "serve", "--faux", "--allow-anonymous"]
    command += ["--workspace", str(workspace), "--port", str(port), "--grpc-port", "-1"]
    server = await asyncio.create_subprocess_exec(
        *command,
        stdout=subprocess.DEVNULL,
        stderr=None if args.verbose else subprocess.DEVNULL,
        env=env,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(base + "/.well-known/agent-card.json", 120)
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            warm = await hold(http, base, args.warm, args.rpc)
            await asyncio.sleep(1)
            before = await snapshot(trigger)
            held = await hold(http, base, args.streams, args.rpc)
            await asyncio.sleep(1)
            after = await snapshot(trigger)
            for response in warm + held:
                response.close()
        diff = after.compare_to(before, "traceback" if args.frames > 1 else args.group)
        total = sum(stat.size_diff for stat in diff)
        count = sum(stat.count_diff for stat in diff)
        print(
            f"{name}: {total / args.streams / 1024:.2f} KiB traced per held stream"
            f" ({count / args.streams:.0f} blocks), over {args.streams} {args.rpc} streams",
            flush=True,
        )
        if args.by_file:
            _by_file(diff, args)
            return
        for stat in diff[: args.top]:
            where = " < ".join(
                f"{Path(frame.filename).name}:{frame.lineno}" for frame in stat.traceback
            )
            print(
                f"  {stat.size_diff / args.streams:8.0f} B {stat.count_diff / args.streams:6.1f}"
                f" blocks  {where}"
            )
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 30)
        shutil.rmtree(WORK / "held", ignore_errors=True)


def _by_file(diff: list[tracemalloc.StatisticDiff], args: argparse.Namespace) -> None:
    """Each file's bytes per stream, then its lines (innermost frame)."""
    files: dict[str, list[tracemalloc.StatisticDiff]] = {}
    for stat in diff:
        files.setdefault(stat.traceback[0].filename, []).append(stat)
    shares = sorted(files.items(), key=lambda item: -sum(s.size_diff for s in item[1]))
    for filename, stats in shares:
        size = sum(stat.size_diff for stat in stats) / args.streams
        if abs(size) < 16:
            continue
        parts = Path(filename).parts
        print(f"{size:8.0f} B  {'/'.join(parts[-2:])}")
        for stat in sorted(stats, key=lambda s: -s.size_diff)[: args.top]:
            size = stat.size_diff / args.streams
            if abs(size) >= 8:
                blocks = stat.count_diff / args.streams
                print(f"      {size:6.0f} B {blocks:5.1f}  :{stat.traceback[0].lineno}")


async def run(args: argparse.Namespace) -> None:
    if not args.revisions:
        await measure(None, "worktree", args)
    for rev in args.revisions:
        commit = resolve(rev)
        await measure(package_tree(commit), commit, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs="*", help="revisions (the working tree if none)")
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument("--frames", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--group", choices=("lineno", "filename"), default="lineno")
    parser.add_argument(
        "--rpc",
        choices=("jsonrpc-send", "jsonrpc-subscribe", "rest-send", "rest-subscribe"),
        default="jsonrpc-send",
    )
    parser.add_argument("--by-file", action="store_true", help="lines grouped by file")
    parser.add_argument("--verbose", action="store_true", help="the server's stderr")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
