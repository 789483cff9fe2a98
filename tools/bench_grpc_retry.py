"""Our Python on a retried gRPC SendMessage, in process, without grpc's own machinery.

    .venv/bin/python -P tools/bench_grpc_retry.py [--calls 20000] [--profile] [--new]

A gateway as ``serve --faux --allow-anonymous`` builds it (the file store in a fresh
workspace under ``build/``, metrics on as by default, the drain gate), started; then the
binding's SendMessage handler (:class:`RpcAdapter.unary`, as the gRPC server holds it)
is called with a stand-in for grpc's servicer context that hands over the request's
bytes (the bench's request: one text part, messageId ``m1``, ``a2a-version: 1.0``
metadata, no deadline). The first call makes the task; the measured ones are retries
answered from it, as in the side-by-side bench's gRPC load (``--new``: a new messageId
each call instead; ``--no-metrics``: as ``serve --no-metrics``; ``--no-memo``: without
the binding's retry memo, ``server/retry_memo.py``). Prints microseconds
per call (best of several rounds); ``--profile`` prints cProfile's top functions
instead. Under valgrind's callgrind, the count of a run of 6,000 calls less one of 2,000,
over 4,000, is instructions per call (docs/performance.md). A measurement, never a
test: the whole-server figure is ``tools/bench_compare.py --transport grpc --retries
--callgrind``'s.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR
from a2a_gateway.serve import Gateway
from a2a_gateway.server.grpc_binding import CallWatch, GrpcBounds, RpcAdapter
from a2a_gateway.settings import resolve

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 5


class Context:
    """What the binding asks of grpc's servicer context on a unary call."""

    def __init__(self, request: bytes) -> None:
        self.request = request

    async def read(self) -> bytes:
        return self.request

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("user-agent", "grpc-python-asyncio/1.85.0 grpc-c/52.0.0"), ("a2a-version", "1.0"))

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def time_remaining(self) -> None:
        return None

    async def send_initial_metadata(self, metadata: Any) -> None:
        return None

    async def abort(self, code: Any, details: str, trailing: Any) -> None:
        raise RuntimeError(f"aborted: {code} {details}")


def request(message_id: str) -> bytes:
    message = pb.Message(role=pb.Role.ROLE_USER, message_id=message_id, parts=[pb.Part(text="hi")])
    return pb.SendMessageRequest(message=message).SerializeToString()


async def main(args: argparse.Namespace) -> None:
    workspace = ROOT / "build" / "bench-grpc-retry"
    shutil.rmtree(workspace, ignore_errors=True)
    flags = {"workspace": [str(workspace)], "allow_anonymous": True, "port": 0, "faux": True}
    if args.no_metrics:
        flags["metrics"] = False
    gateway = Gateway(resolve(flags, environ={}))
    await gateway.start()
    try:
        method = SERVICE_DESCRIPTOR.methods_by_name["SendMessage"]
        adapter = RpcAdapter(
            method,
            gateway.service,
            gateway.authenticator,
            bounds=GrpcBounds(),
            watch=CallWatch(),
            meter=gateway.metrics.grpc,
            memo=None if args.no_memo else gateway.retry_memo,
        )
        unary = adapter.unary
        ids = itertools.count()

        def context() -> Context:
            return Context(request(f"n{next(ids)}" if args.new else "m1"))

        answer = pb.SendMessageResponse.FromString(await unary(None, context()))  # type: ignore[arg-type]
        assert answer.task.status.state == pb.TaskState.TASK_STATE_COMPLETED, answer
        contexts = [context() for _ in range(args.calls)]

        async def run() -> float:
            started = time.perf_counter()
            for ctx in contexts:
                await unary(None, ctx)  # type: ignore[arg-type]
            return (time.perf_counter() - started) / args.calls * 1e6

        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            await run()
            profile.disable()
            stats = pstats.Stats(profile, stream=sys.stdout)
            stats.sort_stats(args.sort).print_stats(args.top)
            return
        best = min([await run() for _ in range(args.rounds)])
        print(f"{best:.2f} us per {'new' if args.new else 'retried'} send (best of {args.rounds})")
    finally:
        await gateway.stop()
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--new", action="store_true")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--no-metrics", action="store_true", help="as serve --no-metrics")
    parser.add_argument("--no-memo", action="store_true", help="without the retry memo")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--top", type=int, default=45)
    uvloop.run(main(parser.parse_args()))
