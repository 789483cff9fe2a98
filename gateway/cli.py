"""The ``a2a-gateway`` command: ``serve`` hosts an agent; other verbs call agents."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import gc
import logging
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__, grpc_env  # noqa: F401 (grpc_env: before anything imports grpc)
from .agents_cli import add_parser as _add_agents
from .agents_cli import run as _agents
from .callers_cli import add_parser as _add_callers
from .callers_cli import run as _callers
from .chat_settings import CHAT_SETTINGS, ChatSettings
from .logs import setup_logging
from .settings import (
    SETTINGS,
    ServeSettings,
    Setting,
    SettingsError,
    SettingsT,
    heading_order,
    load,
)
from .startup import StartupError, report
from .stderr_relay import relay_stderr
from .telegram_settings import TELEGRAM_SETTINGS, TelegramSettings
from .verbs import EXIT_CODES_HELP, VERBS, add_verbs, run_verb

log = logging.getLogger("a2a_gateway")

DESCRIPTION = "An A2A 1.0 gateway: 'serve' hosts an agent; the other verbs call agents."


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with usage mistakes in one line (exit status 2) instead of a usage dump.

    Sub-parsers (every verb) are made of this class too (argparse's default)."""

    def error(self, message: str) -> NoReturn:
        choice = _INVALID_CHOICE.search(message)
        if choice:
            close = difflib.get_close_matches(choice[1], re.findall(r"'([^']*)'", choice[2]), n=1)
            if close:
                message += f" (did you mean {close[0]}?)"
        report(f"{message} (see '{self.prog} --help')", prog=self.prog)
        raise SystemExit(2)


def _help_with_default(setting: Setting) -> str:
    """The setting's help, ending with its default unless the help already says it."""
    text = setting.help
    if "default" in text or setting.default in ("", [], None):
        return text
    if setting.kind is bool:
        return f"{text} (default: {'on' if setting.default else 'off'})"
    return f"{text} (default: {setting.default})"


def _add_settings(parser: argparse.ArgumentParser, table: tuple[Setting, ...]) -> None:
    """One flag per setting of ``table`` (bools as ``--x/--no-x``, lists repeatable),
    listed under the setting's heading."""
    groups: dict[str, Any] = {}
    for setting in sorted(table, key=lambda s: heading_order(s.heading)):
        group = groups.get(setting.heading)
        if group is None:
            group = groups[setting.heading] = parser.add_argument_group(setting.heading)
        kwargs: dict[str, Any] = {
            "dest": setting.name,
            "default": None,
            "help": _help_with_default(setting),
        }
        if setting.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif setting.kind is list:
            kwargs["action"] = "append"
            kwargs["metavar"] = setting.name.upper()
        else:
            kwargs["type"] = setting.kind
        group.add_argument(setting.flag, **kwargs)


def _add_host(sub: Any, name: str, table: tuple[Setting, ...], help_text: str, about: str) -> Any:
    """A verb that runs a host process, with one flag per setting of ``table`` and a
    ``--config`` TOML file whose table is named after the verb."""
    parser = sub.add_parser(
        name,
        usage=f"a2a-gateway {name} [options]  (by topic below; docs/configuration.md)",
        help=help_text,
        description=f"{about} Every setting can also be given as A2A_GATEWAY_<NAME> in the"
        f" environment or in the --config file ([{name}] table).",
    )
    parser.add_argument("--config", type=Path, help=f"TOML file ([{name}] table)")
    _add_settings(parser, table)
    return parser


def _add_serve(sub: Any) -> None:
    _add_host(
        sub,
        "serve",
        SETTINGS,
        "host an agent over JSON-RPC, HTTP+JSON and gRPC",
        "Host an agent over JSON-RPC, HTTP+JSON and gRPC.",
    )


def _add_telegram(sub: Any) -> None:
    _add_host(
        sub,
        "telegram",
        TELEGRAM_SETTINGS,
        "run the assistant as a Telegram bot (A2A on the side with --a2a)",
        "Run the owner's assistant as a Telegram bot: each allowed user's chat is an owner"
        " with a workspace under --workspaces-root. The token comes from TELEGRAM_BOT_TOKEN"
        " only.",
    )


