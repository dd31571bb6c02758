"""What flux-plunger remembers about an API server between runs (issue 19).

One fact today: the server refused a watch-list (``sendInitialEvents``; WatchList is off
before Kubernetes 1.34).  Without a memory, every one-shot run pays for that refused
request again.  Like kubectl's discovery cache (``~/.kube/cache/discovery/<host>``), it is
kept per server in a small file under the user's cache directory —
``$XDG_CACHE_HOME/kubectl-flux-plunger/servers/<host>-<digest>.json`` (else ``~/.cache``) —
the digest covering the server URL and the CA bundle that identifies it, so two clusters
behind one address (a port-forward, a recreated kind cluster) are two servers.  A remembered
refusal holds for ``TTL`` seconds; after that the server is probed again (it may have been
upgraded).  Nothing here ever fails a run: a cache that cannot be read or written (a
read-only HOME in a pod) is as good as no memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

TTL = 4 * 3600.0  # seconds a remembered "no watch-lists" holds before it is probed again


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kubectl-flux-plunger/servers``, else under ``~/.cache``; a
    relative path (no HOME and no passwd entry: ``~`` stays ``~``) is never used, so no
    directory appears in whatever the working directory is."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        base = os.devnull  # nothing can be made under it: no memory
    return Path(base) / "kubectl-flux-plunger" / "servers"


def server_file(host: str, ca: bytes) -> Path:
    """The file of the server at URL ``host`` whose CA bundle is ``ca`` (b"" for none)."""
    digest = hashlib.sha256(host.encode() + b"\0" + ca).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9.]+", "_", re.sub(r"^https?://", "", host)).strip("_")
    return cache_dir() / f"{readable[:60] or 'server'}-{digest}.json"


def read_ca(path: str | None) -> bytes:
    """The CA bundle the client verifies the server with (b"" when there is none)."""
    if not path:
        return b""
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def watch_lists_refused(path: Path, now: float | None = None) -> bool:
    """True when ``path`` remembers a refused watch-list less than ``TTL`` seconds ago."""
    try:
        data = json.loads(path.read_text())
        checked = float(data["checked"])
        refused = data["watchList"] is False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    now = time.time() if now is None else now
    return refused and 0 <= now - checked < TTL


def remember_watch_lists_refused(path: Path, host: str, now: float | None = None) -> bool:
    """Write down that the server refused a watch-list; False when that cannot be written."""
    body = {"server": host, "watchList": False, "checked": time.time() if now is None else now}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        return False
    return True
