"""Secrets never reach a task's failure message."""

from __future__ import annotations

import pytest

from a2a_gateway.local.redaction import redact_error


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("401: Authorization: Bearer abcdEFGH12345678xyz", "abcdEFGH12345678xyz"),
        ("GET https://api.example/v1?api_key=k_3f9c2a77&x=1", "k_3f9c2a77"),
        ('{"password": "hunter2hunter2"}', "hunter2hunter2"),
        ("invalid key sk-proj-0123456789abcdef", "sk-proj-0123456789abcdef"),
        ("token ghp_0123456789abcdefghij0123 rejected", "ghp_0123456789abcdefghij0123"),
        ("blob 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "9f86d081884c"),
    ],
)
def test_patterns_are_redacted(text: str, secret: str) -> None:
    assert secret not in redact_error(text)
    assert "[redacted]" in redact_error(text)


def test_known_secrets_uuids_and_length() -> None:
    assert (
        redact_error("the key is plain-secret-value", ["plain-secret-value"])
        == "the key is [redacted]"
    )
    task_id = "3f2b8c1e-9a4d-4e7f-8b6a-1c2d3e4f5a6b"
    assert redact_error(f"task {task_id} failed") == f"task {task_id} failed"
    assert len(redact_error("x " * 1000)) <= 500
