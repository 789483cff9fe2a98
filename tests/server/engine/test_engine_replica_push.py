"""Push notifications with two engines (two gateway processes' worth) on one PostgreSQL
database: a config registered or deleted on one engine while the other runs the task
takes effect for the runner's next status change, each status change is delivered
once, by the engine that runs the task, and the cap of 10 configs holds across both
(real dispatchers, a real webhook receiver on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_gateway.agent.base import Completed, Output, Progress, Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import Caller
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.pg_local import USER, LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore, migrate
from a2a_gateway.server.push import PushDispatcher
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.postgres import Clock, fresh_database
from tests.support.secrets import use_secret

from .engine_helpers import ALICE, WAIT_S, Scripted, ctx, send, state_name

TOKEN = "replica-push-token-8c1d4e"
use_secret(TOKEN)


class Hooks:
    """A webhook receiver: the (state, status text) of each delivery, by config path."""

    def __init__(self) -> None:
        self.got: dict[str, list[tuple[str, str]]] = {}
        self.tokens: set[str] = set()
        self._changed = asyncio.Condition()
        self._server: TestServer | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self._hook)
        self._server = TestServer(app, host="127.0.0.1", port=0)
        await self._server.start_server(access_log=None)

    def url(self, name: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.port}/{name}"

    async def _hook(self, request: web.Request) -> web.Response:
        task = orjson.loads(await request.read())["task"]
        status = task["status"]
        text = "".join(p.get("text", "") for p in status.get("message", {}).get("parts", []))
        state = status["state"].removeprefix("TASK_STATE_")
        self.tokens.add(request.headers.get("X-A2A-Notification-Token", ""))
        async with self._changed:
            self.got.setdefault(request.match_info["name"], []).append((state, text))
            self._changed.notify_all()
        return web.Response()

    async def wait_for(self, name: str, count: int) -> None:
        async with asyncio.timeout(WAIT_S), self._changed:
            await self._changed.wait_for(lambda: len(self.got.get(name, [])) >= count)

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()


class Replica:
    """An engine on the shared database with its own dispatcher and outbound client."""

    def __init__(
        self,
        url: str,
        box_dir: Path,
        agent: object,
        clock: Callable[[], int] | None = None,
        kind: type[PostgresTaskStore] = PostgresTaskStore,
    ) -> None:
        self.outbound = OutboundClient(allow_private_urls=True)
        self.push = PushDispatcher(self.outbound)
        self.store = kind(url, box=SecretBox(box_dir), lease_s=10, clock=clock)
        self.engine = TaskEngine(
            agent,  # type: ignore[arg-type]
            self.store,
            push_enabled=True,
            push=self.push,
            outbound=self.outbound,
        )

    async def close(self) -> None:
        await self.engine.aclose()
        await self.push.aclose()
        await self.outbound.aclose()


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    receiver = Hooks()
    await receiver.start()
    yield receiver
    await receiver.close()


@pytest.fixture
async def pair(postgres: LocalPostgres, tmp_path: Path) -> AsyncIterator[tuple[Replica, Replica]]:
    """Two faux engines on a fresh database."""
    url = await fresh_database(postgres)
    a = Replica(url, tmp_path, FauxAgent())
    b = Replica(url, tmp_path, FauxAgent())
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def config(task_id: str, name: str, hooks: Hooks) -> pb.TaskPushNotificationConfig:
    return pb.TaskPushNotificationConfig(task_id=task_id, id=name, url=hooks.url(name), token=TOKEN)


async def listed(engine: TaskEngine, task_id: str) -> list[str]:
    answer = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task_id), ctx()
    )
    return [c.id for c in answer.configs]


async def stored_status(engine: TaskEngine, task_id: str) -> str:
    """The task's status message as the database has it (for an engine not running it)."""
    task = await engine.get_task(pb.GetTaskRequest(id=task_id), ctx())
    return "".join(p.text for p in task.status.message.parts)


