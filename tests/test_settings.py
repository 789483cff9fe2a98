"""serve's settings: flags over environment over TOML, each value checked at the source."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from a2a_gateway import config_doc
from a2a_gateway.cli import main
from a2a_gateway.client.transport import DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT
from a2a_gateway.proxy import ignored_settings
from a2a_gateway.settings import SETTINGS, SettingsError, heading_order, resolve


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
