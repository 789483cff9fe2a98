"""A blocking send whose agent answers at once (``Agent.answer_now``) is driven in the
sender's task (``Runner.drive_now``): the same answers, stored tasks and task files as
the run's own task gives, and a final save that waits goes on when the sender goes."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from a2a_gateway.agent.base import Output, TextChunk, Turn, answers_at_once
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskStore
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, WAIT_S, Scripted, ctx, eventually
from .engine_helpers import request as send_request


class RunOnly(FauxAgent):
    """The faux agent without its answers at once: every turn goes through ``run``."""

    def answer_now(self, turn: Turn) -> list[Output] | None:
        return None


class RunTasks:
    """The run tasks (``a2a-run-*``) created while a test runs."""

    def __init__(self) -> None:
        self.made: list[asyncio.Task[Any]] = []

    def __len__(self) -> int:  # (the loop names a task after its factory made it)
        return sum(task.get_name().startswith("a2a-run-") for task in self.made)


@pytest.fixture
async def run_tasks() -> AsyncIterator[RunTasks]:
    loop = asyncio.get_running_loop()
    seen = RunTasks()
    previous = loop.get_task_factory()

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        seen.made.append(task)
        return task

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    yield seen
    loop.set_task_factory(previous)


_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _same_shape(text: str, ids: list[str]) -> str:
    """``text`` with the given ids (longest first) and every timestamp replaced."""
    numbers = {made: number for number, made in enumerate(dict.fromkeys(ids))}
    for made in sorted(numbers, key=len, reverse=True):  # (no id inside a longer one)
        text = text.replace(made, f"<id{numbers[made]}>")
    return _TIMESTAMP.sub("<time>", text)


def _ids_of(task: pb.Task, message_id: str) -> list[str]:
    made = [task.id, task.context_id, message_id]
    made += [artifact.artifact_id for artifact in task.artifacts]
    made += [message.message_id for message in task.history]
    if task.status.HasField("message"):
        made.append(task.status.message.message_id)
    return [value for value in made if value]


def _task_file(root: Path, task_id: str) -> str:
    (path,) = root.rglob(f"{task_id}.json")
    return path.read_text()


async def _send_both(
    store: TaskStore, text: str, tmp_path: Path, run_tasks: RunTasks
) -> list[tuple[str, str, str]]:
    """One blocking send of ``text`` to an engine with the faux agent and one to an engine
    whose run goes through its task: each one's answer, stored task and task file (on
    the file store), with their ids and times replaced."""
    seen: list[tuple[str, str, str]] = []
    engines: list[TaskEngine] = []
    try:
        # (A database's save waits: the run's end goes on in a task of its own.)
        waits = isinstance(store, PostgresTaskStore)
        for agent, tasks_made in ((FauxAgent(), int(waits)), (RunOnly(), 1)):
            engine = TaskEngine(agent, store)
            engines.append(engine)
            before = len(run_tasks)
            message_id = f"same-{type(agent).__name__}-{len(text)}"
            async with asyncio.timeout(WAIT_S):
                answer = await engine.send_message(send_request(text, message_id=message_id), ctx())
            assert len(run_tasks) - before == tasks_made, run_tasks
            assert engine.live_task_ids() == []
            task = answer.task
            ids = _ids_of(task, message_id)
            record = await store.load(ALICE, task.id)
            assert record is not None
            async with asyncio.timeout(WAIT_S):  # its retry key was kept: a retry finds it
                again = await engine.send_message(send_request(text, message_id=message_id), ctx())
            assert again.task.id == task.id
            on_disk = ""
            if isinstance(store, WorkspaceTaskStore):
                on_disk = _same_shape(_task_file(tmp_path, task.id), ids)
            seen.append(
                (
                    _same_shape(json_format.MessageToJson(answer, sort_keys=True), ids),
                    _same_shape(json_format.MessageToJson(record.task, sort_keys=True), ids),
                    on_disk,
                )
            )
    finally:
        for engine in engines:
            await engine.aclose()
    return seen


TEXTS = [
    "hi",
    "",
    "ask:why?",
    "form:what?",
    "fail:no",
    "reject:never",
    "auth:a key",
    'data:{"a": [1, 2]}',
    "data:{nope",
    "other:text",
]


@pytest.mark.parametrize("text", TEXTS)
async def test_an_answer_at_once_is_answered_and_stored_as_by_the_run_task(
    store: TaskStore, text: str, tmp_path: Path, run_tasks: RunTasks
) -> None:
    inline, through_task = await _send_both(store, text, tmp_path, run_tasks)
    assert inline == through_task
    assert json.loads(inline[0])["task"]["status"]["state"].startswith("TASK_STATE_")


async def test_the_file_stores_task_files_are_the_same_bytes(
    tmp_path: Path, run_tasks: RunTasks
) -> None:
    for number, text in enumerate(("hi", "ask:why?", 'data:{"a": 1}')):
        store = WorkspaceTaskStore(tmp_path / f"ws{number}")  # (the engines close it)
        inline, through_task = await _send_both(store, text, tmp_path, run_tasks)
        assert inline[2] and inline[2] == through_task[2]


async def test_directives_that_wait_still_run_in_their_task(
    engine: TaskEngine, run_tasks: RunTasks
) -> None:
    for text in ("chunks:3", "hold:0", "file:a.txt"):
        async with asyncio.timeout(WAIT_S):
            await engine.send_message(send_request(text), ctx())
    assert len(run_tasks) == 3


class Shouting(FauxAgent):
    """A subclass with a run of its own and its parent's answer_now."""

    async def run(self, turn: Turn) -> AsyncIterator[Output]:
        async for output in super().run(turn):
            yield (
                TextChunk(output.text.upper(), last=True)
                if isinstance(output, TextChunk)
                else output
            )


