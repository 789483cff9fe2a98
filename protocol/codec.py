"""ProtoJSON codec: orjson for bytes <-> JSON values, ``json_format`` for values <-> messages.

Parsing is strict about what it reads and lenient about what it does not know: an
unknown field, at any depth, is dropped before parsing (the spec asks implementations
to ignore unrecognized fields), while wrong types, bad enum values, two members of one
oneof, missing REQUIRED fields (read from ``google.api.field_behavior`` in the
descriptors), ``bytes`` that are not base64 and over-deep nesting all raise
:class:`~.errors.InvalidParamsError` (or :class:`~.errors.JSONParseError` for a body
that is not JSON) with the field path. Settings files parse with ``unknown="refuse"``
so that a typo there is reported.

Speed (every request of every binding goes through here): ``json_format.ParseDict``
costs ~12 us for a one-part ``SendMessageRequest`` and the REQUIRED/oneof walk ~4 us,
most of a blocking send's binding time. So :func:`parse_request` first tries a
hand-written parser (:func:`parse_fast`, ~1 us) for the common ``SendMessageRequest``
shape and for the requests naming one task (GetTask, CancelTask, SubscribeToTask) that
accepts only input the strict path would accept *and build identically* and answers
``None`` for anything else (then the strict path runs and reports the error), and
:func:`validate` follows a per-type plan compiled from the descriptors instead of
reflecting over ``ListFields()``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast

import google.api.field_behavior_pb2 as field_behavior_pb2
import orjson
from google.protobuf import descriptor, json_format, message

from lf.a2a.v1 import a2a_pb2 as pb

from . import proto_dict
from .errors import FieldViolation, InvalidParamsError, InvalidRequestError, JSONParseError

M = TypeVar("M", bound=message.Message)

#: Default cap on a request body (bytes). A 10 MB file part is ~13.4 MB of base64.
MAX_BODY_BYTES = 24 * 1024 * 1024
#: What our client reads back (answers, stream events, gRPC messages): twice what a
#: server accepts, so a task holding a message as large as the body cap, and an answer
#: of the same size, can always be read back.
MAX_ANSWER_BYTES = 2 * MAX_BODY_BYTES
#: gRPC's own receive limit sits this far above the body cap, so that a message just
#: over the cap reaches the binding and gets its size error (with status details)
#: instead of grpc's bare RESOURCE_EXHAUSTED.
GRPC_LIMIT_SLACK_BYTES = 1024 * 1024

#: Deepest JSON nesting (objects and arrays) accepted. upb refuses binary messages
#: nested deeper than 32 levels, while json_format accepts ~48 JSON levels of
#: ``Part.data``; anything we accept must survive a relay over gRPC, so JSON stops
#: at 32 (measured: a request with ``Part.data`` 33 objects deep parses from JSON
#: but its binary form is refused).
MAX_JSON_DEPTH = 32

_A2A_PACKAGE = "lf.a2a.v1"
# googleapis stubs type the extension as a plain FieldDescriptor; the runtime object is right.
_FIELD_BEHAVIOR: Any = field_behavior_pb2.field_behavior


def loads(body: bytes | str, *, max_bytes: int = MAX_BODY_BYTES, depth: bool = True) -> Any:
    """Decode a JSON body, refusing oversized, malformed or (unless ``depth`` is False,
    for callers that run :func:`check_depth` themselves) over-deep input."""
    if len(body) > max_bytes:
        raise body_too_large(max_bytes)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JSONParseError(f"Invalid JSON payload: {exc}") from None
    if depth:
        check_depth(value)
    return value


def body_too_large(limit: int) -> InvalidRequestError:
    """The error for a request body over the cap, on every binding: the request as a
    whole is refused (InvalidRequest), not one of its params."""
    return InvalidRequestError(f"request body is larger than {limit} bytes")


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


def parse(
    cls: type[M],
    value: Any,
    *,
    path: str = "params",
    unknown: Literal["ignore", "refuse"] = "ignore",
) -> M:
    """Parse a JSON value into ``cls`` strictly and check REQUIRED fields and oneofs.

    Unknown fields are dropped (``unknown="ignore"``, requests) or refused (``"refuse"``,
    the operator's own files); ``bytes`` fields are checked as base64 either way.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidParamsError(
            f"{path}: expected a JSON object for {cls.DESCRIPTOR.name}",
            violations=[FieldViolation(path, "must be a JSON object")],
        )
    value = _known(
        _shape(cast(descriptor.Descriptor, cls.DESCRIPTOR)), value, "", unknown == "ignore"
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


def parse_request(cls: type[M], value: Any, *, path: str = "params") -> M:
    """:func:`check_depth` then :func:`parse`, after trying :func:`parse_fast`.

    Same result and same errors as the strict path; the common shapes skip it.
    """
    fast = parse_fast(cls, value)
    if fast is not None:
        return fast
    check_depth(value)
    return parse(cls, value, path=path)


def parse_fast(cls: type[M], value: Any) -> M | None:
    """``cls`` built from ``value`` when it has a shape with a hand-written parser and
    is valid; None otherwise (the caller then runs the strict path, which builds the
    same message or raises the error)."""
    parser = _FAST_PARSERS.get(cls)
    if parser is None:
        return None
    return cast("M | None", parser(value))


# --- before json_format: unknown keys dropped, bytes checked -------------------------
# json_format's own ``ignore_unknown_fields`` also drops unknown *enum names*, which
# must stay errors, and it decodes ``bytes`` leniently (characters outside the base64
# alphabet are skipped, so "aGk!!!" reads as "hi"). So one walk over the JSON, guided
# by a per-type shape compiled from the descriptors, drops unknown keys (copying only
# the objects that had one) and checks every ``bytes`` value; json_format then parses
# with unknown fields refused, which can no longer happen. Values of the wrong JSON
# type are left alone for json_format to report. Struct/Value/Timestamp values are
# opaque (any key is data there).

_ONE, _MANY, _KEYED = 0, 1, 2
_BYTES = "bytes"  # the "child" of a bytes field
# Standard or URL-safe alphabet (not mixed), then at most two "=".
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]*|[A-Za-z0-9_-]*)(={0,2})")


