"""Helpers every 0.3 translation shares: copying JSON fields, reading a field by its
camelCase name or snake_case alias, and the errors that name a bad field (in a 0.3
request: InvalidParamsError; in a 0.3 agent's result: InvalidAgentResponseError)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import FieldViolation, InvalidAgentResponseError, InvalidParamsError
from .tables import JSON


def copy_fields(source: Mapping[str, Any], target: JSON, *names: str) -> None:
    for name in names:
        if name in source:
            target[name] = source[name]


def invalid_field(path: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(f"{path}: {problem}", violations=[FieldViolation(path, problem)])


def get_field(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]`` by its camelCase name or its snake_case alias (the SDK accepts
    both); ``None`` (JSON null) counts as absent."""
    value = obj.get(name)
    if value is None and not name.islower():
        value = obj.get("".join("_" + c.lower() if c.isupper() else c for c in name))
    return value


def copy_fields_in(source: Mapping[str, Any], target: dict[str, Any], *names: str) -> None:
    """Copy ``names`` (camelCase, or their snake_case alias) when present."""
    for name in names:
        value = get_field(source, name)
        if value is not None:
            target[name] = value


def bad_result(path: str, problem: str) -> InvalidAgentResponseError:
    return InvalidAgentResponseError(f"{path}: {problem}")


def result_object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise bad_result(path, "must be a JSON object")
    return value


__all__ = [
    "bad_result",
    "copy_fields",
    "copy_fields_in",
    "get_field",
    "invalid_field",
    "result_object",
]
