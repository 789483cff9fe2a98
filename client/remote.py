"""RemoteService: the typed A2A service implemented over the network.

It is the same interface the task engine implements, so callers (our agent's tool, the
CLI, proxy-mode server bindings) never know which wire is used. :func:`connect` resolves
the card, picks the interface, sets up credentials and builds the transport.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Iterable

import httpx
from google.protobuf import empty_pb2, message
from joserfc.jwk import KeySet
from opentelemetry.trace import SpanKind

from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol import codec, tracing
from a2a_gateway.protocol.card_signature import CardSignatureError, verify_card
from a2a_gateway.protocol.closing import AsyncCloseable
from a2a_gateway.protocol.compat03 import LEGACY_VERSION
from a2a_gateway.protocol.context import PROTOCOL_VERSION, CallContext
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.hops import has_hops, read_hops, stamp_hops
from a2a_gateway.protocol.service import A2AService
from lf.a2a.v1 import a2a_pb2 as pb

from .cards import card_url, choose_interface, fetch_card, speaks_03
from .credentials import ClientAuth, Credentials, TokenSource, credentials_for
from .errors import AuthRejected, CardError
from .grpc03 import Grpc03Transport
from .grpc_transport import GrpcTransport
from .http_calls import new_http_client
from .jsonrpc import JsonRpcTransport
from .jsonrpc03 import JsonRpc03Transport
from .rest import RestTransport
from .rest03 import Rest03Transport
from .transport import (
    DEFAULT_STREAM_IDLE_TIMEOUT,
    DEFAULT_TIMEOUT,
    GRPC,
    HTTP_JSON,
    JSONRPC,
    CallOptions,
    M,
    Transport,
)
from .wire_log import wired

log = logging.getLogger(__name__)

R = message.Message


class RemoteService(A2AService, AsyncCloseable):
    """The A2A operations of one remote agent, over one transport.

    ``timeout`` bounds each call (and the opening of a stream); ``stream_idle_timeout``
    bounds the silence between stream events. A :class:`CallContext` passed to a call
    can only shorten them (its ``deadline``) and adds its requested extensions; the
    extensions the agent reports as activated are added to its ``activated_extensions``.
    The chosen interface's ``tenant`` replaces the tenant of every request (the caller's
    message is copied, never modified). ``http`` is an httpx client this service owns and
    closes in :meth:`aclose` (the one its JSON-RPC/REST transport uses).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        card: pb.AgentCard | None = None,
        interface: pb.AgentInterface | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT,
        extensions: Iterable[str] = (),
        http: httpx.AsyncClient | None = None,
        headers: Iterable[tuple[str, str]] = (),
        tenant: str | None = None,
    ) -> None:
        self.transport = transport
        self.card = card if card is not None else pb.AgentCard()
        if interface is None:
            legacy = isinstance(transport, (JsonRpc03Transport, Rest03Transport, Grpc03Transport))
            interface = pb.AgentInterface(
                url=transport.target,
                protocol_binding=transport.binding,
                protocol_version=LEGACY_VERSION if legacy else PROTOCOL_VERSION,
            )
        self.interface = interface
        self.timeout = timeout
        self.stream_idle_timeout = stream_idle_timeout
        self.extensions = frozenset(extensions)
        self.headers = tuple(headers)
        #: Replaces the interface's tenant when set (``--tenant``).
        self.tenant = tenant
        self._http = http
        self._closed = False

    def __repr__(self) -> str:
        return f"RemoteService({self.card.name!r}, {self.transport!r})"

    @property
    def binding(self) -> str:
        """``JSONRPC``, ``HTTP+JSON`` or ``GRPC``."""
        return self.transport.binding

    # --- lifecycle ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the transport and the HTTP client this service owns. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.transport.aclose()
        finally:
            if self._http is not None:
                await self._http.aclose()

    # --- plumbing -------------------------------------------------------------------------

    def _options(self, context: CallContext | None) -> CallOptions:
        timeout, idle, extensions = self.timeout, self.stream_idle_timeout, self.extensions
        if context is None:
            return CallOptions(timeout, idle, extensions, headers=self.headers)
        remaining = context.remaining()
        if remaining is not None:
            timeout, idle = min(timeout, remaining), min(idle, remaining)
        return CallOptions(
            timeout,
            idle,
            extensions | context.extensions,
            on_extensions=context.activated_extensions.update,
            headers=self.headers,
            resume_from=context.resume_from,
            on_event_id=functools.partial(_note_event_id, context),
        )

    def _prepare(self, request: R) -> R:
        if self._closed:
            raise RuntimeError("this RemoteService is closed")
        prepared = type(request)()
        prepared.CopyFrom(request)
        # Digest §9: the chosen interface's tenant goes on every request (none: omitted).
        # Every request type has a tenant field; the type here is the generic Message.
        tenant = self.interface.tenant if self.tenant is None else self.tenant
        setattr(prepared, "tenant", tenant)  # noqa: B010
        if isinstance(prepared, pb.SendMessageRequest) and has_hops(prepared):
            # A hop count set under either key goes out under both (protocol/hops.py).
            stamp_hops(prepared, read_hops(prepared))
        return prepared

    def _token_source(self) -> TokenSource | None:
        credentials = self.transport.credentials
        return credentials.source if credentials is not None else None

    async def _unary(
        self, rpc: str, request: R, response_type: type[M], context: CallContext | None
    ) -> M:
        if tracing.current_tracer() is None:
            return await self._send(rpc, request, response_type, context)
        attributes = {"rpc.system": "a2a", "rpc.method": rpc, "a2a.binding": self.binding}
        with tracing.span(f"A2A client {rpc}", kind=SpanKind.CLIENT, attributes=attributes):
            return await self._send(rpc, request, response_type, context)

    async def _send(
        self, rpc: str, request: R, response_type: type[M], context: CallContext | None
    ) -> M:
        prepared = self._prepare(request)
        source = self._token_source()
        if source is None:
            return await self.transport.unary(rpc, prepared, response_type, self._options(context))
        await source.ensure()
        try:
            return await self.transport.unary(rpc, prepared, response_type, self._options(context))
        except AuthRejected:  # the token expired or was revoked early: a new one, once
            await source.ensure(fresh=True)
            return await self.transport.unary(rpc, prepared, response_type, self._options(context))

    async def _stream(
        self, rpc: str, request: R, context: CallContext | None
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        prepared = self._prepare(request)
        source = self._token_source()
        if source is not None:
            await source.ensure()
        for attempt in (1, 2):
            events = self.transport.stream(rpc, prepared, self._options(context))
            started = False
            try:
                async with contextlib.aclosing(events):
                    async for event in events:
                        started = True
                        yield event
                return
            except AuthRejected:
                # Refused before any event: a new token, once (a stream already under
                # way is not replayed).
                if source is None or started or attempt == 2:
                    raise
                await source.ensure(fresh=True)

    # --- the service ----------------------------------------------------------------------

    async def send_message(
        self, request: pb.SendMessageRequest, context: CallContext | None = None
    ) -> pb.SendMessageResponse:
        return await self._unary("SendMessage", request, pb.SendMessageResponse, context)

    def send_streaming_message(
        self, request: pb.SendMessageRequest, context: CallContext | None = None
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        return self._stream("SendStreamingMessage", request, context)

    async def get_task(
        self, request: pb.GetTaskRequest, context: CallContext | None = None
    ) -> pb.Task:
        return await self._unary("GetTask", request, pb.Task, context)

    async def list_tasks(
        self, request: pb.ListTasksRequest, context: CallContext | None = None
    ) -> pb.ListTasksResponse:
        return await self._unary("ListTasks", request, pb.ListTasksResponse, context)

    async def cancel_task(
        self, request: pb.CancelTaskRequest, context: CallContext | None = None
    ) -> pb.Task:
        return await self._unary("CancelTask", request, pb.Task, context)

    def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext | None = None
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        return self._stream("SubscribeToTask", request, context)

    async def create_task_push_notification_config(
        self, request: pb.TaskPushNotificationConfig, context: CallContext | None = None
    ) -> pb.TaskPushNotificationConfig:
        return await self._unary(
            "CreateTaskPushNotificationConfig", request, pb.TaskPushNotificationConfig, context
        )

    async def get_task_push_notification_config(
        self, request: pb.GetTaskPushNotificationConfigRequest, context: CallContext | None = None
    ) -> pb.TaskPushNotificationConfig:
        return await self._unary(
            "GetTaskPushNotificationConfig", request, pb.TaskPushNotificationConfig, context
        )

    async def list_task_push_notification_configs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, context: CallContext | None = None
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        return await self._unary(
            "ListTaskPushNotificationConfigs",
            request,
            pb.ListTaskPushNotificationConfigsResponse,
            context,
        )

    async def delete_task_push_notification_config(
        self,
        request: pb.DeleteTaskPushNotificationConfigRequest,
        context: CallContext | None = None,
    ) -> empty_pb2.Empty:
        return await self._unary(
            "DeleteTaskPushNotificationConfig", request, empty_pb2.Empty, context
        )

    async def get_extended_agent_card(
        self,
        request: pb.GetExtendedAgentCardRequest | None = None,
        context: CallContext | None = None,
    ) -> pb.AgentCard:
        request = request if request is not None else pb.GetExtendedAgentCardRequest()
        return await self._unary("GetExtendedAgentCard", request, pb.AgentCard, context)

    async def use_extended_card(self) -> bool:
        """Replace :attr:`card` by the extended card; keep the public one if that fails."""
        try:
            self.card = await self.get_extended_agent_card()
        except A2AError as exc:
            log.warning(
                "extended card of %s unavailable, using the public card: %s (%s)",
                self.transport.redact(self.transport.target),
                exc.message,
                type(exc).__name__,
            )
            return False
        return True


def _note_event_id(context: CallContext, event_id: str) -> None:
    """A stream event's id, kept in the call's context for whoever resumes the stream."""
    context.event_id = event_id


def make_transport(
    interface: pb.AgentInterface,
    *,
    http: httpx.AsyncClient,
    credentials: Credentials | None = None,
    redact: Redactor | None = None,
) -> Transport:
    """The transport for a card interface (JSON-RPC and REST share ``http``)."""
    redact = redact or Redactor()
    binding = interface.protocol_binding.upper()
    # A 0.3 interface (choose_interface picks one only when no 1.x one is usable) gets
    # its binding's 0.3 transport; the calls themselves are the same.
    legacy = speaks_03(interface.protocol_version)
    if binding == JSONRPC:
        jsonrpc = JsonRpc03Transport if legacy else JsonRpcTransport
        return jsonrpc(interface.url, http, credentials=credentials, redact=redact)
    if binding == HTTP_JSON:
        rest = Rest03Transport if legacy else RestTransport
        return rest(interface.url, http, credentials=credentials, redact=redact)
    if binding == GRPC:
        grpc_wire = Grpc03Transport if legacy else GrpcTransport
        return grpc_wire(interface.url, credentials=credentials, redact=redact)
    raise ValueError(f"unsupported protocol binding {interface.protocol_binding[:40]!r}")


async def connect(
    url: str,
    *,
    key: str | None = None,
    transport: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 (each call is bounded by it)
    stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT,
    extensions: Iterable[str] = (),
    extended_card: bool = True,
    http: httpx.AsyncClient | None = None,
    signing_secret: str | None = None,
    auth: ClientAuth | None = None,
    card_keys: KeySet | None = None,
    headers: Iterable[tuple[str, str]] = (),
    tenant: str | None = None,
    wire: Callable[[str], None] | None = None,
) -> RemoteService:
    """Connect to the agent at ``url`` (its base URL, or its card URL ending in ``.json``).

    Fetches the public card, picks the first interface we speak (or the one of the forced
    ``transport``: ``jsonrpc``, ``rest``, ``grpc``), presents ``key`` as the card's
    security schemes ask (signing each request with ``signing_secret`` when given), and,
    with a key and a card that offers one, switches to the extended card (falling back to
    the public card on failure). Without a key, ``auth`` says how else to prove who we
    are (Basic, OAuth 2.0 client credentials, a token command; see :mod:`.credentials`).
    With ``card_keys`` the card must carry a signature by one of them (CardError if not).

    ``http`` replaces the default HTTP client (e.g. the a2a tool's guarded one); the
    service owns it either way. ``headers`` (service parameters) go on every call,
    ``tenant`` replaces the interface's, and ``wire`` receives each call and answer
    written out (:class:`~.wire_log.WireLog`, ``-v``).

    Raises Unreachable, Timeout, AuthRejected, CardError, or ValueError for an unknown
    ``transport`` name. The caller must ``aclose()`` the service (or use ``async with``).
    """
    redact = Redactor([key, signing_secret, *(auth.secrets() if auth else ())])
    if http is None:
        http = new_http_client(timeout, tls=auth.ssl_context() if auth and auth.has_tls else None)
    service: RemoteService | None = None
    try:
        card = await fetched_card(url, http, timeout, redact, wire)
        if card_keys is not None:
            check_signed(card, card_keys)
        interface = choose_interface(card, transport)
        credentials = credentials_for(card, key, signing_secret, auth=auth, http=http)
        calls = make_transport(interface, http=http, credentials=credentials, redact=redact)
        service = RemoteService(
            wired(calls, wire),
            card=card,
            interface=interface,
            timeout=timeout,
            stream_idle_timeout=stream_idle_timeout,
            extensions=extensions,
            http=http,
            headers=headers,
            tenant=tenant,
        )
        if (key or auth) and extended_card and card.capabilities.extended_agent_card:
            await service.use_extended_card()
        return service
    except BaseException:
        if service is not None:
            await service.aclose()
        else:
            await http.aclose()
        raise


async def fetched_card(
    url: str,
    http: httpx.AsyncClient,
    timeout: float,  # noqa: ASYNC109 (bounds the fetch)
    redact: Redactor,
    wire: Callable[[str], None] | None,
) -> pb.AgentCard:
    """:func:`fetch_card`, written out to ``wire`` when given (``-v``)."""
    if wire is None:
        return await fetch_card(url, http=http, timeout=timeout, redact=redact)
    wire(redact(f"> GET {card_url(url)}"))
    try:
        card = await fetch_card(url, http=http, timeout=timeout, redact=redact)
    except A2AError as exc:
        wire(redact(f"< error {type(exc).__name__}: {exc.message}"))
        raise
    wire(redact(f"< {codec.to_json(card).decode()}"))
    return card


def check_signed(card: pb.AgentCard, keys: KeySet) -> None:
    """CardError unless ``card`` carries a signature by one of ``keys``."""
    try:
        verify_card(card, keys)
    except CardSignatureError as exc:
        raise CardError(f"the agent card's signature does not verify: {exc}") from None


async def resolve_card(
    url: str,
    *,
    key: str | None = None,
    transport: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 (each call is bounded by it)
    signing_secret: str | None = None,
    card_keys: KeySet | None = None,
    headers: Iterable[tuple[str, str]] = (),
    tenant: str | None = None,
    extensions: Iterable[str] = (),
    wire: Callable[[str], None] | None = None,
) -> pb.AgentCard:
    """The agent's card: the extended card when ``key`` is given and the card offers one
    (and it can be fetched), else the public card. For ``a2a-gateway card URL``. With
    ``card_keys`` the public card must carry a signature by one of them."""
    redact = Redactor([key, signing_secret])
    async with new_http_client(timeout) as http:
        card = await fetched_card(url, http, timeout, redact, wire)
        if card_keys is not None:
            check_signed(card, card_keys)
        if not key or not card.capabilities.extended_agent_card:
            return card
        try:
            interface = choose_interface(card, transport)
        except CardError:
            return card  # nothing we can call: the public card is all there is
        credentials = credentials_for(card, key, signing_secret)
        calls = make_transport(interface, http=http, credentials=credentials, redact=redact)
        async with RemoteService(
            wired(calls, wire),
            card=card,
            interface=interface,
            timeout=timeout,
            extensions=extensions,
            headers=headers,
            tenant=tenant,
        ) as service:
            await service.use_extended_card()
            return service.card