class _Shape:
    __slots__ = ("fields",)

    def __init__(self) -> None:
        # Every accepted key (JSON and proto names) -> None (nothing to look into) or
        # (JSON name, _ONE/_MANY/_KEYED, _BYTES or the shape of the message type).
        self.fields: dict[str, tuple[str, int, _Shape | str] | None] = {}


_SHAPES: dict[descriptor.Descriptor, _Shape] = {}


def _shape(desc: descriptor.Descriptor) -> _Shape:
    shape = _SHAPES.get(desc)
    if shape is not None:
        return shape
    shape = _SHAPES[desc] = _Shape()  # registered first: recursive types end here
    for fd in desc.fields:
        mode = _MANY if fd.is_repeated else _ONE
        target = fd
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            mode, target = _KEYED, fd.message_type.fields_by_name["value"]
        entry: tuple[str, int, _Shape | str] | None = None
        if target.type == descriptor.FieldDescriptor.TYPE_BYTES:
            entry = (fd.json_name, mode, _BYTES)
        elif target.message_type is not None and target.message_type.full_name.startswith(
            _A2A_PACKAGE + "."
        ):
            entry = (fd.json_name, mode, _shape(target.message_type))
        shape.fields[fd.json_name] = shape.fields[fd.name] = entry
    return shape


def _known(shape: _Shape, value: Any, path: str, drop: bool) -> Any:
    """``value`` without the keys ``shape`` does not know (when ``drop``), its bytes
    checked; the same object when nothing was dropped below it."""
    if type(value) is not dict:
        return value  # json_format reports the type
    fields = shape.fields
    out = value
    for key, item in value.items():
        if key not in fields:
            if drop:
                if out is value:
                    out = dict(value)
                del out[key]
            continue
        entry = fields[key]
        if entry is None or item is None:
            continue
        name, mode, child = entry
        sub = f"{path}.{name}" if path else name
        if mode == _ONE:
            new = _known_item(child, item, sub, drop)
        elif mode == _MANY:
            new = _known_items(child, item, sub, drop)
        else:
            new = _known_map(child, item, sub, drop)
        if new is not item:
            if out is value:
                out = dict(value)
            out[key] = new
    return out


