"""Strict ProtoJSON: every kind of bad input is InvalidParams naming the field."""

from __future__ import annotations

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
        (_with(foo=1), "foo"),
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
    with pytest.raises(errors.InvalidParamsError, match="larger than 10 bytes"):
        codec.loads(b'{"a": "0123456789"}', max_bytes=10)


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
