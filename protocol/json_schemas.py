"""JSON Schema on A2A parts: the questions our agents ask with a schema (tagged as
Everruns tags them) and the checks of data against a schema, both sides share.

A question's schema rides in the status message as a data part ``{"schema": ...}`` whose
``mediaType`` is :data:`ASK_USER_MEDIA_TYPE` and whose metadata names
:data:`ASK_USER_TAG` under ``kind``: a caller finds it by either mark. Checks use the
``jsonschema`` package (the dialect a schema names in ``$schema``, else 2020-12), with
``$ref`` kept inside the schema. jsonschema is imported at the first check: a process
that never meets a schema (a plain ``serve``) never loads it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from lf.a2a.v1 import a2a_pb2 as pb

if TYPE_CHECKING:
    import jsonschema
    import referencing

#: The mark of a question's data part (the name Everruns gives it).
ASK_USER_TAG = "everruns/ask_user"
ASK_USER_MEDIA_TYPE = "application/vnd.everruns.ask-user+json"
#: The metadata member that carries the mark.
TAG_KEY = "kind"
#: The mark of the result schema our a2a tool sends with a message (``resultSchema``).
RESULT_SCHEMA_MEDIA_TYPE = "application/schema+json"
RESULT_SCHEMA_KIND = "a2a-gateway/result_schema"
#: Longest violation text put into an error or a prompt.
VIOLATION_CAP = 300


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a usable JSON Schema (None when it is)."""
    if not isinstance(schema, dict):
        return "must be a JSON Schema object"
    import jsonschema

    try:
        _validator_class(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return _cap(f"not a valid JSON Schema: {exc.message}")
    except RecursionError:
        return "not a valid JSON Schema: nested too deeply"
    return None


def _validator_class(schema: Mapping[str, Any]) -> type[jsonschema.protocols.Validator]:
    """The dialect ``$schema`` names; 2020-12 when it names none, or one unknown."""
    import jsonschema

    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


@functools.cache
def _no_remote() -> referencing.Registry[Any]:
    """Where ``$ref`` may lead: nowhere outside the schema itself."""
    import referencing

    return referencing.Registry()


def violation(schema: Mapping[str, Any], value: Any) -> str | None:
    """The most relevant way ``value`` breaks ``schema`` ("at /a/0: ..."), or None when
    it conforms. A schema that is itself broken is reported as the violation.

    ``$ref`` resolves within the schema only: the empty registry retrieves nothing
    (jsonschema would otherwise fetch a remote ``$ref``, blocking, from wherever the
    schema points)."""
    import jsonschema
    import referencing.exceptions
    from jsonschema.exceptions import best_match

    try:
        validator = _validator_class(schema)(schema, registry=_no_remote())
        error = best_match(validator.iter_errors(value))
    except (jsonschema.SchemaError, jsonschema.exceptions.UnknownType, re.error) as exc:
        return _cap(f"the schema is not usable: {getattr(exc, 'message', exc)}")
    except referencing.exceptions.Unresolvable as exc:
        return _cap(f"the schema is not usable: it refers to {exc.ref}, which is not in it")
    except RecursionError:
        return "the schema refers to itself without end"
    if error is None:
        return None
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return _cap(f"at {where}: {error.message}")


def part_value(part: pb.Part) -> Any:
    """The JSON value of a data part. Protobuf keeps every number as a double: whole
    ones come back as ints (``7``, not ``7.0``), as they were sent."""
    return _whole_numbers(json_format.MessageToDict(part.data))


#: Doubles hold every integer up to here exactly.
_EXACT_INT = 2**53


def _whole_numbers(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= _EXACT_INT else value
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def data_part(
    value: Any, *, media_type: str = "", metadata: Mapping[str, Any] | None = None
) -> pb.Part:
    part = pb.Part(media_type=media_type)
    json_format.ParseDict(value, part.data)
    if metadata:
        part.metadata.update(metadata)
    return part


def ask_user_part(schema: Mapping[str, Any]) -> pb.Part:
    """The data part that carries a question's answer schema, tagged."""
    return data_part(
        {"schema": dict(schema)}, media_type=ASK_USER_MEDIA_TYPE, metadata={TAG_KEY: ASK_USER_TAG}
    )


def is_ask_user(part: pb.Part) -> bool:
    return _marked(part, ASK_USER_MEDIA_TYPE, ASK_USER_TAG)


def is_result_schema(part: pb.Part) -> bool:
    return _marked(part, RESULT_SCHEMA_MEDIA_TYPE, RESULT_SCHEMA_KIND)


def _marked(part: pb.Part, media_type: str, kind: str) -> bool:
    """A data part with this media type, or this ``kind`` in its metadata."""
    if part.WhichOneof("content") != "data":
        return False
    if part.media_type == media_type:
        return True
    tag = part.metadata.fields.get(TAG_KEY)
    return tag is not None and tag.string_value == kind


def asked_schema(message: pb.Message) -> dict[str, Any] | None:
    """The answer schema of a tagged question in ``message`` (None without one)."""
    for part in message.parts:
        if is_ask_user(part):
            value = part_value(part)
            schema = value.get("schema") if isinstance(value, dict) else None
            if isinstance(schema, dict):
                return schema
    return None


def data_parts(parts: Iterable[pb.Part]) -> Iterator[tuple[int, pb.Part]]:
    for index, part in enumerate(parts):
        if part.WhichOneof("content") == "data":
            yield index, part


def _cap(text: str) -> str:
    return text if len(text) <= VIOLATION_CAP else text[: VIOLATION_CAP - 3] + "..."
