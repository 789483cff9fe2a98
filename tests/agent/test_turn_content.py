"""What an agent reads of a message: text parts, and data parts as compact JSON (a
caller's result schema introduced as such)."""

from __future__ import annotations

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.base import RESULT_SCHEMA_LABEL, Signal, Turn
from a2a_gateway.client.structured import stamp_schema
from a2a_gateway.protocol.json_schemas import data_part

from .agent_helpers import CALLER


def turn_of(message: pb.Message) -> Turn:
    return Turn(message, None, CALLER, "ctx", Signal())


def test_content_text_keeps_data_parts() -> None:
    message = pb.Message(parts=[pb.Part(text="Here:"), data_part({"day": "Monday", "n": 2})])
    turn = turn_of(message)
    assert turn.text() == "Here:"
    assert turn.content_text() == 'Here:\n{"day":"Monday","n":2}'


def test_a_result_schema_is_introduced() -> None:
    message = pb.Message(parts=[pb.Part(text="Where is it?")])
    stamp_schema(message, {"type": "object"})
    assert turn_of(message).content_text() == (
        f'Where is it?\n{RESULT_SCHEMA_LABEL} {{"type":"object"}}'
    )
