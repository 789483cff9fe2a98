"""Two revisions of this repository, side by side: blocking sends/s (or stream events/s)
of each, and the ratio.

    .venv/bin/python -P tools/bench_compare.py BASE [HEAD ...] [--sends 4000] [--rounds 4]
        [--concurrency 32] [--transport jsonrpc|rest|grpc] [--retries | --replay]
        [--streams CHUNKS]
        [--store memory] [--callgrind | --strace]

For each revision (anything ``git rev-parse`` takes; HEAD by default for the second;
more than two are each compared with the first, in rounds whose order rotates),
builds a package tree under ``build/bench-compare/<rev>`` from ``git archive`` laid out
by ``pyproject.toml``'s ``[tool.setuptools.package-dir]``, then runs interleaved rounds
(the order alternating): ``a2a-gateway serve --faux`` of that tree, started from this
venv with ``PYTHONPATH``, on a fresh workspace of the file store (under ``build/``, not
/tmp), ``--sends`` blocking sends at ``--concurrency`` with unique messageIds, stopped
after each round (``--retries``: every send has the same messageId, as in the
side-by-side bench's gRPC scenario, so the measured ones are retries answered from the
stored task; ``--replay``: each measured send retries once a send that a server stopped
before made, as the side-by-side bench's JSON-RPC and HTTP+JSON sends mostly are (its
ids repeat in every wrk run on one workspace); ``--transport grpc``: unary SendMessage
over one grpc.aio channel).
Prints sends/s per round and HEAD ÷ BASE per round and in the median,
and the server's CPU time per send (steadier than the rate on a shared machine).
With ``--streams CHUNKS`` each send is a JSON-RPC SendStreamingMessage of the faux
agent's ``chunks:CHUNKS`` and the rate is stream events/s; ``--store memory`` serves
from the memory store instead of the workspace files.

Run it before resolving performance-sensitive work (a hot path, the engine, a store, a
binding): docs/performance.md keeps the figures. The load is our own; no outside code.
A measurement, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # python -P leaves the script's folder out

from load import free_port, grpc_sends, sends, stream_events, wait_ready  # noqa: E402

WORK = ROOT / "build" / "bench-compare"


def resolve(rev: str) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short=12", rev], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"not a revision: {rev}")
    return done.stdout.strip()


def package_tree(commit: str) -> Path:
    """The importable packages of ``commit``, laid out as the editable install does."""
    tree = WORK / commit / "pkgs"
    if tree.exists():
        return tree
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True)
    source = WORK / commit / "src"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    layout = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in layout["package-dir"].items():
        target = tree.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for file in (source / folder).iterdir():
            if file.is_file():
                shutil.copy2(file, target / file.name)
    return tree


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the server has used: per operation, a figure the other
    work on a shared machine disturbs far less than the wall-clock rate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def start_server(
    tree: Path,
    args: argparse.Namespace,
    workspace: Path,
    port: int,
    grpc_port: int,
    out: Path | None,
) -> asyncio.subprocess.Process:
    """``a2a-gateway serve --faux`` of ``tree`` on ``workspace`` (under callgrind with
    ``--callgrind`` and an ``out`` for its dump)."""
    command = [sys.executable, "-P", "-m", "a2a_gateway", "serve", "--faux", "--allow-anonymous"]
    if args.callgrind and out is not None:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command]
    command += ["--workspace", str(workspace), "--port", str(port), "--grpc-port", str(grpc_port)]
    command += ["--store", args.store]
    return await asyncio.create_subprocess_exec(
        *command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )


async def seed(tree: Path, args: argparse.Namespace, workspace: Path, name: str) -> None:
    """(``--replay``) The sends the measured server retries: ``--sends`` of them, with
    the ids ``replay-<name>-<n>``, through a server that is then stopped (the measured
    one starts afresh on the same workspace, its record cache empty, as each repeat of
    the side-by-side bench does)."""
    port = free_port()
    server = await start_server(tree, args, workspace, port, -1, None)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(base + "/.well-known/agent-card.json", 10)
        rest = args.transport == "rest"
        url = base + ("/a2a/v1/message:send" if rest else "/a2a")
        await sends(url, {}, args.sends, args.concurrency, rest=rest, id_prefix=f"replay-{name}")
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)


async def one_round(tree: Path, args: argparse.Namespace, name: str) -> tuple[float, float]:
    # A fresh folder each time, and the disk settled first: the previous run's fsynced
    # files otherwise slow the next run's writes, and whichever server ran second in a
    # round measured up to twice as fast (files removed just before: see compare).
    workspace = WORK / "workspaces" / name
    workspace.mkdir(parents=True)
    os.sync()
    await asyncio.sleep(1)
    if args.replay and not args.streams:
        await seed(tree, args, workspace, name)
    port = free_port()
    grpc_port = free_port() if args.transport == "grpc" else -1
    out = workspace.parent / f"{name}.callgrind"
    server = await start_server(tree, args, workspace, port, grpc_port, out)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(base + "/.well-known/agent-card.json", 300 if args.callgrind else 10)
        if args.streams:
            url = base + "/a2a"
            await stream_events(url, {}, min(100, args.sends), args.streams, args.concurrency)
            if args.callgrind:
                await callgrind_control(server.pid, "--zero")
            if args.strace:
                traced = workspace.parent / f"{name}.strace"
                strace = await asyncio.create_subprocess_exec(
                    *("strace", "-f", "-c", "-q", "-o", str(traced), "-p", str(server.pid))
                )
                await asyncio.sleep(1)  # attached to every thread
            cpu = server_cpu_s(server.pid)
            rate, ops = await stream_events(url, {}, args.sends, args.streams, args.concurrency)
            if args.callgrind:
                await callgrind_control(server.pid, "--dump")
                return rate, instructions(out) / ops
            if args.strace:
                strace.send_signal(2)
                await asyncio.wait_for(strace.wait(), 30)
                return rate, system_calls(traced, name, ops)
        else:
            url = base + ("/a2a" if args.transport == "jsonrpc" else "/a2a/v1/message:send")
            rest = args.transport == "rest"

            same = "retried" if args.retries else None

            async def load(count: int, prefix: str | None = None) -> float:
                if args.transport == "grpc":
                    target = f"127.0.0.1:{grpc_port}"
                    return await grpc_sends(target, count, args.concurrency, message_id=same)
                return await sends(
                    url, {}, count, args.concurrency, rest=rest, message_id=same, id_prefix=prefix
                )

            # Warm up (--retries: the message is stored; --replay: new sends, other ids).
            await load(min(500, args.sends), f"warm-{name}" if args.replay else None)
            if args.callgrind:
                await callgrind_control(server.pid, "--zero")
            cpu = server_cpu_s(server.pid)
            rate = await load(args.sends, f"replay-{name}" if args.replay else None)
            ops = args.sends
            if args.callgrind:
                await callgrind_control(server.pid, "--dump")
                return rate, instructions(out) / ops
        return rate, (server_cpu_s(server.pid) - cpu) / ops * 1e6
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)


async def callgrind_control(pid: int, action: str) -> None:
    done = await asyncio.create_subprocess_exec(
        "callgrind_control", action, str(pid), stdout=subprocess.DEVNULL
    )
    await asyncio.wait_for(done.wait(), 120)


def instructions(out: Path) -> float:
    """The instructions counted in the dump asked for (``<out>.1``)."""
    for line in Path(f"{out}.1").read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return float(line.split()[1])
    raise SystemExit(f"no totals in {out}.1")


def system_calls(traced: Path, name: str, ops: int) -> float:
    """System calls per operation in ``strace -c``'s table; the main ones printed."""
    counts: dict[str, int] = {}
    for line in traced.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    total = counts.pop("total", sum(counts.values()))
    main = ", ".join(
        f"{c} {n / ops:.3f}" for c, n in sorted(counts.items(), key=lambda i: -i[1])[:6]
    )
    print(f"{name}: system calls per operation {total / ops:.3f} ({main})", flush=True)
    return total / ops


