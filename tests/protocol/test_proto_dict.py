"""The fast ProtoJSON encoder prints exactly what json_format prints, for every A2A
message type with every field set (each oneof member in turn), and for typical ones."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import orjson
import pytest
from google.protobuf import descriptor, json_format, message, message_factory, timestamp_pb2

from a2a_gateway.protocol import codec
from a2a_gateway.protocol.proto_dict import (
    RECENT_TASK_BYTES,
    RECENT_TASKS,
    recent_task_json,
    remember_recent_json,
    remember_task_json,
    timestamp_text,
    to_dict,
)
from lf.a2a.v1 import a2a_pb2 as pb

_FD = descriptor.FieldDescriptor
_counter = itertools.count(1)


def _scalar(fd: descriptor.FieldDescriptor) -> object:
    n = next(_counter)
    if fd.type == _FD.TYPE_STRING:
        return f"{fd.name}-{n}"
    if fd.type == _FD.TYPE_BYTES:
        return bytes([n % 256, 0, 255])
    if fd.type == _FD.TYPE_BOOL:
        return True
    if fd.type == _FD.TYPE_ENUM:
        return fd.enum_type.values[-1].number
    if fd.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return 1.5
    return n


def _fill(msg: message.Message, depth: int, choice: int, only: str | None = None) -> None:
    """Set every field of ``msg`` (or, at the top, ``only`` that one and the oneofs);
    in each oneof, member number ``choice`` (mod size)."""
    desc = msg.DESCRIPTOR
    if desc.full_name == "google.protobuf.Timestamp":
        msg.FromMilliseconds(1_764_000_000_123)  # type: ignore[attr-defined]
        return
    if desc.full_name == "google.protobuf.Struct":
        msg.update({"k": [1, "two", None, {"x": True}], "n": 3.5})  # type: ignore[attr-defined]
        return
    if desc.full_name == "google.protobuf.Value":
        msg.struct_value.update({"deep": [1, 2]})  # type: ignore[attr-defined]
        return
    chosen = {o.name: o.fields[choice % len(o.fields)].name for o in desc.oneofs}
    for fd in desc.fields:
        if only is not None and fd.name != only and fd.containing_oneof is None:
            continue  # with ``only``: that field plus the chosen oneof members
        oneof = fd.containing_oneof
        if oneof is not None and chosen.get(oneof.name) != fd.name:
            continue
        field = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.message_type is not None:
                if depth < 4:
                    _fill(field["key-a"], depth + 1, choice)
            else:
                field["key-a"] = _scalar(value_fd)
        elif fd.message_type is not None:
            if depth >= 4 and only is None:
                continue
            if fd.is_repeated:
                for _ in range(2):
                    _fill(field.add(), depth + 1, choice)
            else:
                _fill(field, depth + 1, choice)
        elif fd.is_repeated:
            field.extend([_scalar(fd), _scalar(fd)])
        else:
            setattr(msg, fd.name, _scalar(fd))


def _all_a2a_messages() -> Iterator[type[message.Message]]:
    for desc in pb.DESCRIPTOR.message_types_by_name.values():
        yield message_factory.GetMessageClass(desc)


@pytest.mark.parametrize("cls", list(_all_a2a_messages()), ids=lambda c: c.DESCRIPTOR.name)
def test_every_field_of_every_message(cls: type[message.Message]) -> None:
    for choice in range(4):
        msg = cls()
        _fill(msg, 0, choice)
        assert to_dict(msg) == json_format.MessageToDict(msg)
    for fd in cls.DESCRIPTOR.fields:  # one field at a time: no other field hides it
        for choice in range(4):
            msg = cls()
            _fill(msg, 0, choice, only=fd.name)
            assert to_dict(msg) == json_format.MessageToDict(msg), fd.name
    assert to_dict(cls()) == json_format.MessageToDict(cls()) == {}


def test_typical_shapes_and_unknown_enum_values() -> None:
    task = pb.Task(id="t", context_id="c")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.FromMilliseconds(1_764_000_000_120)
    task.history.add(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="")])
    task.artifacts.add(artifact_id="a", name="response", parts=[pb.Part(text="hi")])
    event = pb.StreamResponse()
    event.artifact_update.task_id = "t"
    event.artifact_update.artifact.parts.add(text="chunk-1")
    event.artifact_update.append = True
    odd = pb.TaskStatus(state=99)  # type: ignore[arg-type]
    for msg in (task, event, pb.SendMessageResponse(task=task), odd, pb.Part(raw=b"\x00")):
        assert to_dict(msg) == json_format.MessageToDict(msg)


@pytest.mark.parametrize("items", [0, 1, 2, 3])
def test_tasks_of_plain_parts_print_json_formats_bytes(items: int) -> None:
    """The hand-written encoders' paths for plain tasks (each list of 0-3 items, read
    by index when it holds one): the same keys in the same order as json_format, so the
    same bytes; texts with escapes, non-ASCII and an empty one."""
    texts = [
        "",
        'quote " back \\ nl \n tab \t \x01',
        "caf\u00e9 \u6f22\u5b57 \U0001f600",
        "x" * 5000,
    ]
    task = pb.Task(id="t-1", context_id="c-1")
    task.status.state = pb.TASK_STATE_WORKING
    task.status.timestamp.FromNanoseconds(1_764_000_000_123_456_789)
    if items:
        task.status.message.message_id = "s"
        task.status.message.parts.add(text=texts[items])
    for n in range(items):
        task.artifacts.add(
            artifact_id=f"a-{n}", name="response", parts=[pb.Part(text=t) for t in texts[: n + 1]]
        )
        task.history.add(
            message_id=f"m-{n}",
            context_id="c-1",
            task_id="t-1",
            role=pb.ROLE_AGENT if n % 2 else pb.ROLE_USER,
            parts=[pb.Part(text=t) for t in texts[n:]],
        )
    expected = orjson.dumps(json_format.MessageToDict(task))
    assert orjson.dumps(to_dict(task)) == expected
    answer = pb.SendMessageResponse(task=task)
    assert codec.to_json(answer) == orjson.dumps(json_format.MessageToDict(answer))


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(0, 0), (1, 1), (-1, 999_999_999), (253_402_300_799, 999_000_000), (1_700_000_000, 5_000)],
)
def test_timestamps(seconds: int, nanos: int) -> None:
    for _ in range(2):  # the second time from the one-second cache
        ts = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
        assert timestamp_text(ts) == ts.ToJsonString()


@pytest.mark.parametrize("payload", [fd.name for fd in pb.StreamResponse.DESCRIPTOR.fields])
def test_stream_event_json_is_to_json(payload: str) -> None:
    """The SSE encoder's shortcut (no always-emitted fields to look up) gives the same
    bytes as ``to_json`` for each kind of stream event, full or empty."""
    for choice in range(4):
        event = pb.StreamResponse()
        _fill(event, 0, choice, only=payload)
        assert codec.stream_event_json(event) == codec.to_json(event)
        assert orjson.loads(codec.stream_event_json(event)) == json_format.MessageToDict(event)
    assert codec.stream_event_json(pb.StreamResponse()) == codec.to_json(pb.StreamResponse())


def test_a_send_answers_the_task_it_stored_with_the_same_json() -> None:
    """The task file's encoding keeps the task's JSON; a send's answer of a task equal
    to it reuses it, and of a task changed since (same id) or too large encodes anew:
    each time the bytes json_format's dict prints."""
    task = pb.Task(id="t-remembered", context_id="c")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.FromMilliseconds(1_764_000_000_120)
    task.history.add(
        message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text='h\u00e9 "\\ \U0001f600')]
    )
    kept = remember_task_json(task)
    assert kept == orjson.dumps(json_format.MessageToDict(task))
    answer = pb.SendMessageResponse()
    answer.task.CopyFrom(task)
    assert recent_task_json(answer.task) is kept
    assert codec.to_json(answer) == orjson.dumps(json_format.MessageToDict(answer))

    answer.task.status.state = pb.TASK_STATE_FAILED  # changed since it was stored
    assert recent_task_json(answer.task) is None
    assert codec.to_json(answer) == orjson.dumps(json_format.MessageToDict(answer))

    task.artifacts.add(artifact_id="a", parts=[pb.Part(raw=b"x" * (RECENT_TASK_BYTES + 1))])
    remember_task_json(task)  # too large to keep: the smaller one is forgotten too
    assert recent_task_json(task) is None
    assert recent_task_json(answer.task) is None
    assert codec.to_json(pb.SendMessageResponse(task=task)) == (
        orjson.dumps(json_format.MessageToDict(pb.SendMessageResponse(task=task)))
    )


