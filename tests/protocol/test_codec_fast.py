"""The fast paths of the codec answer exactly what the strict paths answer.

``parse_request`` (hand-written parser, then depth check and ``json_format``) must build
the same message as ``check_depth`` + ``parse`` for every input the strict path accepts,
and raise the same error for every input it refuses. ``validate`` (a compiled plan per
type) must flag exactly the messages the full walk flags.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import message

from a2a_gateway.protocol import codec, errors
from lf.a2a.v1 import a2a_pb2 as pb

from .test_proto_dict import _all_a2a_messages, _fill

GOOD: dict[str, Any] = {
    "message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hi"}]}
}


def _strict(cls: type[message.Message], value: Any) -> message.Message:
    codec.check_depth(value)
    return codec.parse(cls, value, path="params")


def _outcome(
    parse: Any, value: Any, cls: type[message.Message] = pb.SendMessageRequest
) -> tuple[str, Any]:
    """('ok', serialized message) or ('error', (type, message, violations))."""
    try:
        msg = parse(cls, copy.deepcopy(value))
    except errors.A2AError as exc:
        return "error", (type(exc), exc.message, exc.violations)
    return "ok", msg.SerializeToString(deterministic=True)


def _fast_is_strict(value: Any, cls: type[message.Message] = pb.SendMessageRequest) -> None:
    fast = _outcome(lambda cls, v: codec.parse_request(cls, v, path="params"), value, cls)
    assert fast == _outcome(_strict, value, cls), value


ACCEPTED_BY_THE_FAST_PARSER: list[dict[str, Any]] = [
    GOOD,
    {"message": {**GOOD["message"], "contextId": "c-1", "taskId": "t-1"}},
    {"message": {**GOOD["message"], "contextId": "", "taskId": ""}},
    {"message": {**GOOD["message"], "role": "ROLE_AGENT"}},
    {"message": {**GOOD["message"], "parts": [{"text": ""}, {"text": "é ✓ 𝄞 \u0000"}]}},
    {**GOOD, "tenant": "acme"},
    {**GOOD, "tenant": ""},
]


@pytest.mark.parametrize("value", ACCEPTED_BY_THE_FAST_PARSER)
def test_the_fast_parser_builds_what_json_format_builds(value: dict[str, Any]) -> None:
    fast = codec.parse_fast(pb.SendMessageRequest, value)
    assert fast is not None
    strict = _strict(pb.SendMessageRequest, value)
    assert fast == strict
    assert fast.SerializeToString(deterministic=True) == strict.SerializeToString(
        deterministic=True
    )
    assert fast.HasField("message")
    assert [part.WhichOneof("content") for part in fast.message.parts] == [
        "text" for _ in value["message"]["parts"]
    ]


LEFT_TO_THE_STRICT_PATH: list[Any] = [
    None,
    [],
    "text",
    {},
    {"message": None},
    {"message": []},
    {**GOOD, "tenant": None},
    {**GOOD, "tenant": 5},
    {**GOOD, "configuration": {"returnImmediately": True}},
    {**GOOD, "metadata": {"k": 1}},
    {**GOOD, "extra": 1},
    {"message": {**GOOD["message"], "messageId": ""}},
    {"message": {**GOOD["message"], "messageId": 5}},
    {"message": {**GOOD["message"], "messageId": None}},
    {"message": {**GOOD["message"], "role": "ROLE_UNSPECIFIED"}},
    {"message": {**GOOD["message"], "role": 1}},
    {"message": {**GOOD["message"], "role": "ROLE_NOPE"}},
    {"message": {**GOOD["message"], "parts": []}},
    {"message": {**GOOD["message"], "parts": {"text": "hi"}}},
    {"message": {**GOOD["message"], "parts": [{"text": "a", "mediaType": "text/plain"}]}},
    {"message": {**GOOD["message"], "parts": [{"url": "https://x.example/f"}]}},
    {"message": {**GOOD["message"], "parts": [{"text": 5}]}},
    {"message": {**GOOD["message"], "parts": [{}]}},
    {"message": {**GOOD["message"], "parts": ["hi"]}},
    {"message": {**GOOD["message"], "contextId": None}},
    {"message": {**GOOD["message"], "taskId": 7}},
    {"message": {**GOOD["message"], "metadata": {}}},
    {"message": {**GOOD["message"], "extensions": []}},
    {"message": {**GOOD["message"], "message_id": "m-2"}},
    {"message": {"role": "ROLE_USER", "message_id": "m-1", "parts": [{"text": "x"}]}},
    {"message": {**GOOD["message"], "unknown": True}},
]


@pytest.mark.parametrize("value", LEFT_TO_THE_STRICT_PATH)
def test_anything_else_is_left_to_the_strict_path(value: Any) -> None:
    assert codec.parse_fast(pb.SendMessageRequest, value) is None
    _fast_is_strict(value)


def test_other_request_types_have_no_fast_parser() -> None:
    assert codec.parse_fast(pb.ListTasksRequest, {"pageSize": 5}) is None
    assert codec.parse_request(pb.ListTasksRequest, {"pageSize": 5}) == pb.ListTasksRequest(
        page_size=5
    )


# --- the requests naming one task: GetTask, CancelTask, SubscribeToTask ----------------

TASK_ID_REQUESTS = [pb.GetTaskRequest, pb.CancelTaskRequest, pb.SubscribeToTaskRequest]

TASK_ID_ACCEPTED: list[tuple[type[message.Message], dict[str, Any]]] = [
    *((cls, {"id": "t-1"}) for cls in TASK_ID_REQUESTS),
    *((cls, {"id": "é ✓ 𝄞", "tenant": "acme"}) for cls in TASK_ID_REQUESTS),
    *((cls, {"id": "t-1", "tenant": ""}) for cls in TASK_ID_REQUESTS),
    (pb.GetTaskRequest, {"id": "t-1", "historyLength": 0}),
    (pb.GetTaskRequest, {"id": "t-1", "historyLength": 3, "tenant": "acme"}),
    (pb.GetTaskRequest, {"id": "t-1", "historyLength": -1}),  # (the engine refuses it)
    (pb.GetTaskRequest, {"id": "t-1", "historyLength": 2**31 - 1}),
]


@pytest.mark.parametrize(("cls", "value"), TASK_ID_ACCEPTED)
def test_the_task_id_parser_builds_what_json_format_builds(
    cls: type[message.Message], value: dict[str, Any]
) -> None:
    fast = codec.parse_fast(cls, value)
    assert fast is not None
    strict = _strict(cls, value)
    assert fast == strict
    assert fast.SerializeToString(deterministic=True) == strict.SerializeToString(
        deterministic=True
    )
    if cls is pb.GetTaskRequest:
        assert fast.HasField("history_length") is ("historyLength" in value)


_NOT_A_TASK_ID_REQUEST: list[Any] = [
    None, [], "t-1", {}, {"id": ""}, {"id": None}, {"id": 5}, {"id": ["t"]},
    {"id": "t-1", "tenant": None}, {"id": "t-1", "tenant": 5}, {"tenant": "acme"},
    {"id": "t-1", "extra": 1}, {"id": "t-1", "history_length": 1},
    {"id": "t-1", "metadata": {"k": "v"}},
]  # fmt: skip
_NOT_AN_INT32: list[Any] = [None, "3", 3.0, 2.5, True, 2**31, -(2**31) - 1, [], {}]

TASK_ID_LEFT_TO_THE_STRICT_PATH: list[tuple[type[message.Message], Any]] = [
    *((cls, value) for cls in TASK_ID_REQUESTS for value in _NOT_A_TASK_ID_REQUEST),
    *((pb.GetTaskRequest, {"id": "t-1", "historyLength": v}) for v in _NOT_AN_INT32),
    (pb.CancelTaskRequest, {"id": "t-1", "historyLength": 1}),
    (pb.SubscribeToTaskRequest, {"id": "t-1", "historyLength": 1}),
]


@pytest.mark.parametrize(("cls", "value"), TASK_ID_LEFT_TO_THE_STRICT_PATH)
def test_any_other_task_id_request_is_left_to_the_strict_path(
    cls: type[message.Message], value: Any
) -> None:
    assert codec.parse_fast(cls, copy.deepcopy(value)) is None
    _fast_is_strict(value, cls)


_TASK_ID_REPLACEMENTS: list[Any] = [
    None, "", "t-2", "acme", 0, 1, -1, 2**31, 2**40, 1.5, True, False, [], {}, "5",
]  # fmt: skip


@pytest.mark.parametrize("cls", TASK_ID_REQUESTS, ids=lambda cls: cls.DESCRIPTOR.name)
def test_random_edits_of_a_task_id_request_give_the_same_answer_both_ways(
    cls: type[message.Message],
) -> None:
    rng = random.Random(cls.DESCRIPTOR.name)
    fast = 0
    for _ in range(300):
        value: dict[str, Any] = {"id": "t-1", "tenant": "acme", "historyLength": 2}
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(["id", "tenant", "historyLength", "metadata", "bogus"])
            if rng.random() < 0.3:
                value.pop(key, None)
            else:
                value[key] = copy.deepcopy(rng.choice(_TASK_ID_REPLACEMENTS))
        _fast_is_strict(value, cls)
        fast += codec.parse_fast(cls, copy.deepcopy(value)) is not None
    assert 0 < fast < 300  # both paths were exercised


def test_over_deep_input_is_still_refused() -> None:
    deep: Any = "leaf"
    for _ in range(codec.MAX_JSON_DEPTH + 2):
        deep = {"k": deep}
    value = {**GOOD, "metadata": deep}
    with pytest.raises(errors.InvalidParamsError, match="nesting"):
        codec.parse_request(pb.SendMessageRequest, value)


_REPLACEMENTS: list[Any] = [
    None, "", "x", "ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED", 0, 1, -1, 2**40, 1.5,
    True, False, [], [{}], [{"text": "t"}], [{"text": None}], {}, {"text": "t"},
]  # fmt: skip


def _mutations(seed: int) -> Iterator[Any]:
    """Random edits of GOOD: replaced, added and removed keys at every level."""
    rng = random.Random(seed)
    for _ in range(400):
        value = copy.deepcopy(GOOD)
        for _ in range(rng.randint(1, 3)):
            holders: list[dict[str, Any]] = (
                [value, value["message"]] if isinstance(value.get("message"), dict) else [value]
            )
            message_value = value.get("message")
            if isinstance(message_value, dict) and isinstance(message_value.get("parts"), list):
                holders += [p for p in message_value["parts"] if isinstance(p, dict)]
            holder = rng.choice(holders)
            keys = [*holder, "messageId", "role", "parts", "text", "contextId", "taskId",
                    "tenant", "message", "configuration", "metadata", "bogus"]  # fmt: skip
            key = rng.choice(keys)
            if rng.random() < 0.2:
                holder.pop(key, None)
            else:
                holder[key] = copy.deepcopy(rng.choice(_REPLACEMENTS))
        yield value


@pytest.mark.parametrize("seed", range(5))
def test_random_edits_give_the_same_answer_both_ways(seed: int) -> None:
    fast = 0
    for value in _mutations(seed):
        _fast_is_strict(value)
        fast += codec.parse_fast(pb.SendMessageRequest, copy.deepcopy(value)) is not None
    assert 0 < fast < 400  # both paths were exercised


# --- validate: the compiled plan against the full walk ---------------------------------


def _flags(msg: message.Message) -> bool:
    violations: list[errors.FieldViolation] = []
    codec._collect(msg, "", violations)
    return bool(violations)


def _variants(cls: type[message.Message]) -> Iterator[message.Message]:
    """Empty, full (each oneof member in turn), and full with one field cleared, at the
    top and one level down."""
    yield cls()
    for choice in range(3):
        full = cls()
        _fill(full, 0, choice)
        yield full
        for fd in cls.DESCRIPTOR.fields:
            cleared = copy.deepcopy(full)
            cleared.ClearField(fd.name)
            yield cleared
            if fd.message_type is None or fd.is_repeated or not full.HasField(fd.name):
                continue
            for sub in fd.message_type.fields:
                inner = copy.deepcopy(full)
                getattr(inner, fd.name).ClearField(sub.name)
                yield inner


@pytest.mark.parametrize("cls", list(_all_a2a_messages()), ids=lambda c: c.DESCRIPTOR.name)
def test_validate_flags_exactly_what_the_full_walk_flags(cls: type[message.Message]) -> None:
    for msg in _variants(cls):
        flagged = _flags(msg)
        if flagged:
            with pytest.raises(errors.InvalidParamsError):
                codec.validate(msg)
        else:
            codec.validate(msg)


def test_validate_names_the_first_violation_with_its_path() -> None:
    request = pb.SendMessageRequest()
    request.message.message_id = "m-1"
    request.message.role = pb.ROLE_USER
    request.message.parts.add()
    request.message.parts.add(text="ok")
    request.message.parts.add()
    with pytest.raises(errors.InvalidParamsError) as caught:
        codec.validate(request)
    assert caught.value.message == "message.parts[0]: must set exactly one of: " + ", ".join(
        f.json_name for f in pb.Part.DESCRIPTOR.oneofs_by_name["content"].fields
    )
    assert [v.field for v in caught.value.violations] == [
        "message.parts[0]",
        "message.parts[2]",
    ]


def _plan(cls: type[message.Message]) -> Any:
    desc: Any = cls.DESCRIPTOR
    return codec._plan(desc)


def test_every_type_with_rules_has_a_non_trivial_plan() -> None:
    for cls in _all_a2a_messages():
        required, oneofs = codec._rules(cls.DESCRIPTOR)
        plan = _plan(cls)
        assert plan.trivial == (not required and not oneofs and not plan.fields), (
            cls.DESCRIPTOR.name
        )
        assert {name for name, _, is_required, _ in plan.fields if is_required} == {
            fd.name for fd in required
        }
    assert not _plan(pb.SendMessageRequest).trivial
    parts = [child for name, _, _, child in _plan(pb.Message).fields if name == "parts"]
    assert parts and parts[0] is _plan(pb.Part) and parts[0].leaf_oneofs == ("content",)
