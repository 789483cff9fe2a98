"""One-time links on which the owner gives a secret (``serve``'s secret asker).

A secret question of the assistant (``request_input`` with ``secret``) is never
answered by the caller: under ``serve``, the owner is asked on our own HTTP server, at
``<JSON-RPC mount>/secrets/<token>``. The link is written to the log (a URL: the value
is never logged) and appended to the workspace's ``.a2a/owner-inbox.jsonl``
(``{"ts", "caller", "text", "url", "expiresInS"}``), over the owner's trust: whoever
holds the link can answer, so it is unguessable (``secrets.token_urlsafe``, 256 bits),
found by its SHA-256 and compared in constant time, single use and expiring (the
runtime's ``--llm-secret-wait``).

``GET`` shows an HTML form (the question, who asked, a password field); ``POST`` takes
``value`` (or ``decline``) once. A link that was used, has expired or never existed
answers 404, the same page for all three; an expired one also ends the wait at once.
Pages are never cached, framed or sent as a referrer.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from a2a_gateway.agent.tools.interaction import OWNER_INBOX, SecretQuestion

log = logging.getLogger("a2a_gateway.secrets")

Clock = Callable[[], float]

SECRETS_FOLDER = "secrets"
#: The longest value a form takes (a credential, not a file).
MAX_VALUE_BYTES = 8192
_TOKEN_BYTES = 32
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
}
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{title}</title>
<style>body{{font:16px system-ui,sans-serif;max-width:36em;margin:3em auto;padding:0 1em}}
input[type=password]{{width:100%;padding:.5em;font:inherit}}button{{padding:.5em 1em;font:inherit}}
</style></head><body>
{body}
</body></html>
"""
NOT_VALID = (
    "This link is not valid: it was used, it expired, or it never existed. Nothing was sent."
)


def secrets_path(jsonrpc_mount: str) -> str:
    """Where the links live: ``<JSON-RPC mount>/secrets``."""
    mount = jsonrpc_mount.strip().strip("/")
    return f"/{mount}/{SECRETS_FOLDER}" if mount else f"/{SECRETS_FOLDER}"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(slots=True)
