"""Reads: GetTask, ListTasks (filters, ordering and paging over stored and live tasks)
and SubscribeToTask."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence

from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.protocol.resume import RESUME_EXPIRED, RESUME_EXTENSION, resume_point
from lf.a2a.v1 import a2a_pb2 as pb

from ..events import Batch, Event, Subscriber, TaskStream
from ..ids import valid_id
from ..store_roles import EventLogs, TaskRecords
from ..task_states import KNOWN_STATES, TERMINAL, task_view, timestamp_ns
from ..task_store import Position, TaskFilter, TaskRecord, TaskSummary, select_page
from .records import Records
from .rules import check_not_terminal, read_history_length
from .state import (
    DEFAULT_PAGE_SIZE,
    EVENTS_GONE,
    MAX_PAGE_SIZE,
    EngineState,
    invalid,
    not_found,
)

log = logging.getLogger(__name__)

#: A short read of a shared log asked again after these pauses (1.55 s in all): its
#: writer commits a batch within a round trip or two of the row that names it.
LOG_CATCH_UP_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8)


class Reads:
    """What a caller can read of its tasks: one, a page of them, or a live stream."""

    def __init__(
        self, state: EngineState, records: Records, tasks: TaskRecords, events: EventLogs
    ) -> None:
        self._state = state
        self._records = records
        self._tasks = tasks
        self._events = events

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        history_length = read_history_length(request, "historyLength")
        if history_length is None and self._state.live(context.caller, request.id) is None:
            # A settled task the store's cache holds, as the JSON it kept (the first
            # GetTask loads it, and the cache keeps it, for the next polls).
            named = self._records.json_answer(context, request.id, read_once=False)
            if named is not None:
                return named
        record = await self._records.view_or_not_found(context.caller, request.id)
        return task_view(record.task, history_length)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        """A page of the caller's tasks, newest status first (ties: id, descending).

        The store answers an indexed range query for the page (the workspace index on
        disk), merged with the live runs whose newest state is only in memory; the cost
        is the page and the live runs, not the history. The answer ends early when its
        tasks' encoded size would pass ``list_max_bytes`` (at least one task is
        answered): fewer tasks and a next page token. A listed task whose file is gone
        or unreadable is skipped, and its index row refreshed."""
        caller = context.caller
        page_size = DEFAULT_PAGE_SIZE
        if request.HasField("page_size"):
            page_size = request.page_size
            if not 1 <= page_size <= MAX_PAGE_SIZE:
                raise invalid("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
        history_length = read_history_length(request, "historyLength")
        status = request.status
        if status != pb.TASK_STATE_UNSPECIFIED and status not in KNOWN_STATES:
            raise invalid("status", f"unknown task state {status}")
        after_ns: int | None = None
        if request.HasField("status_timestamp_after"):
            after_ns = timestamp_ns(request.status_timestamp_after)
        include_artifacts = request.include_artifacts
        context_id = request.context_id
        query = "\x00".join(
            ("tasks", caller.workspace, caller.name, context_id, str(status), str(after_ns))
        )
        cursor: Position | None = None
        if request.page_token:
            ts_text, _, last_id = self._state.tokens.read(request.page_token, query).partition(":")
            cursor = (int(ts_text), last_id)

        store = self._tasks
        await store.before_listing(caller)
        await self._recover(caller)
        live = {
            task_id: TaskSummary.of(run.record.task)
            for task_id, run in self._state.runs.items()
            if run.record.owner == caller
        }
        flt = TaskFilter(context_id, status, after_ns)
        page, total, more = await select_page(store, caller, flt, cursor, page_size, live)
        runs = self._state.runs
        ahead = [s.task_id for s in page if s.task_id not in runs]
        await store.prefetch_for(caller, ahead, self._state.list_max_bytes)
        tasks: list[pb.Task] = []
        missing: list[str] = []
        budget = self._state.list_max_bytes
        used = 0
        last: TaskSummary | None = None
        for summary in page:
            run = self._state.live(caller, summary.task_id)
            record: TaskRecord | None
            if run is not None:
                await self._records.persist_if_dirty(run)  # its id is about to leave the engine
                record = run.record
            else:
                record = await self._records.load(caller, summary.task_id)
            if record is None:
                missing.append(summary.task_id)
                last = summary
                continue
            view = task_view(record.task, history_length, include_artifacts=include_artifacts)
            size = view.ByteSize()
            if tasks and used + size > budget:
                more = True  # over the byte budget: the rest on the next page
                break
            used += size
            tasks.append(view)
            last = summary
        if missing:
            total -= len(missing)
            await store.refresh(caller, missing)
        next_token = ""
        if last is not None and (more or last is not page[-1]):
            next_token = self._state.tokens.issue(f"{last.timestamp_ns}:{last.task_id}", query)
        return pb.ListTasksResponse(
            tasks=tasks, next_page_token=next_token, page_size=len(tasks), total_size=total
        )

    async def _recover(self, caller: Caller) -> None:
        """Stored tasks left submitted or working by a run that is gone (a restart)
        are failed now, before they are listed: loading one recovers it."""
        for task_id in await self._tasks.active_ids(caller):
            if task_id not in self._state.runs:
                await self._records.load(caller, task_id)

    async def subscription_batches(
        self, request: pb.SubscribeToTaskRequest, context: CallContext, stream: TaskStream
    ) -> AsyncGenerator[Batch]:
        """SubscribeToTask: the first batch of its :class:`~..events.TaskStream`
        (``stream``), which then follows the task's hub itself."""
        caller = context.caller
        task_id = request.id
        del request  # not held for the stream's life
        resume = resume_point(context.resume_from, task_id)
        subscriber = Subscriber(until_interrupted=False)
        snapshot, snapshot_seq = await self._join(caller, task_id, subscriber, resume)
        if resume is not None or RESUME_EXTENSION in context.extensions:
            context.activated_extensions.add(RESUME_EXTENSION)
        # The snapshot (none for a resumed stream), then the stream reads the hub's
        # events itself (this generator ends: no frame of its held while the stream
        # waits) and leaves the hub however it ends (as ``streaming_batches``).
        prefix = task_id + ":"
        stream.follow(subscriber, prefix, self._state.leave)
        if snapshot is not None:
            batch: Sequence[Event] = [snapshot]
            del snapshot  # nor the batches: not held while the stream waits
            yield batch, [snapshot_seq], prefix
            return
        # A resumed stream's first batch is its subscriber's (read from the log).
        try:
            first = await stream.followed()
        except StopAsyncIteration:
            return
        yield first

    async def _resume(
        self,
        owner: Caller,
        task_id: str,
        subscriber: Subscriber,
        snapshot: pb.StreamResponse,
        snapshot_seq: int,
        resume: int,
    ) -> pb.StreamResponse | None:
        """A stream resumed after event ``resume``: it reads the logged events after it
        (then goes on live) and gets no snapshot, or, when those are no longer all kept
        (or the number is unknown here), the snapshot, marked :data:`RESUME_EXPIRED`."""
        bounds = await self._events.event_bounds(owner, task_id)
        kept = (
            bounds is not None and bounds[0] - 1 <= resume <= max(bounds[1], snapshot_seq)
        ) or resume == snapshot_seq
        if not kept:
            snapshot.task.metadata[RESUME_EXPIRED] = True
            return snapshot
        subscriber.resume_at(
            resume, snapshot_seq, lambda after, upto: self._read_log(task_id, after, upto, owner)
        )
        return None

    def _line_up(self, task_id: str, snapshot_seq: int, subscriber: Subscriber) -> None:
        """A subscriber joining the follow of another process's run, already under way:
        its snapshot (the stored task) may reflect fewer events than the follow has
        delivered (the row is written less often than events) or more (the follow is
        behind). Its stream goes on right after its snapshot: the events it already
        reflects are dropped (``seq``), the missing ones read from the log a page at a
        time as it drains them (never queued all at once, nor counted as a backlog)."""
        subscriber.seq = snapshot_seq
        delivered = self._events.followed_seq(task_id)  # in the same step as the subscribe
        if delivered is not None and delivered > snapshot_seq:
            subscriber.catch_up(delivered, lambda after, upto: self._read_log(task_id, after, upto))

    async def _read_log(
        self, task_id: str, after: int, upto: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        """Logged events of the task a catching-up subscriber missed; UnavailableError
        (resubscribe) when they cannot be read or are gone (pruned).

        On a store whose log other processes write, a stored row may name events its
        writer has not committed yet (the row and the events' batch are separate
        statements): a short read is asked again after :data:`LOG_CATCH_UP_PAUSES_S`
        (bounded) before the events count as gone."""
        pauses = LOG_CATCH_UP_PAUSES_S if self._events.shares_events else ()
        for pause in (*pauses, None):
            try:
                events = await self._events.read_events(task_id, after, upto, owner)
            except Exception as exc:
                log.warning("could not read task %s's logged events: %s", task_id, exc)
                raise UnavailableError(EVENTS_GONE) from None
            if len(events) == upto - after:
                return events
            if pause is not None:
                await asyncio.sleep(pause)
        raise UnavailableError(EVENTS_GONE)

    async def _join(
        self, caller: Caller, task_id: str, subscriber: Subscriber, resume: int | None
    ) -> tuple[pb.StreamResponse | None, int]:
        """Subscribe to a non-terminal task (any task, with a ``resume`` point): its
        snapshot, taken in the same step, and the number of the last event it
        reflects; no snapshot for a stream that resumes from the log."""
        state = self._state
        run = state.live(caller, task_id)
        if run is None:
            if not valid_id(task_id):
                raise not_found(task_id)
            async with state.locks.hold(task_id):
                run = state.live(caller, task_id)
                if run is None:
                    record = await self._records.load(caller, task_id, locked=True)
                    if record is None:
                        raise not_found(task_id)
                    terminal = record.task.status.state in TERMINAL
                    if resume is None or not terminal:
                        check_not_terminal(record.task)
                        await state.open_log(caller, task_id, create=True)
                        snapshot_seq = self._subscribe_stored(record, subscriber)
                    else:
                        snapshot_seq = await self._last_logged(record)
                        subscriber.seq = snapshot_seq
                        subscriber.finish()  # the log's events, then the end
                    snapshot = pb.StreamResponse(task=task_view(record.task))
                    if resume is not None:
                        resumed = await self._resume(
                            caller, task_id, subscriber, snapshot, snapshot_seq, resume
                        )
                        return resumed, snapshot_seq
                    return snapshot, snapshot_seq
        check_not_terminal(run.record.task)
        snapshot_seq = state.subscribe(task_id, subscriber, caller)
        snapshot = pb.StreamResponse(task=task_view(run.record.task))
        await self._records.persist_if_dirty(run)
        if resume is not None:
            resumed = await self._resume(
                caller, task_id, subscriber, snapshot, snapshot_seq, resume
            )
            return resumed, snapshot_seq
        return snapshot, snapshot_seq

    def _subscribe_stored(self, record: TaskRecord, subscriber: Subscriber) -> int:
        """Join the hub of a stored task with no run here; the number of the last event
        its snapshot reflects."""
        state = self._state
        task_id = record.task.id
        followed = task_id in state.hubs
        if not state.shared_events:
            return state.subscribe(task_id, subscriber, record.owner)
        state.subscribe(task_id, subscriber)
        if not followed:
            subscriber.seq = record.event_seq
            state.follow_log(task_id, record.event_seq)
        else:
            self._line_up(task_id, record.event_seq, subscriber)
        return record.event_seq

    async def _last_logged(self, record: TaskRecord) -> int:
        """The number of the last event of a settled task (what its stored state
        reflects)."""
        if self._state.shared_events:
            return record.event_seq
        bounds = await self._events.event_bounds(record.owner, record.task.id)
        return bounds[1] if bounds is not None else 0
