"""HelmReleases: the fresh read, the paged LIST, the watch (a watch-list where the server
serves one), and the three kinds of write (server-side apply, merge and JSON patch)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..core import constants as C
from ..core.objects import Obj
from .errors import KubeError
from .paths import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, hr_path
from .read import Reads
from .transport import Transport


class HelmReleases:
    """HelmReleases (``helm.toolkit.fluxcd.io``), over one transport and its reads."""

    def __init__(self, transport: Transport, reads: Reads) -> None:
        self._transport = transport
        self._reads = reads

    def get_hr(self, namespace: str, name: str) -> Obj | None:
        """A fresh read; None when the release does not exist."""
        try:
            return self._transport.request("GET", "GET", hr_path(namespace, name))
        except KubeError as exc:
            if exc.object_missing:
                return None
            raise

    def list_hrs(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """Every HelmRelease of a fresh (paged) LIST."""
        return [hr for items, _ in self.iter_hr_pages(namespace, label_selector) for hr in items]

    def iter_hr_pages(
        self, namespace: str | None = None, label_selector: str | None = None, limit: int = 500
    ) -> Iterator[tuple[list[Obj], str]]:
        """The pages of a fresh LIST, one at a time (``serve`` never holds every release in
        memory at once). Yields (items of one page, list resourceVersion)."""
        pages = self._reads.pages(
            hr_path(namespace), {"labelSelector": label_selector, "limit": limit}
        )
        for out in pages:
            md = out.get("metadata") or {}
            yield out.get("items") or [], md.get("resourceVersion", "")

    def watch_hrs(
        self,
        namespace: str | None,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
        opened: Callable[[Any], None] | None = None,
        send_initial_events: bool = False,
    ) -> Iterator[Obj]:
        """Stream watch events (dicts with ``type`` and ``object``) with bookmarks.
        A 410 arrives as an ERROR event or as a KubeError(status=410).  ``opened`` gets the
        streaming response once the apiserver answered (another thread may shut it down).

        ``send_initial_events`` (``resource_version`` must be ""): a watch-list — the stream
        starts with the current state (a consistent read, as fresh as a GET) as ADDED
        events, ends it with a BOOKMARK annotated :data:`INITIAL_EVENTS_END`, then carries
        every change: one request where a GET and a WATCH would be two.  Servers without
        the WatchList feature answer 422."""
        yield from self._reads.watch(
            hr_path(namespace),
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            opened=opened,
            send_initial_events=send_initial_events,
        )

    def apply_hr(self, body: Obj, *, force: bool = False) -> Obj:
        """Server-side apply by manager ``flux-plunger`` of a minimal body."""
        md = body["metadata"]
        return self._transport.request(
            "APPLY",
            "PATCH",
            hr_path(md["namespace"], md["name"]),
            body=body,
            content_type=APPLY_PATCH,
            write=True,
            query={"fieldManager": C.FIELD_MANAGER, "force": "true" if force else None},
        )

    def merge_patch_hr(
        self, namespace: str, name: str, patch: Obj, *, field_manager: str = C.CLIENT_SIDE_MANAGER
    ) -> Obj:
        return self._transport.request(
            "PATCH",
            "PATCH",
            hr_path(namespace, name),
            body=patch,
            content_type=MERGE_PATCH,
            write=True,
            query={"fieldManager": field_manager},
        )

    def json_patch_hr(
        self, namespace: str, name: str, ops: list[Obj], *, field_manager: str = C.FIELD_MANAGER
    ) -> Obj:
        return self._transport.request(
            "PATCH",
            "PATCH",
            hr_path(namespace, name),
            body=ops,
            content_type=JSON_PATCH,
            write=True,
            query={"fieldManager": field_manager},
        )

    def hr_api_served(self) -> bool:
        try:
            self._transport.request("GET", "GET", f"/apis/{C.HR_GROUP}/{C.HR_VERSION}")
            return True
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
