"""The Telegram host: each allowed chat is an owner talking to the assistant.

python-telegram-bot's :class:`~telegram.ext.Application` receives updates (long
polling, or a webhook route on the host's own aiohttp app); :class:`TelegramHost`
turns each message of an allowed user into a job of that chat's :class:`ChatQueue`,
runs it as a turn of the chat's session on the assistant runtime (scope
``telegram-<chatId>``), shows "typing…" while it runs, streams the answer into one
edited message (:class:`LiveReply`) and sends the files the assistant hands over as
documents. Follow-ups (results of delegated tasks, notices
from inbound callers) are queued behind the running turn in the same chat.

Commands: ``/start`` and ``/help`` say what the bot does, ``/stop`` aborts the running
turn, ``/a2a`` shows the chat's agents, watches and callers (``status.py``).

Secrets (:meth:`TelegramHost.ask_secret`): an inbound caller's secret question is a
message in the owner's chat; the owner's *reply* to that message is the value. It goes
to the waiting turn only (never a turn of the chat's own session), is deleted from the
chat (``deleteMessage``; where Telegram refuses, the owner is told to delete it) and is
handed to the runtime's ``on_secret`` (log redaction) before anything else is done.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aiohttp import web

from a2a_gateway.agent.base import Signal
from a2a_gateway.agent.defaults import TURN_TIMEOUT_S
from a2a_gateway.agent.runtime import (
    Asked,
    FileReady,
    Finished,
    Runtime,
    TextDelta,
    TurnFailed,
)
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.files import SEND_CAP
from a2a_gateway.local.atomic_files import replace_file
from a2a_gateway.local.files import INBOX_FOLDER as INBOX
from a2a_gateway.local.files import sanitize_filename, save_new_file
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol.closing import Startable
from telegram import Bot, Message, Update
from telegram.constants import ChatAction
from telegram.error import BadRequest, RetryAfter, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler

from .access import AllowedUsers
from .chats import ChatQueue, Job
from .live_reply import LiveReply
from .outage import BotApiHealth, WatchedRequest

log = logging.getLogger("a2a_gateway.telegram")

#: The public Bot API; ``--telegram-base-url`` points elsewhere (self-hosted, tests).
DEFAULT_BASE_URL = "https://api.telegram.org"
#: Telegram shows "typing…" for about 5 seconds: renew it a little sooner.
TYPING_EVERY_S = 4.0
#: Where the owner's documents and photos land, under the workspace.
INBOX_FOLDERS = (INBOX, "telegram")
#: Bound on one Bot API call made by the host itself.
CALL_TIMEOUT_S = 30.0
#: Longest wait the host accepts from a "retry after" answer before giving up on a write.
MAX_RETRY_AFTER_S = 30.0
#: A chat's own settings (its time zone), in its workspace.
CHAT_SETTINGS_FILE = RELATIVE.telegram_settings
#: The header python-telegram-bot's webhook (and Telegram) carry the secret token in.
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: The owner's chat, for a secret question (the caller's name and the question follow).
SECRET_ASKED = (
    "🔑 {who} asks for a secret: {question}\n\nReply to this message with the value"
    " within {minutes} min. It goes to your assistant only, never to {who}, and I delete"
    " your reply from this chat."
)
SECRET_TAKEN = "Thank you: the value went to your assistant, and your message was deleted."
SECRET_NOT_DELETED = (
    "Thank you: the value went to your assistant. I could not delete your message:"
    " please delete it yourself."
)
SECRET_EXPIRED = "The secret question of {who} expired unanswered."
SECRET_LATE = "That question is no longer waiting: your message was deleted and not used."
SECRET_LATE_NOT_DELETED = (
    "That question is no longer waiting: your message was not used. I could not delete"
    " it: please delete it yourself."
)

HELP_TEXT = (
    "I am your assistant, running on a2a-gateway. Write to me and I answer; send a "
    "document or a photo and I can work with it.\n\n"
    "/stop aborts what I am doing.\n"
    "/tz Area/City sets the time zone of the follow-ups I get.\n"
    "/a2a shows the agents I can call, the tasks I am waiting for, and who may call me.\n\n"
    "To let me call another agent, add it to this chat's workspace: "
    "a2a-gateway agents add NAME URL --workspace {workspace}\n"
    "To let another agent call me, give it a key: "
    "a2a-gateway callers add NAME --workspace {workspace}"
)


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """What the host needs to run (see ``a2a-gateway telegram --help``)."""

    token: str
    allowed_users: frozenset[int]
    workspaces_root: Path
    base_url: str = DEFAULT_BASE_URL
    webhook_url: str = ""  # empty: long polling
    time_zone: str = "UTC"
    max_file_bytes: int = SEND_CAP
    poll_timeout_s: float = 30.0
    #: How long one turn may run (``--turn-timeout``; as chat's) before it is stopped
    #: and the chat told so.
    turn_timeout_s: float = TURN_TIMEOUT_S


class TelegramHost(Startable):
    """Start with :meth:`start`, stop with :meth:`stop` (or ``async with``)."""

    def __init__(
        self,
        config: TelegramConfig,
        runtime: Runtime,
        *,
        tools_for: Callable[[int, Path], ToolRegistry] | None = None,
        status: Callable[[int, Path], Awaitable[str]] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self._runtime = runtime
        self._tools_for = tools_for
        self._status = status
        self._now = now
        self._allowed = AllowedUsers(config.allowed_users)
        self._chats: dict[int, ChatQueue] = {}
        self._follow_ups: set[asyncio.Future[bool]] = set()  # not run yet
        #: Secret questions waiting for the owner's reply: (chat, message id) -> answer.
        self._secrets: dict[tuple[int, int], asyncio.Future[str]] = {}
        #: The latest questions asked, answered or not: a late reply to one is deleted,
        #: never taken as a message of the owner's own conversation.
        self._asked_secrets: collections.deque[tuple[int, int]] = collections.deque(maxlen=256)
        self._stopping = False
        self.webhook_secret = secrets.token_urlsafe(32)
        _quiet_token_loggers()  # before the Bot exists: it logs its URLs when built
        base = config.base_url.rstrip("/")
        self.health = BotApiHealth(base)
        timeouts = {
            "connect_timeout": 10.0,
            "read_timeout": config.poll_timeout_s + 10.0,
            "write_timeout": CALL_TIMEOUT_S,
        }
        builder = (
            ApplicationBuilder()
            .token(config.token)
            .base_url(f"{base}/bot")
            .base_file_url(f"{base}/file/bot")
            .request(WatchedRequest(self.health, connection_pool_size=256, **timeouts))
            .get_updates_request(WatchedRequest(self.health, connection_pool_size=1, **timeouts))
        )
        if config.webhook_url:
            builder = builder.updater(None)  # updates come in through webhook_route
        self.application: Application[Any, Any, Any, Any, Any, Any] = builder.build()
        self.application.add_handler(TypeHandler(Update, self._on_update))
        self.application.add_error_handler(self.health.handler_error)

    @property
    def bot(self) -> Bot:
        return cast(Bot, self.application.bot)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the Bot API (getMe), then poll or register the webhook."""
        await self.application.initialize()
        await self.application.start()
        if self.config.webhook_url:
            await self.bot.set_webhook(
                self.config.webhook_url,
                secret_token=self.webhook_secret,
                allowed_updates=["message"],
            )
            mode = "webhook"
        else:
            await self.bot.delete_webhook()
            updater = self.application.updater
            assert updater is not None
            await updater.start_polling(
                timeout=int(self.config.poll_timeout_s),
                allowed_updates=["message"],
                error_callback=self.health.polling_error,
            )
            mode = "long polling"
        log.info(
            "telegram bot @%s started (%s, %d allowed users)",
            self.bot.username,
            mode,
            len(self.config.allowed_users),
        )

    async def stop(self) -> None:
        self._stopping = True
        for chat in list(self._chats.values()):
            await chat.aclose()  # running turns end here; the runtime is the caller's
        self._chats.clear()
        for ran in list(self._follow_ups):  # queued, never run
            if not ran.done():
                ran.set_result(False)
        updater = self.application.updater
        if updater is not None and updater.running:
            await updater.stop()
        if self.application.running:
            await self.application.stop()
        await self.application.shutdown()

    async def aclose(self) -> None:
        """:meth:`stop`; a Bot API that fails meanwhile is logged, never raised: the
        host goes anyway (and python-telegram-bot's texts may quote the token)."""
        try:
            await self.stop()
        except Exception as exc:
            log.warning("telegram: stopping the bot failed (%s)", type(exc).__name__)

    # --- the webhook route (mounted on the host's aiohttp app) ------------------------------

    async def webhook_route(self, request: web.Request) -> web.Response:
        """``POST`` from Telegram: the secret token must match, then the update is
        queued for the application. A wrong or missing token is 403, nothing read."""
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.webhook_secret.encode()):
            log.warning("telegram webhook: refused a request with a wrong secret token")
            raise web.HTTPForbidden()
        try:
            data = await request.json()
            if not isinstance(data, dict):
                raise TypeError("an update is a JSON object")
            update = Update.de_json(data, self.bot)
        except (ValueError, TypeError, KeyError, AttributeError):
            # python-telegram-bot reads a malformed update with whatever error its
            # attribute access hits: every one of them is the sender's mistake.
            raise web.HTTPBadRequest() from None
        await self.application.update_queue.put(update)
        return web.Response()

    # --- what the host is asked to do from outside ------------------------------------------

    def workspace(self, chat_id: int) -> Path:
        """``<root>/<chatId>``, created on first use."""
        folder = self.config.workspaces_root / str(chat_id)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @staticmethod
    def scope(chat_id: int) -> str:
        return f"telegram-{chat_id}"

    async def notify_owner(self, chat_id: int, caller: str, text: str) -> None:
        """An inbound caller's ``notify_owner``: ``<caller>: <text>`` in the chat."""
        await self._send_text(chat_id, f"{caller}: {text}")

    async def ask_secret(
        self, chat_id: int, caller: str | None, question: str, wait_s: float
    ) -> str | None:
        """Ask the owner for a secret in the chat: the reply to the question's message
        is the value (None when no reply came within ``wait_s``, or the chat is not an
        owner's)."""
        if chat_id not in self.config.allowed_users:
            log.warning("a secret question for chat %s, which is not allowed: not asked", chat_id)
            return None
        who = caller or "your assistant"
        minutes = max(1, round(wait_s / 60))
        text = SECRET_ASKED.format(who=who, question=question, minutes=minutes)
        sent = await _call(lambda: self.bot.send_message(chat_id, text))
        if not isinstance(sent, Message):
            return None
        key = (chat_id, sent.message_id)
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._secrets[key] = answer
        self._asked_secrets.append(key)
        log.info("chat %s: %s asks for a secret (waiting %g s)", chat_id, who, wait_s)
        try:
            async with asyncio.timeout(wait_s):
                return await answer
        except TimeoutError:
            with contextlib.suppress(TelegramError, TimeoutError):
                await self._send_text(chat_id, SECRET_EXPIRED.format(who=who))
            return None
        finally:
            del self._secrets[key]

    async def _take_secret(self, message: Message, answer: asyncio.Future[str]) -> None:
        """The owner's reply to a secret question: the value for the waiting turn,
        then deleted from the chat."""
        value = message.text or ""
        if answer.done():  # a late reply: deleted, taken by no one
            self._runtime.on_secret(value)
            note, gone = SECRET_LATE, SECRET_LATE_NOT_DELETED
        elif not value.strip():
            await self._send_text(message.chat_id, "Reply with the value as text.")
            return
        else:
            self._runtime.on_secret(value)  # before any log line could hold it
            answer.set_result(value)
            note, gone = SECRET_TAKEN, SECRET_NOT_DELETED
        try:
            await _call(lambda: self.bot.delete_message(message.chat_id, message.message_id))
        except (TelegramError, TimeoutError) as exc:
            log.warning("chat %s: the secret's message was not deleted: %s", message.chat_id, exc)
            note = gone
        await self._send_text(message.chat_id, note)

    def follow_up(
        self, chat_id: int, text: str, *, label: str = "follow-up"
    ) -> asyncio.Future[bool] | None:
        """Run ``text`` as a turn of the chat's session, behind the running turn, with
        the chat's local time as a header. None when the chat is not allowed or its
        queue is full (the caller keeps the text); else a future that becomes True once
        the turn has answered (or ``/stop`` ended it), False when it failed, ran over
        its bound, or the host stopped first: the caller keeps the text then too (the
        owner sees only the model's answer, never the text itself)."""
        if chat_id not in self.config.allowed_users:
            return None
        prompt_text = f"{self._time_header(chat_id)}\n{text}"
        ran: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            ok = False
            try:
                ok = await self._run_turn(chat_id, prompt_text, (), follow_up=True)
            except asyncio.CancelledError:
                ok = not self._stopping  # /stop: the owner ended it, so it was taken
                raise
            finally:
                if not ran.done():
                    ran.set_result(ok)

        if not self._queue(chat_id).put(Job(run, label)):
            return None
        self._follow_ups.add(ran)
        ran.add_done_callback(self._follow_ups.discard)
        return ran

    async def wait_idle(self, chat_id: int) -> None:
        """Wait until the chat has no queued or running job (tests)."""
        chat = self._chats.get(chat_id)
        if chat is not None:
            await chat.join()

    # --- updates ------------------------------------------------------------------------------

    async def _on_update(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        if not isinstance(update, Update):
            return
        message = update.message
        if message is None:
            return
        user = message.from_user
        chat_id = message.chat_id
        # Only private chats with an allowed user: in a group anyone could speak.
        if message.chat.type != "private" or not self._allowed.allows(
            user.id if user is not None else None
        ):
            return
        replied = message.reply_to_message
        if replied is not None and (chat_id, replied.message_id) in self._asked_secrets:
            answer = self._secrets.get((chat_id, replied.message_id))
            if answer is None:  # answered or expired already
                answer = asyncio.get_running_loop().create_future()
                answer.cancel()
            await self._take_secret(message, answer)
            return
        text = message.text or message.caption or ""
        command = text.split(maxsplit=1)[0].split("@", 1)[0] if text.startswith("/") else ""
        if command in ("/start", "/help"):
            await self._send_text(chat_id, HELP_TEXT.format(workspace=self.workspace(chat_id)))
        elif command == "/stop":
            chat = self._chats.get(chat_id)
            stopped = chat is not None and chat.stop_current()
            await self._send_text(chat_id, "Stopped." if stopped else "Nothing is running.")
        elif command == "/tz":
            await self._set_time_zone(chat_id, text)
        elif command == "/a2a":
            report = (
                await self._status(chat_id, self.workspace(chat_id))
                if self._status is not None
                else "A2A is not set up on this bot."
            )
            await self._send_text(chat_id, report)
        else:
            self._queue(chat_id).put(Job(lambda: self._owner_message(message), "message"))

    def _queue(self, chat_id: int) -> ChatQueue:
        chat = self._chats.get(chat_id)
        if chat is None:
            chat = self._chats[chat_id] = ChatQueue(chat_id)
        return chat

    async def _owner_message(self, message: Message) -> None:
        chat_id = message.chat_id
        try:
            files = await self._receive_files(message)
        except _FileProblem as problem:
            await self._send_text(chat_id, str(problem))
            return
        text = message.text or message.caption or ""
        await self._run_turn(chat_id, text, files, follow_up=False)

    async def _receive_files(self, message: Message) -> tuple[Path, ...]:
        """Save a document or the largest photo size to ``inbox/telegram/``."""
        if message.document is not None:
            file_id = message.document.file_id
            size = message.document.file_size
            name = message.document.file_name or "document"
        elif message.photo:
            photo = message.photo[-1]  # the largest size comes last
            file_id, size, name = photo.file_id, photo.file_size, f"photo-{message.message_id}.jpg"
        else:
            return ()
        limit = self.config.max_file_bytes
        if size is not None and size > limit:
            raise _FileProblem(f"That file is larger than {limit} bytes; I did not save it.")
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                telegram_file = await self.bot.get_file(file_id)
                data = bytes(await telegram_file.download_as_bytearray())
        except (TelegramError, TimeoutError) as exc:
            log.warning(
                "chat %s: could not download a file: %s", message.chat_id, type(exc).__name__
            )
            raise _FileProblem("I could not download that file from Telegram.") from None
        if len(data) > limit:
            raise _FileProblem(f"That file is larger than {limit} bytes; I did not save it.")
        workspace = self.workspace(message.chat_id)
        path, relative = await asyncio.to_thread(
            save_new_file, workspace, INBOX_FOLDERS, sanitize_filename(name), data
        )
        log.info("chat %s: saved %s (%d bytes)", message.chat_id, relative, len(data))
        return (path,)

    # --- one turn -----------------------------------------------------------------------------

    async def _run_turn(
        self, chat_id: int, text: str, files: tuple[Path, ...], *, follow_up: bool
    ) -> bool:
        """One turn, its answer written to the chat; True when the model answered."""
        answered = False
        workspace = self.workspace(chat_id).resolve()
        tools = self._tools_for(chat_id, workspace) if self._tools_for is not None else None
        reply = LiveReply(_ChatSink(self, chat_id))
        cancelled = Signal()
        typing = asyncio.create_task(self._keep_typing(chat_id))
        turn = self._runtime.run_turn(
            self.scope(chat_id), workspace, text, files=files, tools=tools, cancelled=cancelled
        )
        bound = asyncio.timeout(self.config.turn_timeout_s)
        try:
            async with bound, contextlib.aclosing(turn) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        await reply.add(event.text)
                    elif isinstance(event, FileReady):
                        await reply.finish()  # the text so far goes before the file
                        await self._send_file(chat_id, event)
                    elif isinstance(event, Finished):
                        await reply.finish(event.text)
                        answered = True
                    elif isinstance(event, Asked):  # owner sessions get no request_input
                        await reply.finish(event.question)
                        answered = True
                    elif isinstance(event, TurnFailed):
                        await reply.finish()
                        await self._send_text(chat_id, f"Sorry, that did not work: {event.text}")
        except asyncio.CancelledError:
            cancelled.set()
            await reply.close()
            raise
        except TimeoutError:
            if not bound.expired():
                raise  # a Bot API call's own bound
            cancelled.set()
            await reply.close()
            seconds = self.config.turn_timeout_s
            log.warning("chat %s: turn stopped after %g s", chat_id, seconds)
            await self._send_text(
                chat_id, f"Sorry, that took longer than {seconds:g} s, so I stopped it."
            )
            return False
        finally:
            typing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await typing
        return answered

    async def _keep_typing(self, chat_id: int) -> None:
        while True:
            with contextlib.suppress(TelegramError, TimeoutError):
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    await self.bot.send_chat_action(chat_id, ChatAction.TYPING)
            await asyncio.sleep(TYPING_EVERY_S)

    def _time_header(self, chat_id: int) -> str:
        return f"[Follow-up, local time {self.local_time(chat_id)}]"

    def local_time(self, chat_id: int) -> str:
        """``2026-12-01 13:30 (Europe/Lisbon)``: now, in the chat's time zone."""
        zone_name = self.chat_time_zone(chat_id)
        local = self._now().astimezone(ZoneInfo(zone_name))
        return f"{local:%Y-%m-%d %H:%M} ({zone_name})"

    def chat_time_zone(self, chat_id: int) -> str:
        """The chat's own zone (``/tz``, kept in ``.a2a/telegram.json``), else the
        host's ``--time-zone``, else UTC."""
        path = self.config.workspaces_root / str(chat_id) / CHAT_SETTINGS_FILE
        with contextlib.suppress(OSError, ValueError, AttributeError):
            chosen = json.loads(path.read_text(encoding="utf-8")).get("time_zone")
            if isinstance(chosen, str) and valid_zone(chosen):
                return chosen
        return self.config.time_zone if valid_zone(self.config.time_zone) else "UTC"

    async def _set_time_zone(self, chat_id: int, text: str) -> None:
        parts = text.split(maxsplit=1)
        if len(parts) == 1:
            zone = self.chat_time_zone(chat_id)
            await self._send_text(chat_id, f"Time zone: {zone}. Change it with /tz Area/City.")
            return
        zone = parts[1].strip()
        if not valid_zone(zone):
            await self._send_text(chat_id, f"Unknown time zone {zone!r}: try e.g. Europe/Lisbon.")
            return
        path = self.workspace(chat_id) / CHAT_SETTINGS_FILE
        await asyncio.to_thread(_write_json, path, {"time_zone": zone})
        await self._send_text(chat_id, f"Time zone set to {zone}.")

    # --- writing to the chat --------------------------------------------------------------------

    async def _send_text(self, chat_id: int, text: str) -> None:
        sink = _ChatSink(self, chat_id)
        reply = LiveReply(sink)
        await reply.finish(text)

    async def _send_file(self, chat_id: int, file: FileReady) -> None:
        await _call(
            lambda: self.bot.send_document(chat_id, document=file.data, filename=file.filename)
        )


def _quiet_token_loggers() -> None:
    """The bot token is part of every Bot API URL: python-telegram-bot's DEBUG lines
    and httpx's INFO request lines print those URLs. Keep both above those levels, so
    the token never reaches a log whatever level the host logs at."""
    for name, level in (("telegram", logging.INFO), ("httpx", logging.WARNING)):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < level:
            logger.setLevel(level)


def valid_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0o666 before the umask: the mode Path.write_text gives a new file.
    replace_file(path, json.dumps(value).encode("utf-8"), fsync=False, mode=0o666)


class _FileProblem(Exception):
    """A file the owner sent was not saved; the text tells the owner why."""


class _ChatSink:
    """LiveReply's writes as Bot API calls, each bounded; an edit to the same text and
    other refused edits are not errors."""

    def __init__(self, host: TelegramHost, chat_id: int) -> None:
        self._bot = host.bot
        self._chat_id = chat_id

    async def send(self, text: str) -> int:
        message = await _call(lambda: self._bot.send_message(self._chat_id, text))
        return message.message_id if isinstance(message, Message) else 0

    async def edit(self, message_id: int, text: str) -> None:
        try:
            await _call(
                lambda: self._bot.edit_message_text(
                    text, chat_id=self._chat_id, message_id=message_id
                )
            )
        except BadRequest as exc:
            if "not modified" not in str(exc).lower():
                log.warning("chat %s: an edit was refused: %s", self._chat_id, exc)
        except (TelegramError, TimeoutError) as exc:
            # An edit only shows progress: the next edit (or the final one) catches up,
            # so a slow or failing Bot API must not end the turn.
            log.warning("chat %s: an edit failed: %s", self._chat_id, type(exc).__name__)


async def _call(make_call: Callable[[], Awaitable[Any]]) -> Any:
    """One Bot API call, bounded; a "retry after" answer is waited out once."""
    for attempt in range(2):
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return await make_call()
        except RetryAfter as exc:
            wait = exc.retry_after
            seconds = wait.total_seconds() if hasattr(wait, "total_seconds") else float(wait)
            if attempt or seconds > MAX_RETRY_AFTER_S:
                raise
            await asyncio.sleep(seconds)
    return None
