"""Injectable clocks that tests move by hand."""

from __future__ import annotations


class FakeClock:
    """An injectable clock (seconds) that tests move by hand: ``clock.now += 31``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
