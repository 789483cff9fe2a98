"""Push-config operations: create, get, list and delete a task's webhook configs, and
the inline config of a SendMessage.

Push notifications (with a :class:`~a2a_gateway.server.push.PushDispatcher`): every
status change of a task that has push configs (WORKING, progress, interrupted,
terminal; also a task failed by the hop guard or by restart recovery, and a cancel)
queues ``{"task": ...}`` for each config; text and artifact chunks do not. A task with
push configs is written before its first WORKING notification goes out (its id leaves
the engine). Configs are validated like the guard will judge them
(``validate_push_config``: numeric host spellings included), and the webhook's host is
resolved at registration by the client that will deliver (``check_push_destination``:
any forbidden answer is InvalidParams naming the ``url``; a name that does not resolve
now is accepted); delivery checks every connection again. A task holds at most
``MAX_PUSH_CONFIGS``, and their token and credentials are never returned. A config
remembers the A2A version it was registered with (``TaskRecord.push_versions``, stored
with the task): one registered over 0.3 gets 0.3-shaped deliveries.

A store shared by several processes (``TaskStore.push_rows``: PostgreSQL) keeps each
config as a row of its own, keyed by (task, config id): CreateTaskPushNotificationConfig
and Delete change that row only (the cap counted in the store, atomically), so a save
of the task by the process running it neither drops nor revives one; Get and List on
a task running here read the rows, and every status change is delivered to the
configs stored when it happens (``push_feed``).
"""

from __future__ import annotations

from google.protobuf import empty_pb2

from a2a_gateway.protocol.context import PROTOCOL_VERSION, CallContext, Caller
from a2a_gateway.protocol.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
)
from lf.a2a.v1 import a2a_pb2 as pb

from ..ids import new_id, valid_id
from ..push import check_push_destination, validate_push_config
from ..store_roles import PushConfigs as PushConfigRows
from ..task_store import TaskRecord
from .records import Records
from .state import (
    MAX_PAGE_SIZE,
    MAX_PUSH_CONFIGS,
    EngineState,
    invalid,
    not_found,
    store_failure_as_internal,
)


