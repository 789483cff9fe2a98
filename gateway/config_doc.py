"""docs/configuration.md, made from the settings tables (the one definition of each
setting: its flag, environment variable, TOML key, type, default and help).

    python -P -m a2a_gateway.config_doc > docs/configuration.md

The suite checks that the page in the repository is what this prints, so a setting
added, renamed or given another default is documented in the same change.
"""

from __future__ import annotations

import sys
from itertools import groupby

from .chat_settings import CHAT_SETTINGS
from .settings import SETTINGS, Setting, heading_order
from .telegram_settings import TELEGRAM_SETTINGS

#: The verbs that run a host process, their TOML table and their settings.
VERBS: tuple[tuple[str, str, tuple[Setting, ...]], ...] = (
    ("serve", "host an agent over JSON-RPC, HTTP+JSON and gRPC", SETTINGS),
    ("chat", "the owner's conversation with the assistant in a terminal", CHAT_SETTINGS),
    ("telegram", "the assistant as a Telegram bot", TELEGRAM_SETTINGS),
)

INTRO = """\
# Configuration

<!-- Made by `python -P -m a2a_gateway.config_doc > docs/configuration.md`; the suite
checks it against the settings tables (gateway/settings.py and friends). Edit those. -->

Every setting of `serve`, `chat` and `telegram` can be given three ways; the first
found wins:

1. a flag: `--max-hops 5` (a yes/no setting: `--fsync` / `--no-fsync`; a list: repeat it);
2. the environment: `A2A_GATEWAY_MAX_HOPS=5` (yes/no: `1`, `true`, `yes`, `on` or `0`,
   `false`, `no`, `off`; a list: its items joined with `:`, the path separator);
3. a TOML file given with `--config FILE`, in the verb's table: `[serve]` `max_hops = 5`.

With nothing given, each has the default below, which works on 127.0.0.1 with no
configuration at all. Secrets (keys, passwords, client secrets) are read from the
environment only where the help says so, and never logged.
"""


def _default(setting: Setting) -> str:
    value = setting.default
    if setting.kind is bool:
        return "on" if value else "off"
    if value in ("", [], None):
        return "—"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(settings: list[Setting]) -> list[str]:
    lines = ["| flag | environment | default | what it does |", "|---|---|---|---|"]
    for s in settings:
        kind = "" if s.kind in (str, bool) else f" ({s.kind.__name__})"
        choices = f" One of: {', '.join(s.choices)}." if s.choices else ""
        text = _cell(s.help).rstrip(".") + "." + choices
        lines.append(f"| `{s.flag}`{kind} | `{s.env}` | {_default(s)} | {text} |")
    return lines


def render() -> str:
    """The whole page."""
    out = [INTRO]
    for verb, about, table in VERBS:
        out.append(f"## `{verb}`: {about}\n")
        out.append(f"TOML table: `[{verb}]`.\n")
        ordered = sorted(table, key=lambda s: heading_order(s.heading))
        for heading, settings in groupby(ordered, key=lambda s: s.heading):
            out.append(f"### {verb}: {heading}\n")
            out.append("\n".join(_table(list(settings))) + "\n")
    return "\n".join(out)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
