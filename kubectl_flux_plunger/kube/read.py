"""Reading: a GET that may find nothing, a paged LIST, and a WATCH stream — the watch-list
among them, with whether this server serves one (the readers fall back to a LIST when not).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..core.objects import Obj
from . import servers
from .errors import KubeError, Unreachable
from .official import ClientConfiguration
from .transport import Transport, _one_line

# The annotation of the BOOKMARK that ends a watch-list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


# Watch-lists in a row that gave no state (a stream that ended or failed before its
# initial events) before this process reads without them for WATCH_LIST_PAUSE seconds.
# Misses are passing (in the soak, right after an apiserver restart, watch-lists ended
# cleanly before their initial events for some seconds): after the pause one is tried, and
# a miss then pauses again at once.  Only a refusal (400/422) turns them off for good.
WATCH_LIST_MISSES = 3
WATCH_LIST_PAUSE = 300.0


class WatchLists:
    """Whether to read with a watch-list: not once the server refused one (``refused``,
    for good), nor for ``pause`` seconds after ``misses`` in a row gave no state."""

    def __init__(
        self,
        refused: bool = False,
        misses: int = WATCH_LIST_MISSES,
        pause: float = WATCH_LIST_PAUSE,
        clock: Callable[[], float] | None = None,  # time.monotonic
    ) -> None:
        self.refused = refused
        self.misses = 0  # in a row, since the last watch-list that gave its state
        self.pause = pause  # seconds
        self._limit, self._clock = misses, clock
        self._paused_until = 0.0

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic()

    @property
    def usable(self) -> bool:
        return not self.refused and self._now() >= self._paused_until

    def served(self) -> None:
        """A watch-list gave its state: the count of misses starts again."""
        self.misses = 0

    def missed(self) -> bool:
        """A watch-list gave no state.  True when that starts a pause (the caller says so)."""
        self.misses += 1
        if self.misses < self._limit:
            return False
        self._paused_until = self._now() + self.pause
        return True


class Reads:
    """The reads every resource part is made of, over one :class:`Transport`; and whether
    this server serves watch-lists."""

    def __init__(self, transport: Transport, configuration: ClientConfiguration) -> None:
        self._transport = transport
        # the server answers watch-lists (sendInitialEvents; WatchList, on by default
        # since Kubernetes 1.34); cleared for good on the first 400/422 to one, for a while
        # after a run of misses.  A refusal is remembered per server for a while
        # (servers.py): loaded here, saved on the flip.
        self._server_file = servers.server_file(
            str(configuration.host), servers.read_ca(getattr(configuration, "ssl_ca_cert", None))
        )
        self.watch_lists = WatchLists(refused=servers.watch_lists_refused(self._server_file))

    @property
    def watch_list(self) -> bool:
        """Whether to read with a watch-list: False once this server refused one (now, or
        in a run less than ``servers.TTL`` ago), and while a run of misses pauses them."""
        return self.watch_lists.usable

    @watch_list.setter
    def watch_list(self, value: bool) -> None:
        """False: the server refused a watch-list (for good, and remembered)."""
        flipped = not self.watch_lists.refused and not value
        self.watch_lists.refused = not value
        if flipped:
            servers.remember_watch_lists_refused(self._server_file, str(self._transport.host))

    def get_or_none(self, path: str) -> Obj | None:
        """A GET; None when the answer is 404."""
        try:
            return self._transport.request("GET", "GET", path)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def pages(self, path: str, query: Obj) -> Iterator[Obj]:
        """The answers of a paged LIST of ``path`` (``query`` carries its ``limit``), one
        request per page, each sent only when the page before it has been consumed."""
        cont = None
        while True:
            out = self._transport.request("LIST", "GET", path, query={**query, "continue": cont})
            yield out
            cont = (out.get("metadata") or {}).get("continue")
            if not cont:
                return

    def watch(
        self,
        path: str,
        *,
        label_selector: str | None,
        field_selector: str | None,
        resource_version: str,
        timeout_seconds: int,
        opened: Callable[[Any], None] | None,
        send_initial_events: bool,
    ) -> Iterator[Obj]:
        """The events of one WATCH of ``path`` with bookmarks (see ``Kube.watch_hrs``)."""
        query: Obj = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "resourceVersion": resource_version or None,
            "timeoutSeconds": timeout_seconds,
        }
        if send_initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
        resp = self._transport.open_watch(path, query, timeout=timeout_seconds + 30)
        if opened is not None:
            opened(resp)
        try:
            yield from _lines(resp.stream(65536, decode_content=True))
        except Exception as exc:
            import urllib3

            if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
                raise Unreachable(
                    0, "Unreachable", f"watch interrupted: {_one_line(exc)}"
                ) from None
            raise
        finally:
            resp.release_conn()


def _lines(chunks: Iterator[bytes]) -> Iterator[Obj]:
    """The JSON objects of a stream of newline-separated lines, however it is chunked."""
    buf = bytearray()
    for chunk in chunks:
        # one growing buffer; each complete line is cut off its front once (a long
        # object split over many chunks is scanned only from where the last scan
        # stopped, never re-copied per chunk)
        scanned = len(buf)
        buf += chunk
        start = 0
        nl = buf.find(b"\n", scanned)
        while nl >= 0:
            line = bytes(buf[start:nl])
            start = nl + 1
            if line.strip():
                yield json.loads(line)
            nl = buf.find(b"\n", start)
        if start:
            del buf[:start]
