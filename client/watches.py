"""Watches: follow a remote task until it settles, then deliver the result into the
conversation that started it.

One :class:`WatchRegistry` per process, on one injectable :class:`~.clock.Clock`. A
conversation (workspace + scope) watches a task at most once: handing over a task it
already watches keeps the existing watch. How a watch learns about updates is chosen when
it starts:

- **push** — only with a public URL for the push receiver (``public_url``) and a card that
  advertises push notifications: a push config with id = the watch id, URL
  ``<public_url>/a2a/push/<watchId>`` and a random 32-byte token. A push only wakes the
  watch (:meth:`WatchRegistry.wake` checks the token in constant time), which then reads
  the task with GetTask; a safety GetTask runs every 10 minutes. A refused config falls
  back to subscribe or poll.
- **subscribe** — the card advertises streaming: a stream that drops or ends before the
  task settles is reopened after 1 s, 5 s, then 15 s; after 3 failures in a row the watch
  polls instead. A stream is also reopened after a day.
- **poll** — GetTask after 15 s, 30 s, 1 min, 2 min, then every 5 min (the delays between
  checks).

Every check reads agents.json again: an agent a valid file no longer lists ends the watch
with a ``(stopped)`` notice. A file that is missing, blank or does not parse (an editor
that truncates, then writes, is caught half-way) is a passing state: the watch checks
with its last good reading of the entry (none yet: it skips that check), logs it once
until a good reading comes back, and reads the file again at its next check. The
connection (card and client) is kept between checks and reopened after a failure or when
the agent's entry changes. After
``watch_timeout_s`` (a day) from its start the watch gives up with a ``(no result)``
notice. On a settled task its files are saved and a push config is deleted (best effort).

Every watch is a record in pending.json (:mod:`.pending`). A finished watch stores its text
as ``undelivered``, delivers it to the target's registered delivery
(:meth:`WatchRegistry.register_target`), then removes the record: at least once. Without
a registered target the text stays in the file and goes out when the target registers
(a second later) or at the next start. A delivery that fails (its follow-up turn failed:
provider down, turn bound) keeps the record and is tried again while the process runs,
1 minute later, then 2, 4, ... up to every hour; each attempt first reads the record
again, so a result delivered meanwhile (a target that registered) is not sent twice.
:meth:`WatchRegistry.restore` re-arms a workspace's records in the background;
:meth:`WatchRegistry.aclose` stops the watches and keeps their records.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.files import DEFAULT_MAX_FILE_BYTES
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol.closing import AsyncCloseable
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.watch_metering import NULL_WATCH_METER, WatchMeter

from .agents_file import AgentEntry, read_agents
from .clock import DEFAULT_WATCH_TIMEOUT_S, SYSTEM_CLOCK, Clock
from .guarded_http import open_agent
from .pending import PendingFiles, PendingRecord
from .remote import RemoteService
from .results import (
    SETTLED,
    delivery_text,
    is_settled,
    no_result_text,
    save_task_files,
    stopped_text,
)
from .structured import check_task

log = logging.getLogger(__name__)

DAY_S = 86400.0
#: Bound of every single remote call (and of opening a connection).
CALL_TIMEOUT_S = 60.0
#: Poll mode: delays between checks, the last one repeating.
POLL_DELAYS_S = (15.0, 30.0, 60.0, 120.0, 300.0)
#: Subscribe mode: delays before reopening after the 1st, 2nd, 3rd failure in a row.
RESUBSCRIBE_DELAYS_S = (1.0, 5.0, 15.0)
#: Subscribe mode: after this many failures in a row the watch polls.
MAX_STREAM_FAILURES = 3
#: Subscribe mode: a stream is reopened after this long even when healthy.
STREAM_REOPEN_S = DAY_S
#: Push mode: the safety GetTask interval.
PUSH_SAFETY_S = 600.0
#: Any mode: agents.json is read again this soon while no good reading of the entry
#: exists yet (a watch restored while the file is being edited).
NO_ENTRY_RETRY_S = 1.0
#: A target that registers gets its kept results this long after.
DELIVER_AFTER_REGISTER_S = 1.0
#: A failed delivery is tried again after this long, doubling up to REDELIVER_MAX_S.
REDELIVER_FIRST_S = 60.0
REDELIVER_MAX_S = 3600.0
PUSH_PATH = "/a2a/push/"

Deliver = Callable[[str, str], Awaitable[None]]
"""A host's delivery into a conversation: ``await deliver(scope, text)`` hands the text
over as a follow-up prompt (queued behind a running turn); it returns once the host
has taken it, and raises when it could not."""
Opener = Callable[..., Awaitable[RemoteService]]


def _resolved(workspace: Path) -> Path:
    """Watches are keyed by the resolved workspace (resolving touches no file here
    that can be slow: the workspace is a local folder)."""
    return workspace.resolve()


def poll_delays() -> Iterator[float]:
    """15 s, 30 s, 1 min, 2 min, then 5 min forever."""
    yield from POLL_DELAYS_S[:-1]
    while True:
        yield POLL_DELAYS_S[-1]


def mode_for(card: pb.AgentCard, *, push_available: bool) -> str:
    """push when we can receive pushes and the card offers them, else subscribe when it
    streams, else poll."""
    if push_available and card.capabilities.push_notifications:
        return "push"
    return "subscribe" if card.capabilities.streaming else "poll"


@dataclass(eq=False, slots=True)
class Watch:
    """One running watch. ``record`` is its pending.json record (kept current)."""

    workspace: Path
    record: PendingRecord
    wake_event: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    checks: int = 0  # remote checks made (GetTask calls and streams opened)
    #: Set once the watch has checked the task (or ended): ``chat --message`` waits
    #: for this before its own turn, so a result that is ready goes out first.
    first_check: asyncio.Event = field(default_factory=asyncio.Event)
    #: The agent's entry at the last conclusive reading of agents.json.
    entry: AgentEntry | None = None
    #: The last reading was inconclusive and that was logged (once per such spell).
    unsure: bool = False

    @property
    def key(self) -> tuple[Path, str, str]:
        return (self.workspace, self.record.target, self.record.taskId)


class _Connection:
    """The agent's connection kept between checks; reopened on failure or entry change."""

    def __init__(self, registry: WatchRegistry) -> None:
        self.registry = registry
        self.entry: AgentEntry | None = None
        self.service: RemoteService | None = None

    async def get(self, entry: AgentEntry) -> RemoteService:
        if self.service is not None and entry == self.entry:
            return self.service
        await self.reset()
        async with asyncio.timeout(self.registry.call_timeout_s):
            service = await self.registry.opener(
                entry,
                allow_private_urls=self.registry.allow_private_urls,
                timeout=self.registry.call_timeout_s,
            )
        # A healthy subscription may be silent for long: the day's reopen bounds it.
        service.stream_idle_timeout = STREAM_REOPEN_S + CALL_TIMEOUT_S
        self.entry, self.service = entry, service
        return service

    async def reset(self) -> None:
        service, self.service, self.entry = self.service, None, None
        if service is not None:
            with contextlib.suppress(Exception):
                await service.aclose()