async def until(probe: Callable[[], Awaitable[object]], expected: object) -> None:
    """Await ``probe()`` until it answers ``expected``, bounded (what it reads is the
    database or another engine: nothing to wait on)."""
    async with asyncio.timeout(WAIT_S):
        while await probe() != expected:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_configs_changed_on_one_engine_reach_the_runs_status_changes_on_the_other(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    url = await fresh_database(postgres)
    steps = [asyncio.Event() for _ in range(3)]

    async def script(turn: Turn) -> AsyncIterator[Output]:
        await steps[0].wait()
        yield Progress("one")
        await steps[1].wait()
        yield Progress("two")
        await steps[2].wait()
        yield Completed("done")

    a = Replica(url, tmp_path, Scripted(script))
    b = Replica(url, tmp_path, FauxAgent())
    try:
        task = await send(a.engine, "go", return_immediately=True)
        await until(lambda: _state(a.engine, task.id), "WORKING")
        # One config registered on the runner, one on the other engine, during the run.
        await a.engine.create_task_push_notification_config(config(task.id, "on-a", hooks), ctx())
        await b.engine.create_task_push_notification_config(config(task.id, "on-b", hooks), ctx())
        assert await listed(a.engine, task.id) == ["on-a", "on-b"]
        assert await listed(b.engine, task.id) == ["on-a", "on-b"]

        steps[0].set()  # the runner's next status change goes to both
        await hooks.wait_for("on-a", 1)
        await hooks.wait_for("on-b", 1)
        # The runner's save of that status (lazy) does not drop the other engine's config.
        await until(lambda: stored_status(b.engine, task.id), "one")
        assert await listed(a.engine, task.id) == ["on-a", "on-b"]
        assert await listed(b.engine, task.id) == ["on-a", "on-b"]
        got = await a.engine.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="on-b"), ctx()
        )
        assert got.url == hooks.url("on-b") and not got.token  # never answered

        # Deleted on the other engine: the runner's next status changes skip it.
        await b.engine.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="on-a"), ctx()
        )
        assert await listed(a.engine, task.id) == ["on-b"]
        steps[1].set()
        await hooks.wait_for("on-b", 2)
        steps[2].set()
        await hooks.wait_for("on-b", 3)
        assert await a.push.wait_idle(WAIT_S) and await b.push.wait_idle(WAIT_S)
        assert await listed(b.engine, task.id) == ["on-b"]  # the final save kept it
    finally:
        await a.close()
        await b.close()
    assert hooks.got == {
        "on-a": [("WORKING", "one")],
        "on-b": [("WORKING", "one"), ("WORKING", "two"), ("COMPLETED", "done")],
    }
    assert hooks.tokens == {TOKEN}


async def _state(engine: TaskEngine, task_id: str) -> str:
    return state_name(await engine.get_task(pb.GetTaskRequest(id=task_id), ctx()))


async def test_the_cap_of_ten_configs_holds_across_engines(
    pair: tuple[Replica, Replica], hooks: Hooks
) -> None:
    a, b = pair
    task = await send(a.engine, "ask:Which city?")
    assert state_name(task) == "INPUT_REQUIRED"
    # Twelve new configs at once, six through each engine: exactly ten are kept.
    adds = [
        engine.create_task_push_notification_config(config(task.id, f"c{n}", hooks), ctx())
        for n in range(12)
        for engine in [(a.engine, b.engine)[n % 2]]
    ]
    outcomes = await asyncio.gather(*adds, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, errors.InvalidParamsError)]
    assert len(refused) == 2, outcomes
    assert all("at most 10" in str(o) for o in refused)
    kept = await listed(b.engine, task.id)
    assert len(kept) == 10 and kept == await listed(a.engine, task.id)
    # Replacing a kept one is not adding one.
    replaced = config(task.id, kept[0], hooks)
    replaced.url = hooks.url("replaced")
    await b.engine.create_task_push_notification_config(replaced, ctx())
    assert await listed(a.engine, task.id) == kept
    # A continuation's inline config over the cap changes nothing, on either engine.
    answer = pb.SendMessageRequest(
        message=pb.Message(message_id="m-over", role=pb.ROLE_USER, parts=[pb.Part(text="Lisbon")])
    )
    answer.message.task_id = task.id
    answer.configuration.task_push_notification_config.url = hooks.url("more")
    with pytest.raises(errors.InvalidParamsError, match="at most 10"):
        await a.engine.send_message(answer, ctx())
    assert await _state(b.engine, task.id) == "INPUT_REQUIRED"
    answer.message.message_id = "m-fits"
    answer.configuration.task_push_notification_config.id = kept[1]  # a replacement
    done = await a.engine.send_message(answer, ctx())
    assert state_name(done.task) == "COMPLETED"