async def test_a_subclass_that_runs_its_own_way_is_run(
    new_engine: Callable[..., TaskEngine], run_tasks: RunTasks
) -> None:
    """Its parent's answers at once do not know its run: the run gives the answer."""
    assert answers_at_once(FauxAgent()) and not answers_at_once(Shouting())
    assert not answers_at_once(Scripted(None))  # type: ignore[arg-type]
    async with asyncio.timeout(WAIT_S):
        answer = await new_engine(Shouting()).send_message(send_request("hi"), ctx())
    assert [p.text for a in answer.task.artifacts for p in a.parts] == ["HI"]
    assert len(run_tasks) == 1


@pytest.mark.parametrize("kind", ["file-fsync", "postgres"])
async def test_a_final_save_that_waits_is_stored_when_the_sender_goes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, run_tasks: RunTasks
) -> None:
    """The sender is cancelled while the run's final save waits (a thread's fsync, a
    database): the save goes on in the run's own task and the task is stored completed."""
    store: TaskStore
    if kind == "file-fsync":
        store = WorkspaceTaskStore(tmp_path / "ws", fsync=True)
    else:
        postgres: LocalPostgres = request.getfixturevalue("postgres")
        store = PostgresTaskStore(postgres.url, box=SecretBox(tmp_path / "ws"), pool_size=4)
        await store.start()
        await store.truncate()
    engine = TaskEngine(FauxAgent(), store)
    try:
        async with asyncio.timeout(WAIT_S):  # the store started (its index read)
            await engine.send_message(send_request("hi"), ctx())
        for _ in range(3):
            sender = asyncio.create_task(engine.send_message(send_request("hi"), ctx()))
            live: list[str] = []
            async with asyncio.timeout(WAIT_S):  # steps of the loop: the sender waits or ends
                while not (live or sender.done()):
                    await asyncio.sleep(0)
                    live = engine.live_task_ids()
            if sender.done():  # the save did not wait this time
                continue
            assert run_tasks  # the save's wait went on in a task of its own
            sender.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sender
            await eventually(lambda: not engine.live_task_ids())
            record = await store.load(ALICE, live[0])
            assert record is not None
            assert record.task.status.state == pb.TASK_STATE_COMPLETED
            assert [p.text for a in record.task.artifacts for p in a.parts] == ["hi"]
            return
        pytest.fail("no final save waited")
    finally:
        await engine.aclose()
        if kind == "postgres":
            await store.aclose()
