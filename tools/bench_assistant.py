"""Benchmark of ``serve --llm`` against a zero-latency scripted provider (not a test).

    .venv/bin/python -P tools/bench_assistant.py --workdir ../bench-assistant [--duration 5]

Starts, as subprocesses: the scripted OpenAI-compatible provider of the tests
(``tests/agent/fake_llm.py``), a gateway with ``--llm`` on it, and a gateway with
``--faux``; then measures, with an aiohttp load generator in this process:

1. Added latency per streamed token: the provider writes tokens stamped with
   ``time.monotonic_ns()`` (one every 2 ms); the time from stamp to arrival at a
   streaming JSON-RPC client, through the gateway, against the same tokens read
   straight from the provider (p50, p99).
2. Turns per second with 32 concurrent sessions (each its own contextId, blocking
   SendMessage ``hi``), on the LLM agent and on the faux agent.
3. Memory (RSS of the gateway) per idle session, and per session after idle eviction,
   next to the faux agent's memory per finished task.

Workspaces go under ``--workdir`` (keep it out of the system temp folder).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the provider subprocess -----------------------------------------------------------


def run_fake(port: int) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.agent.fake_llm import FakeLLM, Reply, Say, Ticks

    def responder(body: dict[str, Any]) -> Reply:
        text = body["messages"][-1].get("content") or ""
        if "ticks:" in text:
            count, interval_ms = text.rsplit("ticks:", 1)[1].split(":")
            return Ticks(int(count), float(interval_ms) / 1000)
        return Say(chunks=["Hello", " there", "!"])

    async def main() -> None:
        fake = FakeLLM(responder)
        fake.record = False
        await fake.start(port)
        await asyncio.Event().wait()  # until SIGTERM

    asyncio.run(main())


# --- processes -------------------------------------------------------------------------


class Proc:
    def __init__(self, name: str, argv: list[str], log: Path, cpu: str | None) -> None:
        if cpu is not None and shutil.which("taskset"):
            argv = ["taskset", "-c", cpu, *argv]
        self.name = name
        self.log = log.open("wb")
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self.log, stderr=self.log)

    def rss_kib(self) -> int:
        pid = self.proc.pid
        # taskset execs the command: the pid is the server's.
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_s(self) -> float:
        """User + system CPU seconds the process has used."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


async def wait_http(url: str) -> None:
    deadline = time.monotonic() + 30.0
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as response:
                    if response.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


def gateway(
    name: str,
    workdir: Path,
    agent: list[str],
    extra: list[str] = (),  # type: ignore[assignment]
) -> tuple[Proc, str]:
    workspace = workdir / name
    if workspace.exists():
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    port = free_port()
    argv = [PY, "-P", "-m", "a2a_gateway", "serve", *agent, "--workspace", str(workspace)]
    argv += ["--allow-anonymous", "--port", str(port), "--grpc-port", "-1"]
    argv += ["--log-level", "warning", "--max-running-tasks", "0", *extra]
    return Proc(name, argv, workdir / f"{name}.log", "1"), f"http://127.0.0.1:{port}"


# --- load ------------------------------------------------------------------------------

_ids = itertools.count()


def send_body(text: str, context_id: str, method: str = "SendMessage") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": method,
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": str(uuid.uuid4()),
                "contextId": context_id,
                "parts": [{"text": text}],
            }
        },
    }


HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}


async def sse_data(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async for raw in response.content:
        line = raw.strip()
        if line.startswith(b"data:"):
            data = line[5:].strip()
            if data and data != b"[DONE]":
                yield json.loads(data)


async def token_latency_via_gateway(base: str, tokens: int, interval_ms: int) -> list[float]:
    latencies: list[float] = []
    body = send_body(f"ticks:{tokens}:{interval_ms}", str(uuid.uuid4()), "SendStreamingMessage")
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + "/a2a", json=body, headers=HEADERS) as response,
    ):
        async for event in sse_data(response):
            update = event.get("result", {}).get("artifactUpdate")
            if update is None:
                continue
            now = time.monotonic_ns()
            for part in update["artifact"]["parts"]:
                for stamp in part.get("text", "").split():
                    latencies.append((now - int(stamp)) / 1e6)
    return latencies


