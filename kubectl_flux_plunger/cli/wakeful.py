"""A stream the main thread can be interrupted out of at any moment (``status --watch``).

A quiet watch leaves its reader blocked on the socket until the next event or bookmark (about
a minute).  CPython runs a signal's handler only between bytecodes: a SIGINT that arrives
after the interpreter's last check and before the read enters the kernel, or that the kernel
hands to another thread, interrupts no system call, and Ctrl-C would wait for that next
event.  :func:`wakeful` reads the stream on a daemon thread while the main thread waits for
each item in steps of :data:`TICK`: a signal is acted on within one step wherever it lands."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# the longest a delivered signal can wait before the main thread acts on it
TICK = 0.2
# items read ahead of the caller at most: a caller slower than the stream holds the stream
# back (the apiserver's own buffer, then its timeout), as a reader on the main thread did
DEPTH = 64


def wakeful(source: Iterator[T], *, tick: float = TICK, depth: int = DEPTH) -> Iterator[T]:
    """Yield ``source``'s items in order; its exception is raised here, where it would have
    been.  When the caller stops early the reader stops after the item it is waiting for
    (a watch's next event or bookmark) and closes ``source`` on its own thread."""
    items: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def hand(entry: tuple[bool, Any]) -> bool:
        """Queue ``entry`` for the caller unless it stopped listening."""
        while not stop.is_set():
            try:
                items.put(entry, timeout=tick)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for item in source:
                if not hand((True, item)):
                    break
            hand((False, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            hand((False, exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    threading.Thread(target=pump, name="wakeful-read", daemon=True).start()
    try:
        while True:
            try:
                ok, value = items.get(timeout=tick)
            except queue.Empty:
                continue
            if ok:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        stop.set()
