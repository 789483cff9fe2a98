"""``serve --llm`` settings: flags, environment and TOML; the key only from the
environment; start-up mistakes in one line; docs/assistant.md names only real settings."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from a2a_gateway.agent.provider import DEFAULT_BASE_URL, ProviderConfig
from a2a_gateway.assistant_host import build_assistant, build_runtime, llm_api_key
from a2a_gateway.local.redaction import redact
from a2a_gateway.settings import BY_NAME, LLM_BASE_URL, SettingsError, resolve
from a2a_gateway.startup import StartupError
from tests.support.processes import GATEWAY

ROOT = Path(__file__).resolve().parents[1]


def test_llm_settings_from_each_source(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        '[serve]\nllm_model = "from-file"\nllm_temperature = 0.2\nsession_mode = "shared"\n'
        "llm_context_budget = 5000\n"
    )
    settings = resolve(
        {"llm": True, "llm_timeout": "7.5"},
        environ={"A2A_GATEWAY_LLM_MAX_TOOL_ROUNDS": "4", "A2A_GATEWAY_LLM_MODEL": "from-env"},
        config_file=config,
    )
    assert settings.llm is True
    assert settings.llm_model == "from-env"
    assert settings.llm_timeout == 7.5
    assert settings.llm_max_tool_rounds == 4
    assert settings.llm_temperature == 0.2
    assert settings.session_mode == "shared"
    assert settings.llm_context_budget == 5000
    defaults = resolve({}, environ={})
    assert defaults.llm_base_url == DEFAULT_BASE_URL == LLM_BASE_URL
    assert defaults.llm_temperature is None
    assert defaults.session_idle_timeout == 1800.0
    assert defaults.message_template == "{{a2a.text}}"
    assert defaults.llm_stream == ProviderConfig("m").stream == "auto"


async def test_llm_stream_reaches_the_provider() -> None:
    settings = resolve({"llm_model": "m"}, environ={"A2A_GATEWAY_LLM_STREAM": "off"})
    runtime = build_runtime(settings)
    try:
        assert runtime.provider.config.stream == "off"
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"session_mode": "sometimes"}, "session_mode must be one of"),
        ({"llm_timeout": "0"}, "llm_timeout must be more than 0"),
        ({"llm_max_tool_rounds": "0"}, "llm_max_tool_rounds must be at least 1"),
        ({"llm_temperature": "-1"}, "llm_temperature must be at least 0"),
        ({"llm_stream": "sometimes"}, "llm_stream must be one of: auto, on, off"),
    ],
)
def test_bad_llm_values_name_the_setting(flags: dict[str, str], needle: str) -> None:
    with pytest.raises(SettingsError, match=needle):
        resolve(flags, environ={})


def test_the_key_is_never_a_setting() -> None:
    assert not [name for name in BY_NAME if "key" in name and name.startswith("llm")]
    assert llm_api_key({"OPENAI_API_KEY": "b", "A2A_GATEWAY_LLM_API_KEY": "a"}) == "a"
    assert llm_api_key({"OPENAI_API_KEY": "b"}) == "b"
    assert llm_api_key({}) == ""


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({}, "--llm needs --llm-model"),
        ({"llm_model": "m", "exec": "cat"}, "--llm and --exec cannot be used together"),
        ({"llm_model": "m", "message_template": "{{a2a.nope}}"}, "unknown placeholder"),
    ],
)
def test_startup_mistakes(flags: dict[str, str], needle: str, tmp_path: Path) -> None:
    settings = resolve({"llm": True, **flags}, environ={})
    with pytest.raises(StartupError, match=re.escape(needle)):
        build_assistant(settings, [tmp_path])
    with pytest.raises(StartupError, match="needs a --workspace"):
        build_assistant(resolve({"llm": True, "llm_model": "m"}, environ={}), [])


def test_llm_without_model_exits_2_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*GATEWAY, "serve", "--llm", "--workspace", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == (
        "a2a-gateway: --llm needs --llm-model (the model name the provider knows) or --llm-demo"
    )
    assert "Traceback" not in done.stderr


def test_docs_model_section_names_real_settings() -> None:
    text = (ROOT / "docs" / "assistant.md").read_text(encoding="utf-8")
    section = text.split("## Run it on a model", 1)[1].split("\n## ", 1)[0]
    flags = set(re.findall(r"--([a-z][a-z0-9-]+)", section))
    assert {"llm", "llm-model", "session-mode", "message-template"} <= flags
    unknown = {f for f in flags if f.replace("-", "_") not in BY_NAME}
    assert unknown == set()


def test_the_key_is_registered_with_the_log_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every other secret the process learns is (local/redaction.register_secret): a log line that
    # would carry the model provider's key, whatever logs it, leaves without it.
    key = "sk-registered-llm-key-5d2e8f"
    monkeypatch.setenv("A2A_GATEWAY_LLM_API_KEY", key)
    build_runtime(resolve({"llm": True, "llm_model": "m"}, environ={}))
    assert redact(f"Authorization: Bearer {key}") == "Authorization: Bearer ***"