def _known_item(child: _Shape | str, item: Any, path: str, drop: bool) -> Any:
    if child is _BYTES:
        check_base64(item, path)
        return item
    return _known(cast(_Shape, child), item, path, drop)


def _known_items(child: _Shape | str, items: Any, path: str, drop: bool) -> Any:
    if type(items) is not list:
        return items
    out = items
    for index, item in enumerate(items):
        new = _known_item(child, item, f"{path}[{index}]", drop)
        if new is not item:
            if out is items:
                out = list(items)
            out[index] = new
    return out


def _known_map(child: _Shape | str, entries: Any, path: str, drop: bool) -> Any:
    if type(entries) is not dict:
        return entries
    out = entries
    for key, item in entries.items():
        new = _known_item(child, item, f"{path}[{key!r}]", drop)
        if new is not item:
            if out is entries:
                out = dict(entries)
            out[key] = new
    return out


def check_base64(value: Any, path: str) -> None:
    """A ``bytes`` value: standard or URL-safe base64, padded or not, nothing else."""
    if type(value) is not str:
        return  # json_format reports the type
    found = _BASE64.fullmatch(value)
    valid = found is not None
    if found is not None:
        padding = len(found.group(1))
        data = len(value) - padding
        # Unpadded: any length but 4n+1. Padded: the "=" complete a group of four.
        valid = data % 4 != 1 and (padding == 0 or (len(value) % 4 == 0 and data % 4 != 0))
    if not valid:
        problem = "must be base64 (standard or URL-safe, padded or not)"
        raise InvalidParamsError(f"{path}: {problem}", violations=[FieldViolation(path, problem)])


# --- the hand-written parsers ------------------------------------------------------
# SendMessage's: ``{"message": {...}, "tenant"?: str}`` where the message has a non-empty
# string ``messageId``, a ``role`` given by the name of a non-zero Role, a non-empty
# ``parts`` list of exactly ``{"text": str}`` objects, and optionally string
# ``contextId``/``taskId``. Exact types only (``type(x) is str``, never a subclass).
# Any other key, type or an empty required value falls back to the strict path, so
# this never accepts anything json_format would refuse or validate() would flag, and
# sets exactly the fields ParseDict sets (tests/protocol/test_codec_fast.py compares
# the two paths on fixed shapes and on random edits). The requests naming one task
# (GetTask, CancelTask, SubscribeToTask) the same way: ``{"id": non-empty str}``, a
# string ``tenant``, GetTask's ``historyLength`` as a JSON integer in int32's range.

_ROLE_BY_NAME: dict[str, int] = {
    value.name: value.number for value in pb.Role.DESCRIPTOR.values if value.number != 0
}
_MESSAGE_KEYS = frozenset({"messageId", "role", "parts", "contextId", "taskId"})


def _parse_send_message_request(value: Any) -> pb.SendMessageRequest | None:
    if type(value) is not dict:
        return None
    source = value.get("message")
    if type(source) is not dict:
        return None
    tenant = value.get("tenant")
    if len(value) != (1 if tenant is None else 2) or (
        tenant is not None and type(tenant) is not str
    ):
        return None
    message_id = source.get("messageId")
    role_name = source.get("role")
    role = _ROLE_BY_NAME.get(role_name) if type(role_name) is str else None
    parts = source.get("parts")
    if type(message_id) is not str or not message_id or role is None:
        return None
    if type(parts) is not list or not parts:
        return None
    # messageId, role and parts are there; anything else must be contextId or taskId.
    if len(source) > 3 and not _MESSAGE_KEYS.issuperset(source):
        return None
    texts: list[str] = []
    for part in parts:
        if type(part) is not dict or len(part) != 1:
            return None
        text = part.get("text")
        if type(text) is not str:
            return None
        texts.append(text)
    context_id = source.get("contextId", "")
    task_id = source.get("taskId", "")
    if type(context_id) is not str or type(task_id) is not str:
        return None
    request = pb.SendMessageRequest()
    try:
        if tenant:
            request.tenant = tenant
        message = request.message
        message.message_id = message_id
        if context_id:
            message.context_id = context_id
        if task_id:
            message.task_id = task_id
        message.role = role  # type: ignore[assignment]
        add = message.parts.add
        for text in texts:
            add(text=text)
    except (ValueError, TypeError):  # e.g. a string protobuf refuses: strict path decides
        return None
    return request


