"""``a2a-gateway callers``: manage who may call a workspace's agent.

- ``callers add NAME --workspace DIR [--plaintext] [--signing] [--note TEXT]`` generates
  a strong key, prints it once on stdout (and, with ``--signing``, a signing secret on a
  second line), and appends the entry to ``<DIR>/.a2a/callers.json``. Only
  ``sha256:<hex>`` of the key is stored, with its first 8 characters as ``key_prefix``
  so people can tell keys apart; ``--plaintext`` stores the key itself instead.
- ``callers rotate NAME --workspace DIR [--plaintext] [--signing]`` gives the caller a
  new key (printed once; the old one stops working at once) and, with ``--signing``, a
  new signing secret; every other field is kept.
- ``callers remove NAME --workspace DIR`` deletes the caller.
- ``callers publish --workspace DIR`` / ``callers unpublish --workspace DIR`` set
  ``"published"`` in ``<DIR>/.a2a/card.json`` (keeping its other keys): while a
  workspace is unpublished its callers' calls are refused (401) and, once no workspace
  of the gateway is published, its public card answers 404. A running gateway notices
  at once (no restart).
- ``callers list --workspace DIR`` shows each valid caller's name, mode and note, and of
  its key only the stored prefix of a hashed key, or the last 4 characters of a
  plaintext key of 12 characters or more. Skipped entries are reported on stderr with
  the reason, never the key.

Every change rewrites the file atomically (temp file, fsync, rename) under a lock,
keeping every other entry as it was; a malformed file is left alone and the command
fails.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from a2a_gateway.local.atomic_files import replace_file
from a2a_gateway.server.auth import (
    CALLERS_FILE,
    HASH_PREFIX,
    MODE_ISOLATED,
    NAME_PATTERN,
    CallerEntry,
    parse_entry,
    read_callers,
)
from a2a_gateway.server.identity import hash_password
from a2a_gateway.server.publication import CARD_FILE, PUBLISHED_KEY

KEY_PREFIX = "a2a_"
#: How much of a new key a hashed entry keeps as ``key_prefix`` ("a2a_" + 4 characters).
DISPLAY_PREFIX_CHARS = 8
#: Key hints show this many trailing characters, and only of keys at least HINT_MIN long.
HINT_CHARS = 4
HINT_MIN = 12
MIN_PASSWORD_CHARS = 12
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class CallersError(Exception):
    """A problem to report in one line (exit status 1)."""


def generate_key() -> str:
    """256 random bits, URL-safe, with a prefix that secret scanners can spot."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def generate_signing_secret() -> str:
    return secrets.token_hex(32)


def hashed(key: str) -> str:
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def key_hint(entry: CallerEntry) -> str:
    """What ``list`` shows of a key: never more than its last 4 characters (of a JWT or
    Basic caller: whom it matches, which is no secret)."""
    if entry.jwt is not None:
        return f"jwt sub={entry.jwt.sub or '(claims)'} of {entry.jwt.issuer}"
    if entry.basic is not None:
        return f"basic user {entry.basic.username}"
    if entry.hashed:
        return f"{entry.key_prefix}... (sha256)" if entry.key_prefix else "(sha256 hash)"
    if len(entry.key) < HINT_MIN:
        return "(hidden: shorter than 12)"
    return "..." + entry.key[-HINT_CHARS:]


# --- the file -------------------------------------------------------------------------


def callers_path(workspace: Path) -> Path:
    return workspace / CALLERS_FILE


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock next to ``path``, so two ``add`` runs cannot lose an entry."""
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_json_array(path: Path) -> list[Any]:
    """The JSON array in ``path`` (empty when there is no file), or CallersError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CallersError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw) if raw.strip() else []
    except ValueError:
        raise CallersError(f"{path} is not valid JSON; fix it first (it was not changed)") from None
    if not isinstance(data, list):
        raise CallersError(f"{path} is not a JSON array; fix it first (it was not changed)")
    return data


def _key_fields(key: str, *, hash_key: bool) -> dict[str, str]:
    if not hash_key:
        return {"key": key}
    return {"key": hashed(key), "key_prefix": key[:DISPLAY_PREFIX_CHARS]}


def _write(path: Path, data: list[Any]) -> None:
    replace_file(path, json.dumps(data, indent=2, ensure_ascii=False).encode() + b"\n", fsync=True)