# --- changes where no run exists: made, stored and announced by one engine only ----------


async def test_a_lost_run_recovered_by_two_engines_at_once_is_announced_once(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    url = await fresh_database(postgres)
    # A gateway that wrote a working task with a webhook, then died (no more renewals).
    dead = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=10, clock=Clock())
    task = pb.Task(id="t-lost", context_id="c-lost")
    task.status.state = pb.TASK_STATE_WORKING
    await dead.save(TaskRecord(task, ALICE, [config(task.id, "hook", hooks)]))
    await dead.aclose()
    later = Clock()
    b = Replica(url, tmp_path, FauxAgent(), clock=later)
    c = Replica(url, tmp_path, FauxAgent(), clock=later)
    try:
        await b.store.start()  # leases are on the database's clock, read at start
        await c.store.start()
        later.now += 60 * 10**9  # past the lease
        seen = await asyncio.gather(
            *(r.engine.get_task(pb.GetTaskRequest(id=task.id), ctx()) for r in (b, c, b, c))
        )
        assert {state_name(t) for t in seen} == {"FAILED"}
        assert {t.status.message.message_id for t in seen} != {""}
        assert len({t.status.message.message_id for t in seen}) == 1  # one recovery stored
        await hooks.wait_for("hook", 1)
        assert await b.push.wait_idle(WAIT_S) and await c.push.wait_idle(WAIT_S)
    finally:
        await b.close()
        await c.close()
    assert hooks.got == {"hook": [("FAILED", "server restarted")]}


@pytest.mark.server_fault  # the recovery's failed write is logged with its traceback
async def test_a_recovery_whose_write_fails_is_announced_once_it_is_stored(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    """B's first recovery of a lost run cannot be stored (a trigger fails its write
    once): B answers it failed, but announces it only with the recovery that is
    stored (the next read's), not with both."""
    url = await fresh_database(postgres)
    dead = PostgresTaskStore(url, box=SecretBox(tmp_path), lease_s=10, clock=Clock())
    task = pb.Task(id="t-lost", context_id="c-lost")
    task.status.state = pb.TASK_STATE_WORKING
    await dead.save(TaskRecord(task, ALICE, [config(task.id, "hook", hooks)]))
    await dead.aclose()
    admin = await asyncpg.connect(url)
    await admin.execute(
        "CREATE SEQUENCE fail_once;"
        " CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF nextval('fail_once') = 1 THEN RAISE EXCEPTION 'injected'; END IF;"
        " RETURN NEW; END $$;"
        " CREATE TRIGGER fail_once BEFORE UPDATE ON a2a_tasks FOR EACH ROW"
        f" WHEN (NEW.state = {pb.TASK_STATE_FAILED}) EXECUTE FUNCTION fail_once()"
    )
    later = Clock()
    b = Replica(url, tmp_path, FauxAgent(), clock=later)
    try:
        await b.store.start()  # leases are on the database's clock, read at start
        later.now += 60 * 10**9  # past the lease
        for _ in range(2):  # the first recovery is not stored, the second is
            seen = await b.engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
            assert state_name(seen) == "FAILED"
        assert await admin.fetchval("SELECT is_called FROM fail_once")
        await hooks.wait_for("hook", 1)
        assert await b.push.wait_idle(WAIT_S)
    finally:
        await admin.close()
        await b.close()
    assert hooks.got == {"hook": [("FAILED", "server restarted")]}


async def test_a_waiting_task_cancelled_on_two_engines_at_once_is_announced_once(
    pair: tuple[Replica, Replica], hooks: Hooks
) -> None:
    a, b = pair
    task = await send(a.engine, "ask:Which city?")
    await b.engine.create_task_push_notification_config(config(task.id, "hook", hooks), ctx())
    outcomes = await asyncio.gather(
        *(r.engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx()) for r in (a, b)),
        return_exceptions=True,
    )
    cancelled = [o for o in outcomes if isinstance(o, pb.Task)]
    refused = [o for o in outcomes if isinstance(o, errors.TaskNotCancelableError)]
    assert (len(cancelled), len(refused)) == (1, 1), outcomes
    assert state_name(cancelled[0]) == "CANCELED"
    await hooks.wait_for("hook", 1)
    assert await a.push.wait_idle(WAIT_S) and await b.push.wait_idle(WAIT_S)
    assert hooks.got == {"hook": [("CANCELED", "")]}


