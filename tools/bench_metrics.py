"""What the metrics seam costs per call, in-process (docs/performance.md, issue 28).

    .venv/bin/python -P tools/bench_metrics.py [--callgrind]

Times what a binding does per call with metrics on (``BindingMeter``: ``start`` and
``done``, i.e. the clock twice, a dict lookup and an add for the count, a bisect and two
adds for the histogram) against metrics off (``NULL_METER``), a stream's extra reports
(``observe``, ``opened``, ``closed``, ``count``), one awaited store operation timed by
``meter_store``'s wrapper against the bare method (a blocking send makes a few: the
retry-key lookup, the saves, a load); then one scrape (``exposition``) with every method
x binding x a few outcomes in use. Best of several rounds, to see the
cost without the host's noise; the sends/s comparison is the side-by-side bench's.

``--callgrind`` counts instructions instead (the same on a busy host): this script under
valgrind's callgrind, once for 1,000 and once for 21,000 calls of each loop (a meter on
and off, a store operation timed and bare); the difference ÷ 20,000 is per call.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from a2a_gateway.server.metrics import METHODS, NULL_METER, Meter, Metrics, StoreMeter, meter_store

ROUNDS = 7
CALLS = 200_000


def best_ns(fn: Callable[[], None], calls: int) -> float:
    """Best per-call time over ROUNDS rounds of ``calls`` calls, in ns."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        fn()
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def unary(meter: Meter) -> Callable[[], None]:
    def run() -> None:
        done = meter.done
        start = meter.start
        for _ in range(CALLS):
            done("SendMessage", "OK", start())

    return run


def stream(meter: Meter) -> Callable[[], None]:
    def run() -> None:
        for _ in range(CALLS):
            started = meter.start()
            meter.observe("SendStreamingMessage", started)
            meter.opened()
            meter.closed()
            meter.count("SendStreamingMessage", "OK")

    return run


class _Store:
    """A store whose ``load`` answers at once: what the timing wrapper adds, alone."""

    kind = "files"

    def store_gauges(self) -> Mapping[str, int]:
        return {}

    async def load(self, caller: object, task_id: str) -> None:
        return None


def store_operation(timed: bool) -> Callable[[], None]:
    store = _Store()
    if timed:
        meter_store(store, StoreMeter(store))

    async def calls() -> None:
        load = store.load
        for _ in range(CALLS):
            await load(None, "t")

    loop = asyncio.new_event_loop()
    return lambda: loop.run_until_complete(calls())


LOOPS: dict[str, Callable[[], Callable[[], None]]] = {
    "meter on": lambda: unary(Metrics().grpc),
    "meter off": lambda: unary(NULL_METER),
    "store op timed": lambda: store_operation(True),
    "store op bare": lambda: store_operation(False),
}


def instructions(loop: str, calls: int) -> int:
    """What callgrind counts for this script running ``calls`` calls of ``loop``."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        command += [sys.executable, "-P", __file__, "--only", loop, "--calls", str(calls)]
        subprocess.run(command, check=True, capture_output=True, timeout=1200)
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"no totals for {loop}")


def count_instructions() -> None:
    for loop in LOOPS:
        per_call = (instructions(loop, 21_000) - instructions(loop, 1_000)) / 20_000
        print(f"{loop}: {per_call:,.0f} instructions a call", flush=True)


def main() -> None:
    global CALLS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--only", choices=tuple(LOOPS), help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=CALLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:  # one loop, once: what --callgrind counts
        CALLS = args.calls
        LOOPS[args.only]()()
        return
    if args.callgrind:
        count_instructions()
        return
    metrics = Metrics()
    meter = metrics.jsonrpc
    on = best_ns(unary(meter), CALLS)
    off = best_ns(unary(NULL_METER), CALLS)
    print(f"unary call: metrics on {on:.0f} ns, off {off:.0f} ns, cost {on - off:.0f} ns")
    on = best_ns(stream(meter), CALLS)
    off = best_ns(stream(NULL_METER), CALLS)
    print(f"stream:     metrics on {on:.0f} ns, off {off:.0f} ns, cost {on - off:.0f} ns")
    on = best_ns(store_operation(True), CALLS)
    off = best_ns(store_operation(False), CALLS)
    print(f"store op:   metrics on {on:.0f} ns, off {off:.0f} ns, cost {on - off:.0f} ns")
    for each in (metrics.jsonrpc, metrics.rest, metrics.grpc):
        for method in METHODS:
            for outcome in ("OK", "TASK_NOT_FOUND", "INVALID_PARAMS", "UNAUTHENTICATED"):
                each.done(method, outcome, each.start())
    size = len(metrics.exposition())
    scrape = best_ns(lambda: [metrics.exposition() for _ in range(20)] and None, 20)
    print(f"scrape with every method x binding in use: {scrape / 1e6:.1f} ms, {size} bytes")


if __name__ == "__main__":
    main()
