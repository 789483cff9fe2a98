"""``POST /a2a/push/{watchId}``: where remote agents push updates of the tasks our own
client watches (see ``client/watches.py``).

No key: the push config's token (``X-A2A-Notification-Token``) is the credential, checked
in constant time by the waker. An unknown watch, a wrong or missing token, or a host with
no waker answer 404, the same for all three. The body is never read: a push only means
"check now", and the watch reads the task itself.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

TOKEN_HEADER = "X-A2A-Notification-Token"
PUSH_ROUTE = "/a2a/push/{watchId}"


class PushWaker(Protocol):
    def wake(self, watch_id: str, token: str) -> bool:
        """Wake the watch when ``token`` is its token; False otherwise."""
        ...


PUSH_WAKER = web.AppKey("push_waker", PushWaker)


async def handle(request: web.Request) -> web.Response:
    waker = request.app.get(PUSH_WAKER)
    token = request.headers.get(TOKEN_HEADER, "")
    if waker is None or not waker.wake(request.match_info["watchId"], token):
        return web.Response(status=404)
    return web.Response(status=204)


def mount(app: web.Application, waker: PushWaker | None) -> None:
    """Add the receiver route to ``app`` (before any catch-all route)."""
    if waker is not None:
        app[PUSH_WAKER] = waker
    app.router.add_post(PUSH_ROUTE, handle)


def build_push_app(waker: PushWaker) -> web.Application:
    """An application with only the receiver (for hosts that serve nothing else)."""
    app = web.Application(client_max_size=1024 * 1024)
    mount(app, waker)
    return app
