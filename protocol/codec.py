"""ProtoJSON codec: orjson for bytes <-> JSON values, ``json_format`` for values <-> messages.

Parsing is strict. Unknown fields, wrong types, two members of one oneof, missing
REQUIRED fields (read from ``google.api.field_behavior`` in the descriptors) and
over-deep nesting all raise :class:`~.errors.InvalidParamsError` (or
:class:`~.errors.JSONParseError` for bytes that are not JSON) with the field path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import google.api.field_behavior_pb2 as field_behavior_pb2
import orjson
from google.protobuf import descriptor, json_format, message

from . import proto_dict
from .errors import FieldViolation, InvalidParamsError, JSONParseError

M = TypeVar("M", bound=message.Message)

#: Default cap on a request body (bytes). A 10 MB file part is ~13.4 MB of base64.
MAX_BODY_BYTES = 24 * 1024 * 1024

#: Deepest JSON nesting (objects and arrays) accepted. upb refuses binary messages
#: nested deeper than 32 levels, while json_format accepts ~48 JSON levels of
#: ``Part.data``; anything we accept must survive a relay over gRPC, so JSON stops
#: at 32 (measured: a request with ``Part.data`` 33 objects deep parses from JSON
#: but its binary form is refused).
MAX_JSON_DEPTH = 32

_A2A_PACKAGE = "lf.a2a.v1"
# googleapis stubs type the extension as a plain FieldDescriptor; the runtime object is right.
_FIELD_BEHAVIOR: Any = field_behavior_pb2.field_behavior


def loads(body: bytes | str, *, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """Decode a JSON body, refusing oversized, malformed or over-deep input."""
    if len(body) > max_bytes:
        raise InvalidParamsError(f"request body is larger than {max_bytes} bytes")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JSONParseError(f"Invalid JSON payload: {exc}") from None
    check_depth(value)
    return value


def dumps(value: Any) -> bytes:
    """Encode a JSON value (UTF-8, no ASCII escaping)."""
    return orjson.dumps(value)


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise InvalidParams when ``value`` nests objects/arrays deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item  # type: ignore[assignment]
        else:
            continue
        if depth > limit:
            raise InvalidParamsError(f"JSON nesting deeper than {limit} levels is not accepted")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def parse(cls: type[M], value: Any, *, path: str = "params") -> M:
    """Parse a JSON value into ``cls`` strictly and check REQUIRED fields and oneofs."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidParamsError(
            f"{path}: expected a JSON object for {cls.DESCRIPTOR.name}",
            violations=[FieldViolation(path, "must be a JSON object")],
        )
    try:
        msg = json_format.ParseDict(cast(dict[str, Any], value), cls(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        text = str(exc).split("\n", 1)[0]
        raise InvalidParamsError(
            f"Invalid {cls.DESCRIPTOR.name}: {text}",
            violations=[FieldViolation(path, text)],
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:  # defensive: never a 500
        raise InvalidParamsError(f"Invalid {cls.DESCRIPTOR.name}: {exc}") from None
    validate(msg)
    return msg


def to_dict(msg: message.Message) -> dict[str, Any]:
    """ProtoJSON dict of ``msg``.

    Top-level REQUIRED scalars and lists are always present, even at their default
    (``ListTasksResponse`` must always carry ``nextPageToken``, ``pageSize``, ...).
    """
    out: dict[str, Any] = proto_dict.to_dict(msg)
    for json_name, default in _always_emitted(msg.DESCRIPTOR):
        if json_name not in out:
            out[json_name] = [] if default is _LIST else default
    return out


_LIST = object()


@functools.cache
def _always_emitted(desc: descriptor.Descriptor) -> tuple[tuple[str, Any], ...]:
    emitted: list[tuple[str, Any]] = []
    for fd in desc.fields:
        if not _is_required(fd):
            continue
        if fd.is_repeated:
            emitted.append((fd.json_name, _LIST))
        elif fd.enum_type is not None:
            emitted.append((fd.json_name, fd.enum_type.values_by_number[0].name))
        elif fd.message_type is None:
            emitted.append((fd.json_name, fd.default_value))
    return tuple(emitted)


def to_json(msg: message.Message) -> bytes:
    return orjson.dumps(to_dict(msg))


def from_json(cls: type[M], body: bytes, *, path: str = "body") -> M:
    return parse(cls, loads(body), path=path)


# --- REQUIRED fields and oneofs, from the descriptors ---------------------------------


def _is_required(fd: descriptor.FieldDescriptor) -> bool:
    behaviors: Any = fd.GetOptions().Extensions[_FIELD_BEHAVIOR]
    return field_behavior_pb2.REQUIRED in behaviors


@functools.cache
def _rules(
    desc: descriptor.Descriptor,
) -> tuple[tuple[descriptor.FieldDescriptor, ...], tuple[descriptor.OneofDescriptor, ...]]:
    required = tuple(fd for fd in desc.fields if _is_required(fd))
    # Every real (non-synthetic) oneof of the A2A schema means "exactly one of".
    oneofs: tuple[descriptor.OneofDescriptor, ...] = ()
    if desc.full_name.startswith(_A2A_PACKAGE + "."):
        oneofs = tuple(o for o in desc.oneofs if not _is_synthetic(o))
    return required, oneofs


def _is_synthetic(oneof: descriptor.OneofDescriptor) -> bool:
    return len(oneof.fields) == 1 and oneof.name == "_" + oneof.fields[0].name


def _is_present(msg: message.Message, fd: descriptor.FieldDescriptor) -> bool:
    value = getattr(msg, fd.name)
    if fd.is_repeated:
        return len(value) > 0
    if fd.message_type is not None:
        return msg.HasField(fd.name)
    return bool(value)


def validate(msg: message.Message, path: str = "") -> None:
    """Raise InvalidParams naming the first REQUIRED field or oneof that is missing."""
    violations: list[FieldViolation] = []
    _collect(msg, path, violations)
    if violations:
        first = violations[0]
        raise InvalidParamsError(f"{first.field}: {first.description}", violations=violations)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _collect(msg: message.Message, path: str, out: list[FieldViolation]) -> None:
    desc = msg.DESCRIPTOR
    if not desc.full_name.startswith(_A2A_PACKAGE + "."):
        return  # google.protobuf.Struct/Value/Timestamp: nothing to check
    required, oneofs = _rules(desc)
    for fd in required:
        if not _is_present(msg, fd):
            out.append(FieldViolation(_join(path, fd.json_name), "is required"))
    for oneof in oneofs:
        if msg.WhichOneof(oneof.name) is None:
            names = ", ".join(f.json_name for f in oneof.fields)
            out.append(FieldViolation(path or desc.name, f"must set exactly one of: {names}"))
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        sub = _join(path, fd.json_name)
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.message_type is not None:
                for key, item in value.items():
                    _collect(item, f"{sub}[{key!r}]", out)
        elif fd.is_repeated:
            for index, item in enumerate(value):
                _collect(item, f"{sub}[{index}]", out)
        else:
            _collect(value, sub, out)
