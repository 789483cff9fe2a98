"""Shares of a server's event loop by function, from a py-spy recording.

    py-spy record -p PID -r 250 -d 7 -f raw -o out.raw     # while a load runs
    .venv/bin/python -P tools/spy_shares.py out.raw [--top 60] [--lines] [--thread NAME]

py-spy's ``raw`` output is one line per distinct stack (``frame;frame;... count``) over
every thread. This keeps the stacks of one thread (those with a frame containing
``--thread``, by default ``_run_host``: the gateway's event loop) and prints, as shares of
that thread's samples, each function's inclusive time (its stacks) and self time (the
stacks it ends). A gateway pinned to one busy core is sampled on the loop nearly always,
so the shares are shares of the core's time left to the loop; another thread's work
(the task index's writer) shows when ``--thread`` names it. Functions are named as py-spy
names them, with the file's last component (and the line with ``--lines``).

A measurement, never a test. docs/performance.md (eighth session) has the recipe it was
made for: the bench's own wrk Lua against a pinned server, warm-up then measured run.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

#: ``name (path/to/file.py:123)`` -> ``name (file.py:123)``.
_FRAME = re.compile(r" \((?:[^()]*/)?([^/()]+):(\d+)\)$")


def _frame_name(frame: str, lines: bool) -> str:
    return _FRAME.sub(lambda m: f" ({m[1]}:{m[2]})" if lines else f" ({m[1]})", frame)


def shares(path: Path, thread: str, lines: bool) -> tuple[int, Counter[str], Counter[str]]:
    """The thread's sample count and each function's inclusive and self samples."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or thread not in stack:
            continue
        samples = int(count)
        total += samples
        names = [_frame_name(frame, lines) for frame in stack.split(";")]
        for name in set(names):
            inclusive[name] += samples
        own[names[-1]] += samples
    return total, inclusive, own


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("raw", type=Path, help="py-spy record -f raw output")
    parser.add_argument("--top", type=int, default=60, help="functions listed (each list)")
    parser.add_argument("--lines", action="store_true", help="one entry per line, not function")
    parser.add_argument("--thread", default="_run_host", help="a frame of the thread's stacks")
    args = parser.parse_args()
    total, inclusive, own = shares(args.raw, args.thread, args.lines)
    print(f"{total} samples of the thread with a {args.thread!r} frame")
    if not total:
        return
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"--- {title}")
        for name, samples in counts.most_common(args.top):
            print(f"{100 * samples / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
