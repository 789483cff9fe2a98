"""Structured results: the a2a tool's ``resultSchema``.

The schema goes out twice, so an agent finds it whichever way it reads a message: as a
data part (``mediaType`` :data:`RESULT_SCHEMA_MEDIA_TYPE`, metadata ``kind`` =
:data:`RESULT_SCHEMA_KIND`) after the text, and as the message's
``metadata.resultSchema``. A completed answer is checked with :func:`check_answer`: the
first data part that validates is the result, else the first text (an artifact's text
parts joined, then the status message's; a Markdown code fence around it is allowed)
that parses as JSON and validates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.json_schemas import (
    RESULT_SCHEMA_KIND,
    RESULT_SCHEMA_MEDIA_TYPE,
    TAG_KEY,
    data_part,
    part_value,
    violation,
)

#: The message metadata member (and the tool's argument) holding the schema.
RESULT_SCHEMA_KEY = "resultSchema"
NO_JSON = "the answer holds no JSON (no data part, and no text that parses as JSON)"


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome of a check: ``value`` when an answer conforms, else ``problem``."""

    value: Any = None
    problem: str | None = None

    @property
    def valid(self) -> bool:
        return self.problem is None


def stamp_schema(message: pb.Message, schema: Mapping[str, Any]) -> None:
    """Put ``schema`` on an outgoing message: a data part and the metadata member."""
    message.parts.append(
        data_part(
            dict(schema),
            media_type=RESULT_SCHEMA_MEDIA_TYPE,
            metadata={TAG_KEY: RESULT_SCHEMA_KIND},
        )
    )
    message.metadata.update({RESULT_SCHEMA_KEY: dict(schema)})


def reask_text(problem: str) -> str:
    return (
        f"Your answer does not match the required result schema: {problem}. Answer again"
        " with only the result: a data part, or JSON text, that matches the schema (it is"
        f" in this message's data part and in metadata.{RESULT_SCHEMA_KEY})."
    )


def _answer_groups(task: pb.Task) -> list[list[pb.Part]]:
    groups = [list(artifact.parts) for artifact in task.artifacts]
    if task.status.HasField("message"):
        groups.append(list(task.status.message.parts))
    return groups


def check_task(schema: Mapping[str, Any], task: pb.Task) -> Checked:
    return check_answer(schema, _answer_groups(task))


def check_message(schema: Mapping[str, Any], message: pb.Message) -> Checked:
    return check_answer(schema, [list(message.parts)])


def check_answer(schema: Mapping[str, Any], groups: Iterable[list[pb.Part]]) -> Checked:
    """The first conforming data part, else the first conforming JSON text."""
    groups = list(groups)
    first_problem: str | None = None
    for parts in groups:
        for part in parts:
            if part.WhichOneof("content") == "data":
                value = part_value(part)
                problem = violation(schema, value)
                if problem is None:
                    return Checked(value)
                first_problem = first_problem or problem
    for parts in groups:
        text = "".join(p.text for p in parts if p.WhichOneof("content") == "text").strip()
        parsed = _json_text(text)
        if parsed is _NOT_JSON:
            continue
        problem = violation(schema, parsed)
        if problem is None:
            return Checked(parsed)
        first_problem = first_problem or problem
    return Checked(problem=first_problem or NO_JSON)


def shown_data(task: pb.Task) -> str:
    """The data parts of an answer as compact JSON lines (what the model is shown of an
    answer that did not conform, beside its text)."""
    return "\n".join(
        compact(part_value(part))
        for parts in _answer_groups(task)
        for part in parts
        if part.WhichOneof("content") == "data"
    )


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_NOT_JSON = object()


def _json_text(text: str) -> Any:
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        text = text[3:-3]
        first, _, rest = text.partition("\n")
        text = rest if first.strip().isalpha() or not first.strip() else text
        text = text.strip()
    if not text:
        return _NOT_JSON
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON
