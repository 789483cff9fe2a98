"""The one typed A2A service: the 11 operations of ``lf.a2a.v1.A2AService``.

The task engine implements it locally; the client implements it over the network.
Server bindings only ever call this interface, so every binding behaves the same.
Method names are the schema's rpc names in snake_case (:func:`method_name`).
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from google.protobuf import descriptor, empty_pb2

import lf.a2a.v1.a2a_pb2 as pb

from .context import CallContext

SERVICE_DESCRIPTOR: descriptor.ServiceDescriptor = pb.DESCRIPTOR.services_by_name["A2AService"]


def method_name(rpc_name: str) -> str:
    """``SendMessage`` -> ``send_message``: the Python method implementing an rpc."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc_name).lower()


class A2AService(abc.ABC):
    """The A2A operations. Errors are raised as :class:`~.errors.A2AError`."""

    @abc.abstractmethod
    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse: ...

    @abc.abstractmethod
    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        """Stream events. Errors found before the first event must be raised on the
        first ``__anext__`` so bindings can still answer with a plain error."""

    @abc.abstractmethod
    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task: ...

    @abc.abstractmethod
    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse: ...

    @abc.abstractmethod
    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task: ...

    @abc.abstractmethod
    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]: ...

    @abc.abstractmethod
    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig: ...

    @abc.abstractmethod
    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig: ...

    @abc.abstractmethod
    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse: ...

    @abc.abstractmethod
    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty: ...

    @abc.abstractmethod
    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard: ...


R = TypeVar("R")
T = TypeVar("T")
#: A service method of a unary rpc, and of a streaming one.
UnaryCall = Callable[[R, CallContext], Awaitable[T]]
StreamCall = Callable[[Any, CallContext], AsyncIterator[pb.StreamResponse]]


class ServiceDecorator(A2AService):
    """``service`` with something around every call: each unary rpc goes through
    :meth:`unary`, each streaming one through :meth:`stream`, with the rpc's schema name
    and the wrapped service's method (not yet called: a decorator may refuse the call
    before the service sees it). The methods are plain functions returning
    :meth:`unary`'s coroutine: one frame per call, not two."""

    def __init__(self, service: A2AService) -> None:
        self.service = service

    @abc.abstractmethod
    async def unary(
        self, rpc: str, call: UnaryCall[R, T], request: R, context: CallContext
    ) -> T: ...

    @abc.abstractmethod
    def stream(
        self, rpc: str, call: StreamCall, request: Any, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]: ...

    def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.SendMessageResponse]:
        return self.unary("SendMessage", self.service.send_message, request, context)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        call = self.service.send_streaming_message
        return self.stream("SendStreamingMessage", call, request, context)

    def get_task(
        self, request: pb.GetTaskRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.Task]:
        return self.unary("GetTask", self.service.get_task, request, context)

    def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.ListTasksResponse]:
        return self.unary("ListTasks", self.service.list_tasks, request, context)

    def cancel_task(
        self, request: pb.CancelTaskRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.Task]:
        return self.unary("CancelTask", self.service.cancel_task, request, context)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        return self.stream("SubscribeToTask", self.service.subscribe_to_task, request, context)

    def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> Coroutine[Any, Any, pb.TaskPushNotificationConfig]:
        call = self.service.create_task_push_notification_config
        return self.unary("CreateTaskPushNotificationConfig", call, request, context)

    def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.TaskPushNotificationConfig]:
        call = self.service.get_task_push_notification_config
        return self.unary("GetTaskPushNotificationConfig", call, request, context)

    def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.ListTaskPushNotificationConfigsResponse]:
        call = self.service.list_task_push_notification_configs
        return self.unary("ListTaskPushNotificationConfigs", call, request, context)

    def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> Coroutine[Any, Any, empty_pb2.Empty]:
        call = self.service.delete_task_push_notification_config
        return self.unary("DeleteTaskPushNotificationConfig", call, request, context)

    def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.AgentCard]:
        call = self.service.get_extended_agent_card
        return self.unary("GetExtendedAgentCard", call, request, context)
