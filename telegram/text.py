"""Telegram's message-size rule: a message holds at most 4,096 characters.

Long answers are split into several messages, preferably at a paragraph break, else at
a line break, else at a space, and only as a last resort inside a word.
"""

from __future__ import annotations

#: Telegram's limit on one message's text, in characters.
MAX_MESSAGE_CHARS = 4096


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` as consecutive pieces of at most ``limit`` characters (never empty ones);
    joining them gives back ``text`` less the whitespace at each cut."""
    if limit < 1:
        raise ValueError("limit must be positive")
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = -1
        for separator in ("\n\n", "\n", " "):
            at = window.rfind(separator)
            # A cut very early would leave a tiny piece: only take it past a quarter.
            if at > limit // 4:
                cut = at
                break
        if cut <= 0:
            cut = limit
        piece = rest[:cut].rstrip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].lstrip()
    if rest.strip():
        pieces.append(rest)
    return pieces
