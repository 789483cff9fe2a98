"""serve's settings: flags over environment over TOML, each value checked at the source."""

from __future__ import annotations

import inspect
import re
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from pathlib import Path
from typing import ClassVar, Literal, get_args, get_type_hints

import pytest

from a2a_gateway import config_doc
from a2a_gateway.agent.assistant import AssistantConfig
from a2a_gateway.agent.defaults import SESSION_MODES, STREAM_MODES
from a2a_gateway.agent.provider import ProviderConfig
from a2a_gateway.agent.runtime import RuntimeConfig
from a2a_gateway.chat_settings import ChatSettings
from a2a_gateway.cli import main
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.client.clock import DEFAULT_MAX_WAIT_S
from a2a_gateway.client.transport import DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.local.files import DEFAULT_MAX_FILE_BYTES
from a2a_gateway.proxy import ignored_settings
from a2a_gateway.server import pg_store
from a2a_gateway.server.config import (
    CARD_FORMATS,
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
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.limits import TaskCaps
from a2a_gateway.server.task_store import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_MEMORY_TASKS,
    DEFAULT_RETRY_BYTES,
    DEFAULT_RETRY_KEYS,
)
from a2a_gateway.settings import (
    BY_NAME,
    SETTINGS,
    ServeSettings,
    Setting,
    SettingsError,
    VerbSettings,
    _convert,
    heading_order,
    load,
    resolve,
)
from a2a_gateway.telegram.host import TelegramConfig
from a2a_gateway.telegram_cmd import _serve_settings
from a2a_gateway.telegram_settings import TelegramSettings


