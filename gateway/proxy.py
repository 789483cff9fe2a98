"""Proxy mode: ``a2a-gateway serve --upstream URL [--upstream-key K]``.

Our bindings serve an :class:`UpstreamProxy`, an :class:`A2AService` that forwards every
call to the upstream agent through a :class:`~a2a_gateway.client.RemoteService`, over the
first binding the upstream's card lists that we speak, or the one the operator forces
(``--upstream-transport jsonrpc|rest|grpc``). So any agent, a gRPC-only one included, is
exposed over JSON-RPC, HTTP+JSON and gRPC. Streams are relayed event by event, never
buffered. ``--upstream-timeout`` bounds each upstream call and the opening of each
upstream stream, ``--upstream-idle-timeout`` the silence between two stream events.

What the proxy decides itself (nothing else is changed on the way):

- Our callers authenticate to us as usual; the upstream sees one identity, ours (the
  upstream key). A 401/403 from the upstream is OUR configuration problem, so our caller
  gets an InternalError saying so, never a 401 (they would think their own key is wrong).
- Unreachable / timed-out upstreams become Unavailable / DeadlineExceeded with a message
  that does not reveal the upstream's address (it is logged for the operator instead).
  A stream silent for longer than the idle timeout ends with DeadlineExceeded too. An
  unusable upstream card, a forced binding it does not offer included, is Unavailable;
  the log says what the card offers.
- Tasks stay scoped to our callers: a task belongs to the caller whose SendMessage
  created it through this proxy, and is TaskNotFound for every other caller; a task
  this proxy never recorded (created upstream by someone else, or through another
  gateway) is TaskNotFound for everyone (:class:`~.proxy_owners.TaskOwners`). ListTasks
  lists, counts and pages only the caller's own tasks (:mod:`.proxy_listing`). With a
  workspace, each owner is a record file,
  ``<first workspace>/.a2a/proxy-tasks/<taskId>.json``, final once written, with a
  bounded memory cache in front: ownership survives restarts. Without a workspace (or
  with ``--store memory``) it is in memory only, bounded: a task dropped from the bound,
  or any task after a restart, is nobody's.
- The hop count (``a2a-gateway.hops`` or ``volcanic.hops``, protocol/hops.py) is
  incremented and written under both keys, and a message that has already passed more
  than ``max_hops`` gateways is refused: two proxies pointing at each other fail fast
  instead of looping, and so does a loop through a peer that speaks only the other key.
- A webhook URL (CreateTaskPushNotificationConfig, a SendMessage's inline config) is
  checked by our outbound guard before it is forwarded, as our own engine checks it
  (https only and no private or loopback address, unless ``--allow-private-urls``; the
  host's addresses as resolved now): InvalidParams naming the field, and the upstream
  is not called. The upstream delivers from its own network, and the a2a-sdk checks
  nothing, so a caller could otherwise have it POST to its private addresses.
- A push config is answered (create, get, list) without its token and credentials, as
  our own engine answers it: upstreams such as the a2a-sdk return the stored config whole.
- Our card shows the upstream's name, description, version, skills, modes and
  capabilities with OUR interfaces and security schemes (:class:`ProxyCardProvider`).
  The upstream's card is read when the gateway starts, or on the first call that reaches
  it; the extended card is the upstream's extended card when the upstream key unlocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import TypeVar

from google.protobuf import empty_pb2
from google.protobuf.internal.containers import RepeatedScalarFieldContainer

from a2a_gateway.client import (
    CardError,
    ClientAuth,
    RemoteService,
    Timeout,
    Unreachable,
    connect,
)
from a2a_gateway.client.cards import binding_for
from a2a_gateway.client.resumable import resumable_stream
from a2a_gateway.client.transport import DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT
from a2a_gateway.local.redaction import register_secret
from a2a_gateway.protocol.closing import Startable
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    DeadlineExceededError,
    InternalError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
)
from a2a_gateway.protocol.hops import read_hops, stamp_hops
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.engine.push_configs import public_push
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.paging import PageTokens
from a2a_gateway.server.push import check_push_destination, validate_push_config
from lf.a2a.v1 import a2a_pb2 as pb

from .proxy_listing import list_own_tasks
from .proxy_owners import TaskOwners, event_task_id
from .settings import BY_NAME, ServeSettings

log = logging.getLogger(__name__)

Stream = AsyncGenerator[pb.StreamResponse, None]

T = TypeVar("T")

UPSTREAM_REFUSED = "the upstream agent refused this gateway's credentials"
UPSTREAM_UNREACHABLE = "the upstream agent is unreachable"
UPSTREAM_TIMEOUT = "the upstream agent did not answer in time"
UPSTREAM_CARD = "the upstream agent's card could not be used"


def settings_problem(settings: ServeSettings) -> str | None:
    """Why these ``serve`` settings cannot run proxy mode (None when they can)."""
    if not settings.upstream:
        return None
    if settings.agent or settings.exec:
        return "--upstream cannot be combined with --agent or --exec (the upstream is the agent)"
    return None


def ignored_settings(settings: ServeSettings) -> list[str]:
    """The ``upstream_*`` settings given without ``upstream``: they do nothing then.

    Accepted (with a warning), not refused: one environment or TOML file often serves
    several gateways, some proxies and some not, and a setting that cannot act is
    harmless. (``--agent`` with ``--upstream`` is refused: two agents contradict.)"""
    if settings.upstream:
        return []
    return [
        name
        for name, setting in BY_NAME.items()
        if name.startswith("upstream_") and getattr(settings, name) != setting.default
    ]


def upstream_error(error: A2AError) -> A2AError:
    """What our caller sees for an error of the upstream call (see the module doc)."""
    if isinstance(error, (UnauthenticatedError, PermissionDeniedError)):
        log.error("upstream refused our credentials: %s (check --upstream-key)", error.message)
        return InternalError(UPSTREAM_REFUSED)
    if isinstance(error, Unreachable):
        log.warning("upstream unreachable: %s", error.message)
        return UnavailableError(UPSTREAM_UNREACHABLE)
    if isinstance(error, Timeout):
        log.warning("upstream timeout: %s", error.message)
        return DeadlineExceededError(UPSTREAM_TIMEOUT)
    if isinstance(error, CardError):
        log.warning("upstream card unusable: %s", error.message)
        return UnavailableError(UPSTREAM_CARD)
    return error


class UpstreamProxy(A2AService, Startable):
    """The service of proxy mode: every operation forwarded to one upstream agent.

    ``start()`` tries to reach the upstream (a failure is logged, not fatal: every call
    tries again); ``aclose()`` closes the connection. ``extended_card`` builds the
    extended card our callers get (set by :func:`build_proxy`).
    """

    def __init__(
        self,
        url: str,
        *,
        key: str | None = None,
        transport: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT,
        max_hops: int = 3,
        owners: TaskOwners | None = None,
        signing_secret: str | None = None,
        auth: ClientAuth | None = None,
        allow_private_urls: bool = False,
    ) -> None:
        if transport:
            binding_for(transport)  # ValueError now rather than on the first call
        for name, value in (("timeout", timeout), ("stream_idle_timeout", stream_idle_timeout)):
            if not value > 0:
                raise ValueError(f"{name} must be more than 0, not {value!r}")
        self.url = url
        self._key = key or None
        self._signing_secret = signing_secret or None
        self._auth = auth  # credentials beyond a key (Basic, client credentials, mTLS)
        self.transport = transport or None
        self.timeout = timeout
        self.stream_idle_timeout = stream_idle_timeout
        self.max_hops = max_hops
        self.owners = owners if owners is not None else TaskOwners()
        self._tokens = PageTokens()  # our ListTasks page tokens
        self.upstream_card: pb.AgentCard | None = None
        self.upstream_extended_card: pb.AgentCard | None = None
        self.extended_card: Callable[[CallContext], pb.AgentCard] | None = None
        self._remote: RemoteService | None = None
        # Judges webhook URLs (resolves their hosts); it sends nothing.
        self._guard = OutboundClient(allow_private_urls=allow_private_urls)
        self._connecting = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"UpstreamProxy({self._remote!r})"

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Reach the upstream now, so the card shows its identity from the start."""
        try:
            await self._upstream()
        except A2AError as exc:
            log.warning("upstream not reached yet (%s); will retry on each call", exc.message)

    async def aclose(self) -> None:
        """Close the upstream connection; later calls answer Unavailable."""
        self._closed = True
        remote, self._remote = self._remote, None
        if remote is not None:
            await remote.aclose()
        await self._guard.aclose()

    async def _upstream(self) -> RemoteService:
        if self._remote is not None:
            return self._remote
        if self._closed:
            raise UnavailableError("the gateway is shutting down")
        async with self._connecting:
            if self._remote is None:
                self._remote = await self._open()
            return self._remote

    async def _open(self) -> RemoteService:
        """Connect, and read the upstream's cards (its extended one when our key has one)."""
        try:
            remote = await connect(
                self.url,
                key=self._key,
                signing_secret=self._signing_secret,
                transport=self.transport,
                timeout=self.timeout,
                stream_idle_timeout=self.stream_idle_timeout,
                extended_card=False,  # fetched below, kept apart from the public card
                auth=self._auth,
            )
        except CardError as exc:
            if self.transport is None:
                raise upstream_error(exc) from None
            # The message says which interfaces the card offers (no address).
            log.error(
                "upstream card unusable with --upstream-transport %s: %s",
                self.transport,
                exc.message,
            )
            raise UnavailableError(UPSTREAM_CARD) from None
        except A2AError as exc:
            raise upstream_error(exc) from None
        try:
            extended: pb.AgentCard | None = None
            if (self._key or self._auth) and remote.card.capabilities.extended_agent_card:
                with contextlib.suppress(A2AError):
                    extended = await remote.get_extended_agent_card()
            if self._closed:  # aclose() ran while we were connecting
                raise UnavailableError("the gateway is shutting down")
        except BaseException:
            await remote.aclose()
            raise
        self.upstream_card, self.upstream_extended_card = remote.card, extended
        log.info(
            "proxying %r over %s %s",
            remote.card.name,
            remote.binding,
            remote.transport.redact(remote.interface.url),
        )
        return remote

    # --- forwarding -----------------------------------------------------------------------

    async def _call(self, call: Callable[[RemoteService], Awaitable[T]]) -> T:
        remote = await self._upstream()
        try:
            return await call(remote)
        except A2AError as exc:
            raise upstream_error(exc) from None

    async def _relay(
        self,
        open_stream: Callable[[RemoteService, CallContext], Stream],
        context: CallContext,
        *,
        creates: bool,
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        """Relay an upstream stream; its task is claimed for the caller when the stream
        answers their message (``creates``), else it must be theirs already. An upstream
        stream that drops is resumed from the last event id the upstream sent (when it
        sends ids: docs/streams.md), so the caller's stream goes on unbroken."""
        caller = context.caller
        remote = await self._upstream()

        def resumed(event_id: str, why: A2AError | None) -> None:
            cause = f" ({why.message})" if why is not None else ""
            log.info("the upstream stream was resumed after event %s%s", event_id, cause)

        events = resumable_stream(
            lambda attempt: open_stream(remote, attempt),
            remote.subscribe_to_task,
            until_interrupted=creates,
            on_resume=resumed,
            call=context,
        )
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    task_id = event_task_id(event)
                    if creates:
                        self.owners.claim(caller, task_id)
                    else:
                        self.owners.check(caller, task_id)
                    yield event
        except A2AError as exc:
            raise upstream_error(exc) from None

    def _forwarded(self, request: pb.SendMessageRequest) -> pb.SendMessageRequest:
        """A copy carrying one more hop; refused past ``max_hops`` (proxy loops)."""
        hops = read_hops(request) + 1
        if hops > self.max_hops:
            raise InternalError(
                f"the message has passed through too many gateways ({hops} > {self.max_hops});"
                " is a proxy pointing at itself?"
            )
        forwarded = pb.SendMessageRequest()
        forwarded.CopyFrom(request)
        stamp_hops(forwarded, hops)
        return forwarded

    async def _check_webhook(self, config: pb.TaskPushNotificationConfig, prefix: str) -> None:
        """InvalidParams naming the field unless our guard allows ``config``'s URL (and
        its token and credentials fit in a header), as the engine checks it."""
        validate_push_config(
            config, allow_private_urls=self._guard.allow_private_urls, prefix=prefix
        )
        await check_push_destination(config, self._guard, prefix=prefix)

    async def _check_inline_webhook(self, request: pb.SendMessageRequest) -> None:
        configuration = request.configuration
        if configuration.HasField("task_push_notification_config"):
            await self._check_webhook(
                configuration.task_push_notification_config,
                "configuration.taskPushNotificationConfig",
            )

    # --- the service ----------------------------------------------------------------------

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> pb.SendMessageResponse:
        self.owners.check(context.caller, request.message.task_id)
        await self._check_inline_webhook(request)
        forwarded = self._forwarded(request)
        reply = await self._call(lambda r: r.send_message(forwarded, context))
        if reply.WhichOneof("payload") == "task":
            self.owners.claim(context.caller, reply.task.id)
        return reply

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        return self._send_stream(request, context)

    async def _send_stream(
        self, request: pb.SendMessageRequest, context: CallContext
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        # Checks run on the first __anext__, so bindings answer them as plain errors.
        self.owners.check(context.caller, request.message.task_id)
        await self._check_inline_webhook(request)
        forwarded = self._forwarded(request)
        events = self._relay(
            lambda r, attempt: r.send_streaming_message(forwarded, attempt), context, creates=True
        )
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        self.owners.check(context.caller, request.id)
        task = await self._call(lambda r: r.get_task(request, context))
        self.owners.check(context.caller, task.id)  # the upstream answered that task
        return task

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext
    ) -> pb.ListTasksResponse:
        async def fetch(page: pb.ListTasksRequest) -> pb.ListTasksResponse:
            return await self._call(lambda r: r.list_tasks(page, context))

        return await list_own_tasks(request, context.caller, fetch, self.owners, self._tokens)

    async def cancel_task(self, request: pb.CancelTaskRequest, context: CallContext) -> pb.Task:
        self.owners.check(context.caller, request.id)
        task = await self._call(lambda r: r.cancel_task(request, context))
        self.owners.check(context.caller, task.id)
        return task

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        return self._subscribe(request, context)

    async def _subscribe(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        self.owners.check(context.caller, request.id)
        events = self._relay(
            lambda r, attempt: r.subscribe_to_task(request, attempt), context, creates=False
        )
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self.owners.check(context.caller, request.task_id)
        await self._check_webhook(request, "")
        created = await self._call(
            lambda r: r.create_task_push_notification_config(request, context)
        )
        return public_push(created)  # the upstream may answer its token and credentials

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self.owners.check(context.caller, request.task_id)
        config = await self._call(lambda r: r.get_task_push_notification_config(request, context))
        return public_push(config)

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self.owners.check(context.caller, request.task_id)
        listed = await self._call(lambda r: r.list_task_push_notification_configs(request, context))
        configs = [public_push(config) for config in listed.configs]
        del listed.configs[:]
        listed.configs.extend(configs)
        return listed

    async def delete_task_push_notification_config(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, context: CallContext
    ) -> empty_pb2.Empty:
        self.owners.check(context.caller, request.task_id)
        return await self._call(lambda r: r.delete_task_push_notification_config(request, context))

    async def get_extended_agent_card(
        self, request: pb.GetExtendedAgentCardRequest, context: CallContext
    ) -> pb.AgentCard:
        # Our own card (our interfaces and schemes) with the upstream's identity; the
        # upstream's card is read on the way if it has not been yet.
        await self._upstream()
        if self.extended_card is None:
            raise InternalError("proxy card not configured")
        return self.extended_card(context)


# --- the card -----------------------------------------------------------------------------


def mirror_upstream(card: pb.AgentCard, upstream: pb.AgentCard) -> pb.AgentCard:
    """``card`` (ours) showing ``upstream``'s identity; interfaces and security stay ours."""
    card.name = upstream.name or card.name
    card.description = upstream.description or card.description
    card.version = upstream.version or card.version
    if upstream.HasField("provider"):
        card.provider.CopyFrom(upstream.provider)
    for optional in ("documentation_url", "icon_url"):
        if upstream.HasField(optional):
            setattr(card, optional, getattr(upstream, optional))
    _replace(card.default_input_modes, upstream.default_input_modes)
    _replace(card.default_output_modes, upstream.default_output_modes)
    del card.skills[:]
    card.skills.extend(upstream.skills)
    for skill in card.skills:
        # They name the upstream's security schemes, which our card does not have.
        del skill.security_requirements[:]
    theirs = upstream.capabilities
    card.capabilities.streaming = theirs.streaming
    card.capabilities.push_notifications = theirs.push_notifications
    del card.capabilities.extensions[:]
    card.capabilities.extensions.extend(theirs.extensions)
    return card


def _replace(target: RepeatedScalarFieldContainer[str], values: Iterable[str]) -> None:
    items = list(values)
    if items:
        del target[:]
        target.extend(items)


class ProxyCardProvider(CardProvider):
    """Our cards in proxy mode: the upstream's identity with our interfaces and schemes."""

    def __init__(self, config: ServerConfig, proxy: UpstreamProxy) -> None:
        super().__init__(config)
        self.proxy = proxy

    def public_card(self, base_url: str | None = None) -> pb.AgentCard:
        card = super().public_card(base_url)
        if self.proxy.upstream_card is not None:
            mirror_upstream(card, self.proxy.upstream_card)
        return card

    def extended_card(self, context: CallContext) -> pb.AgentCard:
        card = super().public_card()
        upstream = self.proxy.upstream_extended_card or self.proxy.upstream_card
        if upstream is not None:
            mirror_upstream(card, upstream)
        return card


def task_owners(settings: ServeSettings, config: ServerConfig) -> TaskOwners:
    """Owners recorded in the first workspace; in memory only without a workspace or
    with ``--store memory``. One folder for every caller, whatever their workspace: the
    upstream has one set of task ids, and a claim must be seen by every other caller.
    (With ``--workspaces-root`` alone, the first workspace is its first subfolder by
    name; a ``--workspace`` given too keeps the records in one place as folders come.)"""
    if not config.workspaces or settings.store == "memory":
        return TaskOwners()
    return TaskOwners.in_workspace(config.workspaces[0], fsync=settings.fsync)


def upstream_auth(settings: ServeSettings) -> ClientAuth | None:
    """The ``upstream_*`` credentials beyond a key, or None."""
    auth = ClientAuth(
        basic_user=settings.upstream_basic_user,
        basic_password=settings.upstream_password,
        client_id=settings.upstream_client_id,
        client_secret=settings.upstream_client_secret,
        token_url=settings.upstream_token_url,
        token_command=settings.upstream_token_command,
        client_cert=settings.upstream_client_cert,
        client_key=settings.upstream_client_key,
        ca_cert=settings.upstream_ca_cert,
    )
    return auth if auth != ClientAuth() else None


def build_proxy(
    settings: ServeSettings, config: ServerConfig
) -> tuple[UpstreamProxy, CardProvider]:
    """The proxy service and its card provider, from the ``serve`` settings."""
    key = settings.upstream_key or None
    signing_secret = settings.upstream_signing_secret or None
    auth = upstream_auth(settings)
    for secret in (key, signing_secret, *(auth.secrets() if auth else ())):
        if secret:
            register_secret(secret)
    transport = settings.upstream_transport
    proxy = UpstreamProxy(
        settings.upstream,
        key=key,
        signing_secret=signing_secret,
        auth=auth,
        transport=None if transport == "auto" else transport,
        timeout=settings.upstream_timeout,
        stream_idle_timeout=settings.upstream_idle_timeout,
        max_hops=config.max_hops,
        owners=task_owners(settings, config),
        allow_private_urls=config.allow_private_urls,
    )
    cards = ProxyCardProvider(config, proxy)
    proxy.extended_card = cards.extended_card
    return proxy, cards


__all__ = [
    "ProxyCardProvider",
    "TaskOwners",
    "UpstreamProxy",
    "build_proxy",
    "ignored_settings",
    "mirror_upstream",
    "settings_problem",
    "task_owners",
    "upstream_error",
]
