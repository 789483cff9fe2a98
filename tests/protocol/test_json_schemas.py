"""JSON Schema checks on parts: violations named by path, broken schemas reported (never
raised), ``$ref`` kept inside the schema, whole numbers read back as ints, and the
question tag found by either mark."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.json_schemas import (
    ASK_USER_MEDIA_TYPE,
    ask_user_part,
    asked_schema,
    data_part,
    part_value,
    schema_problem,
    violation,
)

from ..client.client_support import serving

DAY = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (DAY, {"day": "Monday"}, None),
        (DAY, {}, "at /: 'day' is a required property"),
        (DAY, {"day": 3}, "at /day: 3 is not of type 'string'"),
        ({"items": {"type": "integer"}}, [1, "x"], "at /1: 'x' is not of type 'integer'"),
        # An unknown $schema is read as 2020-12 (no warning), a known one as itself.
        ({"$schema": "https://example.com/mine", "type": "integer"}, 1.5, "at /: 1.5 is not"
         " of type 'integer'"),
        ({"type": "string", "pattern": "("}, "x", "the schema is not usable: missing ),"
         " unterminated subpattern at position 0"),
        ({"$ref": "#/$defs/none"}, 1, "the schema is not usable: it refers to /$defs/none,"
         " which is not in it"),
    ],
)  # fmt: skip
def test_violation(schema: dict[str, Any], value: Any, expected: str | None) -> None:
    assert violation(schema, value) == expected


async def test_a_remote_ref_is_never_fetched() -> None:
    hits: list[str] = []

    async def schema(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"type": "string"})

    app = web.Application()
    app.router.add_get("/s.json", schema)
    async with serving(app) as url:
        ref = {"$ref": f"{url}/s.json"}
        assert schema_problem(ref) is None  # a well-formed schema ...
        found = await asyncio.to_thread(violation, ref, 1)  # ... that cannot be used
    assert found == f"the schema is not usable: it refers to {url}/s.json, which is not in it"
    assert hits == []


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (DAY, None),
        ([DAY], "must be a JSON Schema object"),
        ({"type": 5}, "not a valid JSON Schema: 5 is not valid under any of the given schemas"),
    ],
)
def test_schema_problem(schema: Any, expected: str | None) -> None:
    assert schema_problem(schema) == expected


def test_data_parts_keep_whole_numbers() -> None:
    value = {"n": 7, "x": 1.5, "list": [1, 2.0, {"big": 2**60}]}
    assert part_value(data_part(value)) == {"n": 7, "x": 1.5, "list": [1, 2, {"big": 2.0**60}]}
    assert isinstance(part_value(data_part(7)), int)


def test_the_question_tag_is_found_by_either_mark() -> None:
    tagged = ask_user_part(DAY)
    assert tagged.media_type == ASK_USER_MEDIA_TYPE
    assert asked_schema(pb.Message(parts=[pb.Part(text="Which day?"), tagged])) == DAY
    by_media = data_part({"schema": DAY}, media_type=ASK_USER_MEDIA_TYPE)
    by_kind = data_part({"schema": DAY}, metadata={"kind": "everruns/ask_user"})
    untagged = data_part({"schema": DAY})
    for part, expected in ((by_media, DAY), (by_kind, DAY), (untagged, None)):
        assert asked_schema(pb.Message(parts=[part])) == expected
