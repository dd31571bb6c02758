"""``Recent``: a mapping that remembers at most ``limit`` keys, the least recently used
forgotten first — for what a long-running process keeps per release or per Event only to
save work (a repeat logged at debug, an Event patched without a read), never for what
decides: forgetting an entry costs one more request or log line, never a wrong act.

Not thread-safe: its owner holds its own lock around it (issue 49: every piece of serve's
state that grows with the cluster's history has a bound)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("Recent needs a limit of at least 1")
        self.limit = limit
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value remembered for ``key`` (now the most recently used), else None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key``; beyond ``limit`` keys the oldest is forgotten."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)
