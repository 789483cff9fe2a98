"""Push notifications of tasks whose push configs are rows of a store shared by several
processes (``TaskStore.push_rows``: PostgreSQL).

Any process may add or remove a config of a task while another runs it, so a status
change goes to the configs the store holds when it happens, not to those the runner
loaded. Each status change reads them and goes to those stored then that were added
by its status timestamp (each row notes when it was added, on the database's clock;
the store answers it on this process's clock, so replicas whose clocks disagree still
agree on it), so a config added just after a change gets the next one, not that one.
No read is made where the engine already knows the answer (``TaskRecord.push_as_of``):
for the status a save just stored (the save answers the configs as of its commit, so a
run's final state costs no read), and for a task never
stored (no other process can know its id: its configs are the record's own, so a
quick run's WORKING costs no read either). One read serves every change of the task
queued while it was on its way, and the changes of one task reach the dispatcher in
order (one worker per task at a time), so each webhook still sees them in order.

The alternative, a cache of each task's configs kept current by NOTIFY, saves these
reads, but a config added just before a status change would miss it until the
notification arrived; and status changes are rare next to stream events (a run has a
few), so a read per change is cheap where it happens at all.

Which process sends (issue 15: "once per status change, by the replica that runs the
task"): the engine calls :meth:`PushFeed.notify` only where it changes a task: the
process running the task, for each status change of its run, and a process where no
run exists, for a change it makes itself (restart recovery of a task whose run's lease
expired, CancelTask of a task waiting for input, the hop guard). Such a change is
stored only if the task is still as that process read it and no live process holds
its run (``TaskStore.replace``), so of two processes making one at once, one stores
and announces it; the other reads the task again (and answers from what it finds).
A runner that lost its lease while still alive (another process failed its task
"server restarted") finds its saves refused (``TaskRecord.settled_elsewhere``) and
announces nothing more of that task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lf.a2a.v1 import a2a_pb2 as pb

from ..push import PushDispatcher
from ..store_roles import PushConfigs
from ..task_states import timestamp_ns
from ..task_store import (
    STORE_RETRY_PAUSES_S,
    UNSTORED,
    StoredPush,
    TaskRecord,
    status_key,
)

log = logging.getLogger(__name__)


class PushFeed:
    """Hands each status change to the dispatcher with the configs the store holds."""

    def __init__(self, store: PushConfigs, push: PushDispatcher) -> None:
        self._store = store
        self._push = push
        self._queues: dict[str, list[pb.Task]] = {}  # per task: changes awaiting a read
        self._workers: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()  # set by aclose: failed reads are not tried again

    def notify(self, record: TaskRecord) -> None:
        """A status change of ``record``'s task (snapshotted now)."""
        task = record.task
        queue = self._queues.get(task.id)
        if queue is None and record.push_as_of in (UNSTORED, status_key(task)):
            if record.push_configs:
                self._push.notify(task, record.push_configs, record.push_versions)
            return
        snapshot = pb.Task()
        snapshot.CopyFrom(task)
        if queue is not None:
            queue.append(snapshot)
            return
        self._queues[task.id] = [snapshot]
        worker = asyncio.get_running_loop().create_task(
            self._deliver(task.id), name=f"a2a-push-feed-{task.id}"
        )
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)

    async def _deliver(self, task_id: str) -> None:
        queue = self._queues[task_id]
        try:
            while queue:
                changes = queue[:]
                queue.clear()
                stored = await self._read(task_id, len(changes))
                if stored is None:
                    continue
                for task in changes:
                    # Those added by the time of the change (a later one gets the next).
                    at = timestamp_ns(task.status.timestamp)
                    configs = [row for row in stored if row.added_ns <= at]
                    if configs:
                        versions = {r.config.id: r.version for r in configs if r.version}
                        self._push.notify(task, [r.config for r in configs], versions)
        finally:
            del self._queues[task_id]

    async def _read(self, task_id: str, changes: int) -> list[StoredPush] | None:
        """The task's stored configs; a failed read is tried again after each of
        :data:`.task_store.STORE_RETRY_PAUSES_S` (nothing else would announce these
        changes), not once the feed is closing; None (logged) when it is given up."""
        failure: Exception | None = None
        for pause in (*STORE_RETRY_PAUSES_S, None):
            try:
                return await self._store.read_push_configs(task_id)
            except Exception as exc:
                failure = exc
            if pause is None or self._closing.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), pause)
        assert failure is not None
        log.warning(
            "%d push notification(s) of task %s not sent: its push configs"
            " could not be read (%s: %s)",
            changes,
            task_id,
            type(failure).__name__,
            str(failure)[:200],
        )
        return None

    async def aclose(self, grace_s: float) -> None:
        """Let the queued changes be read and handed over for ``grace_s``, then stop."""
        self._closing.set()
        workers = list(self._workers)
        if workers:
            await asyncio.wait(workers, timeout=grace_s)
        for worker in workers:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
