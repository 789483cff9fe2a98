"""One gateway served several ways (settings, environment, revisions), side by side:
server CPU per operation and the rate, in interleaved rounds.

    .venv/bin/python -P tools/bench_modes.py MODE [MODE ...] [--sends 3000] [--rounds 6]
        [--concurrency 16] [--streams CHUNKS] [--store workspace|memory]
        [--transport jsonrpc|rest|grpc] [--same-message] [--callgrind]

Each MODE is ``NAME=REV [ARG ...]``: ``REV`` is a revision (anything ``git rev-parse``
takes; its package tree is built as tools/bench_compare.py does) or ``WORK`` for this
working tree as installed in the venv; each ``ARG`` is added to ``a2a-gateway serve
--faux --allow-anonymous``, except ``KEY=VALUE`` with an upper-case ``KEY``, which goes
into the server's environment. ``{otlp}`` in an argument or a value is the URL of an
OTLP/HTTP receiver this tool starts (tools/otlp_sink.py, its own process), which counts
the spans it receives: the report gives the spans received per operation, so spans
dropped by a full queue show up. Example, tracing against off:

    .venv/bin/python -P tools/bench_modes.py off=WORK 'traced=WORK --otlp-endpoint {otlp}'

Rounds rotate the modes' order; every round starts a fresh server on a fresh workspace
(under ``build/``), warms it up (500 sends, or 100 streams), then measures ``--sends``
blocking sends over ``--transport`` (JSON-RPC by default; ``grpc``: unary SendMessage
on one channel), or JSON-RPC streams of the faux agent's ``chunks:CHUNKS``.
``--same-message`` sends one messageId every time, as the side-by-side bench does (after
the first, each send is a retry answered from the stored task). Prints each round, then
per mode the medians: server CPU per operation (utime + stime from /proc, steadier than
the rate on a shared machine), the rate, and both against the first mode. With
``--callgrind`` the server runs under valgrind's callgrind and the figure is
instructions per operation (user space, every thread, counted only while the measured
load runs: the same on a busy host) instead of CPU time.
A measurement, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # python -P leaves the script's folder out

from bench_compare import (  # noqa: E402
    callgrind_control,
    package_tree,
    resolve,
    server_cpu_s,
)
from load import free_port, grpc_sends, sends, stream_events, wait_ready  # noqa: E402

WORK = ROOT / "build" / "bench-modes"
ENV_ARG = re.compile(r"^[A-Z][A-Z0-9_]*=")


@dataclass
class Mode:
    name: str
    tree: Path | None  # None: the working tree, as installed in the venv
    args: list[str]
    env: dict[str, str]
    cpus: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)

    @property
    def traced(self) -> bool:
        """Whether this mode sends spans to the receiver this tool starts."""
        return any("127.0.0.1" in word for word in [*self.args, *self.env.values()])


def parse_mode(spec: str, otlp: str) -> Mode:
    name, _, rest = spec.partition("=")
    words = [word.replace("{otlp}", otlp) for word in shlex.split(rest)]
    if not name or not words:
        raise SystemExit(f"a mode is NAME=REV [ARG ...], not {spec!r}")
    rev, *more = words
    tree = None if rev == "WORK" else package_tree(resolve(rev))
    env = dict(word.split("=", 1) for word in more if ENV_ARG.match(word))
    args = [word for word in more if not ENV_ARG.match(word)]
    return Mode(name, tree, args, env)


async def spans_received(http: aiohttp.ClientSession, sink: str) -> int:
    async with http.get(sink + "/count") as response:
        return int(await response.text())


def thread_instructions(out: Path, ops: int) -> float:
    """The instructions of every thread in the dump asked for (``<out>.1-NN``, one file
    a thread); each thread's share per operation printed."""
    total = 0.0
    shares = []
    for dump in sorted(out.parent.glob(out.name + ".1-*")):
        for line in dump.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                count = float(line.split()[1])
                total += count
                shares.append(f"{dump.name.rsplit('-', 1)[1]}: {count / ops:,.0f}")
                break
    print(f"{out.stem}: per operation, by thread: " + ", ".join(shares), flush=True)
    return total


async def spans_settled(http: aiohttp.ClientSession, sink: str, start: int) -> None:
    """Wait (bounded, 30 s) until the spans made since the receiver counted ``start``
    are exported: the count has grown, then stood still for 6 s (longer than the
    exporter's batch delay)."""
    seen, still = await spans_received(http, sink), 0
    for _ in range(60):
        await asyncio.sleep(0.5)
        now = await spans_received(http, sink)
        still = still + 1 if now == seen else 0
        seen = now
        if seen > start and still >= 12:
            return


