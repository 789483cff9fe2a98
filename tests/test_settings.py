"""serve's settings: flags over environment over TOML, each value checked at the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2a_gateway.settings import SettingsError, resolve


def test_precedence_flag_then_environment_then_file(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[serve]\nport = 9001\nname = "from file"\nlog_level = "debug"\n')
    environ = {"A2A_GATEWAY_PORT": "9002", "A2A_GATEWAY_NAME": "from env"}
    settings = resolve({"port": 9003}, environ=environ, config_file=config)
    assert settings["port"] == 9003
    assert settings["name"] == "from env"
    assert settings["log_level"] == "debug"
    assert resolve({}, environ={})["port"] == 8080


@pytest.mark.parametrize(
    ("flags", "environ", "needle"),
    [
        ({"log_level": "loud"}, {}, "--log-level: log_level must be one of"),
        ({}, {"A2A_GATEWAY_LOG_FORMAT": "xml"}, "A2A_GATEWAY_LOG_FORMAT: log_format"),
        ({}, {"A2A_GATEWAY_STORE": "disk"}, "store must be one of: workspace, memory"),
        ({}, {"A2A_GATEWAY_PORT": "eighty"}, "port must be a number"),
        ({}, {"A2A_GATEWAY_FAUX": "maybe"}, "faux must be true or false"),
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
