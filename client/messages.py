"""Building requests and reading replies: what the CLI verbs and the agent's tool need
around :class:`~a2a_gateway.client.remote.RemoteService` calls."""

from __future__ import annotations

import mimetypes
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.hops import stamp_hops

#: Largest file attached by :func:`file_part` (bytes); A2A peers commonly cap at 10 MB.
MAX_FILE_BYTES = 10 * 1024 * 1024

_MEDIA_TYPES = {
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".json": "application/json",
    ".csv": "text/csv",
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
}

TERMINAL_STATES = frozenset(
    {
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
    }
)
INTERRUPTED_STATES = frozenset({pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED})
#: Settled for a caller: terminal, or waiting for it (input/auth required). A 1.0 stream
#: ends here, and the a2a tool and its watches report the task here.
SETTLED_STATES = TERMINAL_STATES | INTERRUPTED_STATES


def media_type(path: Path) -> str:
    known = _MEDIA_TYPES.get(path.suffix.lower())
    if known is not None:
        return known
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


def file_part(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> pb.Part:
    """A part carrying the file's bytes, name and media type.

    Raises ValueError (naming the file) for a directory, a missing file or one larger
    than ``max_bytes``.
    """
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{path}: {size} bytes is more than the {max_bytes} allowed")
    return pb.Part(raw=path.read_bytes(), filename=path.name, media_type=media_type(path))


def user_message(
    text: str = "",
    *,
    files: Sequence[Path] = (),
    context_id: str = "",
    task_id: str = "",
    message_id: str | None = None,
    extra_parts: Sequence[pb.Part] = (),
) -> pb.Message:
    """A ROLE_USER message: the text (if any) first, then one part per file, then
    ``extra_parts`` (data parts, URL parts)."""
    parts = [pb.Part(text=text)] if text else []
    parts += [file_part(Path(p)) for p in files]
    parts += extra_parts
    if not parts:
        raise ValueError("a message needs text or at least one file")
    return pb.Message(
        role=pb.ROLE_USER,
        message_id=message_id or uuid.uuid4().hex,
        parts=parts,
        context_id=context_id,
        task_id=task_id,
    )


def send_request(
    text: str = "",
    *,
    files: Sequence[Path] = (),
    context_id: str = "",
    task_id: str = "",
    return_immediately: bool = False,
    history_length: int | None = None,
    extra_parts: Sequence[pb.Part] = (),
    hops: int | None = None,
) -> pb.SendMessageRequest:
    """The SendMessageRequest for ``a2a-gateway send`` (also used for ``--stream``).
    ``hops`` (an agent calling onwards sends its inbound count + 1) is written under
    every hop key."""
    message = user_message(
        text, files=files, context_id=context_id, task_id=task_id, extra_parts=extra_parts
    )
    request = pb.SendMessageRequest(message=message)
    if return_immediately:
        request.configuration.return_immediately = True
    if history_length is not None:
        request.configuration.history_length = history_length
    if hops is not None:
        stamp_hops(request, hops)
    return request


def texts(parts: Iterable[pb.Part]) -> list[str]:
    return [p.text for p in parts if p.WhichOneof("content") == "text"]


def task_text(task: pb.Task) -> str:
    """The human answer of a task: its artifacts' text, else its status message's text."""
    found = [t for artifact in task.artifacts for t in texts(artifact.parts)]
    if not found and task.status.HasField("message"):
        found = texts(task.status.message.parts)
    return "\n".join(found)
