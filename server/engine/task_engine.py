"""The :class:`TaskEngine` facade: the local A2AService, wiring the engine's parts
around one shared :class:`~.state.EngineState`."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from google.protobuf import empty_pb2

from a2a_gateway.agent.base import Agent
from a2a_gateway.local.files import DEFAULT_MAX_FILE_BYTES
from a2a_gateway.protocol.closing import Startable
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import ExtendedAgentCardNotConfiguredError
from a2a_gateway.protocol.service import A2AService
from lf.a2a.v1 import a2a_pb2 as pb

from ..drain import shutting_down
from ..events import TaskStream
from ..limits import TaskLimiter
from ..outbound import OutboundClient
from ..push import PushDispatcher
from ..task_store import TaskStore
from .continuation import Intake
from .push_configs import PushConfigs
from .reads import Reads
from .records import Records
from .replay import replay_check
from .state import DEFAULT_LIST_MAX_BYTES, EngineState
from .turns import Runner

if TYPE_CHECKING:  # the host builds the policy; the engine only holds it
    from ..extensions import ExtensionPolicy

T = TypeVar("T")


class _Setting(Generic[T]):
    """An engine setting, kept in the shared state: read and set through the engine
    (``engine.max_file_bytes = ...`` reaches every part)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, engine: None, owner: type) -> _Setting[T]: ...
    @overload
    def __get__(self, engine: TaskEngine, owner: type) -> T: ...
    def __get__(self, engine: TaskEngine | None, owner: type) -> _Setting[T] | T:
        if engine is None:
            return self
        value: T = getattr(engine._state, self._name)
        return value

    def __set__(self, engine: TaskEngine, value: T) -> None:
        setattr(engine._state, self._name, value)


