"""Configuration sources for ``serve``: flags, then ``A2A_GATEWAY_*`` environment, then TOML.

Every setting has a default that works with no configuration at all on 127.0.0.1.
A flag given on the command line wins over the environment, which wins over the file.

The :data:`SETTINGS` table is the one definition of each setting (flag, environment
name, TOML key, type, default, help); a verb reads its resolved values as a typed,
frozen object (:class:`ServeSettings`, ``ChatSettings``, ``TelegramSettings``) whose
fields the suite checks against the verb's table (tests/test_settings.py).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from a2a_gateway.agent import defaults as assistant
from a2a_gateway.agent.prompt import DEFAULT_TEMPLATE
from a2a_gateway.client.transport import DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT
from a2a_gateway.local.files import DEFAULT_MAX_FILE_BYTES
from a2a_gateway.server.config import (
    CARD_FORMATS,
    DEFAULT_PACT_MAX_LIFETIME_S,
    CardConfig,
    IdentityConfig,
    Mounts,
    ServerConfig,
)
from a2a_gateway.server.engine.state import DEFAULT_LIST_MAX_BYTES
from a2a_gateway.server.event_log import (
    DEFAULT_INDEX_TASKS,
    DEFAULT_LOG_TOTAL_BYTES,
    DEFAULT_MEMORY_LOG_BYTES,
    DEFAULT_TASK_LOG_BYTES,
)
from a2a_gateway.server.limits import TaskCaps
from a2a_gateway.server.task_store import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_MEMORY_TASKS,
    DEFAULT_RETRY_BYTES,
    DEFAULT_RETRY_KEYS,
)

ENV_PREFIX = "A2A_GATEWAY_"
#: Where a local Ollama serves its OpenAI-compatible API (``--llm-base-url``).
LLM_BASE_URL = assistant.DEFAULT_BASE_URL
MIB = 1024 * 1024


def library_default(cls: type, name: str) -> Any:
    """The default the library's dataclass ``cls`` states for its field ``name``: the
    table refers to it instead of restating it (one default, one place)."""
    (found,) = (f for f in fields(cls) if f.name == name)
    if found.default is not MISSING:
        return found.default
    raise TypeError(f"{cls.__name__}.{name} has no plain default")


def _starts(*prefixes: str) -> Callable[[str], bool]:
    return lambda name: name.startswith(prefixes)


def _one_of(*names: str) -> Callable[[str], bool]:
    return lambda name: name in names


GENERAL = "serving"
#: Headings of ``--help`` and docs/configuration.md, in order, and which settings each
#: takes (by name, the first rule that matches); the rest are :data:`GENERAL`.
GROUP_RULES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("model (the assistant)", _starts("llm", "session_", "message_template", "turn_")),
    ("delegation (the a2a tool and watches)", _starts("a2a_", "watch_")),
    ("proxy mode", _starts("upstream")),
    ("gRPC", _starts("grpc_")),
    ("card", _starts("card_")),
    (
        "identity and TLS",
        _starts("jwt_", "identity_", "tls_", "introspection_", "oauth2_", "allow_anonymous"),
    ),
    (
        "store",
        _starts(
            "store",
            "database_",
            "fsync",
            "task_",
            "index_",
            "list_",
            "memory_",
            "event_log",
        ),
    ),
    (
        "limits",
        _starts("max_", "rate_limit", "ip_rate_limit", "retry_keys", "keepalive"),
    ),
    (
        "logging and observability",
        _one_of(
            "access_log", "metrics", "metrics_port", "otlp_endpoint", "log_format", "log_level"
        ),
    ),
)


def heading_order(heading: str) -> int:
    """Where ``heading`` is listed: serving first, then :data:`GROUP_RULES`' order."""
    headings = [GENERAL, *(h for h, _ in GROUP_RULES)]
    return headings.index(heading) if heading in headings else len(headings)


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``serve`` setting: its flag, environment name, TOML key and type."""

    name: str  # attribute name, also the TOML key
    kind: type  # str, int, float, bool, or list (of str)
    default: Any
    help: str
    minimum: float | None = None  # numbers only: the smallest accepted value
    above: float | None = None  # numbers only: accepted values are greater than this
    maximum: float | None = None  # numbers only: the largest accepted value
    choices: tuple[str, ...] = ()  # strings only: the accepted values (empty: any)
    #: The heading it is listed under in ``--help`` and docs/configuration.md; empty:
    #: the first of :data:`GROUP_RULES` its name matches.
    group: str = ""

    @property
    def heading(self) -> str:
        if self.group:
            return self.group
        return next((heading for heading, match in GROUP_RULES if match(self.name)), GENERAL)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "host", str, library_default(ServerConfig, "host"), "address to listen on (HTTP and gRPC)"
    ),
    Setting(
        "port",
        int,
        library_default(ServerConfig, "port"),
        "HTTP port (JSON-RPC, HTTP+JSON, card)",
        0,
        maximum=65535,
    ),
    Setting(
        "grpc_port",
        int,
        library_default(ServerConfig, "grpc_port"),
        "gRPC port; 0 picks a free port, -1 disables gRPC",
        -1,
        maximum=65535,
    ),
    Setting("public_url", str, "", "external base URL for the card's interfaces"),
    Setting("workspace", list, [], "workspace folder (repeatable)"),
    Setting("workspaces_root", str, "", "each subfolder of this folder is one workspace"),
    Setting("agent", str, "", "agent to host, as module:attr"),
    Setting("exec", str, "", "run this command per turn as the agent (text on stdin)"),
    Setting("faux", bool, False, "host the built-in faux agent (directives, for tests)"),
    Setting("llm", bool, False, "host the LLM assistant (an OpenAI-compatible model)"),
    Setting(
        "llm_base_url",
        str,
        LLM_BASE_URL,
        "OpenAI-compatible API base URL (default: a local Ollama)",
    ),
    Setting("llm_model", str, "", "model name (required with --llm)"),
    Setting(
        "llm_demo",
        bool,
        False,
        "the built-in demo model instead of a real one (a few rules, no language model:"
        " to try the assistant, chat and delegation; serve hosts the assistant on it)",
    ),
    Setting(
        "llm_timeout",
        float,
        assistant.DEFAULT_TIMEOUT_S,
        "seconds the model provider may stay silent (connecting, before the first token,"
        " between tokens)",
        above=0,
    ),
    Setting(
        "llm_max_tokens",
        int,
        assistant.DEFAULT_MAX_TOKENS,
        "most tokens per answer (0: the provider's limit)",
        0,
    ),
    Setting("llm_temperature", float, None, "sampling temperature (default: the provider's)", 0),
    Setting(
        "llm_max_retries",
        int,
        assistant.DEFAULT_MAX_RETRIES,
        "retries of a failed model request",
        0,
    ),
    Setting(
        "llm_stream",
        str,
        assistant.DEFAULT_STREAM,
        "stream the model's answers: on, off (whole answers, for servers that cannot"
        " stream), or auto (stream; a streamed request with tools the provider fails is"
        " asked again once without streaming, and so from then on)",
        choices=assistant.STREAM_MODES,
    ),
    Setting(
        "llm_max_tool_rounds",
        int,
        assistant.DEFAULT_MAX_TOOL_ROUNDS,
        "tool rounds per turn before it fails",
        1,
    ),
    Setting(
        "llm_context_budget",
        int,
        assistant.DEFAULT_CONTEXT_BUDGET_CHARS,
        "most conversation characters sent per request (oldest turns dropped first)",
        1000,
    ),
    Setting(
        "llm_secret_wait",
        float,
        assistant.DEFAULT_SECRET_WAIT_S,
        "seconds a secret question (request_input with secret) waits for the owner's"
        " value; its one-time link expires then",
        above=0,
    ),
    Setting(
        "session_idle_timeout",
        float,
        assistant.DEFAULT_IDLE_TIMEOUT_S,
        "seconds before an idle session leaves memory (it resumes from its transcript)",
        above=0,
    ),
    Setting(
        "session_mode",
        str,
        assistant.DEFAULT_SESSION_MODE,
        "per-context, per-task or shared (one session per caller)",
        choices=assistant.SESSION_MODES,
    ),
    Setting(
        "message_template",
        str,
        DEFAULT_TEMPLATE,
        "what the model receives: {{a2a.text}}, {{a2a.task_id}}, {{a2a.context_id}},"
        " {{payload}} (the request's params as compact ProtoJSON)",
    ),
    Setting("upstream", str, "", "proxy mode: forward every call to this A2A agent URL"),
    Setting("upstream_key", str, "", "API key for the upstream agent"),
    Setting(
        "upstream_signing_secret",
        str,
        "",
        "sign every upstream request with this secret (X-A2A-Signature)",
    ),
    Setting("upstream_basic_user", str, "", "HTTP Basic user at the upstream"),
    Setting("upstream_password", str, "", "its password (better in the environment)"),
    Setting("upstream_client_id", str, "", "OAuth 2.0 client credentials at the upstream"),
    Setting("upstream_client_secret", str, "", "its secret (better in the environment)"),
    Setting("upstream_token_url", str, "", "the token URL (default: the upstream card's)"),
    Setting("upstream_token_command", str, "", "a command printing a bearer token"),
    Setting("upstream_client_cert", str, "", "our TLS client certificate for the upstream"),
    Setting("upstream_client_key", str, "", "its private key (PEM)"),
    Setting("upstream_ca_cert", str, "", "trust this CA for the upstream's TLS"),
    Setting(
        "upstream_transport",
        str,
        "auto",
        "binding to the upstream: jsonrpc, rest, grpc, or auto (the first one its card"
        " lists that we speak)",
        choices=("auto", "jsonrpc", "rest", "grpc"),
    ),
    Setting(
        "upstream_timeout",
        float,
        DEFAULT_TIMEOUT,
        f"seconds allowed for one upstream call or stream opening (default {DEFAULT_TIMEOUT:g})",
        above=0,
    ),
    Setting(
        "upstream_idle_timeout",
        float,
        DEFAULT_STREAM_IDLE_TIMEOUT,
        "seconds of silence allowed between two upstream stream events"
        f" (default {DEFAULT_STREAM_IDLE_TIMEOUT:g})",
        above=0,
    ),
    Setting(
        "grpc_default_deadline",
        float,
        library_default(ServerConfig, "grpc_default_deadline_s"),
        "seconds a unary gRPC call may take when its client sets no deadline (default 300)",
        above=0,
    ),
    Setting(
        "grpc_stream_idle_timeout",
        float,
        library_default(ServerConfig, "grpc_stream_idle_s"),
        "seconds a gRPC stream may go without an event before it is ended (default 300)",
        above=0,
    ),
    Setting(
        "shutdown_grace",
        float,
        library_default(ServerConfig, "shutdown_grace_s"),
        "seconds a SIGTERM gives calls in flight (a blocking send) to finish before the"
        " exit; new calls are refused and open streams end meanwhile (default 10)",
        0,
    ),
    Setting("allow_anonymous", bool, False, "accept requests without a key (loopback only)"),
    Setting("allow_private_urls", bool, False, "outbound guard off: http and private addresses"),
    Setting(
        "jsonrpc_path",
        str,
        library_default(Mounts, "jsonrpc"),
        "JSON-RPC mount point ('/' allowed)",
    ),
    Setting(
        "rest_path",
        str,
        library_default(Mounts, "rest"),
        "HTTP+JSON mount point ('' or '/' = root)",
    ),
    Setting(
        "card_name",
        str,
        "",
        "agent name on the public card (default: the agent's own, else 'a2a-gateway agent')",
    ),
    Setting(
        "card_description",
        str,
        "",
        "description on the public card, and on extended cards of workspaces without a"
        " PERSONA.md (default: the agent's own, else a generic sentence)",
    ),
    Setting(
        "card_skills",
        str,
        "",
        "JSON file with the public card's skills, an array of AgentSkill (default: the"
        " agent's own, else one chat skill)",
    ),
    Setting(
        "card_extensions",
        str,
        "",
        'extensions the card declares, a JSON array such as [{"uri": "https://...",'
        ' "description": "...", "required": false}]; a call that does not name a required'
        " one in A2A-Extensions is refused (-32008)",
    ),
    Setting(
        "card_icon",
        str,
        "",
        "image file for the cards' iconUrl, served as a 256 px square PNG at"
        " <jsonrpc_path>/icon.png (default: the first workspace's icon.png, if any)",
    ),
    Setting(
        "card_format",
        str,
        library_default(CardConfig, "format"),
        "public card shape: auto (pure 1.0 for a request with A2A-Version 1.x, else the"
        " hybrid with the 0.3 keys), 1.0, or hybrid",
        choices=CARD_FORMATS,
    ),
    Setting(
        "max_hops",
        int,
        library_default(ServerConfig, "max_hops"),
        "refuse tasks whose a2a-gateway.hops exceeds this",
    ),
    Setting(
        "max_file_bytes",
        int,
        DEFAULT_MAX_FILE_BYTES,
        "cap per file part, in and out",
        minimum=1,
    ),
    Setting(
        "keepalive",
        float,
        library_default(ServerConfig, "keepalive_interval_s"),
        "seconds between SSE keep-alive comments",
    ),
    Setting(
        "store",
        str,
        "workspace",
        "task store: workspace (files), memory, or postgres (--database-url)",
        choices=("workspace", "memory", "postgres"),
    ),
    Setting(
        "database_url",
        str,
        "",
        "--store postgres: postgresql://user:password@host:port/database (never logged)",
    ),
    Setting(
        "database_pool_size", int, 10, "--store postgres: database connections kept", minimum=1
    ),
    Setting(
        "database_lease",
        float,
        30.0,
        "--store postgres: seconds a run's lease lasts (renewed every third); a task whose"
        " lease expired is failed 'server restarted' by the next gateway that reads it",
        above=0,
    ),
    Setting("fsync", bool, False, "fsync task files (survive power loss; slower)"),
    Setting(
        "task_retention",
        str,
        "",
        "remove settled tasks whose status is older than this, e.g. 30d, 12h (empty: keep)",
    ),
    Setting(
        "task_retention_files",
        bool,
        False,
        "with --task-retention, also remove the inbox files of removed tasks",
    ),
    Setting("task_cache_entries", int, 4096, "task records cached in memory (count)", 0),
    Setting("task_cache_mib", int, 64, "task records cached in memory (MiB)", 0),
    Setting(
        "index_reconcile_interval",
        float,
        600.0,
        "seconds between two checks of the task index against the task files",
        above=0,
    ),
    Setting(
        "list_max_mib",
        float,
        DEFAULT_LIST_MAX_BYTES / MIB,
        "byte budget of one ListTasks answer (MiB)",
        above=0,
    ),
    Setting(
        "event_log_kib",
        int,
        DEFAULT_TASK_LOG_BYTES // 1024,
        "stream events kept per task for resuming a stream (KiB; memory and workspace stores)",
        1,
    ),
    Setting(
        "event_log_tasks",
        int,
        DEFAULT_INDEX_TASKS,
        "--store workspace: finished streams whose events are kept for resuming, per"
        " workspace (the most recent; older resume points get the task's snapshot)",
        1,
    ),
    Setting(
        "event_log_mib",
        int,
        DEFAULT_LOG_TOTAL_BYTES // MIB,
        "--store workspace: stream events kept for all tasks of a workspace (MiB of"
        " segment files, the oldest dropped first)",
        16,
    ),
    Setting(
        "memory_event_log_mib",
        int,
        DEFAULT_MEMORY_LOG_BYTES // MIB,
        "--store memory: stream events kept for all tasks together (MiB)",
        1,
    ),
    Setting(
        "memory_store_tasks",
        int,
        DEFAULT_MEMORY_TASKS,
        "--store memory: tasks kept (count)",
        1,
    ),
    Setting(
        "memory_store_mib",
        int,
        DEFAULT_MEMORY_BYTES // MIB,
        "--store memory: tasks kept (MiB)",
        1,
    ),
    Setting(
        "retry_keys",
        int,
        DEFAULT_RETRY_KEYS,
        "--store memory: messageId retry keys kept (count)",
        0,
    ),
    Setting(
        "retry_keys_mib",
        int,
        DEFAULT_RETRY_BYTES // MIB,
        "--store memory: messageId retry keys kept (MiB)",
        0,
    ),
    Setting("rate_limit_per_minute", int, 0, "requests per minute per caller (0: unlimited)", 0),
    Setting(
        "ip_rate_limit_per_minute",
        int,
        0,
        "requests per minute per client address (0: unlimited)",
        0,
    ),
    Setting(
        "jwt_leeway",
        float,
        library_default(IdentityConfig, "jwt_leeway_s"),
        "seconds of clock skew allowed on JWT exp/nbf/iat (jwt callers)",
        0,
    ),
    Setting(
        "identity_fetch_timeout",
        float,
        library_default(IdentityConfig, "fetch_timeout_s"),
        "seconds an identity provider (discovery, JWKS) has to answer",
        above=0,
    ),
    Setting(
        "pact_token_max_lifetime",
        float,
        DEFAULT_PACT_MAX_LIFETIME_S,
        "seconds a personal agent's token may live (exp - iat) on the PACT URL",
        above=0,
    ),
    Setting(
        "card_signing_key",
        str,
        "",
        "sign the agent cards with this private key (JWK or PEM); published at"
        " /.well-known/jwks.json",
    ),
    Setting("tls_cert", str, "", "serve HTTP and gRPC over TLS with this certificate (PEM)"),
    Setting("tls_key", str, "", "the private key of --tls-cert (PEM)"),
    Setting(
        "tls_client_ca",
        str,
        "",
        "verify client certificates against this CA (PEM): mtls callers",
    ),
    Setting("introspection_url", str, "", "OAuth 2.0 token introspection endpoint (RFC 7662)"),
    Setting("introspection_client_id", str, "", "our client id at the introspection endpoint"),
    Setting(
        "introspection_client_secret",
        str,
        "",
        "our client secret at the introspection endpoint (better in the environment)",
    ),
    Setting(
        "introspection_cache",
        float,
        library_default(IdentityConfig, "introspection_cache_s"),
        "seconds an active introspection answer is reused (at most until the token's exp)",
        0,
    ),
    Setting(
        "oauth2_token_url",
        str,
        "",
        "the token URL the card names for introspection callers (client credentials)",
    ),
    Setting(
        "max_running_tasks",
        int,
        library_default(TaskCaps, "max_running_tasks"),
        "running tasks per caller (0: unlimited)",
        0,
    ),
    Setting(
        "max_open_contexts",
        int,
        library_default(TaskCaps, "max_open_contexts"),
        "contexts with unfinished tasks per caller (0: unlimited)",
        0,
    ),
    Setting(
        "access_log",
        bool,
        False,
        "log one line per call: binding, method, caller, status, duration (never keys or bodies)",
    ),
    Setting(
        "metrics",
        bool,
        True,
        "count calls and serve Prometheus metrics at /metrics (loopback or a caller key;"
        " --no-metrics: off; its cost: docs/performance.md)",
    ),
    Setting(
        "metrics_port",
        int,
        -1,
        "serve /metrics (and /healthz, /readyz) on this port, unguarded, instead of the"
        " HTTP port; 0 picks a free port, -1: on the HTTP port",
        -1,
        maximum=65535,
    ),
    Setting(
        "otlp_endpoint",
        str,
        "",
        "send traces over OTLP/HTTP to this endpoint (e.g. http://127.0.0.1:4318; the standard"
        " OTEL_EXPORTER_OTLP_ENDPOINT works too); off when neither is set",
    ),
    Setting(
        "log_format",
        str,
        "plain",
        "plain or json (json: a JSON object a line; serve's and telegram's stderr carry"
        " gRPC core's own lines as JSON too)",
        choices=("plain", "json"),
    ),
    Setting(
        "log_level",
        str,
        "info",
        "debug, info, warning, error",
        choices=("debug", "info", "warning", "error"),
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


class SettingsError(ValueError):
    """A setting has a value of the wrong type; the message names the source and key."""


def _convert(setting: Setting, value: Any, source: str) -> Any:
    where = f"{source}: {setting.name}"
    if setting.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in (
            "1",
            "true",
            "yes",
            "on",
            "0",
            "false",
            "no",
            "off",
            "",
        ):
            return value.lower() in ("1", "true", "yes", "on")
        raise SettingsError(f"{where} must be true or false")
    if setting.kind is list:
        if isinstance(value, str):
            return [v for v in value.split(os.pathsep) if v]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise SettingsError(f"{where} must be a list of strings")
    if setting.kind in (int, float):
        if isinstance(value, bool):
            raise SettingsError(f"{where} must be a number")
        try:
            number = setting.kind(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a huge TOML int
            raise SettingsError(f"{where} must be a number") from None
        if isinstance(number, float) and not math.isfinite(number):  # "nan", "inf" parse
            raise SettingsError(f"{where} must be a finite number")
        if setting.above is not None and number <= setting.above:
            raise SettingsError(f"{where} must be more than {setting.above:g}")
        if setting.minimum is not None and number < setting.minimum:
            raise SettingsError(f"{where} must be at least {setting.minimum:g}")
        if setting.maximum is not None and number > setting.maximum:
            raise SettingsError(f"{where} must be at most {setting.maximum:g}")
        return number
    if not isinstance(value, str):
        raise SettingsError(f"{where} must be a string")
    if setting.choices and value not in setting.choices:
        raise SettingsError(f"{where} must be one of: {', '.join(setting.choices)}")
    return value


def _merge(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None,
    config_file: Path | None,
    table: tuple[Setting, ...],
    section: str,
) -> dict[str, Any]:
    """Merge the three sources; ``flags`` holds only the flags actually given.
    ``table`` is the command's settings and ``section`` its TOML table (``serve``,
    ``telegram``)."""
    by_name = BY_NAME if table is SETTINGS else {s.name: s for s in table}
    environ = os.environ if environ is None else environ
    from_file: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise SettingsError(f"cannot read {config_file}: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{config_file} is not valid TOML: {exc}") from None
        values_in_file = data.get(section, data)
        if not isinstance(values_in_file, dict):
            raise SettingsError(f"{config_file}: [{section}] must be a table")
        for key, value in values_in_file.items():
            if key not in by_name:
                raise SettingsError(f"{config_file}: unknown setting {key!r}")
            from_file[key] = _convert(by_name[key], value, str(config_file))
    values: dict[str, Any] = {}
    for setting in table:
        if setting.name in flags and flags[setting.name] is not None:
            values[setting.name] = _convert(setting, flags[setting.name], setting.flag)
        elif setting.env in environ:
            values[setting.name] = _convert(setting, environ[setting.env], setting.env)
        elif setting.name in from_file:
            values[setting.name] = from_file[setting.name]
        else:
            values[setting.name] = setting.default
    return values


LlmStream = Literal["auto", "on", "off"]
SessionMode = Literal["per-context", "per-task", "shared"]
UpstreamTransport = Literal["auto", "jsonrpc", "rest", "grpc"]
CardFormat = Literal["auto", "1.0", "hybrid"]
StoreKind = Literal["workspace", "memory", "postgres"]
LogFormat = Literal["plain", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]


class VerbSettings:
    """What every verb's typed settings share: the table they are made from and its TOML
    section. Subclasses are frozen dataclasses with one field per setting of ``TABLE``
    (same name, the setting's type; no defaults: those are the table's)."""

    __slots__ = ()
    TABLE: ClassVar[tuple[Setting, ...]]
    SECTION: ClassVar[str]
    # Every verb has these (read before the verb starts: logging is set up first).
    log_level: LogLevel
    log_format: LogFormat


SettingsT = TypeVar("SettingsT", bound=VerbSettings)


def build(kind: type[SettingsT], values: Mapping[str, Any]) -> SettingsT:
    """``kind`` from checked values by setting name (a list becomes a tuple); a setting
    ``values`` lacks takes the table's default."""
    given: dict[str, Any] = {}
    for setting in kind.TABLE:
        value = values.get(setting.name, setting.default)
        given[setting.name] = tuple(value) if setting.kind is list else value
    return kind(**given)