def test_precedence_flag_then_environment_then_file(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[serve]\nport = 9001\ncard_name = "from file"\nlog_level = "debug"\n')
    environ = {"A2A_GATEWAY_PORT": "9002", "A2A_GATEWAY_CARD_NAME": "from env"}
    settings = resolve({"port": 9003}, environ=environ, config_file=config)
    assert settings.port == 9003
    assert settings.card_name == "from env"
    assert settings.log_level == "debug"
    assert resolve({}, environ={}).port == 8080


@pytest.mark.parametrize(
    ("flags", "environ", "needle"),
    [
        ({"log_level": "loud"}, {}, "--log-level: log_level must be one of"),
        ({}, {"A2A_GATEWAY_LOG_FORMAT": "xml"}, "A2A_GATEWAY_LOG_FORMAT: log_format"),
        ({}, {"A2A_GATEWAY_STORE": "disk"}, "store must be one of: workspace, memory"),
        ({}, {"A2A_GATEWAY_PORT": "eighty"}, "port must be a number"),
        ({}, {"A2A_GATEWAY_FAUX": "maybe"}, "faux must be true or false"),
        # A port past 65535 was taken modulo 65536 (99999 served on 34463), a negative
        # one failed at bind time with a resolver error that named no setting.
        ({"port": 99999}, {}, "--port: port must be at most 65535"),
        ({"port": -5}, {}, "--port: port must be at least 0"),
        ({}, {"A2A_GATEWAY_GRPC_PORT": "70000"}, "grpc_port must be at most 65535"),
        ({"grpc_port": -2}, {}, "--grpc-port: grpc_port must be at least -1"),
    ],
)
def test_bad_values_name_their_source(
    flags: dict[str, object], environ: dict[str, str], needle: str
) -> None:
    with pytest.raises(SettingsError, match=needle):
        resolve(flags, environ=environ)


def test_unknown_file_setting_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("[serve]\nprot = 1\n")
    with pytest.raises(SettingsError, match="unknown setting 'prot'"):
        resolve({}, environ={}, config_file=config)


# --- proxy mode's upstream settings --------------------------------------------------------


def test_upstream_settings_defaults_and_sources(tmp_path: Path) -> None:
    defaults = resolve({}, environ={})
    assert defaults.upstream_transport == "auto"
    assert defaults.upstream_timeout == DEFAULT_TIMEOUT
    assert defaults.upstream_idle_timeout == DEFAULT_STREAM_IDLE_TIMEOUT

    config = tmp_path / "gateway.toml"
    config.write_text(
        '[serve]\nupstream_transport = "rest"\nupstream_timeout = 5\nupstream_idle_timeout = 7.5\n'
    )
    from_file = resolve({}, environ={}, config_file=config)
    assert from_file.upstream_transport == "rest"
    assert from_file.upstream_timeout == 5.0  # a TOML integer is fine for seconds
    assert from_file.upstream_idle_timeout == 7.5

    environ = {"A2A_GATEWAY_UPSTREAM_TRANSPORT": "grpc", "A2A_GATEWAY_UPSTREAM_TIMEOUT": "2.5"}
    from_env = resolve({}, environ=environ, config_file=config)
    assert from_env.upstream_transport == "grpc"
    assert from_env.upstream_timeout == 2.5
    assert from_env.upstream_idle_timeout == 7.5

    flags = {"upstream_transport": "jsonrpc", "upstream_idle_timeout": 0.25}
    from_flags = resolve(flags, environ=environ, config_file=config)
    assert from_flags.upstream_transport == "jsonrpc"
    assert from_flags.upstream_idle_timeout == 0.25


@pytest.mark.parametrize(
    ("flags", "environ", "toml", "needle"),
    [
        (
            {"upstream_timeout": 0},
            {},
            "",
            "--upstream-timeout: upstream_timeout must be more than 0",
        ),
        ({"upstream_timeout": -1.5}, {}, "", "upstream_timeout must be more than 0"),
        (
            {},
            {"A2A_GATEWAY_UPSTREAM_IDLE_TIMEOUT": "0"},
            "",
            "A2A_GATEWAY_UPSTREAM_IDLE_TIMEOUT: upstream_idle_timeout must be more than 0",
        ),
        ({}, {"A2A_GATEWAY_UPSTREAM_TIMEOUT": "soon"}, "", "upstream_timeout must be a number"),
        ({}, {"A2A_GATEWAY_UPSTREAM_TIMEOUT": "nan"}, "", "upstream_timeout must be a finite"),
        ({}, {"A2A_GATEWAY_UPSTREAM_IDLE_TIMEOUT": "inf"}, "", "idle_timeout must be a finite"),
        ({}, {}, "upstream_idle_timeout = -3", "gateway.toml: upstream_idle_timeout must be more"),
        ({}, {}, "upstream_timeout = true", "upstream_timeout must be a number"),
        ({}, {}, "upstream_timeout = 1" + "0" * 400, "upstream_timeout must be a number"),
        (
            {"upstream_transport": "soap"},
            {},
            "",
            "--upstream-transport: upstream_transport must be one of: auto, jsonrpc, rest, grpc",
        ),
        ({}, {"A2A_GATEWAY_UPSTREAM_TRANSPORT": "GRPC"}, "", "upstream_transport must be one of"),
        ({}, {}, 'upstream_transport = "http"', "upstream_transport must be one of"),
    ],
)
def test_bad_upstream_values_name_the_setting(
    tmp_path: Path, flags: dict[str, object], environ: dict[str, str], toml: str, needle: str
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f"[serve]\n{toml}\n")
    with pytest.raises(SettingsError, match=re.escape(needle)):
        resolve(flags, environ=environ, config_file=config)


def test_upstream_settings_without_upstream_are_reported_as_ignored() -> None:
    assert ignored_settings(resolve({}, environ={})) == []
    given = resolve({"upstream_timeout": 5.0, "upstream_key": "k-123456"}, environ={})
    assert ignored_settings(given) == ["upstream_key", "upstream_timeout"]
    proxying = resolve({"upstream": "http://127.0.0.1:9", "upstream_timeout": 5.0}, environ={})
    assert ignored_settings(proxying) == []


def test_the_configuration_page_is_made_from_the_settings_tables() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == config_doc.render(), (
        "docs/configuration.md is out of date: make docs"
    )


def test_serve_help_lists_every_setting_under_its_heading(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    starts = {heading: text.index(f"\n{heading}:\n") for heading in {s.heading for s in SETTINGS}}
    order = sorted(starts, key=starts.__getitem__)
    assert order == sorted(order, key=heading_order)  # serving first, then by topic
    for setting in SETTINGS:
        # The flag's own line (a help text may wrap onto a line starting with a flag).
        found = re.search(rf"^  {re.escape(setting.flag)}(?=[ ,\n])", text, re.M)
        assert found, setting.flag
        at = found.start()
        after = [h for h in order if starts[h] < at]
        assert after[-1] == setting.heading, setting.name
    assert {s.heading for s in SETTINGS} >= {"serving", "store", "proxy mode", "identity and TLS"}


# --- typed settings: one field per setting, each default stated once ---------------------


def _expected_type(setting: Setting) -> object:
    """The field type a setting's kind, choices and default call for."""
    if setting.choices:
        return Literal[setting.choices]  # Literal[("a", "b")] is Literal["a", "b"]
    if setting.kind is list:
        return tuple[str, ...]
    if setting.default is None:
        return setting.kind | None
    return setting.kind


def _spelled(setting: Setting) -> str:
    """The field's annotation as written in the settings classes (for a drift message)."""
    expected = _expected_type(setting)
    return getattr(expected, "__name__", None) or str(expected).replace("typing.", "")


def _disagreements(kind: type[VerbSettings]) -> list[str]:
    """Where ``kind``'s fields and its table part: a setting without a field, a field
    without a setting, a field of another type, a field stating a default of its own."""
    hints = get_type_hints(kind)
    own = {f.name: f for f in fields(kind)}
    table = {s.name: s for s in kind.TABLE}
    problems = [
        f"no field for {name} (add `{name}: {_spelled(table[name])}`)"
        for name in table.keys() - own.keys()
    ]
    problems += [f"{name} is not a setting" for name in own.keys() - table.keys()]
    for name in own.keys() & table.keys():
        expected = _expected_type(table[name])
        if hints[name] != expected or get_args(hints[name]) != get_args(expected):
            problems.append(f"{name}: {hints[name]} where the table says {expected}")
        if own[name].default is not MISSING or own[name].default_factory is not MISSING:
            problems.append(f"{name} states a default (the table's is the one)")
    return sorted(problems)


VERB_SETTINGS = [ServeSettings, ChatSettings, TelegramSettings]


@pytest.mark.parametrize("kind", VERB_SETTINGS, ids=lambda kind: kind.SECTION)
def test_each_verbs_settings_have_one_typed_field_per_setting_of_its_table(
    kind: type[VerbSettings],
) -> None:
    assert _disagreements(kind) == []


@dataclass(frozen=True, slots=True, kw_only=True)
class _Drifted(VerbSettings):
    """A settings class that has drifted from its table, every way the check knows."""

    TABLE: ClassVar[tuple[Setting, ...]] = (
        Setting("port", int, 8080, "a port"),
        Setting("mode", str, "a", "a mode", choices=("a", "b")),
        Setting("gone", bool, False, "no field for this one"),
        Setting("temperature", float, None, "optional"),
    )
    SECTION: ClassVar[str] = "drifted"

    port: float
    mode: str
    temperature: float = 0.5
    extra: int


def test_the_field_check_names_each_drift() -> None:
    assert _disagreements(_Drifted) == [
        "extra is not a setting",
        "mode: <class 'str'> where the table says typing.Literal['a', 'b']",
        "no field for gone (add `gone: bool`)",
        "port: <class 'float'> where the table says <class 'int'>",
        "temperature states a default (the table's is the one)",
        "temperature: <class 'float'> where the table says float | None",
    ]


@pytest.mark.parametrize("kind", VERB_SETTINGS, ids=lambda kind: kind.SECTION)
def test_defaults_pass_their_own_checks_and_build_frozen_settings(
    kind: type[VerbSettings],
) -> None:
    built = load(kind, {}, environ={})
    for setting in kind.TABLE:
        if setting.default is not None:
            assert _convert(setting, setting.default, "default") == setting.default
        value = getattr(built, setting.name)
        assert value == (tuple(setting.default) if setting.kind is list else setting.default)
    with pytest.raises(FrozenInstanceError):
        built.log_level = "debug"
    secrets = {"upstream_key": "k-upstream-1", "introspection_client_secret": "s-intro-1"}
    names = {f.name for f in fields(built)}
    shown = repr(load(kind, {k: v for k, v in secrets.items() if k in names}, {}))
    assert "upstream_key" not in shown and "introspection_client_secret" not in shown
    assert not any(secret in shown for secret in secrets.values())


def test_the_telegram_hosts_serve_settings_keep_its_values_and_default_the_rest(
    tmp_path: Path,
) -> None:
    telegram = load(TelegramSettings, {"port": 9, "llm_model": "m", "a2a": True}, environ={})
    config = TelegramConfig(token="t", allowed_users=frozenset(), workspaces_root=tmp_path)
    serve = _serve_settings(telegram, config)
    assert (serve.port, serve.llm_model, serve.llm, serve.workspaces_root) == (
        9,
        "m",
        True,
        str(tmp_path),
    )
    assert (serve.workspace, serve.agent, serve.upstream) == ((), "", "")


MIB = 1024 * 1024


def test_table_defaults_are_the_librarys() -> None:
    """Each default the library also states is the library's: the table refers to the
    library's constant or dataclass field (checked here, so a restated default that
    drifts fails), including the few it cannot import cheaply (asyncpg, python-telegram-bot,
    the HTTP client) and must state beside them."""
    server, identity, caps = ServerConfig(), IdentityConfig(), TaskCaps()
    provider, runtime, assistant = ProviderConfig("m"), RuntimeConfig(), AssistantConfig()
    workspace_store = inspect.signature(WorkspaceTaskStore).parameters
    telegram = {f.name: f.default for f in fields(TelegramConfig)}
    library = {
        "host": server.host,
        "port": server.port,
        "grpc_port": server.grpc_port,
        "jsonrpc_path": Mounts().jsonrpc,
        "rest_path": Mounts().rest,
        "keepalive": server.keepalive_interval_s,
        "max_hops": server.max_hops,
        "grpc_default_deadline": server.grpc_default_deadline_s,
        "grpc_stream_idle_timeout": server.grpc_stream_idle_s,
        "shutdown_grace": server.shutdown_grace_s,
        "card_format": CardConfig().format,
        "jwt_leeway": identity.jwt_leeway_s,
        "identity_fetch_timeout": identity.fetch_timeout_s,
        "introspection_cache": identity.introspection_cache_s,
        "pact_token_max_lifetime": identity.pact_max_lifetime_s,
        "max_running_tasks": caps.max_running_tasks,
        "max_open_contexts": caps.max_open_contexts,
        "llm_base_url": provider.base_url,
        "llm_timeout": provider.timeout_s,
        "llm_max_tokens": provider.max_tokens,
        "llm_temperature": provider.temperature,
        "llm_max_retries": provider.max_retries,
        "llm_stream": provider.stream,
        "llm_max_tool_rounds": runtime.max_tool_rounds,
        "llm_context_budget": runtime.context_budget_chars,
        "session_idle_timeout": runtime.idle_timeout_s,
        "session_mode": assistant.session_mode,
        "message_template": assistant.message_template,
        "max_file_bytes": assistant.max_file_bytes,
        "upstream_timeout": DEFAULT_TIMEOUT,
        "upstream_idle_timeout": DEFAULT_STREAM_IDLE_TIMEOUT,
        "memory_store_tasks": DEFAULT_MEMORY_TASKS,
        "memory_store_mib": DEFAULT_MEMORY_BYTES // MIB,
        "retry_keys": DEFAULT_RETRY_KEYS,
        "retry_keys_mib": DEFAULT_RETRY_BYTES // MIB,
        "event_log_kib": DEFAULT_TASK_LOG_BYTES // 1024,
        "event_log_tasks": DEFAULT_INDEX_TASKS,
        "event_log_mib": DEFAULT_LOG_TOTAL_BYTES // MIB,
        "memory_event_log_mib": DEFAULT_MEMORY_LOG_BYTES // MIB,
        "list_max_mib": DEFAULT_LIST_MAX_BYTES / MIB,
        "database_pool_size": pg_store.DEFAULT_POOL_SIZE,
        "database_lease": pg_store.DEFAULT_LEASE_S,
        "task_cache_entries": workspace_store["cache_entries"].default,
        "task_cache_mib": workspace_store["cache_bytes"].default // MIB,
        "index_reconcile_interval": workspace_store["reconcile_interval_s"].default,
        "a2a_wait": inspect.signature(A2ATool).parameters["wait_s"].default,
        "a2a_max_wait": DEFAULT_MAX_WAIT_S,
        "watch_timeout": inspect.signature(WatchRegistry).parameters["watch_timeout_s"].default,
        "turn_timeout": telegram["turn_timeout_s"],
        "telegram_base_url": telegram["base_url"],
        "time_zone": telegram["time_zone"],
    }
    tables = {s.name: s for kind in VERB_SETTINGS for s in kind.TABLE}
    assert {name: tables[name].default for name in library} == library
    assert BY_NAME["max_file_bytes"].default == DEFAULT_MAX_FILE_BYTES == telegram["max_file_bytes"]
    assert BY_NAME["llm_stream"].choices == STREAM_MODES
    assert BY_NAME["session_mode"].choices == SESSION_MODES
    assert BY_NAME["card_format"].choices == CARD_FORMATS