def _add_chat(sub: Any) -> None:
    chat = _add_host(
        sub,
        "chat",
        CHAT_SETTINGS,
        "talk to the owner's assistant in the terminal (with the a2a tool)",
        "The owner's own conversation with the assistant (scope local-owner): a line on"
        " stdin is a message; results of watched remote tasks arrive as follow-ups."
        " --message runs one turn and exits. Same LLM settings as serve --llm.",
    )
    chat.add_argument("--message", help="run this one message, print the answer and exit")
    chat.add_argument(
        "--verbose",
        action="store_true",
        help="in the terminal program, show log lines on stderr too (always in .a2a/logs/chat.log)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="a2a-gateway",
        description=DESCRIPTION,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"a2a-gateway {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True)
    _add_serve(sub)
    _add_telegram(sub)
    _add_chat(sub)
    _add_callers(sub)
    _add_agents(sub)
    # The verbs that call agents: card, send, get, list, cancel, subscribe (verbs.py).
    add_verbs(sub)
    return parser


def _host_settings(args: argparse.Namespace, kind: type[SettingsT]) -> SettingsT | int:
    """The verb's settings from its three sources, logging set up; or the exit status of
    a settings mistake (reported in one line)."""
    flags = {s.name: getattr(args, s.name) for s in kind.TABLE}
    try:
        settings = load(kind, flags, config_file=args.config)
    except SettingsError as exc:
        return report(exc)
    setup_logging(settings.log_level, settings.log_format)
    if settings.log_format == "json" and kind is not ChatSettings:  # chat logs to a file
        relay_stderr()  # gRPC's own lines (and any other on descriptor 2) as JSON too
    return settings


def _run_host(main: Coroutine[Any, Any, int]) -> int:
    """Run a host until it ends: a start-up mistake is one line (exit 2), Ctrl-C is 0."""
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(main)
    except StartupError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return 0


def _serve(args: argparse.Namespace) -> int:
    settings = _host_settings(args, ServeSettings)
    if isinstance(settings, int):
        return settings
    from a2a_gateway.server.config import is_loopback  # after grpc_env (it imports grpc)

    if settings.allow_anonymous and not is_loopback(settings.host):
        print(
            "a2a-gateway: --allow-anonymous is only allowed on a loopback address",
            file=sys.stderr,
        )
        return 2
    from .proxy import settings_problem
    from .serve import run_server

    problem = settings_problem(settings)
    if problem:
        print(f"a2a-gateway: {problem}", file=sys.stderr)
        return 2

    tune_gc()
    return _run_host(run_server(settings))


def _telegram(args: argparse.Namespace) -> int:
    settings = _host_settings(args, TelegramSettings)
    if isinstance(settings, int):
        return settings
    from .telegram_cmd import run_telegram  # imports python-telegram-bot: only when used

    return _run_host(run_telegram(settings))


def _chat(args: argparse.Namespace) -> int:
    settings = _host_settings(args, ChatSettings)
    if isinstance(settings, int):
        return settings
    from .chat import run_chat

    return _run_host(run_chat(settings, message=args.message, verbose=args.verbose))


#: Young-generation threshold for a serving process (CPython's default is 700).
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Collector settings for a long-running server, applied once before serving.

    Measured on the bench's blocking sends (5 s at ~5,500 req/s): the default settings
    ran ~680 collections costing ~200 ms (4% of the CPU; a full collection ~25 ms).
    Moving the objects of start-up (modules, protobuf descriptors) out of the
    collector's sight (``gc.freeze``) and collecting the young generation every 10,000
    allocations instead of 700 cut that to ~130 collections and ~60 ms. Cycles are
    still collected, in larger batches.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (the default on Linux): measurably faster for the bindings."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The innermost sub-parser ``args`` came through (``callers add`` -> its parser)."""
    current: Any = parser
    while True:
        actions = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            return current
        chosen = getattr(args, actions[0].dest, None)
        if chosen not in actions[0].choices:
            return current
        current = actions[0].choices[chosen]


#: Longest extra word named in full (a longer one is cut).
_SHOWN_WORD_CHARS = 40


def _shown_extras(argv: Sequence[str], extras: list[str]) -> list[str | None]:
    """Each extra as it may be echoed: a flag's name, a positional word in full, or None
    for a value that follows a flag (it may be that flag's secret: ``--kye k_...``)."""
    shown: list[str | None] = []
    start = 0
    for extra in extras:
        try:
            at = argv.index(extra, start)
        except ValueError:
            at = -1
        start = at + 1 if at >= 0 else start
        if extra.startswith("-"):
            shown.append(extra.split("=", 1)[0])
        elif at > 0 and argv[at - 1].startswith("-") and argv[at - 1] != "--":
            shown.append(None)
        else:
            word = extra if len(extra) <= _SHOWN_WORD_CHARS else extra[:_SHOWN_WORD_CHARS] + "..."
            shown.append(repr(word) if not word.isprintable() or " " in word else word)
    return shown


def _takes(parser: argparse.ArgumentParser) -> str:
    """``get takes URL TASK_ID``: the verb's positional arguments, as its usage shows them."""
    words = []
    for action in parser._positionals._group_actions:
        if isinstance(action, argparse._SubParsersAction):
            return ""
        name = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        words.append(f"[{name}]" if action.nargs in ("?", "*") else name)
    verb = parser.prog.removeprefix("a2a-gateway ")
    return f"{verb} takes {' '.join(words)}" if words else f"{verb} takes no positional argument"


def _flags_without_values(
    parser: argparse.ArgumentParser, argv: Sequence[str], extras: list[str]
) -> list[str]:
    """``--json takes no value``: for a value given to a flag that takes none (the
    a2a-go CLI's ``send --json '{message}'``)."""
    hints: list[str] = []
    for extra in extras:
        if extra.startswith("-") or extra not in argv:
            continue
        at = list(argv).index(extra)
        action = parser._option_string_actions.get(argv[at - 1]) if at > 0 else None
        if action is not None and action.nargs == 0 and argv[at - 1] not in hints:
            hint = f"{argv[at - 1]} takes no value"
            if action.dest == "json" and "message_json" in {a.dest for a in parser._actions}:
                hint += " (it asks for JSON output): send a whole Message with --message JSON"
            hints.append(hint)
    return hints


def unknown_arguments(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    extras: list[str],
    argv: Sequence[str] = (),
) -> str:
    """The one-line message for arguments no parser took, with the closest valid flag,
    and what the verb takes when an extra word was given."""
    chosen = _chosen_parser(parser, args)
    flags = sorted(chosen._option_string_actions)
    hints = []
    for extra in extras:
        if extra.startswith("-"):
            close = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1, cutoff=0.6)
            if close:
                hints.append(f"{extra.split('=', 1)[0]}: did you mean {close[0]}?")
    # A value given to a refused flag (``--key k_...``) may be a secret, and stderr often
    # ends up in logs: only flag names and positional words are echoed.
    shown = _shown_extras(argv, extras)
    named = [word for word in shown if word is not None]
    values = len(shown) - len(named)
    message = "unrecognized arguments: " + " ".join(named)
    if values:
        message += f"{' and ' if named else ''}{values} value{'s' if values > 1 else ''} not shown"
    hints += _flags_without_values(chosen, argv, extras)
    if any(word is not None and not word.startswith("-") for word in shown):
        takes = _takes(chosen)
        hints.append(takes + ("; quote a text of several words" if "TEXT" in takes else ""))
    if hints:
        message += " (" + "; ".join(hints) + ")"
    return f"{message} (see '{chosen.prog} --help')"