def test_a_task_whose_json_is_kept_is_printed_from_it() -> None:
    """A GetTask's task (a pb.Task answered on its own) equal to a task whose JSON is
    kept is printed from the kept bytes: the JSON of that very message, found by its
    binary form; a task changed since is encoded anew."""
    task = pb.Task(id="t-kept-for-get", context_id="c")
    task.status.state = pb.TASK_STATE_COMPLETED
    remember_recent_json(task.id, task.SerializeToString(), b'{"kept":true}')  # a marker
    view = pb.Task()
    view.CopyFrom(task)  # (as the engine's task_view hands it over)
    assert codec.to_json(view) == b'{"kept":true}'
    view.status.state = pb.TASK_STATE_FAILED
    assert codec.to_json(view) == orjson.dumps(json_format.MessageToDict(view))
    remember_task_json(task)  # (the marker replaced by the task's own JSON)
    assert codec.to_json(task) == orjson.dumps(json_format.MessageToDict(task))


def test_the_tasks_kept_for_answers_are_bounded() -> None:
    # Ids no other test saves: a task another test stored earlier in the session (the
    # file store keeps every task it writes) under one of them would be replaced in
    # place, not added, and the first one would then stay.
    first = pb.Task(id="bounded-first", context_id="c")
    remember_task_json(first)
    for n in range(RECENT_TASKS):
        remember_task_json(pb.Task(id=f"bounded-{n}", context_id="c"))
    assert recent_task_json(first) is None
    assert recent_task_json(pb.Task(id=f"bounded-{RECENT_TASKS - 1}", context_id="c")) == (
        b'{"id":"bounded-%d","contextId":"c"}' % (RECENT_TASKS - 1)
    )
