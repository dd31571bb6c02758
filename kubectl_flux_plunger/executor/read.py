"""The fresh read that decides: a watch-list where a recovery may follow (its initial event
is the read, and the recovery goes on on the same stream), else a GET; and the fall back to
GETs: for good on a server that refuses watch-lists, for a while after a run of them gave no
state."""

from __future__ import annotations

import logging

from ..core import plan
from ..core.objects import Obj
from ..kube import Kube, KubeError
from .handshake import InitialStateUnknown, ReleaseWatch, watch_timeout
from .outcome import Options

# the executor's logger (the name serve's JSON log lines carry)
log = logging.getLogger("kubectl_flux_plunger.executor")

# How long the watch-list read waits for the release's current state before it reads it
# with a GET instead (the state, or for a missing release the end-of-initial-events
# bookmark, arrives within milliseconds: bench/read_bench.py).
FIRST_WAIT = 5.0


def read_watched(
    kube: Kube,
    opt: Options,
    namespace: str,
    name: str,
    only_rows: frozenset[plan.Row] | None = None,
) -> tuple[Obj | None, ReleaseWatch | None]:
    """The fresh read that decides, as a watch-list where a recovery may follow: its
    initial event is the read (as fresh as a GET), and the recovery goes on on the same
    stream — the acquire on the newest state, the handshake — so the read and the
    WATCH are one request.  A GET (and no watch) where nothing can be recovered (not
    allowed, or not among ``only_rows``), on a dry run, and where the server has no
    watch-lists.  The caller closes the watch."""
    if (
        kube.dry_run
        or opt.dry_run_client
        or not opt.allow_recover
        or (only_rows is not None and plan.Row.LIVE_STUCK not in only_rows)
        or not kube.watch_list
    ):
        return kube.get_hr(namespace, name), None
    try:
        read = ReleaseWatch.read(kube, namespace, name, watch_timeout(opt), FIRST_WAIT)
        kube.watch_lists.served()
        return read
    except KubeError as exc:
        if exc.not_found and not exc.object_missing:
            raise  # the API itself is missing: the GET would say the same
        if exc.status in (400, 422):
            _no_watch_lists(kube, str(exc))  # no WatchList on this server
        else:
            _watch_list_missed(kube, str(exc))
    except InitialStateUnknown as exc:
        _watch_list_missed(kube, str(exc))
    return kube.get_hr(namespace, name), None


def _watch_list_missed(kube: Kube, why: str) -> None:
    """A watch-list that gave no state (a stream ERROR, silence, a failing server): after
    a run of them this process reads with GETs for a while (``kube.WatchLists``), then
    tries a watch-list again."""
    lists = kube.watch_lists
    if lists.missed():
        log.info(
            "%d watch-lists in a row gave no state (%s): reading with GET for %.0fs",
            lists.misses,
            why,
            lists.pause,
        )


def _no_watch_lists(kube: Kube, why: str) -> None:
    kube.watch_list = False
    log.info("the server does not serve watch-lists (%s): reading with GET", why)