async def token_latency_direct(provider: str, tokens: int, interval_ms: int) -> list[float]:
    latencies: list[float] = []
    body = {
        "model": "fake",
        "stream": True,
        "messages": [{"role": "user", "content": f"ticks:{tokens}:{interval_ms}"}],
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(provider + "/chat/completions", json=body) as response,
    ):
        async for event in sse_data(response):
            now = time.monotonic_ns()
            for choice in event.get("choices", []):
                for stamp in (choice["delta"].get("content") or "").split():
                    latencies.append((now - int(stamp)) / 1e6)
    return latencies


async def turns_per_second(base: str, sessions: int, duration: float) -> float:
    done = 0
    stop_at = time.monotonic() + 1.0 + duration
    start_counting = time.monotonic() + 1.0
    connector = aiohttp.TCPConnector(limit=sessions)

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal done
        context_id = str(uuid.uuid4())
        while time.monotonic() < stop_at:
            async with http.post(
                base + "/a2a", json=send_body("hi", context_id), headers=HEADERS
            ) as r:
                answer = await r.json()
            state = answer["result"]["task"]["status"]["state"]
            if state != "TASK_STATE_COMPLETED":
                raise RuntimeError(f"turn ended {state}: {answer}")
            if time.monotonic() >= start_counting:
                done += 1

    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(worker(http) for _ in range(sessions)))
    return done / duration


async def memory_per_session(
    proc: Proc, base: str, count: int, evict_wait: float | None
) -> tuple[float, float | None]:
    async with aiohttp.ClientSession() as http:

        async def one(context_id: str) -> None:
            async with http.post(
                base + "/a2a", json=send_body("hi", context_id), headers=HEADERS
            ) as r:
                await r.read()

        for _ in range(20):  # warm up (imports, pools, first sessions)
            await one(str(uuid.uuid4()))
        await asyncio.sleep(0.5)
        before = proc.rss_kib()
        for batch in range(0, count, 50):
            await asyncio.gather(*(one(str(uuid.uuid4())) for _ in range(min(50, count - batch))))
        await asyncio.sleep(0.5)
        idle = proc.rss_kib()
        evicted = None
        if evict_wait is not None:
            await asyncio.sleep(evict_wait)
            evicted = proc.rss_kib()
    per_idle = (idle - before) / count
    per_evicted = None if evicted is None else (evicted - before) / count
    return per_idle, per_evicted


