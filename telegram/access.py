"""Who may talk to the bot: a fixed set of Telegram user ids.

A message from anyone else is ignored. Each stranger is logged once (not once per
message), so a bot that a spammer found cannot flood the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger("a2a_gateway.telegram")

#: How many distinct strangers are remembered for the one-line-per-user log rule.
_MAX_REMEMBERED = 10_000


class AllowedUsers:
    def __init__(self, user_ids: Iterable[int]) -> None:
        self._allowed = frozenset(user_ids)
        self._logged: set[int] = set()

    @property
    def ids(self) -> frozenset[int]:
        return self._allowed

    def allows(self, user_id: int | None) -> bool:
        if user_id is not None and user_id in self._allowed:
            return True
        if user_id not in self._logged and len(self._logged) < _MAX_REMEMBERED:
            self._logged.add(user_id if user_id is not None else -1)
            log.info("ignoring messages from Telegram user %s (not in the allowed users)", user_id)
        return False


def parse_user_ids(text: str) -> list[int]:
    """``"1, 2,3"`` -> ``[1, 2, 3]``; raises ValueError naming the bad item."""
    ids: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isascii() or not item.lstrip("-").isdigit():
            raise ValueError(f"not a Telegram user id: {item!r}")
        ids.append(int(item))
    return ids
