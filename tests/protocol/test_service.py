"""The typed service has exactly the schema's rpcs, with the schema's message types."""

from __future__ import annotations

import inspect
import typing

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, A2AService, method_name


def test_service_methods_equal_the_schema_rpcs() -> None:
    abstract = set(A2AService.__abstractmethods__)
    rpcs = {method_name(m.name) for m in SERVICE_DESCRIPTOR.methods}
    assert len(rpcs) == 11
    assert abstract == rpcs


def test_each_method_takes_the_rpc_input_type_and_returns_its_output() -> None:
    for rpc in SERVICE_DESCRIPTOR.methods:
        func = getattr(A2AService, method_name(rpc.name))
        hints = typing.get_type_hints(func)
        assert hints["request"].DESCRIPTOR.full_name == rpc.input_type.full_name
        returned = hints["return"]
        if rpc.server_streaming:
            assert typing.get_origin(returned).__name__ == "AsyncIterator"
            (item,) = typing.get_args(returned)
            assert item is pb.StreamResponse
            assert not inspect.iscoroutinefunction(func)
        else:
            assert returned.DESCRIPTOR.full_name == rpc.output_type.full_name
            assert inspect.iscoroutinefunction(func)


def test_method_name() -> None:
    assert method_name("SendMessage") == "send_message"
    assert method_name("ListTaskPushNotificationConfigs") == "list_task_push_notification_configs"
