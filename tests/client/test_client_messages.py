"""Request builders and reply readers for the CLI verbs."""

from __future__ import annotations

from pathlib import Path

import pytest

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import file_part, send_request, task_text, user_message


def test_send_request_with_text_files_and_options(tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("# hi")
    blob = tmp_path / "data.bin"
    blob.write_bytes(b"\x00\x01")
    request = send_request(
        "read these",
        files=[note, blob],
        context_id="c-1",
        task_id="t-1",
        return_immediately=True,
        history_length=0,
    )
    message = request.message
    assert message.role == pb.ROLE_USER and message.message_id
    assert (message.context_id, message.task_id) == ("c-1", "t-1")
    assert message.parts[0].text == "read these"
    assert (message.parts[1].filename, message.parts[1].media_type) == ("note.md", "text/markdown")
    assert message.parts[1].raw == b"# hi"
    assert message.parts[2].media_type == "application/octet-stream"
    assert request.configuration.return_immediately
    assert request.configuration.HasField("history_length")
    assert not send_request("x").configuration.HasField("history_length")


def test_bad_files_and_empty_messages_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a file"):
        file_part(tmp_path)
    with pytest.raises(ValueError, match="not a file"):
        file_part(tmp_path / "missing.txt")
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 11)
    with pytest.raises(ValueError, match="more than the 10 allowed"):
        file_part(big, max_bytes=10)
    with pytest.raises(ValueError, match="needs text"):
        user_message("")


def test_task_text_prefers_the_artifacts_to_the_status_message() -> None:
    task = pb.Task(id="t", status=pb.TaskStatus(state=pb.TASK_STATE_INPUT_REQUIRED))
    task.status.message.parts.add(text="which city?")
    assert task_text(task) == "which city?"
    task.artifacts.add(artifact_id="a", parts=[pb.Part(text="one"), pb.Part(raw=b"x")])
    task.artifacts.add(artifact_id="b", parts=[pb.Part(text="two")])
    assert task_text(task) == "one\ntwo"
