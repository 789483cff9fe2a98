"""``proto_dict.task_from_dict`` builds exactly the Task ``json_format.ParseDict`` builds,
or declines (None) and leaves the dict to ParseDict; it never accepts what ParseDict
refuses, nor a dict other than the one ``to_dict`` makes of the task it builds (so a
task file's JSON it takes is that task's answer, byte for byte). Checked on the tasks
the engine writes, on every A2A field set, and on random edits of a task dict."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from google.protobuf import json_format

from a2a_gateway.protocol.proto_dict import task_from_dict, to_dict
from lf.a2a.v1 import a2a_pb2 as pb

from .test_proto_dict import _fill


def _typical_task() -> pb.Task:
    task = pb.Task(id="t-1", context_id="c-1")
    task.status.state = pb.TASK_STATE_INPUT_REQUIRED
    task.status.timestamp.FromMilliseconds(1_764_000_000_123)
    question = task.status.message
    question.message_id, question.role = "q-1", pb.ROLE_AGENT
    question.parts.add(text="Which city?")
    artifact = task.artifacts.add(artifact_id="a-1", name="response")
    artifact.parts.add(text="chunk-0")
    artifact.parts.add(text="chunk-1 é ✓ 𝄞 \u0000")
    for n in range(2):
        turn = task.history.add(message_id=f"m-{n}", context_id="c-1", task_id="t-1")
        turn.role = pb.ROLE_USER
        turn.parts.add(text=f"turn {n}")
    return task


def _parse_dict(value: Any) -> tuple[str, bytes | None]:
    try:
        task = json_format.ParseDict(copy.deepcopy(value), pb.Task(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError):
        return "refused", None
    return "built", task.SerializeToString(deterministic=True)


def _agrees(value: Any) -> bool:
    """True when the fast path built the task (and it is ParseDict's, and ``value`` is
    its ``to_dict`` to the byte), False when it declined; fails the test when it built
    something ParseDict does not, or took a dict the encoder would write otherwise."""
    fast = task_from_dict(copy.deepcopy(value))
    if fast is None:
        return False
    assert _parse_dict(value) == ("built", fast.SerializeToString(deterministic=True)), value
    assert orjson.dumps(value) == orjson.dumps(to_dict(fast)), value
    return True


def _timestamped(seconds: int, nanos: int) -> dict[str, Any]:
    task = pb.Task(id="t")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.seconds, task.status.timestamp.nanos = seconds, nanos
    return to_dict(task)


TAKEN: list[pb.Task] = [
    pb.Task(),
    pb.Task(id="t-1"),
    _typical_task(),
    pb.Task(id="t", status=pb.TaskStatus()),  # a status with nothing set is still there
    pb.Task(id="t", history=[pb.Message()], artifacts=[pb.Artifact()]),
]


@pytest.mark.parametrize("task", TAKEN, ids=range(len(TAKEN)))
def test_the_shapes_the_engine_writes_are_decoded_fast(task: pb.Task) -> None:
    assert _agrees(to_dict(task))
    decoded = task_from_dict(to_dict(task))
    assert decoded == task
    assert decoded is not None and decoded.HasField("status") == task.HasField("status")


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(0, 0), (1_764_000_000, 0), (1_764_000_000, 123_000_000), (1_764_000_001, 456_000),
     (1_764_000_002, 789), (-62_135_596_800, 0), (253_402_300_799, 999_999_999)],
)  # fmt: skip
def test_timestamps_round_trip(seconds: int, nanos: int) -> None:
    value = _timestamped(seconds, nanos)
    assert _agrees(value)
    decoded = task_from_dict(value)
    assert decoded is not None and decoded.status.HasField("timestamp")
    assert (decoded.status.timestamp.seconds, decoded.status.timestamp.nanos) == (seconds, nanos)


@pytest.mark.parametrize(
    "text",
    ["2026-11-30T10:08:22.9Z", "2026-11-30T10:08:22.Z", "2026-11-30t10:08:22Z",
     "2026-11-30T10:08:22+00:00", "2026-11-30T10:08:22.\u0661\u0662\u0663Z",
     "\u0662\u0660\u0662\u0666-11-30T10:08:22Z",
     "2026-11-30T10:08:22.1234567890Z", "2026-13-30T10:08:22Z", "0000-01-01T00:00:00Z",
     "2026-11-30T10:08:22ZZ", "2026-11-30 10:08:22Z", ""],
)  # fmt: skip
def test_other_timestamp_texts_agree_or_go_to_json_format(text: str) -> None:
    value = {"id": "t", "status": {"state": "TASK_STATE_COMPLETED", "timestamp": text}}
    _agrees(value)


@pytest.mark.parametrize(
    "value",
    [{"id": "t", "contextId": ""}, {"contextId": "c", "id": "t"}, {"id": "t", "history": []},
     {"id": "t", "artifacts": [{"artifactId": "a", "name": ""}]},
     {"id": "t", "artifacts": [{"parts": []}]},
     {"id": "t", "history": [{"role": "ROLE_UNSPECIFIED"}]},
     {"id": "t", "history": [{"messageId": "m", "taskId": ""}]},
     {"id": "t", "history": [{"role": "ROLE_USER", "messageId": "m"}]},
     {"id": "t", "status": {"state": "TASK_STATE_UNSPECIFIED"}},
     {"id": "t", "status": {"timestamp": "2026-11-30T10:08:22Z", "state": "TASK_STATE_WORKING"}},
     {"id": "t", "status": {"timestamp": "2026-11-30T10:08:22.000Z"}},
     {"id": "t", "status": {"timestamp": "2026-11-30T10:08:22.120000Z"}},
     {"id": "t", "status": {"timestamp": "2026-11-30T10:08:22.123456000Z"}},
     {"id": "t", "status": {"timestamp": "2026-11-30T10:08:22.Z"}},
     {"id": "t", "status": {"timestamp": "2016-12-31T23:59:60Z"}}],
)  # fmt: skip
def test_what_the_encoder_would_write_otherwise_goes_to_json_format(value: Any) -> None:
    """Fields at their default written out, keys out of the encoder's order, a fraction
    longer than needed: ParseDict's task, the same as the shape the encoder writes,
    but not this dict's JSON, so the fast path declines it."""
    assert task_from_dict(copy.deepcopy(value)) is None
    built = _parse_dict(value)
    if built[0] == "built":
        task = pb.Task.FromString(built[1] or b"")
        assert orjson.dumps(to_dict(task)) != orjson.dumps(value)


