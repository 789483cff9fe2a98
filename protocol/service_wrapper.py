"""A service in front of another: one hook per call shape instead of 11 methods each.

``serve --access-log`` and tracing both wrap the gateway's service to do something
around every call. :class:`WrappedService` delegates each of the 11 operations to
:meth:`~WrappedService.unary` or :meth:`~WrappedService.stream` with the rpc's schema
name, so a wrapper writes its logic once.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

from google.protobuf import empty_pb2, message

import lf.a2a.v1.a2a_pb2 as pb

from .context import CallContext
from .service import A2AService

T = TypeVar("T")


class WrappedService(A2AService):
    """``service`` with :meth:`unary` around each unary call and :meth:`stream` around
    each stream. ``call`` and ``events`` are the wrapped service's (not yet awaited or
    iterated)."""

    def __init__(self, service: A2AService) -> None:
        self.service = service

    @abc.abstractmethod
    async def unary(
        self, rpc: str, request: message.Message, call: Awaitable[T], context: CallContext
    ) -> T: ...

    @abc.abstractmethod
    def stream(
        self,
        rpc: str,
        request: message.Message,
        events: AsyncIterator[pb.StreamResponse],
        context: CallContext,
    ) -> AsyncIterator[pb.StreamResponse]: ...

    def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.SendMessageResponse]:
        # The hook's own coroutine, handed back to be awaited (the most frequent call:
        # one coroutine, and one frame per resume, fewer than an ``async def`` here).
        call = self.service.send_message(request, context)
        return self.unary("SendMessage", request, call, context)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        events = self.service.send_streaming_message(request, context)
        return self.stream("SendStreamingMessage", request, events, context)

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        call = self.service.get_task(request, context)
        return await self.unary("GetTask", request, call, context)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        call = self.service.list_tasks(request, context)
        return await self.unary("ListTasks", request, call, context)

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        call = self.service.cancel_task(request, context)
        return await self.unary("CancelTask", request, call, context)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        events = self.service.subscribe_to_task(request, context)
        return self.stream("SubscribeToTask", request, events, context)

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        call = self.service.create_task_push_notification_config(request, context)
        return await self.unary("CreateTaskPushNotificationConfig", request, call, context)

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        call = self.service.get_task_push_notification_config(request, context)
        return await self.unary("GetTaskPushNotificationConfig", request, call, context)

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        call = self.service.list_task_push_notification_configs(request, context)
        return await self.unary("ListTaskPushNotificationConfigs", request, call, context)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        call = self.service.delete_task_push_notification_config(request, context)
        return await self.unary("DeleteTaskPushNotificationConfig", request, call, context)

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        call = self.service.get_extended_agent_card(request, context)
        return await self.unary("GetExtendedAgentCard", request, call, context)


__all__ = ["WrappedService"]
