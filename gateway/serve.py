"""``a2a-gateway serve``: wire the service, the bindings and the lifecycle together.

One process runs the aiohttp server (card, JSON-RPC, HTTP+JSON, SSE) and the grpc.aio
server over one :class:`~a2a_gateway.protocol.service.A2AService`.

SIGTERM drains (:meth:`Gateway.drain`, docs/reliability.md "Drain"): not ready, no new
connection, new calls refused with UNAVAILABLE, open streams ended with the resumable
UNAVAILABLE, calls in flight given ``--shutdown-grace`` to finish; then the stop. SIGINT,
a second signal or the grace running out stops at once: runs still going are cancelled
(their tasks are written in a final state), connections closed. Either way the exit
status is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from a2a_gateway.agent.base import Agent, AgentProfile
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.agent.loader import AgentLoadError, load_agent
from a2a_gateway.agent.process import ProcessAgent
from a2a_gateway.agent.tools.base import Tool
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.local.redaction import register_secret
from a2a_gateway.protocol.closing import Startable
from a2a_gateway.protocol.codec import MAX_BODY_BYTES
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.auth import (
    CALLERS_FILE,
    AllowAnonymous,
    Authenticator,
    WorkspaceCallers,
    read_callers,
)
from a2a_gateway.server.card import (
    CardProvider,
    CardSigner,
    parse_extensions,
    read_skills_file,
)
from a2a_gateway.server.config import (
    CardConfig,
    IdentityConfig,
    Mounts,
    ServerConfig,
    is_loopback,
)
from a2a_gateway.server.drain import Drain
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.extensions import ExtensionPolicy
from a2a_gateway.server.file_store import WorkspaceTaskStores
from a2a_gateway.server.grpc_server import build_grpc_server
from a2a_gateway.server.health import Readiness
from a2a_gateway.server.http_app import AppRunner, build_http_app, build_metrics_app
from a2a_gateway.server.icon import CardIcon
from a2a_gateway.server.identity import JwtVerifier
from a2a_gateway.server.identity.introspection import Introspector
from a2a_gateway.server.limits import RateLimits, TaskCaps, TaskLimiter
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.metrics import NULL_METRICS, Metrics, MetricsLike
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.pact import PactAuthenticator, PactMount, PactService
from a2a_gateway.server.pact.config import pact_file
from a2a_gateway.server.pg_store import PostgresTaskStore, StoreUnavailable
from a2a_gateway.server.push import PushDispatcher
from a2a_gateway.server.push_receiver import PushWaker
from a2a_gateway.server.retention import Retention, parse_duration
from a2a_gateway.server.retry_memo import RetryMemo
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.secret_links import SecretLinks
from a2a_gateway.server.task_store import TaskStore
from a2a_gateway.server.tls import TlsConfig, server_ssl_context
from a2a_gateway.server.tracing import Traced, Tracing, tracing_wanted

from .access_log import AccessLogged
from .listeners import STOP_GRACE_S, GrpcListener, HttpListener
from .proxy import UpstreamProxy, build_proxy, ignored_settings
from .settings import ServeSettings
from .startup import StartupError

if TYPE_CHECKING:
    from a2a_gateway.agent.runtime import Runtime

log = logging.getLogger("a2a_gateway.serve")

#: A start step of :class:`Gateway`: its name (tests make it fail) and its part.
Steps = list[tuple[str, AbstractAsyncContextManager[object]]]


def _mount(path: str) -> str:
    path = path.strip()
    if path in ("", "/"):
        return ""
    return "/" + path.strip("/")


def server_config(settings: ServeSettings) -> ServerConfig:
    workspaces = [Path(p) for p in settings.workspace]
    root = settings.workspaces_root
    if root:
        try:
            workspaces += sorted(p for p in Path(root).iterdir() if p.is_dir())
        except OSError as exc:
            raise StartupError(f"cannot read --workspaces-root {root}: {_why(exc)}") from None
    grpc_port = settings.grpc_port
    jsonrpc = _mount(settings.jsonrpc_path) or "/"
    return ServerConfig(
        host=settings.host,
        port=settings.port,
        grpc_port=None if grpc_port < 0 else grpc_port,
        public_url=settings.public_url.rstrip("/"),
        mounts=Mounts(jsonrpc=jsonrpc, rest=_mount(settings.rest_path)),
        card=card_config(settings),
        workspaces=workspaces,
        allow_anonymous=settings.allow_anonymous,
        allow_private_urls=settings.allow_private_urls,
        keepalive_interval_s=settings.keepalive,
        # A request must fit one file part in base64 (4/3 of its size) plus the envelope.
        max_body_bytes=max(MAX_BODY_BYTES, settings.max_file_bytes * 4 // 3 + 1024 * 1024),
        max_hops=settings.max_hops,
        grpc_default_deadline_s=settings.grpc_default_deadline,
        grpc_stream_idle_s=settings.grpc_stream_idle_timeout,
        shutdown_grace_s=settings.shutdown_grace,
        identity=identity_config(settings),
        tls=tls_config(settings),
        rate_limits=RateLimits(
            per_caller_per_minute=settings.rate_limit_per_minute,
            per_ip_per_minute=settings.ip_rate_limit_per_minute,
        ),
        task_caps=TaskCaps(
            max_running_tasks=settings.max_running_tasks,
            max_open_contexts=settings.max_open_contexts,
        ),
    )


def card_signer(settings: ServeSettings) -> CardSigner | None:
    """``--card-signing-key``: the key that signs our cards (a StartupError naming the
    file and the problem, never the key)."""
    path = settings.card_signing_key.strip()
    if not path:
        return None
    try:
        return CardSigner.from_file(Path(path))
    except OSError as exc:
        raise StartupError(f"--card-signing-key {path}: {_why(exc)}") from None
    except ValueError as exc:
        raise StartupError(f"--card-signing-key {path}: {exc}") from None


def tls_config(settings: ServeSettings) -> TlsConfig | None:
    """``--tls-cert`` and ``--tls-key`` (both or neither), and ``--tls-client-ca``."""
    cert, key = settings.tls_cert.strip(), settings.tls_key.strip()
    ca = settings.tls_client_ca.strip()
    if not cert and not key:
        if ca:
            raise StartupError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not (cert and key):
        raise StartupError("--tls-cert and --tls-key go together")
    tls = TlsConfig(Path(cert), Path(key), Path(ca) if ca else None)
    try:
        server_ssl_context(tls)  # now, so a bad file is a start-up error naming it
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"--tls-cert/--tls-key/--tls-client-ca cannot be used: {exc}") from None
    return tls


def identity_config(settings: ServeSettings) -> IdentityConfig:
    """The identity settings; the introspection client secret is registered for
    redaction before anything can log it."""
    secret = settings.introspection_client_secret
    if secret:
        register_secret(secret)
    url = settings.introspection_url.strip()
    if url and not (settings.introspection_client_id and secret):
        raise StartupError(
            "--introspection-url needs --introspection-client-id and"
            " --introspection-client-secret (or A2A_GATEWAY_INTROSPECTION_CLIENT_SECRET)"
        )
    return IdentityConfig(
        jwt_leeway_s=settings.jwt_leeway,
        fetch_timeout_s=settings.identity_fetch_timeout,
        introspection_url=url,
        introspection_client_id=settings.introspection_client_id,
        introspection_client_secret=secret,
        introspection_cache_s=settings.introspection_cache,
        oauth2_token_url=settings.oauth2_token_url.strip(),
        pact_max_lifetime_s=settings.pact_token_max_lifetime,
    )


def card_config(settings: ServeSettings) -> CardConfig:
    """The public card's settings; a skills file or extensions that cannot be read are
    a :class:`StartupError` naming the setting."""
    skills = []
    if settings.card_skills:
        try:
            skills = read_skills_file(Path(settings.card_skills))
        except ValueError as exc:
            raise StartupError(f"--card-skills: {exc}") from None
    extensions = []
    if settings.card_extensions.strip():
        try:
            extensions = parse_extensions(settings.card_extensions)
        except ValueError as exc:
            raise StartupError(f"--card-extensions {exc}") from None
    return CardConfig(
        name=settings.card_name,
        description=settings.card_description,
        skills=skills,
        extensions=extensions,
        format=settings.card_format,
        resumable_streams=not settings.upstream,  # proxy mode: the upstream's streams
    )


def _why(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()


def check_workspaces(workspaces: list[Path]) -> None:
    """Create missing workspace folders; a path that is a file, cannot be created or
    cannot be read and written is a :class:`StartupError` (one line, exit status 2)."""
    for workspace in workspaces:
        if workspace.exists() and not workspace.is_dir():
            raise StartupError(f"workspace {workspace} is not a folder")
        try:
            workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot create workspace {workspace}: {_why(exc)}") from None
        if not os.access(workspace, os.R_OK | os.W_OK | os.X_OK):
            raise StartupError(f"workspace {workspace} is not readable and writable")


def build_agent(
    settings: ServeSettings, workspaces: list[Path] | None = None, tools: Sequence[Tool] = ()
) -> Agent:
    """The hosted agent the settings name; ``tools`` are a host's own for the assistant
    (e.g. :class:`~a2a_gateway.account_api.AccountApiTool` for PACT scopes)."""
    if settings.llm or settings.llm_demo:
        from .assistant_host import build_assistant  # imports openai: only when used

        return build_assistant(settings, workspaces or [], extra_tools=tools)
    if tools:
        raise StartupError("tools are for the assistant: give --llm or --llm-demo")
    if settings.agent:
        # Like uvicorn: ``--agent shout:Shout`` finds shout.py in the current folder.
        here = os.getcwd()
        if here not in sys.path:
            sys.path.insert(0, here)
        try:
            return load_agent(settings.agent)
        except AgentLoadError as exc:
            raise StartupError(f"--agent: {exc}") from None
    if settings.exec:
        return ProcessAgent(settings.exec)
    return FauxAgent()


def agent_profile(agent: Agent) -> AgentProfile | None:
    """The hosted agent's own card profile (Agent.profile), checked once at start-up."""
    try:
        profile = agent.profile()
    except Exception as exc:
        raise StartupError(f"the agent's profile() failed: {type(exc).__name__}") from None
    if profile is not None and not isinstance(profile, AgentProfile):
        raise StartupError("the agent's profile() must return an AgentProfile or None")
    return profile


