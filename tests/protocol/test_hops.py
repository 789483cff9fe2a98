"""The hop count: one reading for the engine and the proxy, both keys, written under
both."""

from __future__ import annotations

from typing import Any

import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec, errors
from a2a_gateway.protocol.hops import HOPS_KEYS, has_hops, read_hops, stamp_hops

OURS, THEIRS = "a2a-gateway.hops", "volcanic.hops"


def _request(metadata: Any = None, message_metadata: Any = None) -> pb.SendMessageRequest:
    message: dict[str, Any] = {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "x"}]}
    if message_metadata is not None:
        message["metadata"] = message_metadata
    value: dict[str, Any] = {"message": message}
    if metadata is not None:
        value["metadata"] = metadata
    return codec.parse(pb.SendMessageRequest, value)


@pytest.mark.parametrize(
    ("metadata", "message_metadata", "hops"),
    [
        (None, None, 0),
        ({}, {}, 0),
        ({"other": 7}, None, 0),
        (None, {OURS: 2}, 2),
        (None, {THEIRS: 2}, 2),
        ({OURS: 1}, {OURS: 5}, 1),  # per key: the request metadata first
        ({THEIRS: 1}, {THEIRS: 5}, 1),
        ({OURS: " 3 "}, None, 3),
        ({THEIRS: "3"}, None, 3),
        ({OURS: 1, THEIRS: 4}, None, 4),  # between the keys: the larger
        ({OURS: 4, THEIRS: 1}, None, 4),
        ({OURS: 1}, {THEIRS: 4}, 4),
        ({THEIRS: 1}, {OURS: 4}, 4),
        (None, {OURS: 2, THEIRS: 6}, 6),
        ({OURS: 0}, {OURS: 9, THEIRS: 2}, 2),
    ],
)
def test_each_key_request_then_message_and_the_larger_key_wins(
    metadata: Any, message_metadata: Any, hops: int
) -> None:
    request = _request(metadata, message_metadata)
    assert read_hops(request) == hops
    assert has_hops(request) == any(
        key in (where or {}) for key in HOPS_KEYS for where in (metadata, message_metadata)
    )


@pytest.mark.parametrize("key", HOPS_KEYS)
@pytest.mark.parametrize("where", ["metadata", "message.metadata"])
@pytest.mark.parametrize("bad", [-1, 1.5, "²", "٣", "x", "", True, None, {"n": 1}])
def test_anything_else_is_invalid_params_naming_the_field(key: str, where: str, bad: Any) -> None:
    request = _request({key: bad}) if where == "metadata" else _request(None, {key: bad})
    with pytest.raises(errors.InvalidParamsError) as caught:
        read_hops(request)
    assert caught.value.message.startswith(f"{where}.{key} must be")


def test_stamp_writes_every_key_in_the_request_metadata() -> None:
    request = _request({"keep": "me", OURS: 1}, {THEIRS: 2})
    stamp_hops(request, 3)
    assert dict(request.metadata) == {"keep": "me", OURS: 3.0, THEIRS: 3.0}
    assert read_hops(request) == 3
