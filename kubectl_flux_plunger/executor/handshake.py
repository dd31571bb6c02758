"""The handshake: wait (bounded) until helm-controller has observed our suspended
generation, by watching the one release — the one wait-until helper of the saga."""
from __future__ import annotations

import logging
import time

from .. import detect
from ..kube import KubeError
from .outcome import Stopped
from .primitives import Primitives

log = logging.getLogger(__name__)


class Handshake(Primitives):
    def _await_handshake(self, hr: dict) -> dict | None:
        """Wait (bounded) until helm-controller has observed the suspended generation, by
        watching this one release from the rv of our acquire, so no revision goes while it
        may be mid-action.  Returns the last state seen (None when gone); the record that
        follows is locked to that state's rv, so nothing that happened after it can slip by."""
        if self.kube.dry_run:
            return hr   # nothing was persisted: there is nothing to observe
        fresh = hr
        deadline = time.monotonic() + self.opt.handshake_timeout
        while (fresh is not None and not detect.is_terminating(fresh)
               and detect.observed_lags(fresh)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self.should_stop():
                raise Stopped()
            fresh = self._watch_one(fresh, min(remaining, self.opt.handshake_window))
        return fresh

    def _watch_one(self, hr: dict, window: float) -> dict | None:
        """Follow one release for up to ``window`` seconds from the rv we last saw; return
        its newest state once helm-controller has observed it (or it is going)."""
        md = hr["metadata"]
        current = hr
        try:
            for ev in self.kube.watch_hrs(md["namespace"], None, md["resourceVersion"],
                                          timeout_seconds=max(1, int(window + 0.999)),
                                          field_selector=f"metadata.name={md['name']}"):
                kind, obj = ev.get("type"), ev.get("object") or {}
                if kind == "DELETED":
                    return None
                if kind == "ERROR":
                    return self._fresh(current)      # e.g. 410: re-read and go on
                if kind in ("ADDED", "MODIFIED"):
                    if obj["metadata"].get("uid") != md.get("uid"):
                        return None
                    current = obj
                    if detect.is_terminating(obj) or not detect.observed_lags(obj):
                        return obj
        except KubeError as exc:
            log.warning("watching %s/%s for helm-controller's handshake failed (%s); "
                        "re-reading instead", md["namespace"], md["name"], exc)
            time.sleep(0.2)
            return self._fresh(current)
        return current