def build_store(settings: ServeSettings, config: ServerConfig) -> TaskStore:
    mib = 1024 * 1024
    if settings.store == "postgres":
        return build_postgres_store(settings, config)
    if settings.store == "memory" or not config.workspaces:
        return MemoryTaskStore(
            max_tasks=settings.memory_store_tasks,
            max_bytes=settings.memory_store_mib * mib,
            retry_keys=settings.retry_keys,
            retry_bytes=settings.retry_keys_mib * mib,
            event_log_bytes=settings.event_log_kib * 1024,
            event_logs_bytes=settings.memory_event_log_mib * mib,
        )
    # Each caller's tasks live in its own workspace; anonymous callers use the first.
    return WorkspaceTaskStores(
        config.workspaces[0],
        fsync=settings.fsync,
        cache_entries=settings.task_cache_entries,
        cache_bytes=settings.task_cache_mib * mib,
        reconcile_interval_s=settings.index_reconcile_interval,
        event_log_bytes=settings.event_log_kib * 1024,
        event_log_tasks=settings.event_log_tasks,
        event_log_total_bytes=settings.event_log_mib * mib,
    )


def build_postgres_store(settings: ServeSettings, config: ServerConfig) -> PostgresTaskStore:
    """``--store postgres``: the URL's password is registered for redaction before
    anything can log it; mistakes are StartupErrors that never echo the URL."""
    url = settings.database_url.strip()
    if not url:
        raise StartupError(
            "--store postgres needs --database-url postgresql://... (or A2A_GATEWAY_DATABASE_URL)"
        )
    register_secret(url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        raise StartupError("--database-url is not a valid URL") from None
    if password:
        register_secret(password)
    if parts.scheme not in ("postgresql", "postgres"):
        raise StartupError("--database-url must be a postgresql:// URL")
    if not config.workspaces:
        raise StartupError(
            f"--store postgres needs a --workspace (its {RELATIVE.secret_key} seals push secrets)"
        )
    mib = 1024 * 1024
    return PostgresTaskStore(
        url,
        box=SecretBox(config.workspaces[0]),
        pool_size=settings.database_pool_size,
        lease_s=settings.database_lease,
        retry_keys=settings.retry_keys,
        retry_bytes=settings.retry_keys_mib * mib,
    )


def build_retention(settings: ServeSettings, store: TaskStore) -> Retention | None:
    """The retention pass of ``--task-retention`` (None when off or without files)."""
    text = settings.task_retention.strip()
    if not text:
        return None
    try:
        max_age_s = parse_duration(text)
    except ValueError as exc:
        raise StartupError(f"--task-retention: {exc}") from None
    files = settings.task_retention_files
    if isinstance(store, PostgresTaskStore):
        return Retention(lambda: [store], max_age_s, files=files)
    if not isinstance(store, WorkspaceTaskStores):
        log.warning("--task-retention applies to the workspace and postgres stores only: ignored")
        return None
    return Retention(store.stores, max_age_s, files=files)


def jwt_verifier(config: ServerConfig) -> JwtVerifier:
    """A verifier with its own guarded client: identity providers are addresses from
    the workspace's files (callers.json, pact.json)."""
    identity = config.identity
    return JwtVerifier(
        OutboundClient(
            allow_private_urls=config.allow_private_urls, timeout_s=identity.fetch_timeout_s
        ),
        leeway_s=identity.jwt_leeway_s,
        fetch_timeout_s=identity.fetch_timeout_s,
    )


def build_pact(config: ServerConfig, service: A2AService) -> PactMount | None:
    """The PACT URL over ``service`` (the engine), for the personal agents each
    workspace's pact.json lists (read fresh: none yet is every token refused)."""
    if not config.workspaces:
        return None
    authenticator = PactAuthenticator(
        config.workspaces,
        jwt_verifier(config),
        max_lifetime_s=config.identity.pact_max_lifetime_s,
        limits=config.rate_limits,
    )
    return PactMount(PactService(service), authenticator)


def build_authenticator(config: ServerConfig) -> Authenticator:
    """Who may call. The anonymous caller exists only on a loopback address: without a
    workspace there (the zero-configuration default) everyone is anonymous; elsewhere
    only keys listed in a workspace's callers.json are accepted (the command line
    refuses to start a non-loopback server that has none, see :func:`keyless_problem`)."""
    loopback = is_loopback(config.host)
    if not config.workspaces and loopback:
        return AllowAnonymous(limits=config.rate_limits)
    identity = config.identity
    verifier = jwt_verifier(config)
    introspector = None
    if identity.introspection_url:
        introspector = Introspector(
            identity.introspection_url,
            identity.introspection_client_id,
            identity.introspection_client_secret,
            OutboundClient(
                allow_private_urls=config.allow_private_urls, timeout_s=identity.fetch_timeout_s
            ),
            max_cache_s=identity.introspection_cache_s,
            timeout_s=identity.fetch_timeout_s,
        )
    return WorkspaceCallers(
        config.workspaces,
        allow_anonymous=config.allow_anonymous and loopback,
        limits=config.rate_limits,
        verifier=verifier,
        introspector=introspector,
        token_url=identity.oauth2_token_url,
        # A Basic password crosses the network only inside TLS.
        basic_allowed=loopback or config.tls is not None,
        certificates=config.tls is not None and config.tls.client_ca is not None,
    )


def keyless_problem(config: ServerConfig) -> str | None:
    """Why a server on ``config.host`` must not start, or None.

    Off loopback a key is always required, so a server whose workspaces list no caller
    at all (or that has no workspace) would refuse every call, or, before this rule,
    answer everyone: it is refused before any port is bound. An enabled personal agent
    in a pact.json is a caller too (a PACT-only server).
    """
    if is_loopback(config.host):
        return None
    for workspace in config.workspaces:
        entries, _ = read_callers(workspace / CALLERS_FILE, str(workspace))
        if entries:
            return None
        pact = pact_file(workspace).value()
        if pact is not None and any(agent.enabled for agent in pact.agents):
            return None
    where = "no --workspace is given" if not config.workspaces else "no workspace has a caller"
    return (
        f"refusing to serve on {config.host or 'every address'} without keys: {where};"
        " add a caller with `a2a-gateway callers add NAME --workspace DIR`"
        " and serve with --workspace DIR (or bind to 127.0.0.1)"
    )


def warn_missing_callers(config: ServerConfig) -> None:
    """One warning per workspace without a callers.json (often a typo in the path)."""
    anonymous = config.allow_anonymous and is_loopback(config.host)
    consequence = (
        "every call with a key will be refused" if anonymous else "every call will be refused"
    )
    for workspace in config.workspaces:
        if not (workspace / CALLERS_FILE).exists():
            log.warning(
                "workspace %s has no %s: no callers: %s", workspace, CALLERS_FILE, consequence
            )


def warn_basic_without_tls(config: ServerConfig) -> None:
    """One line at start-up when Basic callers exist where their passwords are refused."""
    if is_loopback(config.host) or config.tls is not None:
        return
    for workspace in config.workspaces:
        entries, _ = read_callers(workspace / CALLERS_FILE, str(workspace))
        names = [entry.name for entry in entries if entry.basic is not None]
        if names:
            log.warning(
                "workspace %s: Basic callers (%s) will be refused: HTTP Basic needs TLS off"
                " loopback",
                workspace,
                ", ".join(names),
            )


class Gateway(Startable):
    """The whole server in one process: start, then stop (idempotent); or ``async with``.

    Its long-lived parts are built here and opened by :meth:`start`, in order, into one
    :class:`contextlib.AsyncExitStack` (each part is an async context manager,
    ``protocol/closing.py``); :meth:`stop` closes that stack, so the parts close in
    reverse, and a start that fails at any step closes what the steps before it opened.
    The order (:meth:`_steps`): tracing and who calls (closed last); the service behind
    the listeners (the guarded client, push delivery, the assistant's runtime, the
    engine with its store, or the upstream proxy); the card icon check; the gRPC, HTTP
    and metrics listeners; then serving (gRPC serves, the readiness poller, retention).
    On the way down the service closes before the listeners do: the runs end and their
    answers are written, then the connections close.
    """

    def __init__(
        self,
        settings: ServeSettings,
        *,
        push_waker: PushWaker | None = None,
        agent: Agent | None = None,
        routes: Callable[[web.Application], None] | None = None,
        tools: Sequence[Tool] = (),
    ) -> None:
        """``agent`` replaces the one the settings name (a host that built its own);
        ``routes`` adds a host's routes to the HTTP app (the Telegram webhook);
        ``tools`` are the host's own tools for the assistant (``--llm``)."""
        self.config = server_config(settings)
        self._routes = routes
        check_workspaces(self.config.workspaces)
        problem = keyless_problem(self.config)
        if problem:  # before anything is bound or started
            raise StartupError(problem)
        # Wakes our own client's watches on pushes (POST /a2a/push/{watchId}).
        self.push_waker = push_waker
        #: A test seam: awaited with each start step's name before it runs
        #: (tests/e2e/test_lifecycle.py makes a step fail there).
        self.before_step: Callable[[str], Awaitable[None]] = _no_seam
        self._stack: contextlib.AsyncExitStack | None = None  # what start opened
        self.engine: TaskEngine | None = None
        self.runtime: Runtime | None = None  # the assistant's (serve --llm)
        self._own_runtime: Runtime | None = None  # the one built here, closed here
        #: The owner's one-time links for secret questions (an assistant with no
        #: asker of its own: the Telegram host asks in the chat instead).
        self.secret_links: SecretLinks | None = None
        self.proxy: UpstreamProxy | None = None
        # The guarded client for webhooks and file downloads, and push delivery (not
        # in proxy mode: the upstream agent delivers its own notifications).
        self.outbound: OutboundClient | None = None
        self.push: PushDispatcher | None = None
        self.cards: CardProvider
        self.service: A2AService
        if settings.upstream:
            # Proxy mode (proxy.py): every call goes to the upstream agent.
            self.proxy, self.cards = build_proxy(settings, self.config)
            self.service = self.proxy
        else:
            ignored = ignored_settings(settings)
            if ignored:
                log.warning("ignoring %s: they only apply with --upstream", ", ".join(ignored))
            self.outbound = OutboundClient(allow_private_urls=self.config.allow_private_urls)
            self.push = PushDispatcher(self.outbound)
            self.cards = CardProvider(
                self.config, push_notifications=True, signer=card_signer(settings)
            )
        warn_missing_callers(self.config)
        warn_basic_without_tls(self.config)
        self.authenticator = build_authenticator(self.config)
        self.cards.schemes = self.authenticator.schemes
        self.cards.serving = self.authenticator.serving
        self.card_icon_setting = settings.card_icon.strip()
        self.cards.icon = CardIcon.for_gateway(self.card_icon_setting, self.config.workspaces)
        self.retention: Retention | None = None
        self.store: TaskStore | None = None
        if self.proxy is None:
            built = agent is None
            if agent is None:
                agent = build_agent(settings, self.config.workspaces, tools)
            self.runtime = getattr(agent, "runtime", None)
            if built:  # a host that passes its agent owns its runtime
                self._own_runtime = self.runtime
            self.secret_links = self._secret_links(agent)
            self.cards.streaming = agent.streaming
            self.cards.profile = agent_profile(agent)
            store = build_store(settings, self.config)
            self.store = store
            self.retention = build_retention(settings, store)
            self.engine = TaskEngine(
                agent,
                store,
                max_hops=self.config.max_hops,
                extended_card=self.cards.extended_card,
                task_limiter=TaskLimiter(
                    self.config.task_caps, limits_for=self.authenticator.limits_for
                ),
                push_enabled=True,
                push=self.push,
                outbound=self.outbound,
                # Files of callers without a workspace (anonymous) land in the first.
                default_workspace=self.config.workspaces[0] if self.config.workspaces else None,
                max_file_bytes=settings.max_file_bytes,
                extensions=ExtensionPolicy.from_card(self.config.card.extensions),
            )
            self.service = self.engine
        # Every call passes the drain's gate (inside the access log, which shows refusals).
        self.drain_gate = Drain()
        self.service = self.drain_gate.gate(self.service)
        if settings.access_log:
            self.service = AccessLogged(self.service)
        # Tracing wraps outermost, so the access-log line is inside the call's span.
        self.tracing: Tracing | None = None
        if tracing_wanted(settings.otlp_endpoint):
            self.tracing = Tracing(settings.otlp_endpoint)
            self.service = Traced(self.service, self.tracing.tracer)
        # A retried gRPC send answered from the stored task is given again from the
        # binding's memo (server/retry_memo.py) when nothing around the engine but the
        # drain gate sees each call: no access log, no tracing.
        self.retry_memo: RetryMemo | None = None
        if self.engine is not None and not settings.access_log and self.tracing is None:
            self.retry_memo = RetryMemo(self.engine.replay_check(), self.drain_gate)
        # The PACT URL (server/pact) serves the hosted agent, not an upstream's.
        self.pact = build_pact(self.config, self.service) if self.engine is not None else None
        # Metrics in a registry of this gateway's own; off, the bindings' meters do
        # nothing. The engine is read at scrape time (its gauges), never on its path.
        self.metrics: MetricsLike = Metrics() if settings.metrics else NULL_METRICS
        if isinstance(self.metrics, Metrics):
            self._meter_parts(self.metrics)
        metrics_port = settings.metrics_port
        self.metrics_port: int | None = None if metrics_port < 0 else metrics_port
        self.readiness = Readiness()
        if self.store is not None:
            self.readiness.add("store", self.store.readiness)
        config = self.config
        # Built at start, from what the gateway holds then (tests swap a part in).
        self.grpc = GrpcListener(
            lambda: build_grpc_server(
                self.service,
                config,
                self.authenticator,
                meter=self.metrics.grpc,
                readiness=self.readiness,
                memo=self.retry_memo,
            ),
            config,
        )
        self.http = HttpListener(
            self._http_app,
            config.host,
            config.port,
            ssl_context=lambda: server_ssl_context(config.tls) if config.tls else None,
            runner=AppRunner,
            shutdown_timeout=STOP_GRACE_S,
        )
        self.metrics_http: HttpListener | None = None  # --metrics-port
        if self.metrics_port is not None and isinstance(self.metrics, Metrics):
            metrics = self.metrics
            self.metrics_http = HttpListener(
                lambda: build_metrics_app(metrics, self.readiness),
                config.host,
                self.metrics_port,
                flag="--metrics-port",
            )
        self.http_port: int | None = None
        self.grpc_port: int | None = None

    def _secret_links(self, agent: Agent) -> SecretLinks | None:
        if self.runtime is None:
            return None
        from a2a_gateway.agent.assistant import AssistantAgent  # loaded with the runtime

        if not isinstance(agent, AssistantAgent) or agent.secrets is not None:
            return None
        links = SecretLinks(self.config.mounts.jsonrpc, self._base_url)
        agent.secrets = links
        return links

    def _base_url(self) -> str:
        """The external base URL (``--public-url``, else where the HTTP port listens)."""
        config = self.config
        if config.public_url:
            return config.public_url
        host = config.host if config.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if config.tls is not None else "http"
        return f"{scheme}://{host}:{self.http_port or config.port}"

    def _meter_parts(self, metrics: Metrics) -> None:
        """Give the parts that report (the engine's gauges, the assistant, push) the
        gateway's metrics."""
        if self.engine is not None:
            metrics.watch_engine(self.engine)
        if self.store is not None:
            metrics.count_tasks(self.store)
            metrics.watch_store(self.store)
        if self.runtime is not None:
            self.runtime.meter = metrics.assistant
        if self.push is not None:
            push = metrics.push
            self.push.on_result = lambda result: push.record(result.outcome, result.attempts)

    def _steps(self) -> tuple[Steps, Steps, Steps, Steps]:
        """The parts :meth:`start` opens, by name, in four groups (the class doc): those
        around the rest, the service, the listeners, and what runs once serving."""
        pact = self.pact.authenticator if self.pact is not None else None
        around = _present(
            ("tracing", self.tracing), ("authenticator", self.authenticator), ("pact", pact)
        )
        service = _present(
            ("outbound", self.outbound),
            ("push", self.push),
            ("runtime", self._own_runtime),
            ("proxy", self.proxy),  # reads the upstream's card (not fatal if down)
            ("engine", self.engine),  # opens its store: connects and migrates a database
        )
        # Bind gRPC first: with port 0 the card must advertise the real port.
        listeners = _present(
            ("card icon", _calling(self._check_icon)),
            ("grpc", self.grpc),
            ("http", self.http),
            ("metrics", self.metrics_http),
        )
        serving = _present(
            ("grpc serve", _calling(self.grpc.serve)),
            ("readiness", self.readiness),  # the gRPC health service follows it
            ("retention", self.retention),
        )
        return around, service, listeners, serving

    async def start(self) -> None:
        """Open the parts in order; one that fails closes those opened before it (in
        reverse) and its error goes on: nothing is left open, no stop needed."""
        around, service_parts, listeners, serving = self._steps()
        async with contextlib.AsyncExitStack() as stack:
            await self._enter(stack, around)
            service = contextlib.AsyncExitStack()
            stack.push_async_callback(service.aclose)  # a listener that fails to bind
            try:
                await self._enter(service, service_parts)
            except StoreUnavailable as exc:
                raise StartupError(f"--database-url: {exc}") from None
            await self._enter(stack, listeners)
            # A stop ends the service before the listeners close (the class doc).
            stack.push_async_callback(service.aclose)
            await self._enter(stack, serving)
            stack.callback(self.drain_gate.begin)  # a stop refuses new calls first
            self._stack = stack.pop_all()
        self._started_ports()

    async def _enter(self, stack: contextlib.AsyncExitStack, steps: Steps) -> None:
        for name, part in steps:
            await self.before_step(name)
            await stack.enter_async_context(part)

    async def _check_icon(self) -> None:
        """Squared once now, again whenever the file changes. A --card-icon that cannot
        be used stops the start (a workspace's icon.png may come and go)."""
        if await self.cards.icon.refresh() is None and self.card_icon_setting:
            raise StartupError(f"--card-icon {self.card_icon_setting}: not found or not an image")

    def _http_app(self) -> web.Application:
        app = build_http_app(
            self.service,
            self.config,
            self.authenticator,
            self.cards,
            push_waker=self.push_waker,
            metrics=self.metrics,
            readiness=self.readiness,
            serve_metrics=self.metrics_port is None,
            pact=self.pact,
            secret_links=self.secret_links,
        )
        if self._routes is not None:
            self._routes(app)
        return app

    def _started_ports(self) -> None:
        """The ports bound (0 asked: the ones given), and the line that says so."""
        config = self.config
        self.http_port, self.grpc_port = self.http.port, self.grpc.port
        if self.metrics_http is not None:
            self.metrics_port = self.metrics_http.port
            log.info("metrics on http://%s:%s/metrics", config.host, self.metrics_port)
        log.info(
            "serving on %s://%s:%s (JSON-RPC %s, HTTP+JSON %s)%s",
            "https" if config.tls is not None else "http",
            config.host,
            self.http_port,
            config.mounts.jsonrpc,
            config.mounts.rest or "/",
            f", gRPC {config.host}:{self.grpc_port}" if self.grpc_port is not None else "",
        )

    async def drain(self, interrupted: asyncio.Event | None = None) -> bool:
        """Drain (SIGTERM; docs/reliability.md "Drain"): not ready at once (``/readyz``
        and the gRPC health service), neither port accepts a connection, a new call on
        an open one is refused with UNAVAILABLE, every open stream ends with the
        resumable UNAVAILABLE, and the unary calls in flight (a blocking send) get up to
        ``--shutdown-grace`` to finish, or until ``interrupted`` is set. True when they
        all did. :meth:`stop` comes next, as after any run."""
        grace_s = self.config.shutdown_grace_s
        log.info("draining: calls in flight have up to %g s", grace_s)
        await self.http.drain()
        self.grpc.drain(grace_s)  # grpc's own graceful stop; stop() ends it sooner
        self.drain_gate.begin()  # before the readiness checks, which may take a while
        await self.readiness.hold("drain", "the gateway is shutting down")
        return await self.drain_gate.run(grace_s, interrupted)

    async def stop(self) -> None:
        """Stop accepting, end streams, cancel runs (tasks end in a final state): what
        :meth:`start` opened closes in reverse (idempotent)."""
        stack, self._stack = self._stack, None
        if stack is not None:
            log.info("shutting down")
            if self.secret_links is not None:
                self.secret_links.close()  # the turns waiting on a link go on without it
            await stack.aclose()

    async def aclose(self) -> None:
        await self.stop()


def _present(*steps: tuple[str, AbstractAsyncContextManager[object] | None]) -> Steps:
    """The steps whose part this gateway has (None: not in this one)."""
    return [(name, part) for name, part in steps if part is not None]


@contextlib.asynccontextmanager
async def _calling(step: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """A start step that opens nothing: ``step`` runs, nothing closes."""
    await step()
    yield


async def _no_seam(step: str) -> None:
    """:attr:`Gateway.before_step` outside tests."""


async def run_server(settings: ServeSettings, *, stop: asyncio.Event | None = None) -> int:
    gateway = Gateway(settings)
    try:
        await gateway.start()  # one that fails leaves nothing open
    except OSError as exc:  # an address we cannot use otherwise
        raise StartupError(f"cannot start: {exc.strerror or exc}") from None
    with Signals(stop) as signals:  # until after the stop: a late signal changes nothing
        try:
            await signals.first.wait()
            if not signals.at_once.is_set():
                await gateway.drain(interrupted=signals.at_once)
        finally:
            await gateway.stop()
    return 0


class Signals:
    """SIGTERM and SIGINT while a host runs: ``first`` is set by either (or by whoever
    holds ``stop``), ``at_once`` by SIGINT or by any signal after the first: a drain
    is cut short by it."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: asyncio.Event | None = None) -> None:
        self.first = stop or asyncio.Event()
        self.at_once = asyncio.Event()

    def _received(self, sig: signal.Signals) -> None:
        if sig == signal.SIGINT or self.first.is_set():
            if not self.at_once.is_set():
                log.info("%s: stopping at once", sig.name)
            self.at_once.set()
        self.first.set()

    def __enter__(self) -> Signals:
        loop = asyncio.get_running_loop()
        for sig in self.SIGNALS:
            loop.add_signal_handler(sig, self._received, sig)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.SIGNALS:
            loop.remove_signal_handler(sig)


async def until_signalled(stop: asyncio.Event | None = None) -> None:
    """Return on SIGTERM or SIGINT (or when ``stop`` is set): how a host process waits."""
    with Signals(stop) as signals:
        await signals.first.wait()