async def test_a_run_settled_elsewhere_after_its_lease_ran_out_is_not_announced_again(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    """A runner that lost its lease (it could not renew in time) but lives on: the engine
    that failed the task "server restarted" announced its end; the runner's own end is
    not stored over it, nor announced."""
    url = await fresh_database(postgres)
    later = Clock()
    a = Replica(url, tmp_path, FauxAgent())
    b = Replica(url, tmp_path, FauxAgent(), clock=later)
    try:
        task = await send(a.engine, "hold:60", return_immediately=True)
        await until(lambda: _state(a.engine, task.id), "WORKING")
        await a.engine.create_task_push_notification_config(config(task.id, "hook", hooks), ctx())
        await until(lambda: _state(b.engine, task.id), "WORKING")  # A's lazy save is in
        later.now += 60 * 10**9  # to B, A's lease ran out
        failed = await b.engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(failed) == "FAILED"
        await hooks.wait_for("hook", 1)
        await a.engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())  # A's run ends
        assert await a.push.wait_idle(WAIT_S) and await b.push.wait_idle(WAIT_S)
        assert await _state(b.engine, task.id) == "FAILED"
    finally:
        await a.close()
        await b.close()
    assert hooks.got == {"hook": [("FAILED", "server restarted")]}


class CancelledBeforeClaim(PostgresTaskStore):
    """The real store; ``before_claim`` (once) runs just before its next context claim:
    the moment between a continuation's read of the task and its claim."""

    before_claim: Callable[[], Awaitable[object]] | None = None

    async def claim_context(
        self,
        owner: Caller,
        context_id: str,
        task_id: str,
        loaded_as: tuple[int, int] | None = None,
    ) -> bool:
        hook, self.before_claim = self.before_claim, None
        if hook is not None:
            await hook()
        return await super().claim_context(owner, context_id, task_id, loaded_as)


async def test_a_continuation_of_a_task_cancelled_elsewhere_meanwhile_does_not_run(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    url = await fresh_database(postgres)
    a = Replica(url, tmp_path, FauxAgent(), kind=CancelledBeforeClaim)
    b = Replica(url, tmp_path, FauxAgent())
    try:
        task = await send(a.engine, "ask:Which city?")
        await b.engine.create_task_push_notification_config(config(task.id, "hook", hooks), ctx())
        assert isinstance(a.store, CancelledBeforeClaim)
        a.store.before_claim = lambda: b.engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())
        with pytest.raises(errors.UnsupportedOperationError, match="terminal state"):
            await send(a.engine, "Lisbon", task_id=task.id)
        assert a.engine.live_task_ids() == []
        await hooks.wait_for("hook", 1)
        assert await a.push.wait_idle(WAIT_S) and await b.push.wait_idle(WAIT_S)
        assert await _state(a.engine, task.id) == "CANCELED"
    finally:
        await a.close()
        await b.close()
    assert hooks.got == {"hook": [("CANCELED", "")]}


# --- replicas whose clocks disagree ------------------------------------------------------


class Skewed:
    """This host's clock ``ahead_s`` ahead (negative: behind), for one replica."""

    def __init__(self, ahead_s: float) -> None:
        self.ahead_ns = int(ahead_s * 1e9)

    def __call__(self) -> int:
        return time.time_ns() + self.ahead_ns