class PushConfigs:
    """The four push-config operations (PushNotificationNotSupported unless enabled)."""

    def __init__(self, state: EngineState, records: Records, rows: PushConfigRows) -> None:
        self._state = state
        self._records = records
        self._rows = rows

    def _require_push(self) -> None:
        if not self._state.push_enabled:
            raise PushNotificationNotSupportedError()

    async def _check_push_config(self, config: pb.TaskPushNotificationConfig, prefix: str) -> None:
        """InvalidParams naming the field unless ``config`` can be delivered to: the
        static checks, then the host's addresses as resolved now."""
        allow_private = self._state.allow_private_urls
        validate_push_config(config, allow_private_urls=allow_private, prefix=prefix)
        if config.id and not valid_id(config.id):
            raise invalid(f"{prefix}.id" if prefix else "id", "must match [A-Za-z0-9_-]{1,100}")
        push = self._state.push
        client = push.client if push is not None else self._state.outbound
        if client is not None:  # without one nothing is ever delivered
            await check_push_destination(config, client, prefix=prefix)

    async def inline_config(
        self, request: pb.SendMessageRequest
    ) -> pb.TaskPushNotificationConfig | None:
        if not request.HasField("configuration"):
            return None
        configuration = request.configuration
        if not configuration.HasField("task_push_notification_config"):
            return None
        if not self._state.push_enabled:
            raise PushNotificationNotSupportedError()
        config = pb.TaskPushNotificationConfig()
        config.CopyFrom(configuration.task_push_notification_config)
        await self._check_push_config(config, "configuration.taskPushNotificationConfig")
        if not config.id:
            config.id = new_id()
        return config

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._require_push()
        if not request.task_id:
            raise invalid("taskId", "is required")
        config = pb.TaskPushNotificationConfig()
        config.CopyFrom(request)
        config.ClearField("tenant")
        await self._check_push_config(config, "")
        if not config.id:
            config.id = new_id()
        if self._rows.push_rows:
            record = await self._records.view_or_not_found(context.caller, request.task_id)
            await self.add_to_stored(record, config, context.version)
            return public_push(config)
        async with self._records.mutable_record(context.caller, request.task_id) as record:
            upsert_push(record, config, context.version)
        return public_push(config)

    async def add_to_stored(
        self, record: TaskRecord, config: pb.TaskPushNotificationConfig, version: str
    ) -> None:
        """(``push_rows`` stores) Add or replace ``config`` of the stored task as a row
        of its own, which no save of the task overwrites (InvalidParams over the cap,
        counted in the store)."""
        if not self._rows.push_rows:
            return
        task_id = record.task.id
        stored_version = "" if version == PROTOCOL_VERSION else version
        with store_failure_as_internal(f"The push config of task {task_id} could not be stored"):
            added = await self._rows.add_push_config(
                record.owner, task_id, config, stored_version, MAX_PUSH_CONFIGS
            )
        if added == "missing":
            raise not_found(task_id)
        if added == "full":
            raise _too_many()

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._require_push()
        for config in await self._configs(context.caller, request.task_id):
            if config.id == request.id:
                return public_push(config)
        raise TaskNotFoundError(
            f"Push notification config {request.id} not found for task {request.task_id}",
            metadata={"taskId": request.task_id},
        )

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._require_push()
        caller = context.caller
        # The request is checked whole before the store is asked (a round trip on
        # PostgreSQL).
        if request.page_size < 0 or request.page_size > MAX_PAGE_SIZE:
            raise invalid("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
        page_size = request.page_size or MAX_PAGE_SIZE
        query = f"push\x00{caller.workspace}\x00{caller.name}\x00{request.task_id}"
        start = 0
        if request.page_token:
            start = int(self._state.tokens.read(request.page_token, query))
        stored = await self._configs(caller, request.task_id)
        configs = stored[start : start + page_size]
        next_token = ""
        if start + page_size < len(stored):
            next_token = self._state.tokens.issue(str(start + page_size), query)
        return pb.ListTaskPushNotificationConfigsResponse(
            configs=[public_push(c) for c in configs], next_page_token=next_token
        )

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self._require_push()
        store = self._rows
        if store.push_rows:
            await self._records.view_or_not_found(context.caller, request.task_id)
            failed = f"The push config of task {request.task_id} could not be removed"
            with store_failure_as_internal(failed):
                await store.remove_push_config(context.caller, request.task_id, request.id)
        else:
            async with self._records.mutable_record(context.caller, request.task_id) as record:
                kept = [c for c in record.push_configs if c.id != request.id]
                record.push_configs[:] = kept
                record.push_versions.pop(request.id, None)
        if self._state.push is not None:
            self._state.push.forget(request.task_id, request.id)  # stops what is still queued
        return empty_pb2.Empty()

    async def _configs(self, caller: Caller, task_id: str) -> list[pb.TaskPushNotificationConfig]:
        """The caller's task's push configs (TaskNotFound): with ``push_rows``, as the
        store holds them now (another process may have changed them)."""
        record = await self._records.view_or_not_found(caller, task_id)
        if self._rows.push_rows and self._state.live(caller, task_id) is not None:
            with store_failure_as_internal(f"The push configs of task {task_id} could not be read"):
                stored = await self._rows.read_push_configs(task_id)
            return [row.config for row in stored]
        return record.push_configs


def check_push_room(
    configs: list[pb.TaskPushNotificationConfig], config: pb.TaskPushNotificationConfig
) -> None:
    """InvalidParams when adding ``config`` (not replacing one) exceeds the cap."""
    if len(configs) >= MAX_PUSH_CONFIGS and all(c.id != config.id for c in configs):
        raise _too_many()


def _too_many() -> InvalidParamsError:
    return invalid("id", f"a task has at most {MAX_PUSH_CONFIGS} push notification configs")


def upsert_push(
    record: TaskRecord, config: pb.TaskPushNotificationConfig, version: str = PROTOCOL_VERSION
) -> None:
    """Add or replace ``config``, registered over A2A ``version`` (which its deliveries
    follow); InvalidParams when a new one exceeds the cap."""
    configs = record.push_configs
    for index, existing in enumerate(configs):
        if existing.id == config.id:
            configs[index] = config
            break
    else:
        check_push_room(configs, config)
        configs.append(config)
    if version == PROTOCOL_VERSION:
        record.push_versions.pop(config.id, None)
    else:
        record.push_versions[config.id] = version


def public_push(config: pb.TaskPushNotificationConfig) -> pb.TaskPushNotificationConfig:
    """The config as answered to callers: token and credentials are never returned."""
    public = pb.TaskPushNotificationConfig()
    public.CopyFrom(config)
    public.ClearField("token")
    if public.HasField("authentication"):
        public.authentication.ClearField("credentials")
    return public