class _Pending:
    token: str
    question: SecretQuestion
    expires: float
    answer: asyncio.Future[str | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class SecretLinks:
    """The links of the questions waiting now (:class:`~a2a_gateway.agent.tools.
    interaction.SecretAsker`); :meth:`mount` adds the routes to the gateway's app.

    ``base_url()`` is the server's external base (``--public-url``, else where it
    listens); ``clock`` (monotonic seconds) decides expiry and is injectable."""

    def __init__(
        self, jsonrpc_mount: str, base_url: Callable[[], str], *, clock: Clock = time.monotonic
    ) -> None:
        self.path = secrets_path(jsonrpc_mount)
        self.base_url = base_url
        self.clock = clock
        self._pending: dict[bytes, _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def mount(self, app: web.Application) -> None:
        """Add ``GET`` and ``POST <path>/{token}`` (before any catch-all route)."""
        app.router.add_get(self.path + "/{token}", self.handle_get)
        app.router.add_post(self.path + "/{token}", self.handle_post)

    # --- the asker ------------------------------------------------------------------------

    async def ask_secret(self, question: SecretQuestion) -> str | None:
        """Issue a link, tell the owner where it is, and wait for its answer (None when
        declined or expired)."""
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        digest = _digest(token)
        pending = _Pending(token, question, self.clock() + question.wait_s)
        self._pending[digest] = pending
        url = f"{self.base_url().rstrip('/')}{self.path}/{token}"
        who = question.caller or "the assistant"
        try:
            line = orjson.dumps(
                {
                    "ts": round(time.time(), 3),
                    "caller": question.caller,
                    "text": f"{who} asks for a secret: {question.question}",
                    "url": url,
                    "expiresInS": question.wait_s,
                }
            )
            await asyncio.to_thread(_append_line, question.workspace / OWNER_INBOX, line + b"\n")
            log.info(
                "%s asks the owner for a secret: give it at %s (valid %g s, once)",
                who,
                url,
                question.wait_s,
            )
            try:
                async with asyncio.timeout(question.wait_s):
                    return await pending.answer
            except TimeoutError:
                log.info("the secret link for %s expired unanswered", who)
                return None
        finally:
            self._pending.pop(digest, None)
            if not pending.answer.done():
                pending.answer.set_result(None)

    def close(self) -> None:
        """End every wait without a value (the links stop working)."""
        for pending in list(self._pending.values()):
            if not pending.answer.done():
                pending.answer.set_result(None)
        self._pending.clear()

    # --- the pages ------------------------------------------------------------------------

    def _find(self, token: str) -> _Pending | None:
        """The waiting question of ``token``; None when used, expired (its wait ends
        now) or unknown."""
        pending = self._pending.get(_digest(token))
        if pending is None or not hmac.compare_digest(
            pending.token.encode(), token.encode("utf-8", "surrogatepass")
        ):
            return None
        if pending.answer.done():
            return None
        if self.clock() >= pending.expires:
            pending.answer.set_result(None)
            return None
        return pending

    async def handle_get(self, request: web.Request) -> web.Response:
        pending = self._find(request.match_info["token"])
        if pending is None:
            return _page(404, "Not valid", f"<p>{NOT_VALID}</p>")
        question = pending.question
        who = html.escape(question.caller or "Your assistant")
        left = max(0, int(pending.expires - self.clock()))
        body = (
            f"<h1>A secret is asked</h1><p><b>{who}</b> asks your assistant:</p>"
            f"<blockquote>{html.escape(question.question)}</blockquote>"
            "<p>The value goes to your assistant only, never to the one who asked. This"
            f" link works once, for {left // 60} min {left % 60} s more.</p>"
            '<form method="post"><p><input type="password" name="value"'
            ' autocomplete="off" autofocus required aria-label="value"></p>'
            '<p><button type="submit">Give it</button></p></form>'
            '<form method="post"><input type="hidden" name="decline" value="1">'
            '<p><button type="submit">Decline</button></p></form>'
        )
        return _page(200, "A secret is asked", body)

    async def handle_post(self, request: web.Request) -> web.Response:
        if (request.content_length or 0) > MAX_VALUE_BYTES + 1024:
            return _page(413, "Too long", "<p>The value is too long.</p>")
        token = request.match_info["token"]
        if self._find(token) is None:  # before reading anything
            return _page(404, "Not valid", f"<p>{NOT_VALID}</p>")
        try:
            form = await request.post()
        except ValueError:
            return _page(400, "Not a form", "<p>Send the form.</p>")
        pending = self._find(token)  # again: the read may have waited
        if pending is None:
            return _page(404, "Not valid", f"<p>{NOT_VALID}</p>")
        if form.get("decline"):
            pending.answer.set_result(None)
            return _page(200, "Declined", "<p>Declined: the assistant goes on without it.</p>")
        value = form.get("value")
        if not isinstance(value, str) or not value.strip():
            return _page(400, "Empty", "<p>The value is empty: go back and give one.</p>")
        if len(value.encode()) > MAX_VALUE_BYTES:
            return _page(413, "Too long", "<p>The value is too long.</p>")
        pending.answer.set_result(value)
        return _page(
            200,
            "Thank you",
            "<p>Thank you: the value went to your assistant. This link no longer works.</p>",
        )


def _page(status: int, title: str, body: str) -> web.Response:
    return web.Response(
        status=status,
        text=_PAGE.format(title=html.escape(title), body=body),
        content_type="text/html",
        headers=_HEADERS,
    )


def _append_line(path: Path, line: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as file:
        file.write(line)


__all__ = ["MAX_VALUE_BYTES", "NOT_VALID", "SecretLinks", "secrets_path"]
