"""Seed a workspace with many task files, fast (for the ListTasks benchmarks).

    .venv/bin/python -P tools/seed_tasks.py /work/bench17/ws --count 1000000

Writes ``<workspace>/.a2a/tasks/<id>.json`` files in the task-file format of
``server/file_store/task_file.py`` (version 1, ProtoJSON task, no push configs), owned by the
anonymous caller (``--owner NAME`` for another). Each task has one user message and one
``response`` artifact; status timestamps are spread evenly over the last ``--days``
days (ids are time-ordered like the server's, so newest-first is also id order). Contexts cycle over
``--contexts`` ids (``ctx-00000``...), states are mostly COMPLETED with some FAILED,
CANCELED and INPUT_REQUIRED (so status filters have something to find).

It does not touch the index: the server builds it (that is the rebuild the bench times).
Files are written with plain ``os.open``/``os.write`` from a pre-encoded template, no
JSON encoder, no temp file: ~20-60 k files/s here, bounded by the file system.
Keep seeded workspaces under /work, never /tmp (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path

from a2a_gateway.local.layout import WorkspaceLayout

STATES = (
    ("TASK_STATE_COMPLETED", 90),
    ("TASK_STATE_FAILED", 4),
    ("TASK_STATE_CANCELED", 3),
    ("TASK_STATE_INPUT_REQUIRED", 3),
)

TEMPLATE = """{
  "version": 1,
  "owner": {
    "name": "%(owner)s",
    "workspace": "%(workspace)s"
  },
  "task": {
    "id": "%(id)s",
    "contextId": "%(context)s",
    "status": {
      "state": "%(state)s",
      "timestamp": "%(timestamp)s"
    },
    "artifacts": [
      {
        "artifactId": "%(artifact)s",
        "name": "response",
        "parts": [
          {
            "text": "seeded answer %(n)d"
          }
        ]
      }
    ],
    "history": [
      {
        "messageId": "seed-%(n)d",
        "contextId": "%(context)s",
        "taskId": "%(id)s",
        "role": "ROLE_USER",
        "parts": [
          {
            "text": "seeded question %(n)d"
          }
        ]
      }
    ]
  },
  "pushConfigs": []
}
"""


def uuid7(ms: int, seq: int) -> str:
    """A version-7 UUID string for millisecond ``ms`` (ordered by ms, then seq)."""
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (seq & 0xFFF) << 64 | 0b10 << 62
    value |= int.from_bytes(secrets.token_bytes(8), "big") >> 2
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def iso_ms(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def state_table() -> list[str]:
    table: list[str] = []
    for name, weight in STATES:
        table.extend([name] * weight)
    return table


def seed(
    workspace: str, count: int, *, contexts: int, days: float, owner: str, owner_ws: str
) -> float:
    folder = str(WorkspaceLayout(Path(workspace)).tasks)
    os.makedirs(folder, exist_ok=True)
    states = state_table()
    now_ms = time.time_ns() // 1_000_000
    span_ms = max(int(days * 86_400_000), count)
    step = span_ms / count
    start = time.perf_counter()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    last_report = start
    for n in range(count):
        ms = now_ms - span_ms + int(n * step)
        task_id = uuid7(ms, n)
        data = TEMPLATE % {
            "owner": owner,
            "workspace": owner_ws,
            "id": task_id,
            "context": f"ctx-{n % contexts:05d}",
            "state": states[n % len(states)],
            "timestamp": iso_ms(ms),
            "artifact": uuid7(ms, n + 1),
            "n": n,
        }
        fd = os.open(f"{folder}/{task_id}.json", flags, 0o600)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)
        if n % 50_000 == 0 and time.perf_counter() - last_report > 5:
            last_report = time.perf_counter()
            rate = n / (last_report - start)
            print(f"{n:,} files, {rate:,.0f}/s", file=sys.stderr, flush=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workspace")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--contexts", type=int, default=1000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--owner", default="anonymous")
    parser.add_argument("--owner-workspace", default="")
    args = parser.parse_args(argv)
    if args.count < 1 or args.contexts < 1:
        parser.error("--count and --contexts must be at least 1")
    took = seed(
        args.workspace,
        args.count,
        contexts=args.contexts,
        days=args.days,
        owner=args.owner,
        owner_ws=args.owner_workspace,
    )
    print(f"seeded {args.count:,} task files in {took:.1f} s ({args.count / took:,.0f}/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