#: The a2a-go CLI's verbs (``a2a discover URL``, ``a2a get task URL ID``) as ours.
_FOREIGN_VERBS = {
    ("discover",): ["card"],
    ("get", "card"): ["card"],
    ("get", "task"): ["get"],
    ("list", "tasks"): ["list"],
}


def a2a_go_verbs(argv: list[str]) -> list[str]:
    """``argv`` with an a2a-go verb spelled as ours: ``discover`` is ``card``, and the
    nouns ``get task``, ``get card`` and ``list tasks`` need are dropped (no URL is
    spelled ``task`` or ``tasks``, so the words cannot be meant otherwise)."""
    for words, ours in _FOREIGN_VERBS.items():
        if tuple(argv[: len(words)]) == words:
            return ours + argv[len(words) :]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = a2a_go_verbs(list(sys.argv[1:] if argv is None else argv))
    args, extras = parser.parse_known_args(argv)
    if extras:
        return report(
            unknown_arguments(parser, args, extras, argv), prog=_chosen_parser(parser, args).prog
        )
    if args.verb == "serve":
        return _serve(args)
    if args.verb == "telegram":
        return _telegram(args)
    if args.verb == "chat":
        return _chat(args)
    if args.verb == "callers":
        return _callers(args)
    if args.verb == "agents":
        return _agents(args)
    if args.verb in VERBS:
        return run_verb(args)
    parser.error(f"unknown verb {args.verb}")
    return 2


__all__ = ["ServeSettings", "build_parser", "main"]
