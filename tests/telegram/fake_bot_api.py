"""A local stand-in for Telegram's Bot API, for python-telegram-bot to talk to over HTTP.

It serves the subset the host uses (getMe, getUpdates, sendMessage, editMessageText,
sendChatAction, sendDocument, getFile and file downloads, setWebhook, deleteWebhook) at
``/bot<token>/<method>`` and ``/file/bot<token>/<path>``, records every call with its
decoded parameters, and lets a test queue incoming updates (messages, documents,
photos) that ``getUpdates`` hands out, or post them to a webhook.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.secrets import use_secret

BOT_USER = {"id": 4242, "is_bot": True, "first_name": "Gateway", "username": "gateway_bot"}


@dataclass
class Call:
    """One Bot API call as the fake received it."""

    method: str
    params: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)


class FakeBotApi:
    """Start with :meth:`start`; ``base_url`` is what ``--telegram-base-url`` takes."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[Call] = []
        self.files: dict[str, bytes] = {}  # file_id -> bytes (served by getFile + download)
        self.webhook: dict[str, Any] | None = None
        self.polls = 0  # getUpdates calls (not kept in ``calls``: there are many)
        self.failing: set[str] = set()  # methods answered with a 500 (a Bot API outage)
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(100)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/bot{token}/{method}", self._method)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        # A restart (after :meth:`stop`, an outage) comes back on the same port.
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[union-attr]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- what a test does ---------------------------------------------------------------

    async def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": next(self._update_ids), **update}
        async with self._changed:
            self._updates.append(update)
            self._changed.notify_all()
        return update

    async def push_text(self, chat_id: int, text: str, *, user_id: int | None = None) -> None:
        await self.push_update({"message": self._message(chat_id, user_id, text=text)})

    async def push_reply(self, chat_id: int, text: str, reply_to: int) -> int:
        """The owner's reply to the bot's message ``reply_to``; its message id."""
        replied = {
            "message_id": reply_to,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": BOT_USER,
            "text": "(the bot's message)",
        }
        message = self._message(chat_id, None, text=text, reply_to_message=replied)
        await self.push_update({"message": message})
        return int(message["message_id"])

    async def push_document(
        self, chat_id: int, filename: str, data: bytes, *, caption: str = ""
    ) -> None:
        file_id = f"doc-{len(self.files) + 1}"
        self.files[file_id] = data
        document = {
            "file_id": file_id,
            "file_unique_id": file_id,
            "file_name": filename,
            "file_size": len(data),
        }
        message = self._message(chat_id, None, document=document)
        if caption:
            message["caption"] = caption
        await self.push_update({"message": message})

    async def push_photo(self, chat_id: int, data: bytes) -> None:
        file_id = f"photo-{len(self.files) + 1}"
        self.files[file_id] = data
        photo = [
            {
                "file_id": file_id,
                "file_unique_id": file_id,
                "width": 10,
                "height": 10,
                "file_size": len(data),
            }
        ]
        await self.push_update({"message": self._message(chat_id, None, photo=photo)})

    def _message(self, chat_id: int, user_id: int | None, **content: Any) -> dict[str, Any]:
        user = user_id if user_id is not None else chat_id
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": user, "is_bot": False, "first_name": f"user{user}"},
            **content,
        }

    def sent(self, method: str, chat_id: int | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.method == method and (chat_id is None or c.params.get("chat_id") == chat_id)
        ]

    def chat_text(self, chat_id: int) -> list[str]:
        """The texts the chat shows now: every sent message after its last edit."""
        shown: dict[int, str] = {}
        for call in self.calls:
            if call.params.get("chat_id") != chat_id:
                continue
            if call.method == "sendMessage":
                shown[call.params["_message_id"]] = call.params["text"]
            elif call.method == "editMessageText":
                shown[call.params["message_id"]] = call.params["text"]
        return [shown[k] for k in sorted(shown)]

    async def wait_for(self, predicate: Any, limit_s: float = 30.0) -> None:
        """Wait until ``predicate(self)`` holds (checked on every recorded call)."""
        async with asyncio.timeout(limit_s), self._changed:
            await self._changed.wait_for(lambda: bool(predicate(self)))

    # --- the API ------------------------------------------------------------------------

    async def _method(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        method = request.match_info["method"]
        if method in self.failing:
            return web.json_response(
                {"ok": False, "error_code": 500, "description": "Internal Server Error"},
                status=500,
            )
        params, files = await _read_params(request)
        call = Call(method, params, files)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return web.json_response(
                {"ok": False, "error_code": 404, "description": "Not Found: method not found"},
                status=404,
            )
        result = await handler(call)
        if method == "getUpdates":
            self.polls += 1
        else:
            async with self._changed:
                self.calls.append(call)
                self._changed.notify_all()
        return web.json_response({"ok": True, "result": result})

    async def _api_getMe(self, call: Call) -> Any:
        return BOT_USER

    async def _api_getUpdates(self, call: Call) -> Any:
        offset = int(call.params.get("offset") or 0)
        # A short wait keeps tests quick; the client simply asks again.
        wait = min(float(call.params.get("timeout") or 0), 0.5)
        async with self._changed:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
            if not self._updates and wait > 0:
                try:
                    async with asyncio.timeout(wait):
                        await self._changed.wait_for(lambda: bool(self._updates))
                except TimeoutError:
                    pass
            return list(self._updates)

    async def _api_sendMessage(self, call: Call) -> Any:
        return self._sent_message(call, text=call.params["text"])

    async def _api_editMessageText(self, call: Call) -> Any:
        return self._sent_message(
            call, text=call.params["text"], message_id=call.params["message_id"]
        )

    async def _api_deleteMessage(self, call: Call) -> Any:
        return True

    async def _api_sendChatAction(self, call: Call) -> Any:
        return True

    async def _api_sendDocument(self, call: Call) -> Any:
        data = call.files.get("document", b"")
        file_id = f"out-{len(self.files) + 1}"
        self.files[file_id] = data
        name = call.params.get("_filename", "file")
        document = {
            "file_id": file_id,
            "file_unique_id": file_id,
            "file_name": name,
            "file_size": len(data),
        }
        return self._sent_message(call, document=document)

    async def _api_getFile(self, call: Call) -> Any:
        file_id = call.params["file_id"]
        data = self.files.get(file_id)
        if data is None:
            return {"file_id": file_id, "file_unique_id": file_id}
        return {
            "file_id": file_id,
            "file_unique_id": file_id,
            "file_size": len(data),
            "file_path": f"files/{file_id}",
        }

    async def _api_setWebhook(self, call: Call) -> Any:
        self.webhook = dict(call.params)
        return True

    async def _api_deleteWebhook(self, call: Call) -> Any:
        self.webhook = None
        return True

    def _sent_message(self, call: Call, *, message_id: int | None = None, **content: Any) -> Any:
        chat_id = call.params["chat_id"]
        if message_id is None:
            message_id = next(self._message_ids)
            call.params["_message_id"] = message_id
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": BOT_USER,
            **content,
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            raise web.HTTPUnauthorized()
        path = request.match_info["path"]
        file_id = path.removeprefix("files/")
        data = self.files.get(file_id)
        if data is None:
            raise web.HTTPNotFound()
        return web.Response(body=data)


async def _read_params(request: web.Request) -> tuple[dict[str, Any], dict[str, bytes]]:
    """python-telegram-bot posts form fields whose values are JSON (or plain strings), and
    multipart/form-data when it uploads a file."""
    params: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        async for part in reader:
            if part.name is None:
                continue
            if part.filename is not None:
                files[part.name] = bytes(await part.read())  # type: ignore[union-attr]
                params["_filename"] = part.filename
            else:
                params[part.name] = _value(await part.text())  # type: ignore[union-attr]
    elif request.content_type == "application/json":
        params = dict(await request.json())
    else:
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, str):
                params[key] = _value(value)
    return params, files


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


@contextlib.asynccontextmanager
async def fake_bot_api(token: str) -> AsyncIterator[FakeBotApi]:
    """A started fake; the token is declared to the suite's log scan."""
    use_secret(token)  # the suite's log scan fails if the token is ever logged
    api = FakeBotApi(token)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()
