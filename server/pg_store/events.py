"""Each task's event log in ``a2a_events``: append, read, follow."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..events import Event, serialized
from ..task_states import ACTIVE, INTERRUPTED
from ..task_store import (
    STORE_RETRY_PAUSES_S,
)
from .connection import (
    EVENT_BATCH,
    EVENTS_KEPT,
    OUTAGE_EVENTS_KEPT_BYTES,
    OUTAGE_EVENTS_RETRY_S,
    PgConnection,
    outage,
    why,
)
from .db_clock import INT64_MAX
from .errors import DB_ERRORS

log = logging.getLogger(__package__)  # one logger for the package, named as before

_LOG_EVENTS = """
WITH logged AS (
  INSERT INTO a2a_events(task_id, seq, event)
  SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
  ON CONFLICT DO NOTHING
  RETURNING task_id)
SELECT pg_notify('a2a_events', t) FROM (SELECT DISTINCT task_id AS t FROM logged) AS n
"""


class PgEventLogs(PgConnection):
    """Each task's event log in ``a2a_events``: append, read, follow."""

    # --- events across processes ------------------------------------------------------

    def log_event(self, task_id: str, event: Event, state: int | None) -> int | None:
        seq = self._seq.get(task_id)
        if seq is None:
            return None  # not a run of this process
        seq += 1
        last = state is not None and state not in ACTIVE
        if last:
            self._seq.pop(task_id, None)  # the run's last event (settled or interrupted)
        else:
            self._seq[task_id] = seq
        held = self._held.get(task_id)
        if held is None:
            self._queue(task_id, seq, serialized(event))
        elif last:
            # The run ends unseen: its task was stored only now, settled (its row
            # reflects this event too), and no stream here ever had an event's number.
            del self._held[task_id]
        else:
            held.append((seq, event))
            if len(held) >= EVENT_BATCH:  # a long run nobody sees yet: logged after all
                self._unhold(task_id)
        return seq

    def _queue(self, task_id: str, seq: int, data: bytes) -> None:
        """An event to the outbox, whose writer task starts if none is running."""
        self._outbox.append((task_id, seq, data))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._write_events(), name="a2a-pg-events"
            )

    def _unhold(self, task_id: str) -> None:
        """The task's run is no longer unseen (a stream here joined it, or a save stores
        it while it goes on): its held events go to the outbox, in order, and the
        following ones too."""
        held = self._held.pop(task_id, None)
        for seq, event in held or ():
            self._queue(task_id, seq, serialized(event))

    async def _write_events(self) -> None:
        """Write what the outbox holds, a batch per statement, one statement at a time
        (so a task's events are committed in their order), with one NOTIFY per task.
        A batch whose write fails is written again after each of
        :data:`.task_store.STORE_RETRY_PAUSES_S` (a lost event would stop every follower
        of its task at the gap), then dropped; during an outage, until the database is
        back, while the outbox holds at most :data:`OUTAGE_EVENTS_KEPT_BYTES` and the
        store is not closing."""
        tries = 0
        while self._outbox:
            batch = self._outbox[:EVENT_BATCH]  # new events are only ever appended
            try:
                await self._fetch(
                    _LOG_EVENTS,
                    [b[0] for b in batch],
                    [b[1] for b in batch],
                    [b[2] for b in batch],
                )
            except DB_ERRORS as exc:
                if (
                    outage(exc)
                    and self._writer is asyncio.current_task()  # (aclose takes it)
                    and sum(len(b[2]) for b in self._outbox) <= OUTAGE_EVENTS_KEPT_BYTES
                ):
                    await asyncio.sleep(OUTAGE_EVENTS_RETRY_S)
                    continue
                if tries < len(STORE_RETRY_PAUSES_S):
                    pause = STORE_RETRY_PAUSES_S[tries]
                    tries += 1
                    if not outage(exc):
                        log.warning(
                            "%d stream events not logged yet (trying again in %gs): %s",
                            len(batch),
                            pause,
                            why(exc),
                        )
                    await asyncio.sleep(pause)
                    continue
                log.warning("%d stream events not logged: %s", len(batch), why(exc))
            tries = 0
            del self._outbox[: len(batch)]

    async def prune_events(self) -> None:
        """Remove the events of tasks settled more than ``event_keep_s`` ago, by the
        database's clock (the row's ``settled_ns``, noted by the database): neither a
        process whose clock runs ahead nor a runner whose clock is behind (its status
        times, ``ts``, look old) prunes the events of a task settled a moment ago, which
        late subscribers elsewhere still read."""
        cutoff = self._db_now() - int(self.event_keep_s * 1e9)
        try:
            await self._fetch(
                "DELETE FROM a2a_events e USING a2a_tasks t WHERE e.task_id = t.task_id"
                " AND t.state <> ALL($1::smallint[]) AND coalesce(t.settled_ns, t.ts) < $2",
                sorted(EVENTS_KEPT),
                cutoff,
            )
        except DB_ERRORS as exc:
            if not outage(exc):
                log.warning("could not prune stream events: %s", why(exc))

    def follow(
        self,
        task_id: str,
        after_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
    ) -> None:
        if task_id in self._follows:
            return
        poke = asyncio.Event()
        self._delivered[task_id] = after_seq
        follower = asyncio.get_running_loop().create_task(
            self._follow(task_id, after_seq + 1, deliver, poke), name=f"a2a-follow-{task_id}"
        )
        self._follows[task_id] = (poke, follower)

    def _on_event(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        followed = self._follows.get(payload) if isinstance(payload, str) else None
        if followed is not None:
            followed[0].set()

    async def _follow(
        self,
        task_id: str,
        next_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
        poke: asyncio.Event,
    ) -> None:
        """Read the task's events from ``next_seq`` on whenever a NOTIFY names it
        (and once a lease, to notice a run whose process died, or that nobody here
        listens any more: ``deliver`` of no events is False); once handed over
        (:meth:`hand_over`), up to the last event before this process's run."""
        try:
            while True:
                poke.clear()
                last = self._last.get(task_id, INT64_MAX)
                if next_seq > last:
                    return
                rows = await self._fetch(
                    "SELECT seq, event FROM a2a_events WHERE task_id = $1 AND seq >= $2"
                    " AND seq <= $4 ORDER BY seq LIMIT $3",
                    task_id,
                    next_seq,
                    EVENT_BATCH,
                    last,
                )
                first_seq = next_seq
                events: list[pb.StreamResponse] = []
                for seq, data in rows:
                    if seq != next_seq:
                        break  # not committed yet: its NOTIFY follows
                    events.append(pb.StreamResponse.FromString(data))
                    next_seq += 1
                if events:
                    self._delivered[task_id] = next_seq - 1
                    if not deliver(events, first_seq):
                        return
                if len(events) == EVENT_BATCH or next_seq > self._last.get(task_id, INT64_MAX):
                    continue
                try:
                    await asyncio.wait_for(poke.wait(), self.lease_s)
                except TimeoutError:
                    if not deliver([], next_seq):  # nobody here listens any more
                        return
                    if not await self._still_running(task_id):
                        deliver(None, 0)
                        return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not outage(exc):  # (an outage ended the streams that followed it)
                log.warning("following task %s's events failed: %s", task_id, why(exc))
            deliver(None, 0)
        finally:
            followed = self._follows.get(task_id)
            if followed is not None and followed[1] is asyncio.current_task():
                del self._follows[task_id]
                self._delivered.pop(task_id, None)

    async def hand_over(self, task_id: str) -> int | None:
        followed = self._follows.get(task_id)
        last = self._seq.get(task_id)  # the claim's: its run's events follow
        if followed is None or last is None:
            return None
        poke, follower = followed
        self._last[task_id] = last
        poke.set()  # the events before the claim are read now, not at the next NOTIFY
        try:
            # Those not committed yet (the other process's last writes) are announced
            # as usual; their writes are bounded by the same statement bound.
            done, _ = await asyncio.wait({follower}, timeout=self.command_timeout_s)
        except BaseException:
            self._last.pop(task_id, None)  # the run does not start: the follow goes on
            raise
        if not done:
            log.warning("task %s: the events logged before its run came here were late", task_id)
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follower
        self._last.pop(task_id, None)
        return last

    def followed_seq(self, task_id: str) -> int | None:
        return self._delivered.get(task_id) if task_id in self._follows else None

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        """The logged events in the range, those of a run here still in the outbox
        included (taken before the read: one written meanwhile is in the read)."""
        self._unhold(task_id)  # (a stream here reads them: they are logged from now on)
        queued = {
            seq: data
            for queued_id, seq, data in self._outbox
            if queued_id == task_id and after_seq < seq <= upto_seq
        }
        rows = await self._fetch(
            "SELECT seq, event FROM a2a_events WHERE task_id = $1 AND seq > $2 AND seq <= $3"
            " ORDER BY seq",
            task_id,
            after_seq,
            upto_seq,
        )
        found = {int(row[0]): bytes(row[1]) for row in rows}
        events: list[pb.StreamResponse] = []
        seq = after_seq + 1
        while seq <= upto_seq and (data := found.get(seq) or queued.get(seq)) is not None:
            events.append(pb.StreamResponse.FromString(data))
            seq += 1
        return events

    def start_event_log(self, owner: Caller, task_id: str, *, renewed: bool = False) -> int | None:
        self._unhold(task_id)  # a stream here has the events' numbers: they are logged
        return self._seq.get(task_id)  # a run here: its last event's number

    async def open_event_log(self, owner: Caller, task_id: str, *, create: bool) -> int | None:
        return None  # the events are rows: nothing to open

    def close_event_log(self, task_id: str) -> None:
        """Nothing is held open."""

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None:
        rows = await self._fetch(
            "SELECT min(e.seq), max(e.seq), max(t.event_seq) FROM a2a_tasks t"
            " LEFT JOIN a2a_events e ON e.task_id = t.task_id WHERE t.task_id = $1",
            task_id,
        )
        if not rows:
            return None
        first, last, stored = rows[0]
        self._unhold(task_id)
        queued = [seq for queued_id, seq, _ in self._outbox if queued_id == task_id]
        last = max(last or 0, stored or 0, *queued, self._seq.get(task_id) or 0)
        if first is None:
            first = min(queued) if queued else last + 1
        return (int(first), int(last))

    async def _still_running(self, task_id: str) -> bool:
        """Whether the task is interrupted or its run's lease is held."""
        rows = await self._fetch(
            "SELECT state, runner, lease_until FROM a2a_tasks WHERE task_id = $1", task_id
        )
        if not rows:
            return False
        state, runner, lease_until = rows[0]
        if state in INTERRUPTED:
            return True
        return state in ACTIVE and bool(runner) and lease_until > self._db_now()
