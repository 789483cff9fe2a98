"""A peer's gRPC error details are read by the one shared parser, corrupt ones skipped."""

from __future__ import annotations

import grpc

from a2a_gateway.client.errors import from_grpc_status
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol import errors


def test_corrupt_detail_from_a_grpc_peer_is_skipped() -> None:
    status = errors.status_proto(errors.TaskNotFoundError("gone", metadata={"taskId": "t"}))
    status.details.add(type_url="type.googleapis.com/google.rpc.BadRequest", value=b"\xff\xff")
    trailing = [("grpc-status-details-bin", status.SerializeToString())]
    error = from_grpc_status(grpc.StatusCode.NOT_FOUND, "gone", trailing, Redactor())
    assert isinstance(error, errors.TaskNotFoundError)
    assert error.metadata == {"taskId": "t"}
    assert error.violations == []
