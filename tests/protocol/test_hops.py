"""``a2a-gateway.hops``: one reading for the engine and the proxy."""

from __future__ import annotations

from typing import Any

import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec, errors
from a2a_gateway.protocol.hops import read_hops


def _request(metadata: Any = None, message_metadata: Any = None) -> pb.SendMessageRequest:
    message: dict[str, Any] = {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "x"}]}
    if message_metadata is not None:
        message["metadata"] = message_metadata
    value: dict[str, Any] = {"message": message}
    if metadata is not None:
        value["metadata"] = metadata
    return codec.parse(pb.SendMessageRequest, value)


def test_request_metadata_wins_then_message_then_zero() -> None:
    assert read_hops(_request()) == 0
    assert read_hops(_request(message_metadata={"a2a-gateway.hops": 2})) == 2
    assert read_hops(_request({"a2a-gateway.hops": 1}, {"a2a-gateway.hops": 5})) == 1
    assert read_hops(_request({"a2a-gateway.hops": " 3 "})) == 3


@pytest.mark.parametrize("bad", [-1, 1.5, "²", "٣", "x", "", True, None, {"n": 1}])
def test_anything_else_is_invalid_params_naming_the_field(bad: Any) -> None:
    with pytest.raises(errors.InvalidParamsError, match=r"metadata\.a2a-gateway\.hops"):
        read_hops(_request({"a2a-gateway.hops": bad}))
