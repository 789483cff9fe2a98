"""What the a2a tool and the watches say about a remote task: the tool's result texts,
the follow-up prompts a watch delivers, and the files of a settled task saved to
``<workspace>/inbox/a2a/<agent>/``.

The texts are exact (the model and the tests read them)::

    Agent "travel-bot": task <id> (context <ctx>) is completed.
    <the answer: the "response" artifact, else every text artifact, else the status message>
    Files: inbox/a2a/travel-bot/itinerary.pdf
    Files skipped (over 10485760 bytes): huge.bin
    Links: https://travel.example/map.png

A question asked with a schema (a tagged data part) shows it, ``Answer schema (JSON
Schema): {...}``, and says to answer with ``data``. With a ``resultSchema``, a completed
answer is ``Result (matches resultSchema):`` and the JSON, or ``The answer does not match
resultSchema: <violation>. The answer:`` and the answer.

And, delivered later by a watch::

    [A2A result from "travel-bot", task <id> (completed)]
    Context: <ctx>
    <the answer>
    Files: inbox/a2a/travel-bot/itinerary.pdf
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.files import (
    DEFAULT_MAX_FILE_BYTES,
    INBOX_FOLDER,
    clash_names,
    sanitize_filename,
    save_new_file,
)
from a2a_gateway.protocol.json_schemas import asked_schema

from .agents_file import read_raw
from .messages import INTERRUPTED_STATES, SETTLED_STATES
from .structured import Checked, compact, shown_data

#: Where a remote agent's files land, below the workspace: inbox/a2a/<agent>/.
A2A_INBOX = "a2a"
RESPONSE_ARTIFACT = "response"
STILL_RUNNING = (
    "It is still running: the result will be delivered to this conversation when it is ready."
)
STILL_WATCHED = "The task is still watched."
#: An inbound caller's turn has no conversation a later result could be delivered to.
STILL_RUNNING_UNWATCHED = (
    "It is still running and nothing will deliver its result: use action=wait (or status)"
    " with its taskId to get it."
)

SETTLED = SETTLED_STATES
ASKING = INTERRUPTED_STATES


def state_name(state: pb.TaskState.ValueType) -> str:
    """``completed``, ``input-required``, ... (``unknown`` for an unset state)."""
    name = pb.TaskState.Name(state) if state in pb.TaskState.values() else "TASK_STATE_UNKNOWN"
    short = name.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return "unknown" if short == "unspecified" else short


def is_settled(task: pb.Task) -> bool:
    """Completed, failed, canceled, rejected, or waiting for us (input/auth required)."""
    return task.status.state in SETTLED


def parts_text(parts: Iterable[pb.Part]) -> str:
    texts = [p.text for p in parts if p.WhichOneof("content") == "text"]
    return "".join(texts).strip()


def answer_text(task: pb.Task) -> str:
    """The response artifact, else every text artifact, else the status message."""
    for artifact in task.artifacts:
        if artifact.name == RESPONSE_ARTIFACT:
            text = parts_text(artifact.parts)
            if text:
                return text
    texts = [parts_text(a.parts) for a in task.artifacts]
    joined = "\n".join(t for t in texts if t)
    if joined:
        return joined
    return parts_text(task.status.message.parts) if task.status.HasField("message") else ""


def question_text(task: pb.Task) -> str:
    if task.status.HasField("message"):
        return parts_text(task.status.message.parts)
    return ""


def reply_hint(agent: str, task_id: str) -> str:
    return (
        f'To answer, call a2a with action=send, agent="{agent}", taskId={task_id} and the'
        " answer as the message (ask the user first if you do not know it)."
    )


def data_reply_hint(agent: str, task_id: str) -> str:
    return (
        f'To answer, call a2a with action=send, agent="{agent}", taskId={task_id} and the'
        " answer as `data` (a JSON value matching the schema; it is checked) or as the"
        " message (ask the user first if you do not know it)."
    )


def question_lines(agent: str, task: pb.Task) -> list[str]:
    """A question: its text, the answer schema when it was asked with one (a tagged
    data part), and how to answer."""
    lines: list[str] = []
    question = question_text(task)
    if question:
        lines.append(question)
    schema = asked_schema(task.status.message) if task.status.HasField("message") else None
    if schema is None:
        lines.append(reply_hint(agent, task.id))
    else:
        lines.append(f"Answer schema (JSON Schema): {compact(schema)}")
        lines.append(data_reply_hint(agent, task.id))
    return lines


def answer_lines(task: pb.Task, checked: Checked | None, *, reasked: bool = False) -> list[str]:
    """A settled answer; checked against a resultSchema when ``checked`` is given (a
    completed task only)."""
    if checked is None or task.status.state != pb.TASK_STATE_COMPLETED:
        answer = answer_text(task) or shown_data(task)  # a data-only answer as JSON
        return [answer] if answer else []
    return checked_lines(checked, [answer_text(task), shown_data(task)], reasked=reasked)


def checked_lines(checked: Checked, answer: list[str], *, reasked: bool = False) -> list[str]:
    """The result that matched, or the mismatch with the ``answer`` it was found in."""
    if checked.valid:
        return ["Result (matches resultSchema):", compact(checked.value)]
    again = " It was asked once more; this is its second answer." if reasked else ""
    lines = [f"The answer does not match resultSchema: {checked.problem}.{again} The answer:"]
    return lines + [text for text in answer if text]


@dataclass(frozen=True, slots=True)
class ReceivedFiles:
    saved: tuple[str, ...] = ()  # workspace-relative paths
    skipped: tuple[str, ...] = ()  # names of parts over the cap
    links: tuple[str, ...] = ()  # URL parts, not fetched
    limit: int = DEFAULT_MAX_FILE_BYTES
    failed: tuple[str, ...] = field(default=())  # names that could not be saved

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.saved:
            out.append("Files: " + ", ".join(self.saved))
        if self.skipped:
            out.append(f"Files skipped (over {self.limit} bytes): " + ", ".join(self.skipped))
        if self.failed:
            out.append("Files not saved (could not write): " + ", ".join(self.failed))
        if self.links:
            out.append("Links: " + ", ".join(self.links))
        return out


def save_task_files(
    task: pb.Task, workspace: Path, agent: str, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> ReceivedFiles:
    """Save the inline file parts of ``task``'s artifacts; list URL parts. Blocking I/O:
    run it in a worker thread."""
    saved: list[str] = []
    skipped: list[str] = []
    failed: list[str] = []
    links: list[str] = []
    folder = sanitize_filename(agent, fallback="agent")
    for artifact in task.artifacts:
        for part in artifact.parts:
            kind = part.WhichOneof("content")
            if kind == "url":
                links.append(part.url)
                continue
            if kind != "raw":
                continue
            filename = sanitize_filename(part.filename)
            if len(part.raw) > max_file_bytes:
                skipped.append(filename)
                continue
            folders = (INBOX_FOLDER, A2A_INBOX, folder)
            try:
                relative = _saved_before(workspace, folders, filename, part.raw)
                if relative is None:
                    _, relative = save_new_file(workspace, folders, filename, part.raw)
            except OSError:
                failed.append(filename)
                continue
            saved.append(relative)
    return ReceivedFiles(tuple(saved), tuple(skipped), tuple(links), max_file_bytes, tuple(failed))


def _saved_before(
    workspace: Path, folders: tuple[str, ...], filename: str, data: bytes
) -> str | None:
    """The workspace-relative path of ``filename`` or one of its clash names (``-2``,
    ``-3``, ...) already holding exactly ``data``, so a settled task asked about again
    (``status``) does not pile up copies; None when there is none. Blocking I/O."""
    folder = workspace.joinpath(*folders)
    for candidate in clash_names(filename):
        try:
            info = (folder / candidate).lstat()
        except FileNotFoundError:
            return None  # names are taken in order: no later one exists either
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):
            continue
        if read_raw(folder / candidate, limit=len(data)) == data:
            return "/".join([*folders, candidate])
    return None


def task_header(agent: str, task: pb.Task) -> str:
    state = state_name(task.status.state)
    return f'Agent "{agent}": task {task.id} (context {task.context_id}) is {state}.'


def task_result(
    agent: str,
    task: pb.Task,
    files: ReceivedFiles | None = None,
    *,
    checked: Checked | None = None,
    reasked: bool = False,
    watched: bool = True,
) -> str:
    """The tool's text for a task (settled or not); ``watched=False``: a task still
    running is not watched (an inbound caller's turn), so the model is told to ask."""
    lines = [task_header(agent, task)]
    if task.status.state in ASKING:
        lines += question_lines(agent, task)
    elif is_settled(task):
        lines += answer_lines(task, checked, reasked=reasked)
    else:
        lines.append(STILL_RUNNING if watched else STILL_RUNNING_UNWATCHED)
    if files is not None:
        lines += files.lines()
    return "\n".join(lines)


def message_result(agent: str, message: pb.Message, checked: Checked | None = None) -> str:
    """The tool's text for a plain Message reply (no task)."""
    head = f'Agent "{agent}" replied (context {message.context_id}):'
    if checked is None:
        return f"{head}\n{parts_text(message.parts)}"
    return "\n".join([head, *checked_lines(checked, [parts_text(message.parts)])])


def delivery_text(
    agent: str,
    task: pb.Task,
    files: ReceivedFiles | None = None,
    *,
    checked: Checked | None = None,
) -> str:
    """The follow-up prompt a watch delivers for a settled task."""
    state = state_name(task.status.state)
    asking = task.status.state in ASKING
    kind = "question" if asking else "result"
    lines = [
        f'[A2A {kind} from "{agent}", task {task.id} ({state})]',
        f"Context: {task.context_id}",
    ]
    if asking:
        lines += question_lines(agent, task)
    else:
        lines += answer_lines(task, checked)
    if files is not None:
        lines += files.lines()
    return "\n".join(lines)


def stopped_text(agent: str, task_id: str, context_id: str) -> str:
    return "\n".join(
        [
            f'[A2A result from "{agent}", task {task_id} (stopped)]',
            f"Context: {context_id}",
            f'The agent "{agent}" is no longer in agents.json, so the task is no longer watched.',
        ]
    )


def no_result_text(agent: str, task_id: str, context_id: str, timeout_s: float) -> str:
    return "\n".join(
        [
            f'[A2A result from "{agent}", task {task_id} (no result)]',
            f"Context: {context_id}",
            f"No result arrived within {_duration(timeout_s)}; the task is no longer watched."
            f' Ask for it with action=status, agent="{agent}", taskId={task_id}.',
        ]
    )


def _duration(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        days = int(seconds // 86400)
        return f"{days} day" + ("s" if days != 1 else "")
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    return f"{seconds:g} s"