async def test_a_config_added_on_a_replica_whose_clock_is_ahead_gets_the_runs_next_changes(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    """B's clock 10 minutes ahead of the runner A's (A's 10 minutes behind the database):
    the config B adds while A runs the task gets A's next status changes, the one the
    push feed reads configs for and the final one the save answers them with."""
    url = await fresh_database(postgres)
    steps = [asyncio.Event() for _ in range(2)]

    async def script(turn: Turn) -> AsyncIterator[Output]:
        await steps[0].wait()
        yield Progress("one")
        await steps[1].wait()
        yield Completed("done")

    a = Replica(url, tmp_path, Scripted(script), clock=Skewed(-600))
    b = Replica(url, tmp_path, FauxAgent(), clock=Skewed(600))
    try:
        task = await send(a.engine, "go", return_immediately=True)
        await until(lambda: _state(a.engine, task.id), "WORKING")
        await b.engine.create_task_push_notification_config(config(task.id, "on-b", hooks), ctx())
        steps[0].set()
        await hooks.wait_for("on-b", 1)
        steps[1].set()
        await hooks.wait_for("on-b", 2)
        assert await a.push.wait_idle(WAIT_S) and await b.push.wait_idle(WAIT_S)
    finally:
        await a.close()
        await b.close()
    assert hooks.got == {"on-b": [("WORKING", "one"), ("COMPLETED", "done")]}


async def test_a_config_added_on_a_replica_whose_clock_is_ahead_gets_its_recovery(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    """The recovery B stores where no run exists answers the configs added before it,
    one added on B itself (10 minutes ahead) included."""
    url = await fresh_database(postgres)
    ahead = Skewed(600)
    a = Replica(url, tmp_path, FauxAgent())
    b = Replica(url, tmp_path, FauxAgent(), clock=ahead)
    try:
        task = await send(a.engine, "hold:60", return_immediately=True)
        await until(lambda: _state(b.engine, task.id), "WORKING")  # A's lazy save is in
        await b.engine.create_task_push_notification_config(config(task.id, "hook", hooks), ctx())
        ahead.ahead_ns += 60 * 10**9  # to B, A's lease ran out
        failed = await b.engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(failed) == "FAILED"
        await hooks.wait_for("hook", 1)
        await a.engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())  # A's run ends
        assert await a.push.wait_idle(WAIT_S) and await b.push.wait_idle(WAIT_S)
    finally:
        await a.close()
        await b.close()
    assert hooks.got == {"hook": [("FAILED", "server restarted")]}


# --- a failed read of the configs ----------------------------------------------------------

#: Fails the first read of a task's configs for a status change (the push feed's
#: statement, by its text) that finds a row, once; the sequence remembers it was done
#: (it is not rolled back with the failed statement).
_READ_FAULT = """
CREATE SEQUENCE a2a_test_read_faults;
CREATE FUNCTION a2a_test_read_ok() RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  IF current_query() LIKE '%SELECT config, version, added_ns FROM a2a_push_configs%' THEN
    IF nextval('a2a_test_read_faults') = 1 THEN
      RAISE EXCEPTION 'push configs unreadable (injected once)';
    END IF;
  END IF;
  RETURN true;
END $$;
ALTER TABLE a2a_push_configs ENABLE ROW LEVEL SECURITY;
CREATE POLICY rows ON a2a_push_configs USING (true) WITH CHECK (true);
CREATE POLICY read_fault ON a2a_push_configs AS RESTRICTIVE FOR SELECT
  USING (a2a_test_read_ok());
"""


async def test_a_status_change_whose_config_read_fails_once_is_still_announced(
    postgres: LocalPostgres, tmp_path: Path, hooks: Hooks
) -> None:
    """The push feed's read of a task's configs for a status change fails once (a row
    level security policy of the database raises on it; the gateway connects as a role
    that is not the tables' owner, so the policy applies): the read is tried again and
    the change is announced, not dropped."""
    url = await fresh_database(postgres)
    role = "gw_" + url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        await conn.execute(_READ_FAULT)
        await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{postgres.password}'")
        await conn.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
        await conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        a = Replica(url.replace("//" + USER + ":", f"//{role}:", 1), tmp_path, FauxAgent())
        try:
            task = await send(a.engine, "ask:Which city?")
            assert state_name(task) == "INPUT_REQUIRED"
            await a.engine.create_task_push_notification_config(
                config(task.id, "hook", hooks), ctx()
            )
            done = await send(a.engine, "Lisbon", task_id=task.id)
            assert state_name(done) == "COMPLETED"
            await hooks.wait_for("hook", 2)
            assert await a.push.wait_idle(WAIT_S)
        finally:
            await a.close()
        injected = await conn.fetchval("SELECT is_called FROM a2a_test_read_faults")
    finally:
        await conn.close()
    assert injected  # the read did fail once
    assert hooks.got == {"hook": [("WORKING", ""), ("COMPLETED", "")]}
