"""Where tasks are kept: writing them (eagerly when their id leaves the engine, lazily
otherwise), reading them back with lazy restart recovery, and changing a stored task.

Persistence (the hot path matters: the bench sends thousands of ``hi`` per second):

- A task is written when its id first leaves the engine (returnImmediately answer;
  first stream event, sent after the run's first step so that a run that ends at once
  is written only finished), at every interrupted or terminal state (before anyone can
  see that state), and otherwise lazily: a status change marks it dirty, and a flusher task
  writes what is still dirty ``FLUSH_DELAY_S`` (50 ms) later. A run that ends sooner
  (the faux ``hi``) is written once, finished: under load this halves the file writes,
  and creating files is the dominant cost of a blocking send on ext4. Artifact chunks
  never cause a write; they are saved with the next status write. ListTasks writes the
  live tasks it returns first, like every other path that reveals a task id. A store
  that is not ``durable`` (memory) only gets interrupted and final states.
- Lazy restart recovery: a stored task that is submitted/working but has no live run
  in this engine (the process died mid-run) is rewritten failed ("server restarted")
  the first time anything reads it. Input-required tasks are untouched. One engine
  per store folder: two processes on one workspace would "recover" each other's runs.
  A store shared by several processes (PostgreSQL) leases each run to the process
  running it; a task whose lease is held elsewhere is not recovered
  (``TaskRecord.held_elsewhere``), one whose lease expired is, by one process only:
  the recovery is stored only if the task is still as that process read it
  (``TaskStore.replace``), and only the process that stored it notifies its webhooks.
  A refused one reads the task again: failed or held elsewhere now, it is answered so;
  still lost (a late save of its dead runner's landed in between), it is recovered.
- Live tasks are served from memory; finished ones from the store (serialized bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from a2a_gateway.protocol.context import CallContext, Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..ids import valid_id
from ..store_outage import StoreOutageError
from ..store_roles import TaskRecords
from ..task_states import ACTIVE, agent_message
from ..task_store import STORE_RETRY_PAUSES_S, TaskRecord
from .rules import apply_status
from .state import (
    FLUSH_DELAY_S,
    SERVER_RESTARTED,
    EngineState,
    Run,
    not_found,
    store_failure_as_internal,
)

log = logging.getLogger(__name__)

#: Recoveries tried in one read of a lost run, each refused because the task changed
#: since it was read (a live process's change ends the tries: its lease is held).
RECOVERY_TRIES = 3


class Records:
    """The engine's access to its store's tasks: dirty live tasks, writes, reads,
    recovery."""

    def __init__(self, state: EngineState, tasks: TaskRecords) -> None:
        self._state = state
        self._tasks = tasks
        self._durable = tasks.durable
        self._dirty: dict[str, Run] = {}
        self._dirty_wakeup: asyncio.Event | None = None
        self._flusher: asyncio.Task[None] | None = None

    def mark_dirty(self, run: Run) -> None:
        if run.dirty or not self._durable:
            return  # a memory store gains nothing from intermediate states
        run.dirty = True
        if self._dirty_wakeup is None:
            self._dirty_wakeup = asyncio.Event()
            self._flusher = asyncio.create_task(self._flush_loop(), name="a2a-task-flusher")
        if not self._dirty:
            self._dirty_wakeup.set()
        self._dirty[run.record.task.id] = run

    async def _flush_loop(self) -> None:
        assert self._dirty_wakeup is not None
        wakeup = self._dirty_wakeup
        while True:
            await wakeup.wait()
            # Wait a little first: most runs end within a few loop turns and are then
            # written once, finished (under load, runs started in the same turn as
            # the wake-up would otherwise be written submitted, then again finished).
            await asyncio.sleep(FLUSH_DELAY_S)
            wakeup.clear()
            while self._dirty:
                _, run = self._dirty.popitem()
                if run.dirty and not run.finished:
                    await self.persist(run)

    async def persist_if_dirty(self, run: Run) -> None:
        """Store a live task whose id is about to leave the engine. StoreOutageError
        when its store's database is away: the id does not leave (the flusher tries
        the write again)."""
        if not run.dirty:
            return
        run.flush_text()  # the stored task reflects every event so far (its event_seq)
        run.dirty = False
        self._dirty.pop(run.record.task.id, None)
        try:
            await self._save_or_outage(run.record)
        except StoreOutageError:
            self.mark_dirty(run)
            raise

    async def persist(self, run: Run) -> None:
        run.flush_text()
        run.dirty = False
        self._dirty.pop(run.record.task.id, None)
        await self.save(run.record)

    async def persist_final(self, run: Run) -> None:
        """:meth:`persist` of the run's final (terminal or interrupted) state: no later
        write would store it, so a failed write is tried again after each of
        :data:`.task_store.STORE_RETRY_PAUSES_S` before it is given up (logged; a shared
        store would fail the run as lost); not once the
        engine is closing (its store is closed next: a write after that would open
        it anew)."""
        run.flush_text()
        run.dirty = False
        self._dirty.pop(run.record.task.id, None)
        failure: Exception | None = None
        for pause in (*STORE_RETRY_PAUSES_S, None):
            try:
                await self._tasks.save(run.record)
                return
            except Exception as exc:
                failure = exc
            if pause is None or self._state.closing:
                break
            if not isinstance(failure, StoreOutageError):  # (an outage has its own line)
                log.warning(
                    "could not store task %s (trying again in %gs): %s: %s",
                    run.record.task.id,
                    pause,
                    type(failure).__name__,
                    str(failure)[:200],
                )
            await asyncio.sleep(pause)
            if self._state.closing:
                break
        if isinstance(failure, StoreOutageError):
            run.unstored = failure
            # Its sender is answered UNAVAILABLE (Run.unstored); the outage has its line.
            log.info("task %s: its final state was not stored (database away)", run.record.task.id)
            return
        log.error("could not store task %s", run.record.task.id, exc_info=failure)

    async def save(self, record: TaskRecord) -> None:
        with contextlib.suppress(StoreOutageError):  # logged once by the store
            await self._save_or_outage(record)

    async def _save_or_outage(self, record: TaskRecord) -> None:
        """Store a live task; StoreOutageError raised, any other failure logged."""
        try:
            await self._tasks.save(record)
        except StoreOutageError:
            raise
        except Exception:
            # The task stays served from memory while live; the next write retries.
            log.exception("could not store task %s", record.task.id)

    async def save_or_fail(self, record: TaskRecord) -> None:
        """Store a change to a task with no live run: nothing would retry the write,
        so the caller is told it failed (without the server's details)."""
        with store_failure_as_internal(f"Task {record.task.id} could not be stored"):
            await self._tasks.save(record)

    async def load(
        self, caller: Caller, task_id: str, *, locked: bool = False
    ) -> TaskRecord | None:
        """The caller's stored task, after lazy restart recovery. ``locked``: the
        caller holds the task's lock already (the recovery takes it otherwise; the
        lock is not reentrant)."""
        if not valid_id(task_id):
            return None
        record = await self._tasks.load(caller, task_id)
        if (
            record is None
            or record.task.status.state not in ACTIVE
            or task_id in self._state.runs
            or record.held_elsewhere  # another process runs it (a shared store's lease)
        ):
            return record
        if locked:
            return await self._recover(caller, task_id)
        async with self._state.locks.hold(task_id):
            return await self._recover(caller, task_id)

    def stored_answer(self, caller: Caller, task_id: str) -> bytes | None:
        """The caller's stored task as serialized bytes, when the store has them at hand
        and the task needs no recovery (not active: :meth:`load` would return it as
        stored); None: :meth:`load` it. No await: nothing changes meanwhile."""
        if not valid_id(task_id):
            return None
        stored = self._tasks.stored_bytes(caller, task_id)
        if stored is None or stored[0] in ACTIVE:
            return None
        return stored[1]

    def json_answer(self, context: CallContext, task_id: str, *, read_once: bool) -> pb.Task | None:
        """For a binding that prints the answer as JSON (``context.prints_json``): the
        caller's settled stored task handed over as the ProtoJSON the store has at hand
        (``context.task_json``, printed in the answer's place; ``read_once``: see
        ``TaskStore.stored_json``), and the answer naming the task only. None: nothing
        handed over; :meth:`stored_answer` or :meth:`load` it."""
        if not context.prints_json or not valid_id(task_id):
            return None
        kept = self._tasks.stored_json(context.caller, task_id, read_once)
        if kept is None:
            return None
        context.task_json = kept
        return pb.Task(id=task_id)

    async def _recover(self, caller: Caller, task_id: str) -> TaskRecord | None:
        """(holding the task's lock) Fail a stored active task no run has here."""
        if task_id in self._state.runs:  # a run started while we waited
            return await self._tasks.load(caller, task_id)
        for _ in range(RECOVERY_TRIES):
            record = await self._tasks.load(caller, task_id)
            if record is None or record.task.status.state not in ACTIVE or record.held_elsewhere:
                return record
            task = record.task
            log.info("task %s had no live run (server restarted): marking it failed", task_id)
            message = agent_message(SERVER_RESTARTED, context_id=task.context_id, task_id=task_id)
            apply_status(task, pb.TASK_STATE_FAILED, message)
            try:
                recovered = await self._tasks.replace(record)
            except StoreOutageError:
                return record  # served failed; the next reader tries again (as below)
            except Exception:
                # Served failed all the same; the next reader tries again, and the
                # webhooks hear of it from the recovery that is stored (not twice).
                log.exception("could not store task %s", task_id)
                return record
            if recovered:
                self._state.notify(record)
                return record
            # Changed since it was read: another process recovered it, resumed it
            # (its lease is held now), or its late runner's save landed with a
            # lease already run out (still lost: recovered on the next turn).
        return await self._tasks.load(caller, task_id)

    async def replace_or_fail(self, record: TaskRecord) -> bool:
        """:meth:`save_or_fail` for a change to a task no run has here, stored only if
        no other process changed the task since it was loaded (False then)."""
        with store_failure_as_internal(f"Task {record.task.id} could not be stored"):
            return await self._tasks.replace(record)

    async def view_or_not_found(self, caller: Caller, task_id: str) -> TaskRecord:
        run = self._state.live(caller, task_id)
        if run is not None:
            return run.record
        record = await self.load(caller, task_id)
        if record is None:
            raise not_found(task_id)
        return record

    @contextlib.asynccontextmanager
    async def mutable_record(self, caller: Caller, task_id: str) -> AsyncIterator[TaskRecord]:
        """The caller's task record to change in place; stored when the block ends."""
        if not valid_id(task_id):
            raise not_found(task_id)
        run = self._state.live(caller, task_id)
        if run is not None:
            yield run.record
            await self.persist(run)
            return
        async with self._state.locks.hold(task_id):
            run = self._state.live(caller, task_id)
            if run is not None:
                yield run.record
                await self.persist(run)
                return
            record = await self.load(caller, task_id, locked=True)
            if record is None:
                raise not_found(task_id)
            yield record
            await self.save_or_fail(record)

    async def aclose(self) -> None:
        """Stop the flusher (what is still dirty was stored by the runs' ends)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
            self._dirty_wakeup = None
