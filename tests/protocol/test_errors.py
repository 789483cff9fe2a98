"""The one error table: digest §7 codes, statuses and reasons, and the Status round trip."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format

from a2a_gateway.protocol import errors

DIGEST_TABLE = {
    "TaskNotFoundError": (-32001, grpc.StatusCode.NOT_FOUND, 404, "TASK_NOT_FOUND"),
    "TaskNotCancelableError": (
        -32002,
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        "TASK_NOT_CANCELABLE",
    ),
    "PushNotificationNotSupportedError": (
        -32003,
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    "UnsupportedOperationError": (
        -32004,
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        "UNSUPPORTED_OPERATION",
    ),
    "ContentTypeNotSupportedError": (
        -32005,
        grpc.StatusCode.INVALID_ARGUMENT,
        400,
        "CONTENT_TYPE_NOT_SUPPORTED",
    ),
    "InvalidAgentResponseError": (-32006, grpc.StatusCode.INTERNAL, 500, "INVALID_AGENT_RESPONSE"),
    "ExtendedAgentCardNotConfiguredError": (
        -32007,
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    ),
    "ExtensionSupportRequiredError": (
        -32008,
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        "EXTENSION_SUPPORT_REQUIRED",
    ),
    "VersionNotSupportedError": (
        -32009,
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        "VERSION_NOT_SUPPORTED",
    ),
    "JSONParseError": (-32700, grpc.StatusCode.INVALID_ARGUMENT, 400, "INVALID_REQUEST"),
    "InvalidRequestError": (-32600, grpc.StatusCode.INVALID_ARGUMENT, 400, "INVALID_REQUEST"),
    "InvalidParamsError": (-32602, grpc.StatusCode.INVALID_ARGUMENT, 400, "INVALID_PARAMS"),
    "InternalError": (-32603, grpc.StatusCode.INTERNAL, 500, "INTERNAL_ERROR"),
}


@pytest.mark.parametrize("name", sorted(DIGEST_TABLE))
def test_table_matches_the_digest(name: str) -> None:
    spec = getattr(errors, name).spec
    assert (spec.jsonrpc_code, spec.grpc_status, spec.http_status, spec.reason) == DIGEST_TABLE[
        name
    ]


def test_the_nine_a2a_errors_are_all_there() -> None:
    codes = [e.spec.jsonrpc_code for e in errors.A2A_PROTOCOL_ERRORS]
    assert sorted(codes, reverse=True) == list(range(-32001, -32010, -1))


@pytest.mark.parametrize(("sent", "read"), [("7", 7), ("\u00b2", 1), ("-3", 1), ("", 1)])
def test_a_peers_retry_after_is_read_or_defaulted(sent: str, read: int) -> None:
    error = errors.RateLimitedError("slow down", metadata={"retryAfterSeconds": sent})
    assert error.retry_after_s == read


def test_a_corrupt_status_detail_is_skipped() -> None:
    status = errors.status_proto(errors.TaskNotFoundError("gone"))
    status.details.add(type_url="type.googleapis.com/google.rpc.BadRequest", value=b"\xff\xff")
    back = errors.error_from_status(status)
    assert isinstance(back, errors.TaskNotFoundError) and back.message == "gone"
    assert back.violations == []


@pytest.mark.parametrize("cls", errors.ALL_ERRORS, ids=lambda c: c.__name__)
def test_status_round_trip_keeps_type_message_and_metadata(cls: type[errors.A2AError]) -> None:
    if cls is errors.RateLimitedError:
        error: errors.A2AError = errors.RateLimitedError("slow down", retry_after_s=7)
    else:
        error = cls(
            "it went wrong",
            metadata={"taskId": "t-1"},
            violations=[errors.FieldViolation("message.parts", "is required")],
        )
    status = errors.status_proto(error)
    assert status.code == cls.spec.grpc_status.value[0]
    back = errors.error_from_status(status)
    # Classes that share a reason map back to the first of them in the table.
    assert back.spec.reason == cls.spec.reason
    assert back.message == error.message
    assert back.metadata == error.metadata
    assert back.violations == error.violations


_DETAIL_SHAPES = [
    {},
    {"metadata": {"taskId": "t-1", "contextId": "c-1", "é": "ü \u2028"}},
    {
        "metadata": {"taskId": "t-1"},
        "violations": [
            errors.FieldViolation("message.parts", "is required"),
            errors.FieldViolation("", "the whole request"),
            errors.FieldViolation("params.id", ""),
        ],
    },
]


@pytest.mark.parametrize("cls", errors.ALL_ERRORS, ids=lambda c: c.__name__)
def test_the_json_details_are_what_json_format_prints_of_the_packed_details(
    cls: type[errors.A2AError],
) -> None:
    # The JSON bindings print status_details_json; gRPC packs status_proto: one answer.
    for shape in _DETAIL_SHAPES:
        error = cls("it went wrong", **shape)  # type: ignore[arg-type]
        printed = [json_format.MessageToDict(d) for d in errors.status_proto(error).details]
        built = errors.status_details_json(error)
        assert built == printed
        assert [list(d) for d in built] == [list(d) for d in printed]  # the keys' order too


def test_error_info_domain() -> None:
    info = errors.error_info(errors.TaskNotFoundError(metadata={"taskId": "x"}))
    assert info.domain == "a2a-protocol.org"
    assert info.reason == "TASK_NOT_FOUND"
    assert dict(info.metadata) == {"taskId": "x"}


def test_jsonrpc_code_lookup() -> None:
    assert errors.error_for_jsonrpc_code(-32001) is errors.TaskNotFoundError
    assert errors.error_for_jsonrpc_code(-32603) is errors.InternalError
    assert errors.error_for_jsonrpc_code(12345) is None


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (-32700, errors.JSONParseError),
        (-32600, errors.InvalidRequestError),
        (None, errors.InvalidRequestError),  # no code: the reason names the general error
    ],
)
def test_the_shared_invalid_request_reason_reads_back_as_what_was_sent(
    code: int | None, expected: type[errors.A2AError]
) -> None:
    """JSONParseError and InvalidRequestError share the reason INVALID_REQUEST: the reason
    alone (gRPC, HTTP+JSON) is the general InvalidRequest (a request too large is not a
    parse error); on JSON-RPC the code tells them apart."""
    from a2a_gateway.client.errors import from_jsonrpc_error
    from a2a_gateway.local.redaction import Redactor

    status = errors.status_proto(errors.InvalidRequestError("request message is too large"))
    assert type(errors.error_from_status(status)) is errors.InvalidRequestError
    error = {
        "message": "x",
        "data": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "INVALID_REQUEST",
                "domain": "a2a-protocol.org",
            }
        ],
    }
    if code is not None:
        error["code"] = code
    assert type(from_jsonrpc_error(error, Redactor())) is expected
