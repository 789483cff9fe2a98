"""Strict ProtoJSON: every kind of bad input is InvalidParams naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from google.protobuf import json_format

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec, errors

GOOD: dict[str, Any] = {
    "message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}
}


def _with(**message: Any) -> dict[str, Any]:
    return {"message": {**GOOD["message"], **message}}


def test_good_request_round_trips() -> None:
    request = codec.parse(pb.SendMessageRequest, GOOD)
    assert request.message.parts[0].text == "hi"
    assert codec.to_dict(request) == GOOD


def test_snake_case_names_are_accepted() -> None:
    request = codec.parse(
        pb.SendMessageRequest,
        {"message": {"role": "ROLE_USER", "message_id": "m1", "parts": [{"text": "x"}]}},
    )
    assert request.message.message_id == "m1"


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (_with(parts=[{"text": "a", "raw": "AA=="}]), "oneof"),
        (_with(role="ROLE_NOPE"), "ROLE_NOPE"),
        (_with(messageId=5), "messageId"),
        ({**GOOD, "configuration": {"historyLength": "abc"}}, "historyLength"),
        ({**GOOD, "configuration": {"historyLength": 2**40}}, "historyLength"),
        (_with(parts=[{}]), "message.parts[0]"),
        (_with(parts=[]), "message.parts"),
        (_with(messageId=""), "message.messageId"),
        (_with(role="ROLE_UNSPECIFIED"), "message.role"),
        ({}, "message"),
        ([], "params"),
        ("text", "params"),
    ],
)
def test_bad_input_is_invalid_params_naming_the_problem(value: Any, needle: str) -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        codec.parse(pb.SendMessageRequest, value)
    assert needle in caught.value.message


# --- unknown fields are ignored, at any depth; everything else stays strict ----------

UNKNOWN_ANYWHERE: list[tuple[type[Any], dict[str, Any], dict[str, Any]]] = [
    # (request type, with unknown keys, the same without them)
    (pb.SendMessageRequest, {**GOOD, "foo": 1}, GOOD),
    (pb.SendMessageRequest, _with(foo={"x": [1]}), GOOD),
    (pb.SendMessageRequest, _with(parts=[{"text": "hi", "kind": "text"}]), GOOD),
    (
        pb.SendMessageRequest,
        _with(parts=[{"raw": "aGk=", "filename": "a", "bytes": "!!"}]),
        _with(parts=[{"raw": "aGk=", "filename": "a"}]),
    ),
    (
        pb.SendMessageRequest,
        {**GOOD, "configuration": {"historyLength": 2, "later": True}},
        {**GOOD, "configuration": {"historyLength": 2}},
    ),
    (
        pb.SendMessageRequest,
        {
            **GOOD,
            "configuration": {
                "taskPushNotificationConfig": {
                    "url": "https://h.example/p",
                    "x-note": "n",
                    "authentication": {"scheme": "Bearer", "credentials": "c", "realm": "r"},
                }
            },
        },
        {
            **GOOD,
            "configuration": {
                "taskPushNotificationConfig": {
                    "url": "https://h.example/p",
                    "authentication": {"scheme": "Bearer", "credentials": "c"},
                }
            },
        },
    ),
    (pb.GetTaskRequest, {"id": "t", "bogusField": 1}, {"id": "t"}),
    (pb.ListTasksRequest, {"pageSize": 3, "sort": "asc"}, {"pageSize": 3}),
    (pb.CancelTaskRequest, {"id": "t", "reason": {"why": "x"}}, {"id": "t"}),
    (
        pb.TaskPushNotificationConfig,
        {"taskId": "t", "url": "https://h.example/p", "id": "c", "ttl": 5},
        {"taskId": "t", "url": "https://h.example/p", "id": "c"},
    ),
]


@pytest.mark.parametrize(("cls", "value", "without"), UNKNOWN_ANYWHERE)
def test_unknown_fields_anywhere_are_ignored(
    cls: type[Any], value: dict[str, Any], without: dict[str, Any]
) -> None:
    before = copy.deepcopy(value)
    assert codec.parse_request(cls, value) == codec.parse_request(cls, without)
    assert codec.parse(cls, value, path="body") == codec.parse(cls, without, path="body")
    assert value == before  # the caller's JSON is not edited


def test_unknown_keys_inside_struct_values_are_data() -> None:
    request = codec.parse(pb.SendMessageRequest, {**GOOD, "metadata": {"anything": {"x": 1}}})
    assert request.metadata["anything"]["x"] == 1


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        # an unknown field never hides a real mistake next to it
        (_with(foo=1, role="ROLE_NOPE"), "ROLE_NOPE"),
        (_with(foo=1, messageId=5), "messageId"),
        (_with(foo=1, parts=[{"text": "a", "url": "https://x.example/f", "zz": 1}]), "oneof"),
        (_with(foo=1, parts=[{"zz": 1}]), "message.parts[0]"),
        ({"message": {"foo": 1}}, "message.messageId"),
        ({"foo": 1}, "message"),
        ({**GOOD, "configuration": {"historyLength": "abc", "x": 1}}, "historyLength"),
        ({**GOOD, "configuration": {"taskPushNotificationConfig": {"x": 1}}}, "url"),
    ],
)
def test_unknown_fields_do_not_hide_errors(value: Any, needle: str) -> None:
    for parse in (codec.parse, codec.parse_request):
        with pytest.raises(errors.InvalidParamsError) as caught:
            parse(pb.SendMessageRequest, value)
        assert needle in caught.value.message


def test_settings_files_can_refuse_unknown_fields() -> None:
    with pytest.raises(errors.InvalidParamsError, match="bogus"):
        codec.parse(pb.AgentSkill, {"id": "s", "bogus": 1}, unknown="refuse")


# --- bytes: standard or URL-safe base64, padded or not, and nothing else -------------

GOOD_BASE64 = [
    ("aGk=", b"hi"),
    ("aGk", b"hi"),
    ("aGVsbG8=", b"hello"),
    ("aGVsbG8", b"hello"),
    ("aA==", b"h"),
    ("aA", b"h"),
    ("+/8=", b"\xfb\xff"),
    ("-_8=", b"\xfb\xff"),
    ("-_8", b"\xfb\xff"),
    ("", b""),
]
BAD_BASE64 = [
    "!!!",
    "aGk!!!",
    "aG k=",
    " aGk=",
    "aGk=\n",
    "aGk\t",
    "a",
    "aGVsb",
    "aGk==",
    "aGVs=",
    "aA===",
    "=",
    "==",
    "aGk=aGk=",
    "+_8=",
    "aGk*",
    "é",
]


@pytest.mark.parametrize(("text", "content"), GOOD_BASE64)
def test_base64_alphabets_and_padding_are_accepted(text: str, content: bytes) -> None:
    value = _with(parts=[{"raw": text}])
    for parse in (codec.parse, codec.parse_request):
        assert parse(pb.SendMessageRequest, value).message.parts[0].raw == content


@pytest.mark.parametrize("text", BAD_BASE64)
def test_anything_else_in_a_bytes_field_is_invalid_params(text: str) -> None:
    value = _with(parts=[{"text": "a"}, {"raw": text, "filename": "f"}])
    for parse in (codec.parse, codec.parse_request):
        with pytest.raises(errors.InvalidParamsError) as caught:
            parse(pb.SendMessageRequest, value)
        assert caught.value.message.startswith("message.parts[1].raw: must be base64")
        assert [v.field for v in caught.value.violations] == ["message.parts[1].raw"]


def test_required_fields_come_from_field_behavior() -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        codec.parse(pb.SendMessageRequest, {"message": {}})
    fields = [v.field for v in caught.value.violations]
    assert fields == ["message.messageId", "message.role", "message.parts"]


def test_nested_required_fields_in_push_config() -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        codec.parse(
            pb.SendMessageRequest,
            {**GOOD, "configuration": {"taskPushNotificationConfig": {"token": "x"}}},
        )
    assert caught.value.violations[0].field == "configuration.taskPushNotificationConfig.url"


def test_not_json_is_parse_error() -> None:
    with pytest.raises(errors.JSONParseError):
        codec.loads(b'{"jsonrpc": ')


def test_oversized_body_is_refused_before_parsing() -> None:
    # The same error as read_body's cap (and gRPC's): InvalidRequest, not InvalidParams.
    with pytest.raises(errors.InvalidRequestError, match="larger than 10 bytes") as caught:
        codec.loads(b'{"a": "0123456789"}', max_bytes=10)
    assert type(caught.value) is errors.InvalidRequestError


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_json_deeper_than_the_binary_parser_accepts_is_refused() -> None:
    # A request whose Part.data nests 33 objects parses as JSON but cannot cross gRPC.
    too_deep = _with(parts=[{"data": _nested(33)}])
    message = pb.SendMessageRequest()
    json_format.ParseDict(too_deep, message)
    with pytest.raises(Exception, match=r"MaxDepth|parsing"):
        pb.SendMessageRequest.FromString(message.SerializeToString())
    with pytest.raises(errors.InvalidParamsError, match="deeper than 32"):
        codec.loads(codec.dumps(too_deep))


def test_everything_the_depth_limit_admits_survives_binary() -> None:
    for depth in range(1, 40):
        value = _with(parts=[{"data": _nested(depth)}])
        try:
            codec.check_depth(value)
        except errors.InvalidParamsError:
            break
        message = codec.parse(pb.SendMessageRequest, value)
        assert pb.SendMessageRequest.FromString(message.SerializeToString()) == message
    else:
        pytest.fail("depth limit never reached")


def test_list_tasks_response_always_has_its_four_fields() -> None:
    assert codec.to_dict(pb.ListTasksResponse()) == {
        "tasks": [],
        "nextPageToken": "",
        "pageSize": 0,
        "totalSize": 0,
    }


def test_optional_fields_are_emitted_when_set_even_false() -> None:
    caps = codec.to_dict(pb.AgentCapabilities(streaming=False))
    assert caps == {"streaming": False}


def test_unicode_is_not_escaped() -> None:
    assert "é".encode() in codec.to_json(pb.Part(text="é"))