def load(
    kind: type[SettingsT],
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> SettingsT:
    """A verb's settings from its three sources: ``flags`` (only those actually given),
    then ``environ`` (``A2A_GATEWAY_*``; default: the process environment), then the
    verb's table in ``config_file``."""
    return build(kind, _merge(flags, environ, config_file, kind.TABLE, kind.SECTION))


def resolve(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> ServeSettings:
    """``serve``'s settings (:func:`load` of :class:`ServeSettings`)."""
    return load(ServeSettings, flags, environ, config_file)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSettings(VerbSettings):
    """The assistant's model and runtime settings, the same in every verb that runs it
    (serve, chat, telegram): one set of typed fields for the three tables' rows."""

    llm_base_url: str
    llm_model: str
    llm_demo: bool
    llm_timeout: float
    llm_max_tokens: int
    llm_temperature: float | None
    llm_max_retries: int
    llm_stream: LlmStream
    llm_max_tool_rounds: int
    llm_context_budget: int
    llm_secret_wait: float
    session_idle_timeout: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSettings(ModelSettings):
    """What the verbs that host agents (``serve``, ``telegram``) share: one typed field per
    setting their two tables hold alike (listeners, stores, limits, identity, TLS,
    observability). A setting added to ``serve``'s table that the bot takes too
    (``telegram_settings.TELEGRAM_SETTINGS``) gets its field here, once."""

    host: str
    port: int
    grpc_port: int
    public_url: str
    workspaces_root: str
    session_mode: SessionMode
    message_template: str
    grpc_default_deadline: float
    grpc_stream_idle_timeout: float
    shutdown_grace: float
    allow_private_urls: bool
    jsonrpc_path: str
    rest_path: str
    card_name: str
    card_description: str
    card_skills: str
    card_extensions: str
    card_icon: str
    card_format: CardFormat
    max_hops: int
    max_file_bytes: int
    keepalive: float
    store: StoreKind
    database_url: str = field(repr=False)  # a secret
    database_pool_size: int
    database_lease: float
    fsync: bool
    task_retention: str
    task_retention_files: bool
    task_cache_entries: int
    task_cache_mib: int
    index_reconcile_interval: float
    list_max_mib: float
    event_log_kib: int
    event_log_tasks: int
    event_log_mib: int
    memory_event_log_mib: int
    memory_store_tasks: int
    memory_store_mib: int
    retry_keys: int
    retry_keys_mib: int
    rate_limit_per_minute: int
    ip_rate_limit_per_minute: int
    jwt_leeway: float
    identity_fetch_timeout: float
    pact_token_max_lifetime: float
    card_signing_key: str
    tls_cert: str
    tls_key: str
    tls_client_ca: str
    introspection_url: str
    introspection_client_id: str
    introspection_client_secret: str = field(repr=False)  # a secret
    introspection_cache: float
    oauth2_token_url: str
    max_running_tasks: int
    max_open_contexts: int
    access_log: bool
    metrics: bool
    metrics_port: int
    otlp_endpoint: str
    log_format: LogFormat
    log_level: LogLevel


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeSettings(HostSettings):
    """``serve``'s settings, resolved: one field per setting of :data:`SETTINGS`."""

    TABLE: ClassVar[tuple[Setting, ...]] = SETTINGS
    SECTION: ClassVar[str] = "serve"

    workspace: tuple[str, ...]
    agent: str
    exec: str
    faux: bool
    llm: bool
    upstream: str
    upstream_key: str = field(repr=False)  # a secret
    upstream_signing_secret: str = field(repr=False)  # a secret
    upstream_basic_user: str
    upstream_password: str = field(repr=False)  # a secret
    upstream_client_id: str
    upstream_client_secret: str = field(repr=False)  # a secret
    upstream_token_url: str
    upstream_token_command: str
    upstream_client_cert: str
    upstream_client_key: str
    upstream_ca_cert: str
    upstream_transport: UpstreamTransport
    upstream_timeout: float
    upstream_idle_timeout: float
    allow_anonymous: bool
