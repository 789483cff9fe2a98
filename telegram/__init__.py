"""The Telegram host (``a2a-gateway telegram``): the owner's assistant in a Telegram chat.

Imported as ``a2a_gateway.telegram``; python-telegram-bot owns the top-level
``telegram`` package.
"""

from .host import TelegramConfig, TelegramHost

__all__ = ["TelegramConfig", "TelegramHost"]