async def memory_in_process(count: int, workspace: Path) -> tuple[float, float]:
    """Python heap per idle session and per evicted session (tracemalloc), runtime only,
    against an in-process scripted provider and an injected clock."""
    import tracemalloc

    sys.path.insert(0, str(ROOT))
    from a2a_gateway.agent.provider import ChatProvider, ProviderConfig
    from a2a_gateway.agent.runtime import Runtime, RuntimeConfig
    from tests.agent.fake_llm import FakeLLM, Say

    fake = FakeLLM(lambda body: Say(chunks=["Hello", " there", "!"]))
    fake.record = False
    await fake.start()
    now = [0.0]
    provider = ChatProvider(ProviderConfig(model="fake", base_url=fake.base_url, max_retries=0))
    runtime = Runtime(provider, RuntimeConfig(idle_timeout_s=60), clock=lambda: now[0])

    async def turn(scope: str) -> None:
        async for _ in runtime.run_turn(scope, workspace, "hi"):
            pass

    for index in range(20):
        await turn(f"warm-{index}")
    now[0] += 120
    runtime.sessions.sweep()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for index in range(count):
        await turn(f"mem-{index}")
    idle = tracemalloc.get_traced_memory()[0]
    now[0] += 120
    evicted_count = runtime.sessions.sweep()
    evicted = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    await runtime.aclose()
    await fake.aclose()
    assert evicted_count == count, evicted_count
    return (idle - before) / count / 1024, (evicted - before) / count / 1024


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(args: argparse.Namespace) -> None:
    workdir: Path = args.workdir
    fake_port = free_port()
    provider = f"http://127.0.0.1:{fake_port}/v1"
    fake = Proc(
        "fake", [PY, "-P", __file__, "fake", "--port", str(fake_port)], workdir / "fake.log", "0"
    )
    llm_args = [
        "--llm",
        "--llm-model",
        "fake",
        "--llm-base-url",
        provider,
        "--llm-max-retries",
        "0",
    ]
    procs = [fake]
    try:
        llm, llm_url = gateway("llm", workdir, llm_args)
        faux, faux_url = gateway("faux", workdir, ["--faux"])
        procs += [llm, faux]
        for url in (llm_url, faux_url):
            await wait_http(url + "/.well-known/agent-card.json")
        await asyncio.sleep(0.5)

        tokens, interval = args.tokens, 2
        await token_latency_direct(provider, tokens, interval)  # warm-up
        via: list[float] = []
        start_cpu = llm.cpu_s()
        for _ in range(args.latency_runs):
            via += await token_latency_via_gateway(llm_url, tokens, interval)
        token_cpu_ms = (llm.cpu_s() - start_cpu) * 1000 / max(1, len(via))
        direct_all: list[float] = []
        for _ in range(args.latency_runs):
            direct_all += await token_latency_direct(provider, tokens, interval)
        print(f"tokens: {len(via)} via gateway, {len(direct_all)} direct (1 every {interval} ms)")
        for name, values in (("direct", direct_all), ("via gateway", via)):
            print(f"  {name:12} p50 {pct(values, 0.5):.3f} ms  p99 {pct(values, 0.99):.3f} ms")
        print(
            f"  added        p50 {pct(via, 0.5) - pct(direct_all, 0.5):.3f} ms"
            f"  p99 {pct(via, 0.99) - pct(direct_all, 0.99):.3f} ms"
        )
        print(f"  gateway CPU per streamed token ~{token_cpu_ms:.3f} ms")

        for name, url, proc in (("llm", llm_url, llm), ("faux", faux_url, faux)):
            rates, cpu, fake_cpu = [], [], []
            for _ in range(args.repeats):
                start_cpu, start_fake = proc.cpu_s(), fake.cpu_s()
                rate = await turns_per_second(url, 32, args.duration)
                rates.append(round(rate, 1))
                # CPU per turn (the warm-up second's turns counted as at the same rate).
                turns = rate * (args.duration + 1)
                cpu.append((proc.cpu_s() - start_cpu) * 1000 / turns)
                fake_cpu.append((fake.cpu_s() - start_fake) * 1000 / turns)
            print(
                f"turns/s, 32 sessions, {name}: median {statistics.median(rates):.0f} {rates};"
                f" CPU per turn: gateway ~{statistics.median(cpu):.2f} ms,"
                f" provider ~{statistics.median(fake_cpu):.2f} ms"
            )
        for proc in (llm, faux):
            proc.stop()

        # Memory: a gateway whose sessions go idle after 3 s (the sweeper runs every 1.5 s).
        llm2, llm2_url = gateway("llm-mem", workdir, [*llm_args, "--session-idle-timeout", "3"])
        faux2, faux2_url = gateway("faux-mem", workdir, ["--faux"])
        procs += [llm2, faux2]
        for url in (llm2_url, faux2_url):
            await wait_http(url + "/.well-known/agent-card.json")
        idle, evicted = await memory_per_session(llm2, llm2_url, args.sessions, 6.0)
        faux_idle, _ = await memory_per_session(faux2, faux2_url, args.sessions, None)
        print(
            f"memory ({args.sessions} sessions): llm {idle:.1f} KiB per idle session,"
            f" {evicted:.1f} KiB per session after eviction; faux {faux_idle:.1f} KiB per task"
        )
        heap_idle, heap_evicted = await memory_in_process(args.sessions, workdir / "heap")
        print(
            f"python heap (runtime only, {args.sessions} sessions): {heap_idle:.2f} KiB per"
            f" idle session, {heap_evicted:.2f} KiB per evicted session"
        )
    finally:
        for proc in procs:
            proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    fake = sub.add_parser("fake")
    fake.add_argument("--port", type=int, required=True)
    parser.add_argument("--workdir", default="../bench-assistant")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--latency-runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    args.workdir = Path(args.workdir).resolve()
    (args.workdir / "heap").mkdir(parents=True, exist_ok=True)
    if args.command == "fake":
        run_fake(args.port)
    else:
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
