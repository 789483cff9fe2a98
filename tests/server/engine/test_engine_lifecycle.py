"""Task lifecycle through the engine: sends, streams, multi-turn, failures, hop guard."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from a2a_gateway.agent.base import (
    AgentError,
    ArtifactChunk,
    Completed,
    Failed,
    InputRequired,
    Output,
    Progress,
    TextChunk,
    Turn,
)
from a2a_gateway.protocol import errors
from a2a_gateway.server.engine import CONTEXT_BUSY, UNEXPECTED, TaskEngine
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import (
    ALICE,
    BOB,
    WAIT_S,
    Scripted,
    collect,
    ctx,
    kinds,
    request,
    response_text,
    send,
    state_name,
    status_text,
)

# --- blocking send ----------------------------------------------------------------------


async def test_hi_completes_with_one_response_artifact_echoing_the_input(
    engine: TaskEngine,
) -> None:
    task = await send(engine, "hello there")
    assert state_name(task) == "COMPLETED"
    assert task.status.HasField("timestamp")
    assert [a.name for a in task.artifacts] == ["response"]
    assert response_text(task) == ["hello there"]
    assert [m.role for m in task.history] == [pb.ROLE_USER]
    assert task.history[0].task_id == task.id
    assert task.history[0].context_id == task.context_id
    again = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert again == task


async def test_return_immediately_answers_before_the_run_ends(
    new_engine: Callable[..., TaskEngine],
) -> None:
    started = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        started.set()
        await turn.cancelled.wait()
        yield TextChunk("never stored")

    engine = new_engine(Scripted(script))
    task = await send(engine, "go", return_immediately=True)
    assert state_name(task) == "SUBMITTED"
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    fetched = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(fetched) == "WORKING"
    canceled = await engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())
    assert state_name(canceled) == "CANCELED"
    assert not canceled.artifacts


async def test_blocking_send_returns_at_the_call_deadline(engine: TaskEngine) -> None:
    loop = asyncio.get_running_loop()
    context = ctx(deadline=loop.time() + 0.05)
    response = await engine.send_message(request("hold:30"), context)
    assert state_name(response.task) == "WORKING"
    await engine.cancel_task(pb.CancelTaskRequest(id=response.task.id), ctx())


async def test_every_status_has_a_millisecond_timestamp(engine: TaskEngine) -> None:
    events = await collect(engine.send_streaming_message(request("hi"), ctx()))
    for event in events:
        kind = event.WhichOneof("payload")
        if kind in ("task", "status_update"):
            status = event.task.status if kind == "task" else event.status_update.status
            assert status.timestamp.seconds > 0
            assert status.timestamp.nanos % 1_000_000 == 0


@pytest.mark.parametrize(
    ("text", "state", "message"),
    [
        ("fail:disk is full", "FAILED", "disk is full"),
        ("reject:not my job", "REJECTED", "not my job"),
        ("auth:log in at example.com", "AUTH_REQUIRED", "log in at example.com"),
        ("ask:Which city?", "INPUT_REQUIRED", "Which city?"),
        pytest.param("crash", "FAILED", UNEXPECTED, marks=pytest.mark.server_fault),
    ],
)
async def test_faux_outcomes(engine: TaskEngine, text: str, state: str, message: str) -> None:
    task = await send(engine, text)
    assert state_name(task) == state
    assert status_text(task) == message
    assert task.status.message.role == pb.ROLE_AGENT


async def test_message_directive_replies_without_a_task(engine: TaskEngine) -> None:
    response = await engine.send_message(request("message:just a note", context_id="c-1"), ctx())
    assert response.WhichOneof("payload") == "message"
    assert response.message.role == pb.ROLE_AGENT
    assert response.message.context_id == "c-1"
    assert [p.text for p in response.message.parts] == ["just a note"]
    listed = await engine.list_tasks(pb.ListTasksRequest(), ctx())
    assert listed.total_size == 0
    events = await collect(engine.send_streaming_message(request("message:x"), ctx()))
    assert kinds(events) == ["message"]


async def test_agent_error_fails_with_a_redacted_message(
    new_engine: Callable[..., TaskEngine],
) -> None:
    async def script(turn: Turn) -> AsyncIterator[Output]:
        raise AgentError("provider said: invalid api_key=sk-live-0123456789abcdef")
        yield TextChunk("unreachable")

    task = await send(new_engine(Scripted(script)), "go")
    assert state_name(task) == "FAILED"
    text = status_text(task)
    assert "sk-live" not in text and "0123456789abcdef" not in text
    assert "provider said" in text


@pytest.mark.server_fault
async def test_unexpected_exception_keeps_details_out_of_the_task(
    new_engine: Callable[..., TaskEngine], caplog: pytest.LogCaptureFixture
) -> None:
    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield TextChunk("partial")
        raise ValueError("secret internal detail")

    task = await send(new_engine(Scripted(script)), "go")
    assert state_name(task) == "FAILED"
    assert status_text(task) == UNEXPECTED
    assert "secret internal detail" not in str(task)
    assert "secret internal detail" in caplog.text  # details go to the log only


async def test_run_timeout_fails_the_task(new_engine: Callable[..., TaskEngine]) -> None:
    engine = new_engine(run_timeout_s=0.05)
    task = await send(engine, "hold:30")
    assert state_name(task) == "FAILED"
    assert "took longer" in status_text(task)


async def test_runs_share_one_deadline_timer_each_with_its_own_deadline(
    new_engine: Callable[..., TaskEngine],
) -> None:
    # A run started later with a shorter bound times out first (the one timer moves
    # to the nearer deadline); the earlier run goes on to its own.
    started = asyncio.Event()

    async def script(turn: Turn) -> AsyncIterator[Output]:
        started.set()  # its bound is set: the run drives
        await asyncio.sleep(30)
        yield TextChunk("never")

    engine = new_engine(Scripted(script), run_timeout_s=30.0)
    long_run = await send(engine, "long", return_immediately=True)
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    engine.run_timeout_s = 0.05
    short = await send(engine, "short")
    assert state_name(short) == "FAILED"
    assert "took longer than 0.05 s" in status_text(short)
    held = await engine.get_task(pb.GetTaskRequest(id=long_run.id), ctx())
    assert state_name(held) == "WORKING"
    engine.run_timeout_s = 0.1
    third = await send(engine, "third")
    assert "took longer than 0.1 s" in status_text(third)
    assert state_name(await engine.get_task(pb.GetTaskRequest(id=long_run.id), ctx())) == "WORKING"
    await engine.cancel_task(pb.CancelTaskRequest(id=long_run.id), ctx())
    # No live run: no timer left scheduled.
    assert engine.live_task_ids() == []
    assert engine._runner._deadline_timer is None


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.message.ClearField("message_id"), "message.messageId"),
        (lambda r: r.message.ClearField("parts"), "message.parts"),
        (lambda r: setattr(r.message, "role", pb.ROLE_AGENT), "message.role"),
        (lambda r: setattr(r.message, "context_id", "bad id!"), "message.contextId"),
        (lambda r: setattr(r.message, "context_id", "x" * 101), "message.contextId"),
        (
            lambda r: r.configuration.__setattr__("history_length", -1),
            "configuration.historyLength",
        ),
        (lambda r: r.ClearField("message"), "message"),
    ],
)
async def test_invalid_messages_are_invalid_params_naming_the_field(
    engine: TaskEngine, mutate: Callable[[pb.SendMessageRequest], object], field: str
) -> None:
    req = request("hi")
    mutate(req)
    with pytest.raises(errors.InvalidParamsError) as caught:
        await engine.send_message(req, ctx())
    assert caught.value.violations[0].field == field
    assert field in caught.value.message


async def test_client_context_id_is_kept_and_a_missing_one_is_generated(engine: TaskEngine) -> None:
    chosen = await send(engine, "hi", context_id="trip_2026-planning")
    assert chosen.context_id == "trip_2026-planning"
    fresh = await send(engine, "hi")
    assert fresh.context_id and fresh.context_id != chosen.context_id


# --- streaming ---------------------------------------------------------------------------


async def test_stream_starts_with_the_task_and_ends_at_completion(engine: TaskEngine) -> None:
    events = await collect(engine.send_streaming_message(request("hi"), ctx()))
    assert kinds(events) == [
        "task:SUBMITTED",
        "status:WORKING",
        "artifact_update",
        "status:COMPLETED",
    ]
    update = events[2].artifact_update
    assert update.artifact.name == "response"
    assert [p.text for p in update.artifact.parts] == ["hi"]
    assert not update.append and update.last_chunk
    task_id = events[0].task.id
    assert all(
        (e.status_update.task_id or e.artifact_update.task_id) == task_id for e in events[1:]
    )


async def test_chunks_stream_on_one_artifact_with_append_and_last_chunk(
    engine: TaskEngine,
) -> None:
    events = await collect(engine.send_streaming_message(request("chunks:5"), ctx()))
    updates = [e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"]
    assert [u.artifact.parts[0].text for u in updates] == [f"chunk-{i}" for i in range(5)]
    assert len({u.artifact.artifact_id for u in updates}) == 1
    assert [u.append for u in updates] == [False, True, True, True, True]
    assert [u.last_chunk for u in updates] == [False, False, False, False, True]
    assert kinds(events)[-1] == "status:COMPLETED"
    task = await engine.get_task(pb.GetTaskRequest(id=events[0].task.id), ctx())
    assert response_text(task) == ["".join(f"chunk-{i}" for i in range(5))]


async def test_streamed_text_is_one_part_whenever_the_task_is_read(
    new_engine: Callable[..., TaskEngine],
) -> None:
    """Mid-run reads, a progress status and another artifact between chunks each see
    the text so far as one part; each stream event still carries its own delta."""
    go_on = asyncio.Event()
    seen: list[list[str]] = []

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield TextChunk("Hello")
        yield TextChunk(" from")
        yield Progress("still here")
        yield TextChunk(" the")
        yield ArtifactChunk(pb.Artifact(name="note", parts=[pb.Part(text="n")]))
        yield TextChunk(" engine")
        await go_on.wait()
        yield TextChunk(".", last=True)

    engine = new_engine(Scripted(script))
    stream = engine.send_streaming_message(request("go"), ctx())
    events: list[pb.StreamResponse] = []
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            events.append(event)
            if event.artifact_update.artifact.parts[:1] == [pb.Part(text=" engine")]:
                live = await engine.get_task(pb.GetTaskRequest(id=events[0].task.id), ctx())
                seen.append(response_text(live))
                seen.append(response_text(live))  # a second read flushes nothing twice
                go_on.set()
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    response = [u for u in updates if u.artifact.name == "response"]
    assert [u.artifact.parts[0].text for u in response] == [
        "Hello",
        " from",
        " the",
        " engine",
        ".",
    ]
    assert [u.append for u in response] == [False, True, True, True, True]
    assert seen == [["Hello from the engine"]] * 2
    task = await engine.get_task(pb.GetTaskRequest(id=events[0].task.id), ctx())
    assert response_text(task) == ["Hello from the engine."]
    assert [a.name for a in task.artifacts] == ["response", "note"]


async def test_send_stream_closes_at_input_required(engine: TaskEngine) -> None:
    events = await collect(engine.send_streaming_message(request("ask:Which city?"), ctx()))
    assert kinds(events) == ["task:SUBMITTED", "status:WORKING", "status:INPUT_REQUIRED"]


async def test_stream_errors_come_from_the_first_anext(engine: TaskEngine) -> None:
    done = await send(engine, "hi")
    stream = engine.send_streaming_message(request("again", task_id=done.id), ctx())
    with pytest.raises(errors.UnsupportedOperationError):
        await stream.__anext__()
    bad = engine.send_streaming_message(request("hi", context_id="no spaces"), ctx())
    with pytest.raises(errors.InvalidParamsError):
        await bad.__anext__()


async def test_other_artifacts_and_progress_are_streamed_and_stored(
    new_engine: Callable[..., TaskEngine],
) -> None:
    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield Progress("thinking")
        yield ArtifactChunk(
            pb.Artifact(artifact_id="a-1", name="report", parts=[pb.Part(text="p1")])
        )
        yield ArtifactChunk(
            pb.Artifact(artifact_id="a-1", parts=[pb.Part(text="p2")]), append=True, last_chunk=True
        )

    engine = new_engine(Scripted(script))
    events = await collect(engine.send_streaming_message(request("go"), ctx()))
    assert kinds(events) == [
        "task:SUBMITTED",
        "status:WORKING",
        "status:WORKING",
        "artifact_update",
        "artifact_update",
        "status:COMPLETED",
    ]
    assert status_text(events[2].status_update) == "thinking"
    task = await engine.get_task(pb.GetTaskRequest(id=events[0].task.id), ctx())
    assert [(a.artifact_id, a.name, [p.text for p in a.parts]) for a in task.artifacts] == [
        ("a-1", "report", ["p1", "p2"])
    ]
    # The progress message moved into history when the next status came.
    assert [m.role for m in task.history] == [pb.ROLE_USER, pb.ROLE_AGENT]


# --- multi-turn --------------------------------------------------------------------------


async def test_ask_then_answer_completes_the_task_echoing_the_answer(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Which city?")
    assert state_name(asked) == "INPUT_REQUIRED"
    answered = await send(engine, "Paris", task_id=asked.id)
    assert answered.id == asked.id
    assert state_name(answered) == "COMPLETED"
    assert response_text(answered) == ["Paris"]
    assert [(m.role, m.parts[0].text) for m in answered.history] == [
        (pb.ROLE_USER, "ask:Which city?"),
        (pb.ROLE_AGENT, "Which city?"),
        (pb.ROLE_USER, "Paris"),
    ]
    assert all(m.context_id == asked.context_id for m in answered.history)


async def test_answer_with_only_the_task_id_or_the_same_context(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Q?", context_id="ctx-1")
    answered = await send(engine, "A", task_id=asked.id, context_id="ctx-1")
    assert state_name(answered) == "COMPLETED"


async def test_auth_required_task_can_be_continued(engine: TaskEngine) -> None:
    waiting = await send(engine, "auth:need a token")
    done = await send(engine, "here it is", task_id=waiting.id)
    assert state_name(done) == "COMPLETED"


async def test_continuation_rules(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Q?")
    with pytest.raises(errors.InvalidParamsError, match="contextId"):
        await send(engine, "A", task_id=asked.id, context_id="another-context")
    with pytest.raises(errors.TaskNotFoundError):
        await send(engine, "A", task_id="no-such-task")
    with pytest.raises(errors.TaskNotFoundError):
        await send(engine, "A", task_id="../../etc/passwd")
    done = await send(engine, "hi")
    with pytest.raises(errors.UnsupportedOperationError, match="terminal"):
        await send(engine, "more", task_id=done.id)
    running = await send(engine, "hold:30", return_immediately=True)
    with pytest.raises(errors.UnsupportedOperationError):
        await send(engine, "more", task_id=running.id)
    await engine.cancel_task(pb.CancelTaskRequest(id=running.id), ctx())


async def test_each_run_replaces_the_response_artifact(
    new_engine: Callable[..., TaskEngine],
) -> None:
    async def script(turn: Turn) -> AsyncIterator[Output]:
        text = turn.first_text()
        yield TextChunk(f"answer to {text}", last=True)
        if text == "first":
            yield InputRequired("and then?")

    engine = new_engine(Scripted(script))
    first = await send(engine, "first")
    assert response_text(first) == ["answer to first"]
    second = await send(engine, "second", task_id=first.id)
    assert response_text(second) == ["answer to second"]
    assert [a.artifact_id for a in second.artifacts] == [first.artifacts[0].artifact_id]


async def test_one_run_per_context_at_a_time(engine: TaskEngine) -> None:
    running = await send(engine, "hold:30", context_id="busy", return_immediately=True)
    with pytest.raises(errors.UnsupportedOperationError) as caught:
        await send(engine, "hi", context_id="busy")
    assert caught.value.message == CONTEXT_BUSY
    other = await send(engine, "hi", context_id="free")  # other contexts are not blocked
    assert state_name(other) == "COMPLETED"
    bobs = await send(engine, "hi", BOB, context_id="busy")  # nor other callers
    assert state_name(bobs) == "COMPLETED"
    await engine.cancel_task(pb.CancelTaskRequest(id=running.id), ctx())
    after = await send(engine, "hi", context_id="busy")
    assert state_name(after) == "COMPLETED"


async def test_a_retried_message_id_returns_the_existing_task(engine: TaskEngine) -> None:
    first = await send(engine, "hi", message_id="retry-me")
    again = await send(engine, "hi", message_id="retry-me")
    assert again.id == first.id
    assert (await engine.list_tasks(pb.ListTasksRequest(), ctx())).total_size == 1
    held = await send(engine, "hold:30", message_id="held", return_immediately=True)
    stream = engine.send_streaming_message(request("hold:30", message_id="held"), ctx())
    first_event = await stream.__anext__()
    assert first_event.task.id == held.id
    await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())
    rest = await collect(stream)
    assert kinds(rest) == ["status:CANCELED"]
    # Once the run has ended, a streamed message with that id runs anew.
    events = await collect(engine.send_streaming_message(request("hi", message_id="held"), ctx()))
    assert events[0].task.id != held.id
    assert kinds(events)[-1] == "status:COMPLETED"


# --- hop guard ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "message_metadata", "state"),
    [
        ({"a2a-gateway.hops": 3}, None, "COMPLETED"),
        ({"a2a-gateway.hops": 4}, None, "FAILED"),
        (None, {"a2a-gateway.hops": 4}, "FAILED"),
        ({"a2a-gateway.hops": 0}, {"a2a-gateway.hops": 9}, "COMPLETED"),  # request wins
        ({"a2a-gateway.hops": "5"}, None, "FAILED"),
        # the seed's key counts the same, and the larger count of the two keys wins
        ({"volcanic.hops": 3}, None, "COMPLETED"),
        ({"volcanic.hops": 4}, None, "FAILED"),
        (None, {"volcanic.hops": 4}, "FAILED"),
        ({"volcanic.hops": "7"}, None, "FAILED"),
        ({"volcanic.hops": 0}, {"volcanic.hops": 9}, "COMPLETED"),  # request wins per key
        ({"a2a-gateway.hops": 1, "volcanic.hops": 4}, None, "FAILED"),
        ({"a2a-gateway.hops": 4, "volcanic.hops": 1}, None, "FAILED"),
        ({"a2a-gateway.hops": 1}, {"volcanic.hops": 4}, "FAILED"),
        (None, {"a2a-gateway.hops": 4, "volcanic.hops": 0}, "FAILED"),
        ({"a2a-gateway.hops": 2, "volcanic.hops": 3}, None, "COMPLETED"),
    ],
)
async def test_hop_guard(
    engine: TaskEngine,
    metadata: dict[str, object] | None,
    message_metadata: dict[str, object] | None,
    state: str,
) -> None:
    task = await send(engine, "hi", metadata=metadata, message_metadata=message_metadata)
    assert state_name(task) == state
    if state == "FAILED":
        assert "Hop limit" in status_text(task)
        assert not task.artifacts  # the agent never ran
        stored = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(stored) == "FAILED"


@pytest.mark.parametrize("key", ["a2a-gateway.hops", "volcanic.hops"])
@pytest.mark.parametrize("value", [-1, 1.5, "many", True])
async def test_bad_hop_values_are_invalid_params(
    engine: TaskEngine, key: str, value: object
) -> None:
    with pytest.raises(errors.InvalidParamsError, match=f"metadata.{key}"):
        await send(engine, "hi", metadata={key: value})


async def test_max_hops_is_configurable(new_engine: Callable[..., TaskEngine]) -> None:
    engine = new_engine(max_hops=0)
    assert state_name(await send(engine, "hi", metadata={"a2a-gateway.hops": 1})) == "FAILED"
    assert state_name(await send(engine, "hi")) == "COMPLETED"


async def test_hops_reach_the_agent(new_engine: Callable[..., TaskEngine]) -> None:
    seen: list[int] = []

    async def script(turn: Turn) -> AsyncIterator[Output]:
        seen.append(turn.hops)
        yield TextChunk("ok")

    await send(new_engine(Scripted(script)), "hi", metadata={"a2a-gateway.hops": 2})
    assert seen == [2]


# --- history length ------------------------------------------------------------------------


async def test_history_length_is_exact(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Q?")
    task = await send(engine, "A", task_id=asked.id)
    assert len(task.history) == 3

    async def get(n: int | None) -> pb.Task:
        req = pb.GetTaskRequest(id=task.id)
        if n is not None:
            req.history_length = n
        return await engine.get_task(req, ctx())

    assert len((await get(None)).history) == 3
    assert len((await get(0)).history) == 0
    assert [m.parts[0].text for m in (await get(1)).history] == ["A"]
    assert len((await get(2)).history) == 2
    assert len((await get(10)).history) == 3
    with pytest.raises(errors.InvalidParamsError, match="historyLength"):
        await get(-1)
    sent = await send(engine, "hi", history_length=0)
    assert len(sent.history) == 0


async def test_unknown_and_invalid_task_ids_are_not_found(engine: TaskEngine) -> None:
    for task_id in ("nope", "", "../x", "a/b", ".hidden", "x" * 200):
        with pytest.raises(errors.TaskNotFoundError):
            await engine.get_task(pb.GetTaskRequest(id=task_id), ctx())


async def test_extended_card(new_engine: Callable[..., TaskEngine]) -> None:
    plain = new_engine()
    with pytest.raises(errors.ExtendedAgentCardNotConfiguredError):
        await plain.get_extended_agent_card(pb.GetExtendedAgentCardRequest(), ctx())
    card = new_engine(extended_card=lambda c: pb.AgentCard(name=f"for {c.caller.name}"))
    got = await card.get_extended_agent_card(pb.GetExtendedAgentCardRequest(), ctx(ALICE))
    assert got.name == "for alice"


async def test_the_agent_sees_metadata_and_output_modes(
    new_engine: Callable[..., TaskEngine],
) -> None:
    seen: list[tuple[tuple[str, ...], dict[str, object], str]] = []

    async def script(turn: Turn) -> AsyncIterator[Output]:
        assert turn.task is not None
        seen.append((turn.accepted_output_modes, dict(turn.metadata), turn.task.id))
        yield TextChunk("ok")

    req = request("hi", metadata={"trace": "abc"})
    req.configuration.accepted_output_modes.append("text/plain")
    task = (await new_engine(Scripted(script)).send_message(req, ctx())).task
    assert seen == [(("text/plain",), {"trace": "abc"}, task.id)]


async def test_streaming_continuation(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Q?")
    events = await collect(engine.send_streaming_message(request("A", task_id=asked.id), ctx()))
    assert kinds(events) == ["task:WORKING", "artifact_update", "status:COMPLETED"]
    assert events[0].task.id == asked.id


# Text with a lone surrogate (a Python agent can make one, e.g. from json.loads of
# "\ud800"): not encodable as UTF-8, so it cannot go into a task or onto the wire.
_LONE = "a\ud800b"
_SHOWN = "a\ufffdb"


@pytest.mark.parametrize(
    "outputs",
    [
        [TextChunk(_LONE)],
        [TextChunk("x"), TextChunk(_LONE)],
        [Progress(_LONE), TextChunk("x")],
        [TextChunk("x"), InputRequired(_LONE)],
        [TextChunk("x"), Completed(_LONE)],
        [TextChunk("x"), Failed(_LONE)],
    ],
    ids=["first-chunk", "later-chunk", "progress", "question", "completed", "failed"],
)
async def test_agent_text_with_a_lone_surrogate_is_shown_with_a_replacement_character(
    new_engine: Callable[..., TaskEngine], outputs: list[Output]
) -> None:
    async def script(turn: Turn) -> AsyncIterator[Output]:
        for output in outputs:
            yield output

    engine = new_engine(Scripted(script))
    events = await collect(engine.send_streaming_message(request("go"), ctx()))
    task = await send(engine, "go", context_id=events[0].task.context_id)
    for seen in (task, (await engine.get_task(pb.GetTaskRequest(id=task.id), ctx()))):
        blob = seen.SerializeToString()  # valid UTF-8 everywhere, or this raises
        assert _SHOWN.encode() in blob
        assert state_name(seen) != "WORKING"
    assert any(_SHOWN.encode() in event.SerializeToString() for event in events)
    assert engine._state.runs == {}
