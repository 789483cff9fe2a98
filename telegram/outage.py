"""When the Bot API cannot be reached: one WARNING per outage, never a traceback.

python-telegram-bot retries ``getUpdates`` with its own backoff (1 s, growing to 30 s)
and, left to its defaults, logs each failure with an 80-line traceback (about 18 of
them for a 10-second outage). Here every Bot API call goes through
:class:`WatchedRequest`, which tells :class:`BotApiHealth` whether the API answered:
the first failure of an outage is one WARNING line, the first answer after it one INFO
line. The polling loop's error callback and the Application's error handler then only
log what is *not* an outage (a refused call), in one line. The backoff stays the
library's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from telegram.error import NetworkError, TelegramError
from telegram.ext import ContextTypes
from telegram.request import HTTPXRequest

log = logging.getLogger("a2a_gateway.telegram")

#: Answers that mean the API (or the proxy before it) is down, not that a call was wrong.
_DOWN_STATUSES = frozenset({502, 503, 504})


class BotApiHealth:
    """Whether the Bot API answers; logs the start and the end of each outage once."""

    def __init__(self, base_url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = base_url
        self._clock = clock
        self._down_since: float | None = None
        self._failures = 0
        #: How many outages began (tests and the log's reader).
        self.outages = 0

    @property
    def down(self) -> bool:
        return self._down_since is not None

    @property
    def failures(self) -> int:
        """Failed calls in the current outage."""
        return self._failures

    def failed(self, why: str) -> None:
        self._failures += 1
        if self._down_since is not None:
            return
        self._down_since = self._clock()
        self.outages += 1
        log.warning(
            "cannot reach the Telegram Bot API at %s (%s); retrying with backoff",
            self.base_url,
            why,
        )

    def answered(self) -> None:
        if self._down_since is None:
            return
        seconds = self._clock() - self._down_since
        log.info(
            "the Telegram Bot API answers again after %.0f s (%d failed calls)",
            seconds,
            self._failures,
        )
        self._down_since = None
        self._failures = 0

    def polling_error(self, error: TelegramError) -> None:
        """``Updater.start_polling``'s error callback: an outage is already reported."""
        if not isinstance(error, NetworkError):
            log.warning("telegram: getUpdates failed: %s", one_line(error))

    async def handler_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The Application's error handler: a Bot API error while handling an update is
        one line (an outage already said so); anything else is our own bug, with its
        traceback."""
        error = context.error
        if isinstance(error, NetworkError):
            log.info("telegram: an update was not answered: %s", one_line(error))
        elif isinstance(error, TelegramError):
            log.warning("telegram: a Bot API call failed: %s", one_line(error))
        elif error is not None:
            log.error("telegram: handling an update failed", exc_info=error)


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class WatchedRequest(HTTPXRequest):
    """python-telegram-bot's HTTP client, reporting each call's outcome to ``health``."""

    def __init__(self, health: BotApiHealth, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._health = health

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        try:
            status, body = await super().do_request(*args, **kwargs)
        except NetworkError as exc:  # TimedOut too
            self._health.failed(one_line(exc))
            raise
        if status in _DOWN_STATUSES:
            self._health.failed(f"HTTP {status}")
        else:
            self._health.answered()
        return status, body


__all__ = ["BotApiHealth", "WatchedRequest", "one_line"]
