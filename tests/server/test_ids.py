"""Task and context ids: RFC 9562 version 7, strictly increasing within the process."""

from __future__ import annotations

import uuid

from a2a_gateway.server.ids import new_id, valid_id


def test_ids_are_uuid7_and_strictly_increasing() -> None:
    ids = [new_id() for _ in range(20_000)]  # many share a millisecond; tens of them
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for value in ids[::7]:  # (the millisecond's text is kept between ids)
        parsed = uuid.UUID(value)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == value
        assert valid_id(value)