def _check_name(name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise CallersError(f"name must match [a-z0-9-]{{1,40}}: {name[:60]!r}")


def _index(data: list[Any], name: str, path: Path) -> int:
    for index, item in enumerate(data):
        if isinstance(item, dict) and item.get("name") == name:
            return index
    raise CallersError(f"no caller named {name!r} in {path}")


def add_caller(
    workspace: Path,
    name: str,
    *,
    hash_key: bool = True,
    signing: bool = False,
    note: str = "",
    identity: dict[str, Any] | None = None,
) -> tuple[str, str | None]:
    """Append a new caller; returns (key, signing secret or None). With ``identity``
    (``{"jwt": ...}`` or ``{"basic": ...}``) the caller has that instead of a key, and
    the key returned is ``""``."""
    _check_name(name)
    path = callers_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = "" if identity else generate_key()
    secret = generate_signing_secret() if signing else None
    fields = identity or _key_fields(key, hash_key=hash_key)
    entry: dict[str, Any] = {"name": name, **fields}
    entry["mode"] = MODE_ISOLATED
    if note:
        entry["note"] = note
    if secret is not None:
        entry["signing_secret"] = secret
    problem = parse_entry(entry, str(workspace))
    if isinstance(problem, str):
        raise CallersError(problem)
    with locked(path):
        data = read_json_array(path)
        if any(isinstance(item, dict) and item.get("name") == name for item in data):
            raise CallersError(f"a caller named {name!r} already exists in {path}")
        data.append(entry)
        _write(path, data)
    return key, secret


def rotate_caller(
    workspace: Path, name: str, *, hash_key: bool = True, signing: bool = False
) -> tuple[str, str | None]:
    """Give ``name`` a new key (and signing secret); returns (key, secret or None)."""
    _check_name(name)
    path = callers_path(workspace)
    key = generate_key()
    secret = generate_signing_secret() if signing else None
    with locked(path):
        data = read_json_array(path)
        entry = dict(data[_index(data, name, path)])
        if "jwt" in entry or "basic" in entry:
            raise CallersError(
                f"caller {name!r} has no key to rotate (it is a jwt or basic caller)"
            )
        entry.pop("key_prefix", None)
        entry.update(_key_fields(key, hash_key=hash_key))
        if secret is not None:
            entry["signing_secret"] = secret
        data[_index(data, name, path)] = entry
        _write(path, data)
    return key, secret


def remove_caller(workspace: Path, name: str) -> None:
    """Delete the caller ``name`` (CallersError when there is none)."""
    _check_name(name)
    path = callers_path(workspace)
    with locked(path):
        data = read_json_array(path)
        del data[_index(data, name, path)]
        _write(path, data)


# --- the verbs ------------------------------------------------------------------------


def set_published(workspace: Path, published: bool) -> Path:
    """Set ``published`` in the workspace's card.json (created if missing, other keys
    kept); the file's path. A card.json that is not a JSON object is left alone."""
    path = workspace / CARD_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CallersError(f"cannot create {path.parent}: {exc.strerror}") from None
    with locked(path):
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raw = b""
        except OSError as exc:
            raise CallersError(f"cannot read {path}: {exc.strerror}") from None
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise CallersError(
                f"{path} is not valid JSON; fix it first (it was not changed)"
            ) from None
        if not isinstance(data, dict):
            raise CallersError(f"{path} is not a JSON object; fix it first (it was not changed)")
        data[PUBLISHED_KEY] = published
        replace_file(
            path, json.dumps(data, indent=2, ensure_ascii=False).encode() + b"\n", fsync=True
        )
    return path


def add_parser(sub: Any) -> None:
    """Register ``callers add|rotate|remove|list|publish|unpublish`` on the top-level
    subparsers."""
    callers = sub.add_parser("callers", help="manage the callers of a workspace (API keys)")
    verbs = callers.add_subparsers(dest="callers_verb", required=True)
    add = verbs.add_parser("add", help="add a caller with a new key (printed once)")
    rotate = verbs.add_parser("rotate", help="give a caller a new key (printed once)")
    remove = verbs.add_parser("remove", help="delete a caller")
    for parser in (add, rotate, remove):
        parser.add_argument("name", help="caller name, [a-z0-9-]{1,40}")
        parser.add_argument("--workspace", type=Path, required=True, help="workspace folder")
    for parser in (add, rotate):
        parser.add_argument(
            "--plaintext",
            action="store_true",
            help="store the key itself (default: only its SHA-256 and first 8 characters)",
        )
        parser.add_argument(
            "--hashed", action="store_true", help="store only the key's SHA-256 (the default)"
        )
    add.add_argument("--signing", action="store_true", help="also require signed requests")
    rotate.add_argument("--signing", action="store_true", help="also issue a new signing secret")
    add.add_argument("--note", default="", help="a note for the owner")
    add.add_argument(
        "--basic",
        metavar="USERNAME",
        help="HTTP Basic instead of a key: a new password is printed once (scrypt hash stored)",
    )
    add.add_argument(
        "--password-stdin",
        action="store_true",
        help="with --basic: read the password from stdin instead of generating one",
    )
    add.add_argument("--jwt-issuer", metavar="URL", help="JWT bearer tokens of this OIDC issuer")
    add.add_argument("--jwt-audience", metavar="AUD", help="with --jwt-issuer: our audience")
    add.add_argument("--jwt-sub", metavar="SUB", help="with --jwt-issuer: the caller's sub claim")
    show = verbs.add_parser("list", help="list callers (no keys: at most a short part)")
    publish = verbs.add_parser("publish", help="serve the workspace's agent (the default)")
    unpublish = verbs.add_parser(
        "unpublish", help="refuse every call (401) and hide the public card (404)"
    )
    for parser in (show, publish, unpublish):
        parser.add_argument("--workspace", type=Path, required=True, help="workspace folder")


def run(args: argparse.Namespace) -> int:
    try:
        if args.callers_verb == "add":
            return _add(args)
        if args.callers_verb == "rotate":
            return _rotate(args)
        if args.callers_verb == "remove":
            remove_caller(args.workspace, args.name)
            print(f"removed caller {args.name!r} from {callers_path(args.workspace)}")
            return 0
        if args.callers_verb in ("publish", "unpublish"):
            published = args.callers_verb == "publish"
            path = set_published(args.workspace, published)
            flag = "true" if published else "false"
            print(f"{args.callers_verb}ed {args.workspace} ({path}: published={flag})")
            return 0
        return _list(args)
    except CallersError as exc:
        print(f"a2a-gateway callers: {exc}", file=sys.stderr)
        return 1


def _hash_key(args: argparse.Namespace) -> bool:
    if args.plaintext and args.hashed:
        raise CallersError("--plaintext and --hashed contradict each other")
    return not args.plaintext


def _shown_once(args: argparse.Namespace, done: str, key: str, secret: str | None) -> int:
    print(key)
    if secret is not None:
        print(secret)
    stored = "it is stored in the file" if args.plaintext else "only its SHA-256 hash is stored"
    print(
        f"{done}; the key above is shown only once ({stored})"
        + ("; the second line is its signing secret" if secret else ""),
        file=sys.stderr,
    )
    return 0


def _identity(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """The entry's identity when it is not a key, and the password to show once."""
    jwt_args = (args.jwt_issuer, args.jwt_audience, args.jwt_sub)
    if args.basic is not None and any(jwt_args):
        raise CallersError("--basic and --jwt-* name two identities; a caller has one")
    if args.password_stdin and args.basic is None:
        raise CallersError("--password-stdin goes with --basic")
    if args.basic is not None:
        password = sys.stdin.readline().rstrip("\r\n") if args.password_stdin else None
        if password is not None and len(password) < MIN_PASSWORD_CHARS:
            raise CallersError(f"the password must have at least {MIN_PASSWORD_CHARS} characters")
        shown = password is None
        password = password or secrets.token_urlsafe(24)
        basic = {"username": args.basic, "password_hash": hash_password(password)}
        return {"basic": basic}, password if shown else None
    if any(jwt_args):
        if not all(jwt_args):
            raise CallersError("--jwt-issuer, --jwt-audience and --jwt-sub go together")
        rule = {"issuer": args.jwt_issuer, "audience": args.jwt_audience, "sub": args.jwt_sub}
        return {"jwt": rule}, None
    return None, None


def _add(args: argparse.Namespace) -> int:
    identity, password = _identity(args)
    key, secret = add_caller(
        args.workspace,
        args.name,
        hash_key=_hash_key(args),
        signing=args.signing,
        note=args.note,
        identity=identity,
    )
    done = f"added caller {args.name!r} to {callers_path(args.workspace)}"
    if identity is None:
        return _shown_once(args, done, key, secret)
    shown = [line for line in (password, secret) if line is not None]
    for line in shown:
        print(line)
    names = [what for what, line in (("password", password), ("signing secret", secret)) if line]
    if names:
        done += f"; shown only once above: the {' and the '.join(names)}"
    print(done, file=sys.stderr)
    return 0


def _rotate(args: argparse.Namespace) -> int:
    key, secret = rotate_caller(
        args.workspace, args.name, hash_key=_hash_key(args), signing=args.signing
    )
    done = f"caller {args.name!r} has a new key (the old one no longer works)"
    return _shown_once(args, done, key, secret)


def _list(args: argparse.Namespace) -> int:
    path = callers_path(args.workspace)
    if not path.exists():
        print(f"no callers: {path} does not exist", file=sys.stderr)
        return 0
    entries, warnings = read_callers(path, str(args.workspace))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    rows = [
        (
            entry.name,
            entry.mode,
            key_hint(entry),
            "yes" if entry.policy.signing_secret else "no",
            _CONTROL.sub(" ", entry.note),
        )
        for entry in entries
    ]
    header = ("NAME", "MODE", "KEY", "SIGNED", "NOTE")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())
    return 0


__all__ = [
    "CallersError",
    "add_caller",
    "add_parser",
    "generate_key",
    "key_hint",
    "locked",
    "read_json_array",
    "remove_caller",
    "rotate_caller",
    "run",
]