class _Stop(Exception):
    """The agent was removed from agents.json."""


class WatchRegistry(AsyncCloseable):
    """Every watch of this process (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        public_url: str | None = None,
        allow_private_urls: bool = False,
        watch_timeout_s: float = DEFAULT_WATCH_TIMEOUT_S,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        call_timeout_s: float = CALL_TIMEOUT_S,
        opener: Opener = open_agent,
        meter: WatchMeter = NULL_WATCH_METER,
    ) -> None:
        self.clock = clock
        #: Told how each watch ends and each delivery (a host's metrics; see
        #: watch_metering). A host may set it after building the registry.
        self.meter = meter
        self.public_url = public_url.rstrip("/") if public_url else None
        self.allow_private_urls = allow_private_urls
        self.watch_timeout_s = watch_timeout_s
        self.max_file_bytes = max_file_bytes
        self.call_timeout_s = call_timeout_s
        self.opener = opener
        self.pending = PendingFiles()
        self._watches: dict[tuple[Path, str, str], Watch] = {}
        self._by_id: dict[str, Watch] = {}
        self._targets: dict[tuple[Path, str], Deliver] = {}
        self._delivering: set[str] = set()
        #: Watch id → the wait before its next delivery attempt (after a failed one).
        self._redeliver_after: dict[str, float] = {}
        self._redelivery_due: set[str] = set()  # a later attempt is scheduled
        self._finishing: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False

    # --- hosts --------------------------------------------------------------------------

    def register_target(self, workspace: Path, scope: str, deliver: Deliver) -> None:
        """Deliver results for conversation ``scope`` of ``workspace`` with ``deliver``;
        the results kept for it go out a second later."""
        workspace = _resolved(workspace)
        self._targets[(workspace, scope)] = deliver
        self._spawn(self._deliver_kept(workspace, scope, DELIVER_AFTER_REGISTER_S))

    def restore(self, workspace: Path) -> asyncio.Task[None]:
        """Re-arm ``workspace``'s pending watches and deliver its kept results, in the
        background (the returned task; the caller need not wait for it)."""
        return self._spawn(self._restore(workspace.resolve()))

    def watches(self, workspace: Path | None = None) -> list[Watch]:
        items = list(self._watches.values())
        if workspace is not None:
            items = [w for w in items if w.workspace == workspace.resolve()]
        return items

    def pending_by_mode(self) -> dict[str, int]:
        """The watches following a task now, by mode (metrics, at scrape time)."""
        return dict(Counter(w.record.source for w in self._watches.values()))

    def find(self, workspace: Path, scope: str, task_id: str) -> Watch | None:
        return self._watches.get((_resolved(workspace), scope, task_id))

    # --- watches ------------------------------------------------------------------------

    async def watch(
        self,
        workspace: Path,
        scope: str,
        agent: str,
        task_id: str,
        context_id: str,
        *,
        card: pb.AgentCard | None = None,
        result_schema: dict[str, Any] | None = None,
    ) -> Watch:
        """Start watching ``task_id`` for ``scope`` (or return the existing watch);
        ``result_schema``: a completed answer is checked against it before delivery."""
        workspace = _resolved(workspace)
        existing = self._watches.get((workspace, scope, task_id))
        if existing is not None:
            return existing
        push = self.public_url is not None
        source = mode_for(card, push_available=push) if card is not None else "poll"
        record = PendingRecord(
            watchId=uuid.uuid4().hex,
            target=scope,
            agent=agent,
            taskId=task_id,
            contextId=context_id,
            pushToken=secrets.token_urlsafe(32) if source == "push" else None,
            startedAt=self.clock.now().isoformat(),
            source=source,
            resultSchema=result_schema,
        )
        watch = Watch(workspace, record)
        self._add(watch)
        await self.pending.put(workspace, record)
        self._start(watch, fresh=True)
        return watch

    async def rearm(self, workspace: Path, record: PendingRecord) -> Watch:
        """Watch again from ``record`` (same watch id, start and token)."""
        workspace = _resolved(workspace)
        existing = self._watches.get((workspace, record.target, record.taskId))
        if existing is not None:
            return existing
        if record.source == "push" and self.public_url is None:
            record = record.with_(source="subscribe", pushToken=None)
        watch = Watch(workspace, record.with_(undelivered=None))
        self._add(watch)
        await self.pending.put(workspace, watch.record)
        self._start(watch, fresh=False)
        return watch

    async def stop(self, workspace: Path, scope: str, task_id: str) -> PendingRecord | None:
        """Stop this conversation's watch of ``task_id`` and drop its record; returns
        the record (to :meth:`rearm` it), or None when there was no watch."""
        watch = self._watches.get((_resolved(workspace), scope, task_id))
        if watch is None:
            return None
        self._drop(watch)
        if watch.runner is not None:
            watch.runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch.runner
        await self.pending.remove(watch.workspace, watch.record.watchId)
        return watch.record

    async def forget(self, workspace: Path, scope: str, task_id: str) -> None:
        """The conversation has the task's result: stop its watch and drop a result
        kept for delivery, so it does not arrive a second time."""
        workspace = _resolved(workspace)
        await self.stop(workspace, scope, task_id)
        for record in await self.pending.read(workspace):
            if record.target == scope and record.taskId == task_id:
                if record.watchId in self._delivering:
                    continue  # on its way already
                await self.pending.remove(workspace, record.watchId)

    def wake(self, watch_id: str, token: str) -> bool:
        """A push arrived for ``watch_id``: check its token (constant time) and wake the
        watch. False for an unknown watch or a wrong token."""
        watch = self._by_id.get(watch_id)
        expected = watch.record.pushToken if watch is not None else None
        # Compare even when there is nothing to compare with, so timing says nothing.
        ok = hmac.compare_digest(
            (expected or "\x00" * 43).encode(), token.encode("utf-8", "replace")
        )
        if watch is None or expected is None or not ok:
            return False
        watch.wake_event.set()
        return True

    def push_url(self, watch_id: str) -> str:
        assert self.public_url is not None
        return f"{self.public_url}{PUSH_PATH}{watch_id}"

    async def aclose(self) -> None:
        """Stop every watch; their records stay for the next start."""
        self._closed = True
        tasks = list(self._background)  # every runner, delivering or not, and spawned work
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._watches.clear()
        self._by_id.clear()

    # --- internals ----------------------------------------------------------------------

    def _add(self, watch: Watch) -> None:
        self._watches[watch.key] = watch
        self._by_id[watch.record.watchId] = watch

    def _drop(self, watch: Watch) -> None:
        if self._watches.get(watch.key) is watch:
            del self._watches[watch.key]
        if self._by_id.get(watch.record.watchId) is watch:
            del self._by_id[watch.record.watchId]

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        async def run() -> None:
            await work

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _start(self, watch: Watch, *, fresh: bool) -> None:
        if self._closed:
            return
        runner = asyncio.get_running_loop().create_task(
            self._run(watch, fresh), name=f"a2a-watch-{watch.record.watchId}"
        )
        watch.runner = runner
        # Owned until it ends: a finished watch leaves the list before it delivers.
        self._background.add(runner)
        runner.add_done_callback(self._background.discard)

    async def _restore(self, workspace: Path) -> None:
        records = await self.pending.read(workspace)
        for record in records:
            if record.undelivered is None:
                await self.rearm(workspace, record)
        for record in records:
            if record.undelivered is not None:
                await self._deliver(workspace, record)

    async def _deliver_kept(self, workspace: Path, scope: str, delay: float) -> None:
        await self.clock.sleep(delay)
        for record in await self.pending.read(workspace):
            if record.target == scope and record.undelivered is not None:
                await self._deliver(workspace, record)

    async def _deliver(self, workspace: Path, record: PendingRecord) -> None:
        """Hand ``record.undelivered`` to its target, then remove the record; keep it
        when there is no target, and keep it and try again later (backoff) when the
        delivery fails. A record no longer in the file (delivered meanwhile) is not
        delivered again."""
        watch_id = record.watchId
        deliver = self._targets.get((workspace, record.target))
        if record.undelivered is None or deliver is None or watch_id in self._delivering:
            return
        self._delivering.add(watch_id)
        try:
            current = [r for r in await self.pending.read(workspace) if r.watchId == watch_id]
            text = current[0].undelivered if current else None
            if text is None:
                self._redeliver_after.pop(watch_id, None)
                return
            try:
                await deliver(record.target, text)
            except Exception as exc:
                self.meter.delivery("failed")
                delay = self._redeliver_after.get(watch_id, REDELIVER_FIRST_S)
                self._redeliver_after[watch_id] = min(2 * delay, REDELIVER_MAX_S)
                log.warning(
                    "A2A result for task %s could not be delivered (%s); kept, tried again in %g s",
                    record.taskId,
                    type(exc).__name__,
                    delay,
                )
                if watch_id not in self._redelivery_due and not self._closed:
                    self._redelivery_due.add(watch_id)
                    self._spawn(self._redeliver(workspace, watch_id, delay))
                return
            self.meter.delivery("delivered")
            await self.pending.remove(workspace, watch_id)
            self._redeliver_after.pop(watch_id, None)
        finally:
            self._delivering.discard(watch_id)

    async def _redeliver(self, workspace: Path, watch_id: str, delay: float) -> None:
        """Deliver the kept result of ``watch_id`` again after ``delay`` (if it is still
        kept then)."""
        try:
            await self.clock.sleep(delay)
        finally:
            self._redelivery_due.discard(watch_id)
        for record in await self.pending.read(workspace):
            if record.watchId == watch_id:
                await self._deliver(workspace, record)
                return
        self._redeliver_after.pop(watch_id, None)

    def _deadline(self, record: PendingRecord) -> datetime | None:
        try:
            started = datetime.fromisoformat(record.startedAt)
        except ValueError:
            return None
        if started.tzinfo is None:
            return None
        try:
            return started + timedelta(seconds=self.watch_timeout_s)
        except OverflowError:  # past year 9999: never reached
            return None

    def _remaining(self, record: PendingRecord) -> float:
        deadline = self._deadline(record)
        if deadline is None:
            return self.watch_timeout_s
        return (deadline - self.clock.now()).total_seconds()

    async def _run(self, watch: Watch, fresh: bool) -> None:
        record = watch.record
        connection = _Connection(self)
        try:
            text, outcome = await self._follow(watch, connection, fresh)
        except asyncio.CancelledError:
            await asyncio.shield(connection.reset())
            raise
        except Exception:
            log.exception("watch %s of task %s failed", record.watchId, record.taskId)
            self.meter.ended(watch.record.source, "error")
            await connection.reset()
            self._drop(watch)
            watch.first_check.set()
            return
        await connection.reset()
        self.meter.ended(watch.record.source, outcome)
        record = watch.record.with_(undelivered=text)
        watch.record = record
        self._finishing.add(record.watchId)
        try:
            self._drop(watch)
            watch.first_check.set()
            await self.pending.put(watch.workspace, record)
            log.info("watch %s: task %s finished", record.watchId, record.taskId)
            await self._deliver(watch.workspace, record)
        finally:
            self._finishing.discard(record.watchId)

    async def quiesce(self, workspace: Path, *, bound: float) -> None:
        """Wait (at most ``bound`` seconds) until every watch of ``workspace`` has made
        its first check and no finished watch is still delivering."""
        workspace = _resolved(workspace)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                for watch in self.watches(workspace):
                    await watch.first_check.wait()
                while self._finishing or self._delivering:  # noqa: ASYNC110 - two sets
                    await asyncio.sleep(0.05)

    async def _entry(self, watch: Watch) -> AgentEntry | None:
        """The agent's entry now: _Stop when a valid file no longer lists it; the last
        good reading (None before one) when the file is missing, blank or malformed."""
        agents = await asyncio.to_thread(read_agents, watch.workspace)
        if not agents.conclusive:
            if not watch.unsure:
                watch.unsure = True
                why = agents.error or f"{agents.path.name} is missing or empty"
                log.warning(
                    "watch %s: %s; %s, and it is read again at the next check",
                    watch.record.watchId,
                    why,
                    "the last good reading is used" if watch.entry else "no check until then",
                )
            return watch.entry
        watch.unsure = False
        entry = agents.agents.get(watch.record.agent)
        if entry is None:
            raise _Stop
        watch.entry = entry
        return entry

    async def _set_source(self, watch: Watch, source: str) -> None:
        token = watch.record.pushToken if source == "push" else None
        watch.record = watch.record.with_(source=source, pushToken=token)
        await self.pending.put(watch.workspace, watch.record)

    async def _follow(self, watch: Watch, connection: _Connection, fresh: bool) -> tuple[str, str]:
        """Check until the task settles; the text to deliver, and how the watch ended
        (a watch_metering.WATCH_OUTCOMES value)."""
        polls = poll_delays()
        failures = 0
        push_ready = not fresh  # a re-armed push watch registered its config before
        delay = next(polls) if fresh and watch.record.source == "poll" else 0.0
        record = watch.record
        while True:
            remaining = self._remaining(watch.record)
            if delay > 0 and remaining > 0:
                await self.clock.sleep(min(delay, remaining), watch.wake_event)
                watch.wake_event.clear()
                remaining = self._remaining(watch.record)
            record = watch.record
            if remaining <= 0:
                text = no_result_text(
                    record.agent, record.taskId, record.contextId, self.watch_timeout_s
                )
                return text, "expired"
            try:
                entry = await self._entry(watch)
            except _Stop:
                return stopped_text(record.agent, record.taskId, record.contextId), "stopped"
            source = record.source
            task: pb.Task | None = None
            if entry is not None:
                try:
                    service = await connection.get(entry)
                    if source == "push" and not push_ready:
                        push_ready = await self._register_push(watch, service)
                        source = watch.record.source
                    if source == "subscribe":
                        task, healthy, reopen = await self._subscribe(watch, service)
                        if task is None:
                            # A day's reopen is no failure; a stream that brought
                            # updates restarts the count; any other end is one more.
                            failures = 0 if reopen else 1 if healthy else failures + 1
                    else:
                        task = await self._get_task(watch, service)
                except (A2AError, OSError, TimeoutError) as exc:
                    log.info(
                        "watch %s of task %s: check failed: %s",
                        record.watchId,
                        record.taskId,
                        getattr(exc, "message", None) or type(exc).__name__,
                    )
                    await connection.reset()
                    if source == "subscribe":
                        failures += 1
                if task is not None and is_settled(task):
                    return await self._settled(watch, task, connection.service), "settled"
            watch.first_check.set()
            # The next wait.
            if entry is None:  # nothing to check with yet: read the file again soon
                delay = NO_ENTRY_RETRY_S
            elif source == "subscribe":
                if failures >= MAX_STREAM_FAILURES:
                    await self._set_source(watch, "poll")
                    polls = poll_delays()
                    delay = next(polls)
                    failures = 0
                elif failures:
                    delay = RESUBSCRIBE_DELAYS_S[failures - 1]
                else:  # a stream to reopen at once
                    delay = 0.0
            elif source == "push":
                delay = PUSH_SAFETY_S
            else:
                delay = next(polls)

    async def _get_task(self, watch: Watch, service: RemoteService) -> pb.Task:
        watch.checks += 1
        async with asyncio.timeout(self.call_timeout_s):
            return await service.get_task(pb.GetTaskRequest(id=watch.record.taskId))

    async def _register_push(self, watch: Watch, service: RemoteService) -> bool:
        """Register the push config; on refusal fall back to subscribe or poll."""
        record = watch.record
        if record.pushToken is None or self.public_url is None:
            await self._set_source(watch, mode_for(service.card, push_available=False))
            return False
        config = pb.TaskPushNotificationConfig(
            id=record.watchId,
            task_id=record.taskId,
            url=self.push_url(record.watchId),
            token=record.pushToken,
        )
        try:
            async with asyncio.timeout(self.call_timeout_s):
                await service.create_task_push_notification_config(config)
        except (A2AError, TimeoutError) as exc:
            fallback = mode_for(service.card, push_available=False)
            log.info(
                "watch %s: push config refused (%s); using %s",
                record.watchId,
                getattr(exc, "message", None) or type(exc).__name__,
                fallback,
            )
            await self._set_source(watch, fallback)
            return False
        return True

    async def _subscribe(
        self, watch: Watch, service: RemoteService
    ) -> tuple[pb.Task | None, bool, bool]:
        """One stream: (the settled task or None, whether it brought updates, whether it
        was closed for the day's reopen).

        Ends when the task settles, the stream ends or fails (raises), or after a day
        (then reopened at once: not a failure)."""
        record = watch.record
        settled: asyncio.Future[pb.Task | None] = asyncio.get_running_loop().create_future()
        healthy = False
        done = asyncio.Event()

        async def consume() -> None:
            nonlocal healthy
            try:
                events = service.subscribe_to_task(pb.SubscribeToTaskRequest(id=record.taskId))
                async with contextlib.aclosing(events) as stream:
                    first = True
                    async for event in stream:
                        kind = event.WhichOneof("payload")
                        if not first:
                            healthy = True
                        first = False
                        state = None
                        if kind == "task":
                            state = event.task.status.state
                        elif kind == "status_update":
                            state = event.status_update.status.state
                        if state is not None and state in SETTLED:
                            # The complete task (artifacts assembled) from GetTask.
                            settled.set_result(await self._get_task(watch, service))
                            return
                        watch.first_check.set()  # the stream showed the task running
                if not settled.done():
                    settled.set_result(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not settled.done():
                    settled.set_exception(exc)
            finally:
                done.set()

        watch.checks += 1
        consumer = asyncio.get_running_loop().create_task(consume())
        try:
            ended = await self.clock.sleep(STREAM_REOPEN_S, done)
            if not ended:  # a day: reopen
                consumer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await consumer
                return None, True, True
            try:
                task = settled.result()
            except A2AError:
                # E.g. a task already in a final state cannot be subscribed to: read it.
                task = await self._get_task(watch, service)
                if is_settled(task):
                    return task, healthy, False
                raise
            return task, healthy, False
        finally:
            if not consumer.done():
                consumer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await consumer
            if settled.done() and not settled.cancelled():
                settled.exception()  # retrieved: an unread failure is not logged by asyncio

    async def _settled(self, watch: Watch, task: pb.Task, service: RemoteService | None) -> str:
        record = watch.record
        files = await asyncio.to_thread(
            save_task_files,
            task,
            watch.workspace,
            record.agent,
            max_file_bytes=self.max_file_bytes,
        )
        if record.source == "push" and service is not None:
            request = pb.DeleteTaskPushNotificationConfigRequest(
                task_id=record.taskId, id=record.watchId
            )
            try:
                async with asyncio.timeout(self.call_timeout_s):
                    await service.delete_task_push_notification_config(request)
            except (A2AError, TimeoutError) as exc:
                log.info(
                    "watch %s: push config not deleted: %s",
                    record.watchId,
                    getattr(exc, "message", None) or type(exc).__name__,
                )
        # A prompt to the owner's model: the agent's text passes the entry's redactor.
        redact = Redactor([watch.entry.key if watch.entry is not None else None])
        schema = record.resultSchema
        checked = check_task(schema, task) if schema is not None else None
        return redact(delivery_text(record.agent, task, files, checked=checked))