class TaskEngine(A2AService, Startable):
    """The local A2A service (see the package docstring for its rules).

    ``extended_card`` builds the caller's extended agent card (None: the operation
    answers ExtendedAgentCardNotConfigured). With ``push_enabled`` False, the four
    push-config operations and an inline ``configuration.taskPushNotificationConfig``
    answer PushNotificationNotSupported. ``push`` delivers the notifications (None:
    configs are kept but nothing is sent).

    ``outbound`` is the guarded client: it downloads file parts given by URL (None:
    URL parts are refused) and its ``allow_private_urls`` decides which webhook URLs
    are accepted. ``default_workspace`` receives the files of callers without a
    workspace of their own (anonymous); with neither, file parts are refused.
    ``max_file_bytes`` caps each file, in and out. ``list_max_bytes`` is the byte
    budget of one ListTasks answer (its tasks' encoded size): a page that would exceed
    it ends early, with a next page token (one task is always answered).

    ``extensions`` is the card's extension policy (:mod:`..extensions`): every
    operation but GetExtendedAgentCard first refuses a call that does not name a
    required extension and records the activated ones (None: the card declares none).
    """

    agent: _Setting[Agent] = _Setting()
    max_hops: _Setting[int] = _Setting()
    extended_card: _Setting[Callable[[CallContext], pb.AgentCard] | None] = _Setting()
    push_enabled: _Setting[bool] = _Setting()
    run_timeout_s: _Setting[float] = _Setting()
    cancel_grace_s: _Setting[float] = _Setting()
    list_max_bytes: _Setting[int] = _Setting()
    task_limiter: _Setting[TaskLimiter | None] = _Setting()
    push: _Setting[PushDispatcher | None] = _Setting()
    outbound: _Setting[OutboundClient | None] = _Setting()
    default_workspace: _Setting[Path | None] = _Setting()
    max_file_bytes: _Setting[int] = _Setting()

    def __init__(
        self,
        agent: Agent,
        store: TaskStore,
        *,
        max_hops: int = 3,
        extended_card: Callable[[CallContext], pb.AgentCard] | None = None,
        push_enabled: bool = False,
        run_timeout_s: float = 3600.0,
        cancel_grace_s: float = 5.0,
        list_max_bytes: int = DEFAULT_LIST_MAX_BYTES,
        task_limiter: TaskLimiter | None = None,
        push: PushDispatcher | None = None,
        outbound: OutboundClient | None = None,
        default_workspace: Path | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        extensions: ExtensionPolicy | None = None,
    ) -> None:
        self.extensions = extensions
        self._state = state = EngineState(
            agent,
            store,
            max_hops=max_hops,
            extended_card=extended_card,
            push_enabled=push_enabled,
            run_timeout_s=run_timeout_s,
            cancel_grace_s=cancel_grace_s,
            list_max_bytes=list_max_bytes,
            task_limiter=task_limiter,
            push=push,
            outbound=outbound,
            default_workspace=default_workspace,
            max_file_bytes=max_file_bytes,
        )
        # Each part holds the roles of the store it uses (``store_roles``).
        self._store = store
        self._records = Records(state, store)
        self._runner = Runner(state, self._records, cancels=store)
        self._reads = Reads(state, self._records, tasks=store, events=store)
        self._push_configs = PushConfigs(state, self._records, rows=store)
        self._intake = Intake(
            state, self._records, self._runner, self._push_configs, tasks=store, claims=store
        )

    @property
    def store(self) -> TaskStore:
        """The store (the parts hold its roles: it is given once, at construction)."""
        return self._store

    @property
    def allow_private_urls(self) -> bool:
        """Whether webhooks may be http or private addresses: the guarded client's
        setting (the one that will deliver), else False."""
        return self._state.allow_private_urls

    # --- SendMessage / SendStreamingMessage (continuation.py) --------------------------

    def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> Coroutine[Any, Any, pb.SendMessageResponse]:
        # With no extension policy there is nothing to admit: the intake's coroutine
        # itself (a frame less on every send); else one that admits first, so a refusal
        # is raised when awaited, inside the wrappers' hooks, as from any service.
        if self.extensions is None:
            return self._intake.send_message(request, context)
        return self._admitted_send(request, context)

    async def _admitted_send(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        self._admit(context)
        return await self._intake.send_message(request, context)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        refused = self._refusal(context)
        if refused is not None:
            return refused
        stream = TaskStream(None, context)
        return stream.start(self._intake.streaming_batches(request, context, stream))

    def replay_check(self) -> Callable[[object], Callable[[], bool] | None]:
        """For an answer the engine noted as ``CallContext.replay``: the check, made on
        each later call, of whether it may be given again to the same call (same
        caller, request and metadata) without the engine (:mod:`.replay`); None: it may
        not be kept."""
        return functools.partial(replay_check, self._state, self._store)

    # --- GetTask / ListTasks / SubscribeToTask (reads.py) -----------------------------

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        self._admit(context)
        return await self._reads.get_task(request, context)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        self._admit(context)
        return await self._reads.list_tasks(request, context)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        refused = self._refusal(context)
        if refused is not None:
            return refused
        stream = TaskStream(None, context)
        return stream.start(self._reads.subscription_batches(request, context, stream))

    # --- CancelTask (turns.py) --------------------------------------------------------

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        self._admit(context)
        return await self._runner.cancel_task(request, context)

    # --- push notification configs (push_configs.py) ----------------------------------

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._admit(context)
        return await self._push_configs.create_task_push_notification_config(request, context)

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._admit(context)
        return await self._push_configs.get_task_push_notification_config(request, context)

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._admit(context)
        return await self._push_configs.list_task_push_notification_configs(request, context)

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self._admit(context)
        return await self._push_configs.delete_task_push_notification_config(request, context)

    # --- the card's extensions (..extensions) ------------------------------------------

    def _admit(self, context: CallContext) -> None:
        """Refuse a call that does not name a required extension; note the activated."""
        if self.extensions is not None:
            self.extensions.activate(context)

    def _refusal(self, context: CallContext) -> AsyncIterator[pb.StreamResponse] | None:
        """:meth:`_admit` for a stream: a stream that raises the refusal on its first
        event (the service contract for errors before a stream starts), or None."""
        return None if self.extensions is None else self.extensions.stream_refusal(context)

    # --- GetExtendedAgentCard ---------------------------------------------------------

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        if self._state.extended_card is None:
            raise ExtendedAgentCardNotConfiguredError()
        return self._state.extended_card(context)

    # --- shutdown ---------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store (connect and migrate a database's): the engine closes it too."""
        await self._store.start()

    async def aclose(self) -> None:
        """Stop every live run (stored failed), end every stream, stop the flusher, close
        the store."""
        state = self._state
        state.closing = True
        await self._runner.stop_all()
        if state.push_feed is not None:  # the final states' configs are read first
            await state.push_feed.aclose(state.cancel_grace_s)
        state.end_streams(shutting_down())
        await self._records.aclose()
        await self._store.aclose()  # e.g. a ListTasks folder scan in progress

    # --- introspection (tests, the CLI) ----------------------------------------------

    def live_task_ids(self) -> list[str]:
        return list(self._state.runs)

    def gauges(self) -> dict[str, int]:
        """What :mod:`..metrics` reads at scrape time (``metrics.EngineGauges``): sizes of
        tables the engine keeps anyway, so the hot path pays nothing. Subscribers are a
        sum over the hubs of live streams only (one per task being streamed)."""
        state = self._state
        return {
            "runs_in_flight": len(state.runs),
            "context_claims": len(state.busy),
            "stream_subscribers": sum(len(hub.subscribers) for hub in state.hubs.values()),
        }

    def __repr__(self) -> str:
        agent = type(self._state.agent).__name__
        return f"TaskEngine(agent={agent}, live runs={len(self._state.runs)})"


__all__ = ["TaskEngine"]
