"""``serve --access-log``: one line per call that reaches the agent's service.

    access GRPC SendMessage caller=alice status=ok 12.3ms
    access JSONRPC GetTask caller=bob status=TASK_NOT_FOUND 0.4ms
    access HTTP+JSON SendStreamingMessage caller=alice status=ok 2004.1ms events=5

The binding, the method (the schema's rpc name), the caller's name, the outcome (``ok``,
the error's reason, or ``cancelled`` when the caller went away) and the duration; a
stream adds how many events it sent. Never a key, a token or any part of a body. Calls
refused before the service (a missing key, a bad signature, a rate limit) are logged by
the bindings themselves as warnings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from google.protobuf import empty_pb2

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.service import A2AService

log = logging.getLogger("a2a_gateway.access")
T = TypeVar("T")


def _outcome(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, A2AError):
        return exc.spec.reason
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return "cancelled"
    return "internal-error"


class AccessLogged(A2AService):
    """``service`` with one access-log line per call (see the module docstring)."""

    def __init__(self, service: A2AService) -> None:
        self.service = service
        log.setLevel(logging.INFO)  # shown whatever --log-level says: it was asked for

    def _line(
        self, rpc: str, context: CallContext, started: float, exc: BaseException | None
    ) -> str:
        took = (time.perf_counter() - started) * 1000
        return (
            f"access {context.binding or '-'} {rpc} caller={context.caller.name}"
            f" status={_outcome(exc)} {took:.1f}ms"
        )

    async def _unary(self, rpc: str, call: Awaitable[T], context: CallContext) -> T:
        started = time.perf_counter()
        try:
            result = await call
        except BaseException as exc:
            log.info("%s", self._line(rpc, context, started, exc))
            raise
        log.info("%s", self._line(rpc, context, started, None))
        return result

    async def _stream(
        self, rpc: str, events: AsyncIterator[pb.StreamResponse], context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        started = time.perf_counter()
        sent = 0
        failure: BaseException | None = None
        try:
            async for event in events:
                sent += 1
                yield event
        except BaseException as exc:
            failure = exc
            raise
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                await closing()
            log.info("%s events=%d", self._line(rpc, context, started, failure), sent)

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        return await self._unary(
            "SendMessage", self.service.send_message(request, context), context
        )

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        events = self.service.send_streaming_message(request, context)
        return self._stream("SendStreamingMessage", events, context)

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        return await self._unary("GetTask", self.service.get_task(request, context), context)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        return await self._unary("ListTasks", self.service.list_tasks(request, context), context)

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        return await self._unary("CancelTask", self.service.cancel_task(request, context), context)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        events = self.service.subscribe_to_task(request, context)
        return self._stream("SubscribeToTask", events, context)

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        call = self.service.create_task_push_notification_config(request, context)
        return await self._unary("CreateTaskPushNotificationConfig", call, context)

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        call = self.service.get_task_push_notification_config(request, context)
        return await self._unary("GetTaskPushNotificationConfig", call, context)

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        call = self.service.list_task_push_notification_configs(request, context)
        return await self._unary("ListTaskPushNotificationConfigs", call, context)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        call = self.service.delete_task_push_notification_config(request, context)
        return await self._unary("DeleteTaskPushNotificationConfig", call, context)

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        call = self.service.get_extended_agent_card(request, context)
        return await self._unary("GetExtendedAgentCard", call, context)


__all__ = ["AccessLogged"]