async def compare(args: argparse.Namespace) -> None:
    revisions = [resolve(args.base)] + [resolve(rev) for rev in args.head or ["HEAD"]]
    trees = {rev: package_tree(rev) for rev in revisions}
    rates: dict[str, list[float]] = {rev: [] for rev in revisions}
    cpus: dict[str, list[float]] = {rev: [] for rev in revisions}
    # An earlier run's folders are moved aside now and removed after this run's rounds:
    # on this host's ext4 (no journal) a new file skips every inode freed in the last
    # minute (five, while the inode table is not yet written back) of its block group,
    # one by one, so tens of thousands of task files removed just before made the next
    # run's new sends 1.5-2x slower (``recently_deleted`` under ``__ext4_new_inode``, 53%
    # of the server's CPU in perf).
    stale = WORK / f"removed-{os.getpid()}"
    if (WORK / "workspaces").exists():
        (WORK / "workspaces").rename(stale)
    for number in range(args.rounds):
        # The order rotates (two revisions: alternates), so none always runs first.
        shift = number % len(revisions)
        for rev in revisions[shift:] + revisions[:shift]:
            rate, cpu_us = await one_round(trees[rev], args, f"{rev}-{number}")
            rates[rev].append(rate)
            cpus[rev].append(cpu_us)
        base, cpu_base = rates[revisions[0]][-1], cpus[revisions[0]][-1]
        unit = "instructions" if args.callgrind else "calls" if args.strace else "us"
        line = f"round {number + 1}: {revisions[0]} {base:.0f}/s, {cpu_base:.1f} {unit}"
        for rev in revisions[1:]:
            rate, cpu_us = rates[rev][-1], cpus[rev][-1]
            line += f"; {rev} {rate:.0f}/s, {cpu_us:.1f} {unit} (ratio {cpu_us / cpu_base:.3f})"
        what = "instructions" if args.callgrind else "system calls" if args.strace else "CPU"
        print(f"{line} (server {what} per operation)", flush=True)
    summary: dict[str, object] = {
        "base": revisions[0],
        "head": revisions[1] if len(revisions) == 2 else revisions[1:],
        "transport": args.transport,
        "retries": args.retries,
        "replay": args.replay,
        "streams": args.streams,
        "store": args.store,
    }
    for rev in revisions[1:]:
        ratios = [h / b for b, h in zip(rates[revisions[0]], rates[rev], strict=True)]
        cpu_ratios = [h / b for b, h in zip(cpus[revisions[0]], cpus[rev], strict=True)]
        suffix = "" if len(revisions) == 2 else f"_{rev}"
        summary |= {
            f"ratio_median{suffix}": round(statistics.median(ratios), 3),
            f"ratio_min{suffix}": round(min(ratios), 3),
            f"ratio_max{suffix}": round(max(ratios), 3),
            f"cpu_ratio_median{suffix}": round(statistics.median(cpu_ratios), 3),
            f"cpu_ratio_range{suffix}": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)],
        }
    summary["cpu_us_median"] = [round(statistics.median(cpus[rev]), 1) for rev in revisions]
    print(json.dumps(summary))
    if args.callgrind:  # kept for callgrind_annotate: build/bench-compare/callgrind/
        kept = WORK / "callgrind"
        kept.mkdir(exist_ok=True)
        for dump in (WORK / "workspaces").glob("*.callgrind.1"):
            shutil.move(dump, kept / dump.name)
    shutil.rmtree(stale, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(WORK / "workspaces", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("head", nargs="*", help="one or more (HEAD by default)")
    parser.add_argument("--sends", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--transport", choices=("jsonrpc", "rest", "grpc"), default="jsonrpc")
    parser.add_argument(
        "--retries",
        action="store_true",
        help="every send has the same messageId (as the side-by-side bench's gRPC sends):"
        " after the first, retries answered from the stored task",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="the measured sends retry, each once, the sends a server stopped before made"
        " (as the side-by-side bench's JSON-RPC and HTTP+JSON sends do after its first"
        " warm-up): retries answered from the stored task files by a fresh process",
    )
    parser.add_argument("--streams", type=int, default=0, metavar="CHUNKS")
    parser.add_argument("--store", choices=("workspace", "memory"), default="workspace")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="serve under valgrind's callgrind: instructions per operation (user space"
        " only, so no system call's cost) instead of CPU time, the same on a busy host",
    )
    parser.add_argument(
        "--strace",
        action="store_true",
        help="attach strace -f -c to the server for the timed part: system calls per"
        " operation (the main ones printed) instead of CPU time",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep build/bench-compare/workspaces (the stores, callgrind and strace"
        " outputs) after the run, for a look at them (callgrind_annotate)",
    )
    args = parser.parse_args()
    if args.replay and (args.transport == "grpc" or args.retries or args.streams):
        parser.error("--replay is for blocking JSON-RPC or HTTP+JSON sends")
    asyncio.run(compare(args))


if __name__ == "__main__":
    main()
