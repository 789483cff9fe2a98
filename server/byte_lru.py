"""A least-recently-used map bounded by a count and a byte budget, with O(1) eviction.

Each entry is stored with the number of bytes it holds (the caller's measure: the
encoded size of a record, the length of a key); inserting past either bound drops the
least recently used entries first (``OrderedDict.popitem(last=False)``, constant time,
unlike ``del d[next(iter(d))]`` on a plain dict, which walks the deleted slots at the
front). An entry larger than the whole byte budget is not kept at all.

``on_drop``, when given, is called with every value that leaves the map (replaced,
evicted, popped, or too large to be kept): a user keeping a running tally of what the
map holds (the memory store's tasks by state) stays exact without walking it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """At most ``max_entries`` entries holding at most ``max_bytes`` bytes together."""

    __slots__ = ("_data", "bytes", "evicted", "max_bytes", "max_entries", "on_drop")

    def __init__(
        self, max_entries: int, max_bytes: int, on_drop: Callable[[V], None] | None = None
    ) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError("bounds must not be negative")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0  # what the entries held now add up to
        self.evicted = 0  # entries dropped by the bounds, since creation
        self.on_drop = on_drop
        self._data: collections.OrderedDict[K, tuple[V, int]] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or None."""
        found = self._data.get(key)
        if found is None:
            return None
        self._data.move_to_end(key)
        return found[0]

    def peek(self, key: K) -> V | None:
        """The value without touching its recency."""
        found = self._data.get(key)
        return None if found is None else found[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Insert or replace ``key`` (most recently used), then evict to the bounds."""
        data = self._data
        on_drop = self.on_drop
        old = data.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
            if on_drop is not None:
                on_drop(old[0])
        if size > self.max_bytes or self.max_entries == 0:
            if on_drop is not None:
                on_drop(value)
            return
        data[key] = (value, size)
        self.bytes += size
        while len(data) > self.max_entries or self.bytes > self.max_bytes:
            _, (gone, dropped) = data.popitem(last=False)
            self.bytes -= dropped
            self.evicted += 1
            if on_drop is not None:
                on_drop(gone)

    def pop(self, key: K) -> V | None:
        found = self._data.pop(key, None)
        if found is None:
            return None
        self.bytes -= found[1]
        if self.on_drop is not None:
            self.on_drop(found[0])
        return found[0]

    def clear(self) -> None:
        """Drop every entry (each one passed to ``on_drop``)."""
        if self.on_drop is None:
            self._data.clear()
            self.bytes = 0
            return
        while self._data:
            self.pop(next(iter(self._data)))

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def values(self) -> Iterator[V]:
        """The values, least recently used first."""
        return (value for value, _ in self._data.values())