_INT32 = range(-(2**31), 2**31)


def _task_id_request(cls: type[M], keys: frozenset[str]) -> Callable[[Any], M | None]:
    """The parser of a request naming one task (the shape in the comment above); ``keys``
    are the JSON names it may hold."""

    def parse(value: Any) -> M | None:
        if type(value) is not dict or not keys.issuperset(value):
            return None
        task_id = value.get("id")
        tenant = value.get("tenant", "")
        if type(task_id) is not str or not task_id or type(tenant) is not str:
            return None
        length = value.get("historyLength")
        if "historyLength" in value and (type(length) is not int or length not in _INT32):
            return None
        request = cls()
        try:
            request.id = task_id  # type: ignore[attr-defined]
            if tenant:
                request.tenant = tenant  # type: ignore[attr-defined]
            if length is not None:
                request.history_length = length  # type: ignore[attr-defined]
        except (ValueError, TypeError):  # e.g. a string protobuf refuses: strict path decides
            return None
        return request

    return parse


_FAST_PARSERS: dict[type, Callable[[Any], message.Message | None]] = {
    pb.SendMessageRequest: _parse_send_message_request,
    pb.GetTaskRequest: _task_id_request(
        pb.GetTaskRequest, frozenset({"id", "tenant", "historyLength"})
    ),
    pb.CancelTaskRequest: _task_id_request(pb.CancelTaskRequest, frozenset({"id", "tenant"})),
    pb.SubscribeToTaskRequest: _task_id_request(
        pb.SubscribeToTaskRequest, frozenset({"id", "tenant"})
    ),
}


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
    if type(msg) is pb.SendMessageResponse and msg.WhichOneof("payload") == "task":
        # A blocking send's task, most often just stored: its dict is built once.
        task = msg.task
        recent = proto_dict.recent_task_json(task)
        if recent is not None:
            return b"".join((b'{"task":', recent, b"}"))
        return orjson.dumps({"task": proto_dict.to_dict(task)})
    if type(msg) is pb.Task and msg.id:  # (its one always-emitted field, the id, is there)
        # GetTask of a task just stored or read from its file: the JSON kept then.
        recent = proto_dict.recent_task_json(msg)
        if recent is not None:
            return recent
    return orjson.dumps(to_dict(msg))


def answer_json(msg: message.Message, task_json: bytes | None) -> bytes:
    """A unary answer's ProtoJSON: :func:`to_json` of ``msg``, or, when the service
    answered with a stored task's JSON (``CallContext.task_json``: ``msg`` then names the
    task only), that task in its place: the answer itself (GetTask), or a
    SendMessageResponse's ``task``."""
    if task_json is None:
        return to_json(msg)
    if type(msg) is pb.Task:
        return task_json
    return b"".join((b'{"task":', task_json, b"}"))


def stream_event_json(event: pb.StreamResponse) -> bytes:
    """``to_json(event)`` for a stream event, without the look-up of fields always
    emitted (a StreamResponse has none: its fields are one oneof of messages)."""
    return orjson.dumps(proto_dict.stream_response(event))


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


def violations(msg: message.Message, path: str = "") -> list[FieldViolation]:
    """Every REQUIRED field and oneof of ``msg`` that is missing, each with its path."""
    found: list[FieldViolation] = []
    _collect(msg, path, found)
    return found