async def one_round(mode: Mode, args: argparse.Namespace, number: int, sink: str) -> None:
    workspace = WORK / f"workspaces-{os.getpid()}" / f"{mode.name}-{number}"
    workspace.mkdir(parents=True)
    os.sync()
    await asyncio.sleep(1)  # the disk settled (see tools/bench_compare.py)
    port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-P", "-m", "a2a_gateway", "serve", "--faux", "--allow-anonymous"]
    out = workspace.parent / f"{mode.name}-{number}.callgrind"
    if args.callgrind:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}",
            *command,
        ]
    grpc = args.transport == "grpc" and not args.streams
    command += ["--workspace", str(workspace), "--port", str(port)]
    command += ["--grpc-port", str(grpc_port) if grpc else "-1"]
    command += ["--store", args.store, *mode.args]
    env = {**os.environ, **mode.env}
    if mode.tree is not None:
        env["PYTHONPATH"] = str(mode.tree)
    server = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(base + "/.well-known/agent-card.json", 600 if args.callgrind else 10)

        async def load(count: int) -> float:
            if args.streams:
                url = base + "/a2a"
                return (await stream_events(url, {}, count, args.streams, args.concurrency))[0]
            if grpc:
                target = f"127.0.0.1:{grpc_port}"
                return await grpc_sends(target, count, args.concurrency, message_id=same)
            rest = args.transport == "rest"
            url = base + ("/a2a/v1/message:send" if rest else "/a2a")
            return await sends(url, {}, count, args.concurrency, rest=rest, message_id=same)

        same = f"bench-{number}" if args.same_message else None
        async with aiohttp.ClientSession() as http:
            start = await spans_received(http, sink)
            await load(min(100 if args.streams else 500, args.sends))  # warm up
            if args.callgrind and mode.traced:
                # The warm-up's spans exported before counting starts, the measured
                # ones after, so the count holds the export of exactly these.
                await spans_settled(http, sink, start)
            if args.callgrind:
                await callgrind_control(server.pid, "--instr=on")
            before = await spans_received(http, sink)
            if args.callgrind:
                await callgrind_control(server.pid, "--zero")
            cpu = server_cpu_s(server.pid)
            rate = await load(args.sends)
            used = server_cpu_s(server.pid) - cpu
            if args.callgrind:
                if mode.traced:
                    await spans_settled(http, sink, before)
                await callgrind_control(server.pid, "--dump")
                used = thread_instructions(out, args.sends) / 1e6
            server.terminate()
            await asyncio.wait_for(server.wait(), 30)  # exports what is batched
            spans = await spans_received(http, sink) - before
    finally:
        if server.returncode is None:
            server.terminate()
            await asyncio.wait_for(server.wait(), 30)
    mode.cpus.append(used / args.sends * 1e6)
    mode.rates.append(rate)
    mode.spans.append(spans / args.sends)


async def run(args: argparse.Namespace) -> None:
    sink_port = free_port()
    sink_url = f"http://127.0.0.1:{sink_port}"
    modes = [parse_mode(spec, sink_url) for spec in args.modes]
    shutil.rmtree(WORK / f"workspaces-{os.getpid()}", ignore_errors=True)
    sink = await asyncio.create_subprocess_exec(
        sys.executable, "-P", str(ROOT / "tools" / "otlp_sink.py"), str(sink_port)
    )
    try:
        await wait_ready(sink_url + "/count")
        unit = "instructions" if args.callgrind else "us"
        for number in range(args.rounds):
            shift = number % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                await one_round(mode, args, number, sink_url)
            print(
                f"round {number + 1}: "
                + ", ".join(
                    f"{m.name} {m.cpus[-1]:.1f} {unit} {m.rates[-1]:.0f}/s {m.spans[-1]:.2f} spans"
                    for m in modes
                ),
                flush=True,
            )
    finally:
        sink.terminate()
        await sink.wait()
        shutil.rmtree(WORK / f"workspaces-{os.getpid()}", ignore_errors=True)
    first = modes[0]
    unit = "stream" if args.streams else "send"
    figure = f"instructions_per_{unit}" if args.callgrind else f"cpu_us_per_{unit}"
    for mode in modes:
        cpu = statistics.median(mode.cpus)
        rate = statistics.median(mode.rates)
        summary = {
            "mode": mode.name,
            figure: round(cpu, 1),
            "cpu_min_max": [round(min(mode.cpus), 1), round(max(mode.cpus), 1)],
            "rate": round(rate),
            "spans_per_op": round(statistics.median(mode.spans), 2),
            "cpu_vs_first": round(cpu / statistics.median(first.cpus), 3),
            "rate_vs_first": round(rate / statistics.median(first.rates), 3),
        }
        print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modes", nargs="+", metavar="MODE")
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--streams", type=int, default=0, metavar="CHUNKS")
    parser.add_argument("--store", choices=("workspace", "memory"), default="workspace")
    parser.add_argument("--transport", choices=("jsonrpc", "rest", "grpc"), default="jsonrpc")
    parser.add_argument(
        "--same-message",
        action="store_true",
        help="one messageId for every send of a round (retries, as the side-by-side bench)",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="serve under valgrind's callgrind, counting only the measured operations and"
        " the export of their spans: instructions per operation (the 'us' printed)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
