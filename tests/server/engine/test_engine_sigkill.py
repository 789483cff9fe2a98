"""A real crash: a process running the engine over the workspace file store is killed
with SIGKILL while runs are in flight and tasks are being written; a new store and
engine on the same folder must find every task file valid, every interrupted run
failed "server restarted", and input-required tasks intact."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
from pathlib import Path

from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.server.engine import SERVER_RESTARTED, TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore, decode_record
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, ctx, state_name, status_text

CHILD = """
import asyncio, itertools, json, sys
from pathlib import Path
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore
from lf.a2a.v1 import a2a_pb2 as pb

ids = itertools.count()

def request(text, return_immediately=False):
    message = pb.Message(message_id=f"m-{next(ids)}", role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    req = pb.SendMessageRequest(message=message)
    req.configuration.return_immediately = return_immediately
    return req

async def main():
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(Path(sys.argv[1])))
    ctx = CallContext(caller=Caller(name=sys.argv[2], workspace=sys.argv[3]))
    held = [(await engine.send_message(request("hold:60", True), ctx)).task.id for _ in range(5)]
    asked = (await engine.send_message(request("ask:Which city?"), ctx)).task.id
    done = (await engine.send_message(request("hi"), ctx)).task.id
    print(json.dumps({"held": held, "asked": asked, "done": done}), flush=True)
    # Keep writing until killed: new tasks, streams, holds that are canceled.
    for i in itertools.count():
        await engine.send_message(request(f"chunks:{1 + i % 7}", i % 2 == 0), ctx)
        if i % 5 == 0:
            task = (await engine.send_message(request("hold:60", True), ctx)).task
            await engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx)
        if i == 200:
            print("busy", flush=True)
        await asyncio.sleep(0)

asyncio.run(main())
"""


async def test_sigkill_with_runs_in_flight_leaves_every_file_valid(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    workspace = tmp_path / "ws"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        str(script),
        str(workspace),
        ALICE.name,
        ALICE.workspace,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(20):
            ids = json.loads(await proc.stdout.readline())
            assert await proc.stdout.readline() == b"busy\n"  # writing as fast as it can
    finally:
        proc.send_signal(signal.SIGKILL)
        async with asyncio.timeout(10):
            await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    folder = WorkspaceLayout(workspace).tasks
    files = [p for p in folder.iterdir() if not p.name.startswith(".")]
    # A new task file is created in place, then written with one write: the kill may
    # land between the two (that task was never answered), leaving it empty.
    empty = [p for p in files if p.stat().st_size == 0]
    assert len(empty) <= 1
    files = [p for p in files if p not in empty]
    assert len(files) > 200
    for path in files:  # every other task file is whole and parses
        task, owner, _ = decode_record(path.read_bytes(), path.stem)
        assert owner == ALICE

    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(workspace))  # "restart"
    try:
        for task_id in ids["held"]:
            task = await engine.get_task(pb.GetTaskRequest(id=task_id), ctx())
            assert state_name(task) == "FAILED"
            assert status_text(task) == SERVER_RESTARTED
        asked = await engine.get_task(pb.GetTaskRequest(id=ids["asked"]), ctx())
        assert state_name(asked) == "INPUT_REQUIRED"
        assert status_text(asked) == "Which city?"
        done = await engine.get_task(pb.GetTaskRequest(id=ids["done"]), ctx())
        assert state_name(done) == "COMPLETED"
        listed = await engine.list_tasks(pb.ListTasksRequest(page_size=100), ctx())
        assert listed.total_size == len(files)
        states = {state_name(t) for t in listed.tasks}
        assert states <= {"COMPLETED", "CANCELED", "FAILED", "INPUT_REQUIRED"}
        assert not list(folder.glob(".*.tmp"))  # the new store removed leftovers
        assert not [p for p in empty if p.exists()]  # ... and the empty file, if any
        # The index (rows committed up to ~10 ms before the kill, then reconciled at
        # the start after the unclean stop) matches the files exactly.
        with sqlite3.connect(WorkspaceLayout(workspace).task_index) as db:
            rows = dict(
                (r[0], (r[1], r[2], r[3]))
                for r in db.execute("SELECT task_id, mtime, size, ino FROM tasks")
            )
        stamps = {}
        for path in folder.glob("*.json"):
            st = path.stat()
            stamps[path.stem] = (st.st_mtime_ns, st.st_size, st.st_ino)
        assert rows == stamps
        # A retried messageId from before the kill is recognised after the restart.
        retried = await engine.send_message(
            pb.SendMessageRequest(
                message=pb.Message(
                    message_id="m-0", role=pb.ROLE_USER, parts=[pb.Part(text="hold:60")]
                )
            ),
            ctx(),
        )
        assert retried.task.id == ids["held"][0]
        answered = await engine.send_message(
            pb.SendMessageRequest(
                message=pb.Message(
                    message_id="after-restart",
                    role=pb.ROLE_USER,
                    task_id=ids["asked"],
                    parts=[pb.Part(text="Paris")],
                )
            ),
            ctx(),
        )
        assert state_name(answered.task) == "COMPLETED"
    finally:
        await engine.aclose()