def validate(msg: message.Message, path: str = "") -> None:
    """Raise InvalidParams naming the first REQUIRED field or oneof that is missing."""
    plan = _TYPE_PLANS.get(type(msg))
    if plan is None:
        plan = _TYPE_PLANS[type(msg)] = _plan(cast(descriptor.Descriptor, msg.DESCRIPTOR))
    if plan.trivial or _valid(msg, plan):
        return
    # Rare: walk again, collecting every violation with its path.
    violations: list[FieldViolation] = []
    _collect(msg, path, violations)
    if violations:
        first = violations[0]
        raise InvalidParamsError(f"{first.field}: {first.description}", violations=violations)


# A compiled plan per message type says what :func:`_collect` would look at, so the
# common case (nothing missing) is a few attribute reads: the REQUIRED fields, the
# oneofs, and only those message fields whose type can contain a violation at all.
_REPEATED, _SINGULAR_MESSAGE, _SCALAR, _MAP = 0, 1, 2, 3


class _Plan:
    __slots__ = ("fields", "leaf_oneofs", "oneofs", "trivial")

    def __init__(self) -> None:
        # (field name, kind, REQUIRED, plan of its messages when they can hold a
        # violation) for each field that matters, in field-number order.
        self.fields: tuple[tuple[str, int, bool, _Plan | None], ...] = ()
        self.oneofs: tuple[str, ...] = ()
        self.leaf_oneofs: tuple[str, ...] | None = None  # only oneofs: checked inline
        self.trivial = True  # no message of this type can have a violation


_PLANS: dict[descriptor.Descriptor, _Plan] = {}
_TYPE_PLANS: dict[type, _Plan] = {}


def _plan(desc: descriptor.Descriptor) -> _Plan:
    plan = _PLANS.get(desc)
    if plan is None:
        plan = _build_plan(desc, set())
    return plan


def _kind(fd: descriptor.FieldDescriptor) -> int:
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        return _MAP
    if fd.is_repeated:
        return _REPEATED
    return _SINGULAR_MESSAGE if fd.message_type is not None else _SCALAR


def _build_plan(desc: descriptor.Descriptor, building: set[descriptor.Descriptor]) -> _Plan:
    plan = _Plan()
    _PLANS[desc] = plan
    if not desc.full_name.startswith(_A2A_PACKAGE + "."):
        return plan  # as in _collect: other packages' messages are not checked
    building.add(desc)
    required, oneofs = _rules(desc)
    plan.oneofs = tuple(oneof.name for oneof in oneofs)
    fields: list[tuple[str, int, bool, _Plan | None]] = []
    for fd in sorted(desc.fields, key=lambda f: f.number):
        kind = _kind(fd)
        target = fd.message_type
        if kind == _MAP:
            assert target is not None
            target = target.fields_by_name["value"].message_type
        child: _Plan | None = None
        if target is not None:
            child = _PLANS.get(target)
            if child is None:
                child = _build_plan(target, building)
            if child.trivial and target not in building:  # in a cycle: check, to be safe
                child = None
        if fd in required or child is not None:
            fields.append((fd.name, kind, fd in required, child))
    plan.fields = tuple(fields)
    plan.trivial = not (plan.fields or plan.oneofs)
    if not plan.fields and plan.oneofs:
        plan.leaf_oneofs = plan.oneofs
    building.discard(desc)
    return plan


def _valid(msg: Any, plan: _Plan) -> bool:
    """True when :func:`_collect` would find nothing (same checks, no paths built)."""
    for oneof in plan.oneofs:
        if msg.WhichOneof(oneof) is None:
            return False
    for name, kind, required, child in plan.fields:
        if kind == _SINGULAR_MESSAGE:
            if msg.HasField(name):
                if child is not None and not _valid(getattr(msg, name), child):
                    return False
            elif required:
                return False
        elif kind == _SCALAR:
            if not getattr(msg, name):  # only REQUIRED scalars are in the plan
                return False
        else:
            items = getattr(msg, name)
            if required and not items:
                return False
            if child is None:
                continue
            if kind == _MAP:
                items = items.values()
            leaf = child.leaf_oneofs
            for item in items:
                if leaf is not None:
                    for oneof in leaf:
                        if item.WhichOneof(oneof) is None:
                            return False
                elif not _valid(item, child):
                    return False
    return True


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
