"""The one typed A2A service: the 11 operations of ``lf.a2a.v1.A2AService``.

The task engine implements it locally; the client implements it over the network.
Server bindings only ever call this interface, so every binding behaves the same.
Method names are the schema's rpc names in snake_case (:func:`method_name`).
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator

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
