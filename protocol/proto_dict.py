"""ProtoJSON of A2A messages, fast: the same dict as ``json_format.MessageToDict``.

``json_format`` walks every field through generic reflection (about 15 us for a small
Task, 6 us for one artifact-update event). Task files, and any binding that wants it,
encode these objects thousands of times a second. Here the hot shapes (Task, Message,
Part, Artifact, TaskStatus, the stream events and SendMessageResponse) have
hand-written encoders, and everything else goes through a generic encoder that caches
one small handler per field descriptor and walks ``ListFields()`` (exactly the fields
ProtoJSON prints: set oneof members and optional fields, non-default others).
Well-known types keep json_format's own code (Timestamp via ``ToJsonString``, Struct
and Value via ``MessageToDict``), as do float fields and maps with non-string keys, so
the output is always json_format's; a test compares the two on every A2A message type
with every field set.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import orjson
from google.protobuf import descriptor, json_format, message, message_factory, timestamp_pb2

from lf.a2a.v1 import a2a_pb2 as pb

_Handler = Callable[[Any], Any]
_FD = descriptor.FieldDescriptor
_INT64 = frozenset(
    {_FD.TYPE_INT64, _FD.TYPE_UINT64, _FD.TYPE_SINT64, _FD.TYPE_FIXED64, _FD.TYPE_SFIXED64}
)

_HANDLERS: dict[descriptor.FieldDescriptor, tuple[str, _Handler]] = {}


def to_dict(msg: message.Message) -> dict[str, Any]:
    """``json_format.MessageToDict(msg)``, faster for the A2A messages."""
    special = _SPECIAL.get(type(msg))
    if special is not None:
        return special(msg)
    return _generic(msg)


def _generic(msg: message.Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    handlers = _HANDLERS
    for fd, value in msg.ListFields():
        entry = handlers.get(fd)
        if entry is None:
            entry = handlers[fd] = (fd.json_name, _handler(fd))
        out[entry[0]] = entry[1](value)
    return out


# --- hand-written encoders for the hot shapes ------------------------------------------
# Each handles the common fields directly and hands the message to the generic encoder
# as soon as a rarer field is set, so it never drops anything. The equality test fills
# every field of every A2A message, so a field added to the schema fails it until it
# is handled here.

_ROLE = {v.number: v.name for v in pb.Role.DESCRIPTOR.values}
_STATE = {v.number: v.name for v in pb.TaskState.DESCRIPTOR.values}


_PART_TEXT = pb.Part.DESCRIPTOR.fields_by_name["text"]
# The repeated fields below: one item (the common case) is read by index, which costs a
# third of iterating the field.


def _part(part: pb.Part) -> dict[str, Any]:
    fields = part.ListFields()  # (one call: the four checks of a plain text part)
    if len(fields) == 1:
        fd, value = fields[0]
        if fd is _PART_TEXT:
            return {"text": value}
    return _generic(part)


def _message(msg: pb.Message) -> dict[str, Any]:
    if msg.HasField("metadata") or msg.extensions or msg.reference_task_ids:
        return _generic(msg)
    out: dict[str, Any] = {}
    # Each field read once (a read is a name lookup and, for strings, a new object).
    if message_id := msg.message_id:
        out["messageId"] = message_id
    if context_id := msg.context_id:
        out["contextId"] = context_id
    if task_id := msg.task_id:
        out["taskId"] = task_id
    if role := msg.role:
        out["role"] = _ROLE.get(role, role)
    if parts := msg.parts:
        out["parts"] = [_part(parts[0])] if len(parts) == 1 else [_part(x) for x in parts]
    return out


_last_second: list[Any] = [None, ""]  # (seconds, its ISO text): statuses are mostly "now"


def timestamp_text(ts: timestamp_pb2.Timestamp) -> str:
    """``ts.ToJsonString()``, reusing the date-time text of the last second seen."""
    seconds, nanos = ts.seconds, ts.nanos
    if _last_second[0] != seconds:
        _last_second[1] = timestamp_pb2.Timestamp(seconds=seconds).ToJsonString()[:-1]
        _last_second[0] = seconds
    text: str = _last_second[1]
    if nanos == 0:
        return text + "Z"
    if nanos % 1_000_000 == 0:
        return f"{text}.{nanos // 1_000_000:03d}Z"
    if nanos % 1_000 == 0:
        return f"{text}.{nanos // 1_000:06d}Z"
    return f"{text}.{nanos:09d}Z"


def _status(status: pb.TaskStatus) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if state := status.state:
        out["state"] = _STATE.get(state, state)
    if status.HasField("message"):
        out["message"] = _message(status.message)
    if status.HasField("timestamp"):
        out["timestamp"] = timestamp_text(status.timestamp)
    return out


def _artifact(artifact: pb.Artifact) -> dict[str, Any]:
    if artifact.description or artifact.HasField("metadata") or artifact.extensions:
        return _generic(artifact)
    out: dict[str, Any] = {}
    if artifact_id := artifact.artifact_id:
        out["artifactId"] = artifact_id
    if name := artifact.name:
        out["name"] = name
    if parts := artifact.parts:
        out["parts"] = [_part(parts[0])] if len(parts) == 1 else [_part(x) for x in parts]
    return out


def _task(task: pb.Task) -> dict[str, Any]:
    if task.HasField("metadata"):
        return _generic(task)
    out: dict[str, Any] = {}
    if task_id := task.id:
        out["id"] = task_id
    if context_id := task.context_id:
        out["contextId"] = context_id
    if task.HasField("status"):
        out["status"] = _status(task.status)
    if artifacts := task.artifacts:
        out["artifacts"] = (
            [_artifact(artifacts[0])] if len(artifacts) == 1 else [_artifact(x) for x in artifacts]
        )
    if history := task.history:
        out["history"] = (
            [_message(history[0])] if len(history) == 1 else [_message(x) for x in history]
        )
    return out


def _event_ids(update: pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent) -> dict[str, Any]:
    """The ids both update events start with."""
    out: dict[str, Any] = {}
    if task_id := update.task_id:  # (each field read once: a read costs a name lookup)
        out["taskId"] = task_id
    if context_id := update.context_id:
        out["contextId"] = context_id
    return out


def _status_update(update: pb.TaskStatusUpdateEvent) -> dict[str, Any]:
    if update.HasField("metadata"):
        return _generic(update)
    out = _event_ids(update)
    if update.HasField("status"):
        out["status"] = _status(update.status)
    return out


def _artifact_update(update: pb.TaskArtifactUpdateEvent) -> dict[str, Any]:
    if update.HasField("metadata"):
        return _generic(update)
    out = _event_ids(update)
    if update.HasField("artifact"):
        out["artifact"] = _artifact(update.artifact)
    if update.append:
        out["append"] = True
    if update.last_chunk:
        out["lastChunk"] = True
    return out


def stream_response(event: pb.StreamResponse) -> dict[str, Any]:
    kind = event.WhichOneof("payload")
    if kind == "artifact_update":
        return {"artifactUpdate": _artifact_update(event.artifact_update)}
    if kind == "status_update":
        return {"statusUpdate": _status_update(event.status_update)}
    if kind == "task":
        return {"task": _task(event.task)}
    if kind == "message":
        return {"message": _message(event.message)}
    return _generic(event)


def _send_message_response(response: pb.SendMessageResponse) -> dict[str, Any]:
    kind = response.WhichOneof("payload")
    if kind == "task":
        return {"task": _task(response.task)}
    if kind == "message":
        return {"message": _message(response.message)}
    return _generic(response)


_SPECIAL: dict[type, Callable[[Any], dict[str, Any]]] = {
    pb.Part: _part,
    pb.Message: _message,
    pb.TaskStatus: _status,
    pb.Artifact: _artifact,
    pb.Task: _task,
    pb.TaskStatusUpdateEvent: _status_update,
    pb.TaskArtifactUpdateEvent: _artifact_update,
    pb.StreamResponse: stream_response,
    pb.SendMessageResponse: _send_message_response,
}


# --- the task a blocking send just stored -----------------------------------------------
# A blocking send's answer is the task its run just saved: the task file's encoding
# builds the task's ProtoJSON bytes (:func:`remember_task_json`, the file holds them as
# they are) and the answer finds them again (:func:`recent_task_json`) by the task's id,
# checked against the task's binary form, which determines the JSON (equal bytes, equal
# message). So the answer is the same JSON without encoding or serializing the task a
# second time. A GetTask's task read from its file finds the file's JSON so too (the
# file store keeps it when the file holds it as the encoder writes it). A few small
# tasks only: at most RECENT_TASKS, of at most RECENT_TASK_BYTES each.

RECENT_TASKS = 64
RECENT_TASK_BYTES = 4096
_recent_tasks: dict[str, tuple[bytes, bytes]] = {}


def remember_task_json(task: pb.Task) -> bytes:
    """``orjson.dumps(to_dict(task))``, kept for :func:`recent_task_json`."""
    out = orjson.dumps(_task(task))
    remember_recent_json(task.id, task.SerializeToString(), out)
    return out


def remember_recent_json(task_id: str, binary: bytes, json: bytes) -> None:
    """Keep ``json``, the task's ``orjson.dumps(to_dict(task))``, for the task whose
    binary form is ``binary`` (a task file read back whose task's dict
    :func:`task_from_dict` took is that JSON: a stored task answered again). (Event
    loop only: the eviction iterates the map.)"""
    recent = _recent_tasks
    if len(binary) <= RECENT_TASK_BYTES:
        if len(recent) >= RECENT_TASKS:
            recent.pop(next(iter(recent)), None)
        recent[task_id] = (binary, json)
    else:
        recent.pop(task_id, None)


def recent_task_json(task: pb.Task) -> bytes | None:
    """The JSON :func:`remember_task_json` kept for a task equal to ``task``, or None."""
    entry = _recent_tasks.get(task.id)
    if entry is None or entry[0] != task.SerializeToString():
        return None
    return entry[1]


def _message_value(value: message.Message) -> Any:
    if isinstance(value, timestamp_pb2.Timestamp):
        return timestamp_text(value)
    if value.DESCRIPTOR.file.package == "google.protobuf":
        return json_format.MessageToDict(value)  # Struct, Value, ListValue, wrappers
    return to_dict(value)


def _identity(value: Any) -> Any:
    return value


def _bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _scalar(fd: descriptor.FieldDescriptor) -> _Handler | None:
    """The handler of one value of ``fd``; None when json_format must do it."""
    if fd.type == _FD.TYPE_MESSAGE:
        return _message_value
    if fd.enum_type is not None:
        values = fd.enum_type.values_by_number

        def enum_name(value: int) -> Any:
            known = values.get(value)
            return known.name if known is not None else value

        return enum_name
    if fd.type == _FD.TYPE_BYTES:
        return _bytes
    if fd.type in _INT64:
        return str
    if fd.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return None  # NaN, infinities and float precision: json_format's rules
    return _identity  # string, bool, 32-bit integers


def _handler(fd: descriptor.FieldDescriptor) -> _Handler:
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        key_fd = fd.message_type.fields_by_name["key"]
        value = _scalar(fd.message_type.fields_by_name["value"])
        if key_fd.type != _FD.TYPE_STRING or value is None:
            return _by_json_format(fd)
        map_value = value
        return lambda entries: {key: map_value(item) for key, item in entries.items()}
    one = _scalar(fd)
    if one is None:
        return _by_json_format(fd)
    if fd.is_repeated:
        each = one
        return lambda values: [each(v) for v in values]
    return one


def _by_json_format(fd: descriptor.FieldDescriptor) -> _Handler:
    """Encode the field with json_format, through a message holding only it."""
    assert fd.containing_type is not None  # every field belongs to a message
    holder_class = message_factory.GetMessageClass(fd.containing_type)

    def handle(value: Any) -> Any:
        holder = holder_class()
        field = getattr(holder, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, message.Message):
                    field[key].CopyFrom(item)
                else:
                    field[key] = item
        elif fd.is_repeated:
            field.extend(value)
        else:
            setattr(holder, fd.name, value)
        return json_format.MessageToDict(holder)[fd.json_name]

    return handle


# --- decoding: the inverse of the hand-written encoders --------------------------------
# ``task_from_dict`` reads exactly the shapes the encoders above write for a Task (text
# parts; no metadata, extensions, descriptions or referenceTaskIds; enum names; "Z"
# timestamps) and returns None for anything else, so the caller falls back to
# ``json_format.ParseDict``, which then builds the same Task or raises. Task files are
# read through it: ParseDict costs ~40 us for a one-turn task, this ~6 us. Exact types
# only (``type(x) is str``); tests/protocol/test_proto_dict_decode.py compares both
# ways on generated tasks and on random edits.
#
# "Exactly" includes what the encoders leave out and their order: no field at its
# default (an empty string or list, an UNSPECIFIED enum), keys in the encoders' order,
# a timestamp's fraction as long as ``timestamp_text`` writes it. So a dict it accepts
# is the one ``to_dict`` makes of the task it returns, and ``orjson.dumps`` of it is
# that task's JSON (a stored task's answer reuses it: ``remember_recent_json``).

_ROLE_NUMBER = {v.name: v.number for v in pb.Role.DESCRIPTOR.values}
_STATE_NUMBER = {v.name: v.number for v in pb.TaskState.DESCRIPTOR.values}


def _in_order(*keys: str) -> frozenset[tuple[str, ...]]:
    """Every tuple of some of ``keys`` in their order: the key sequences an encoder
    above writes for a message whose fields are these."""
    return frozenset(
        tuple(key for bit, key in enumerate(keys) if mask >> bit & 1)
        for mask in range(1 << len(keys))
    )


_TASK_KEYS = _in_order("id", "contextId", "status", "artifacts", "history")
_STATUS_KEYS = _in_order("state", "message", "timestamp")
_MESSAGE_KEYS = _in_order("messageId", "contextId", "taskId", "role", "parts")
_ARTIFACT_KEYS = _in_order("artifactId", "name", "parts")
_FRACTION_LENGTHS = frozenset({0, 3, 6, 9})
_ASCII_DIGITS = frozenset("0123456789")
_DATE_TIME_LAYOUT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
_last_date_time: list[Any] = ["", 0]  # (the "YYYY-MM-DDTHH:MM:SS" text, its seconds)


def task_from_dict(value: Any) -> pb.Task | None:
    """The Task ``json_format.ParseDict(value, pb.Task())`` builds, when ``value`` is
    the very dict ``to_dict`` writes for it (a common task: see above); None otherwise
    (nothing is raised)."""
    if type(value) is not dict or tuple(value) not in _TASK_KEYS:
        return None
    task_id = value.get("id", "")
    context_id = value.get("contextId", "")
    if type(task_id) is not str or type(context_id) is not str:
        return None
    if not (_as_encoded(value, "id", task_id) and _as_encoded(value, "contextId", context_id)):
        return None
    try:
        task = pb.Task(id=task_id, context_id=context_id)
        if "status" in value and not _status_into(task.status, value["status"]):
            return None
        artifacts = value.get("artifacts", [])
        history = value.get("history", [])
        if type(artifacts) is not list or type(history) is not list:
            return None
        if not _as_encoded(value, "artifacts", artifacts):
            return None
        if not _as_encoded(value, "history", history):
            return None
        for item in artifacts:
            if not _artifact_into(task.artifacts.add(), item):
                return None
        for item in history:
            if not _message_into(task.history.add(), item):
                return None
    except (ValueError, TypeError):  # e.g. a string protobuf refuses: ParseDict decides
        return None
    return task


def _as_encoded(value: dict[str, Any], key: str, item: Any) -> bool:
    """Whether field ``key`` of ``value`` (``item``: its value, or its default when
    absent) is as the encoders write it: an empty one (a string, a list, an UNSPECIFIED
    enum) is left out."""
    return bool(item) or key not in value


def _texts_into(parts: Any, value: Any) -> bool:
    """(``value`` is a message's or an artifact's parts, when present: not empty)"""
    if type(value) is not list or not value:
        return False
    add = parts.add
    for part in value:
        if type(part) is not dict or len(part) != 1:
            return False
        text = part.get("text")
        if type(text) is not str:
            return False
        add(text=text)
    return True


def _message_into(target: pb.Message, value: Any) -> bool:
    if type(value) is not dict or tuple(value) not in _MESSAGE_KEYS:
        return False
    message_id = value.get("messageId", "")
    context_id = value.get("contextId", "")
    task_id = value.get("taskId", "")
    role_name = value.get("role", "ROLE_UNSPECIFIED")
    if type(message_id) is not str or type(context_id) is not str or type(task_id) is not str:
        return False
    role = _ROLE_NUMBER.get(role_name) if type(role_name) is str else None
    if role is None or not (
        _as_encoded(value, "messageId", message_id)
        and _as_encoded(value, "contextId", context_id)
        and _as_encoded(value, "taskId", task_id)
        and _as_encoded(value, "role", role)
    ):
        return False
    target.SetInParent()
    target.message_id = message_id
    target.context_id = context_id
    target.task_id = task_id
    target.role = role  # type: ignore[assignment]
    return "parts" not in value or _texts_into(target.parts, value["parts"])


def _artifact_into(target: pb.Artifact, value: Any) -> bool:
    if type(value) is not dict or tuple(value) not in _ARTIFACT_KEYS:
        return False
    artifact_id = value.get("artifactId", "")
    name = value.get("name", "")
    if type(artifact_id) is not str or type(name) is not str:
        return False
    if not (_as_encoded(value, "artifactId", artifact_id) and _as_encoded(value, "name", name)):
        return False
    target.artifact_id = artifact_id
    target.name = name
    return "parts" not in value or _texts_into(target.parts, value["parts"])


def _status_into(target: pb.TaskStatus, value: Any) -> bool:
    if type(value) is not dict or tuple(value) not in _STATUS_KEYS:
        return False
    state_name = value.get("state", "TASK_STATE_UNSPECIFIED")
    state = _STATE_NUMBER.get(state_name) if type(state_name) is str else None
    if state is None or not _as_encoded(value, "state", state):
        return False
    target.SetInParent()
    target.state = state  # type: ignore[assignment]
    if "message" in value and not _message_into(target.message, value["message"]):
        return False
    return "timestamp" not in value or _timestamp_into(target.timestamp, value["timestamp"])


def _timestamp_into(target: timestamp_pb2.Timestamp, text: Any) -> bool:
    """``target.FromJsonString(text)`` for "YYYY-MM-DDTHH:MM:SS[.fff[fff[fff]]]Z" as
    :func:`timestamp_text` writes it; the date-time part is converted by FromJsonString
    itself (and remembered), the fraction as FromJsonString does, so the result is
    always the same as its."""
    if type(text) is not str or len(text) < 20 or text[-1] != "Z":
        return False
    date_time, fraction = text[:19], text[19:-1]
    if fraction:
        if fraction[0] != "." or len(fraction) - 1 not in _FRACTION_LENGTHS:
            return False
        fraction = fraction[1:]
        if not fraction or not _ASCII_DIGITS.issuperset(fraction) or fraction.endswith("000"):
            return False  # (timestamp_text writes the shortest of 3, 6 or 9 digits, or none)
    if _last_date_time[0] != date_time:
        if not _DATE_TIME_LAYOUT.fullmatch(date_time):
            return False
        whole = timestamp_pb2.Timestamp()
        whole.FromJsonString(date_time + "Z")  # ValueError: the caller falls back
        if whole.ToJsonString() != date_time + "Z":  # e.g. a leap second's ":60"
            return False
        _last_date_time[:] = [date_time, whole.seconds]
    target.SetInParent()
    target.seconds = _last_date_time[1]
    target.nanos = round(float("0." + fraction) * 1e9) if fraction else 0
    return True