def test_every_other_field_goes_to_json_format() -> None:
    """A task with every field set (metadata, file and data parts, extensions...) is
    declined at some level, and what ParseDict builds from it is the whole task."""
    full = pb.Task()
    _fill(full, 0, 0)
    value = to_dict(full)
    assert task_from_dict(value) is None
    assert _parse_dict(value) == ("built", full.SerializeToString(deterministic=True))


_REPLACEMENTS: list[Any] = [
    None, "", "x", "ROLE_USER", "ROLE_AGENT", "TASK_STATE_WORKING", "TASK_STATE_BOGUS", 0, 3,
    -1, 2**40, 1.5, True, [], [{}], [{"text": "t"}], [{"text": None}], [{"text": "t", "x": 1}],
    {}, {"text": "t"}, {"state": "TASK_STATE_COMPLETED"}, "2026-11-30T10:08:22.123Z",
    "2026-11-30T10:08:22Z", "not a time",
]  # fmt: skip


_OTHER_KEYS = ["id", "contextId", "status", "state", "timestamp", "message", "artifacts",
               "history", "parts", "text", "role", "messageId", "taskId", "artifactId",
               "name", "metadata", "extensions", "bogus"]  # fmt: skip


def _holders(value: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every dict inside a task dict (the task, status, messages, artifacts, parts)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _edits(value: dict[str, Any], index: int, key: str) -> Iterator[dict[str, Any]]:
    """Copies of ``value`` with key ``key`` of its dict number ``index`` removed or
    replaced by each of the replacement values."""
    for replacement in [_REMOVED, *_REPLACEMENTS]:
        edited = copy.deepcopy(value)
        holder = list(_holders(edited))[index]
        if replacement is _REMOVED:
            holder.pop(key, None)
        else:
            holder[key] = copy.deepcopy(replacement)
        yield edited


_REMOVED = object()
BASE = to_dict(_typical_task())


def test_every_single_edit_is_decoded_as_json_format_decodes_it() -> None:
    fast = total = 0
    for index, holder in enumerate(_holders(BASE)):
        for key in [*holder, *_OTHER_KEYS]:
            for value in _edits(BASE, index, key):
                fast += _agrees(value)
                total += 1
    assert 0 < fast < total  # both paths were exercised


@pytest.mark.parametrize("seed", range(3))
def test_random_double_edits_are_decoded_as_json_format_decodes_them(seed: int) -> None:
    rng = random.Random(seed)
    fast = 0
    for _ in range(500):
        value = copy.deepcopy(BASE)
        for _ in range(2):
            holders = list(_holders(value))
            index = rng.randrange(len(holders))
            key = rng.choice([*holders[index], *_OTHER_KEYS])
            value = rng.choice(list(_edits(value, index, key)))
        fast += _agrees(value)
    assert 0 < fast < 500
