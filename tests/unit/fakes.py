"""Fakes the unit tests share."""
from __future__ import annotations


class Clock:
    """The time, moved only by ``sleep`` and by whoever sets ``now``: a clock to inject
    (``clock()``), or a stand-in for the ``time`` module (``monotonic()``, ``sleep()``)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
