"""``a2a-gateway agents``: the agents a workspace's assistant may call (agents.json).

- ``agents add NAME URL --workspace DIR [--description D] [--allow-private]`` appends an
  entry. The key comes from ``A2A_GATEWAY_AGENT_KEY`` or, on a terminal, from a prompt
  that does not echo (empty: no key); it is never a flag, so it never lands in shell
  history or process listings.
- ``agents list --workspace DIR [--allow-private-urls]`` fetches every card (10 s each,
  concurrently) and shows name, url, whether it answered, the card's name and skills,
  and of the key only the last 4 characters (keys of 12 characters or more).
- ``agents remove NAME --workspace DIR``.

The file is rewritten atomically under a lock, keeping every other entry as it was; a
malformed file is left alone and the command fails.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

from a2a_gateway.client.agents_file import (
    NAME_PATTERN,
    agents_path,
    read_agents,
    url_problem,
)
from a2a_gateway.client.directory import fetch_agent_cards, one_line
from a2a_gateway.local.atomic_files import replace_file

from .callers_cli import CallersError, locked, read_json_array

KEY_ENV = "A2A_GATEWAY_AGENT_KEY"


class AgentsError(Exception):
    """A problem to report in one line (exit status 1)."""


def _read_list(path: Path) -> list[Any]:
    try:
        return read_json_array(path)
    except CallersError as exc:
        raise AgentsError(str(exc)) from None


def _write(path: Path, data: list[Any]) -> None:
    replace_file(path, json.dumps(data, indent=2, ensure_ascii=False).encode() + b"\n", fsync=True)


def add_agent(
    workspace: Path,
    name: str,
    url: str,
    *,
    key: str | None,
    description: str = "",
    allow_private: bool = False,
) -> None:
    if not NAME_PATTERN.match(name):
        raise AgentsError(f"name must match [a-z0-9-]{{1,40}}: {name[:60]!r}")
    problem = url_problem(url)
    if problem:
        raise AgentsError(problem)
    path = agents_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"name": name, "url": url.strip()}
    if key:
        entry["key"] = key
    if description:
        entry["description"] = description
    if allow_private:
        entry["allow_private"] = True
    with locked(path):
        data = _read_list(path)
        if any(isinstance(item, dict) and item.get("name") == name for item in data):
            raise AgentsError(f"an agent named {name!r} already exists in {path}")
        data.append(entry)
        _write(path, data)


def remove_agent(workspace: Path, name: str) -> None:
    path = agents_path(workspace)
    with locked(path):
        data = _read_list(path)
        kept = [item for item in data if not (isinstance(item, dict) and item.get("name") == name)]
        if len(kept) == len(data):
            raise AgentsError(f"no agent named {name[:60]!r} in {path}")
        _write(path, kept)


def _key_from_user(name: str) -> str | None:
    if KEY_ENV in os.environ:
        return os.environ[KEY_ENV].strip() or None
    if not sys.stdin.isatty():
        return None
    return getpass.getpass(f"Key for {name} (empty: none): ").strip() or None


# --- the verbs ------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    agents = sub.add_parser("agents", help="manage the agents a workspace's assistant may call")
    verbs = agents.add_subparsers(dest="agents_verb", required=True)
    add = verbs.add_parser(
        "add", help=f"add an agent (key from {KEY_ENV} or a prompt, never a flag)"
    )
    add.add_argument("name", help="agent name, [a-z0-9-]{1,40}")
    add.add_argument("url", help="the agent's base URL, or its card URL (ending in .json)")
    add.add_argument("--workspace", type=Path, required=True, help="workspace folder")
    add.add_argument("--description", default="", help="replaces the card's description")
    add.add_argument(
        "--allow-private", action="store_true", help="this agent may be on a private address"
    )
    show = verbs.add_parser("list", help="list agents, fetching their cards (keys hidden)")
    show.add_argument("--workspace", type=Path, required=True, help="workspace folder")
    show.add_argument(
        "--allow-private-urls", action="store_true", help="every agent may be on a private address"
    )
    remove = verbs.add_parser("remove", help="remove an agent")
    remove.add_argument("name")
    remove.add_argument("--workspace", type=Path, required=True, help="workspace folder")


def run(args: argparse.Namespace) -> int:
    try:
        if args.agents_verb == "add":
            key = _key_from_user(args.name)
            add_agent(
                args.workspace,
                args.name,
                args.url,
                key=key,
                description=args.description,
                allow_private=args.allow_private,
            )
            shown = "with a key" if key else "without a key"
            print(f"added agent {args.name!r} ({shown}) to {agents_path(args.workspace)}")
            return 0
        if args.agents_verb == "remove":
            remove_agent(args.workspace, args.name)
            print(f"removed agent {args.name!r}")
            return 0
        return asyncio.run(_list(args))
    except AgentsError as exc:
        print(f"a2a-gateway agents: {exc}", file=sys.stderr)
        return 1


async def _list(args: argparse.Namespace) -> int:
    agents = read_agents(args.workspace)
    for note in agents.notes():
        print(f"warning: {note}", file=sys.stderr)
    if not agents.agents:
        print(f"no agents in {agents.path}", file=sys.stderr)
        return 1 if agents.error else 0
    results = await fetch_agent_cards(
        list(agents.agents.values()), allow_private_urls=args.allow_private_urls
    )
    for result in results:
        entry, card = result.entry, result.card
        print(f"{entry.name}  {entry.url}  key {entry.key_hint()}")
        if card is None:
            print(f"  reachable: no ({one_line(result.problem or '')})")
            continue
        print(f"  reachable: yes; card name: {one_line(card.name)}")
        skills = ", ".join(one_line(s.name or s.id, 80) for s in card.skills)
        print(f"  skills: {skills or '(none)'}")
    return 0
