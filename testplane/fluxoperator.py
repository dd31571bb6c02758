"""The Flux Operator's Suspend and Resume, request for request (tests only).

What each of its faces sends to the apiserver for a HelmRelease, from its source at v0.58.1
(controlplaneio-fluxcd/flux-operator):

* the Web UI (``internal/web/resource_action.go`` ``setSuspension``; its client is
  ``client.WithFieldOwner(..., "flux-operator-web")``, ``internal/web/kubeclient``): a GET,
  then a JSON merge patch computed by controller-runtime's ``client.MergeFrom`` (no
  resourceVersion in it) from the object as read to the object as changed.
  **Suspend** returns before patching when ``spec.suspend`` is already true ("to preserve the
  original SuspendedBy annotation"): no write at all.  Otherwise it sets ``spec.suspend: true``
  and the annotation ``fluxcd.controlplane.io/suspendedBy: <user name>``.  **Resume** removes
  ``spec.suspend`` (null in the patch), sets ``reconcile.fluxcd.io/requestedAt`` to the time
  of the request and deletes ``suspendedBy``, whoever set it.
* the MCP server (``cmd/mcp/toolbox`` ``suspend_flux_reconciliation`` /
  ``resume_flux_reconciliation`` → ``ToggleSuspension``; field owner ``flux-operator-mcp``):
  a GET, then the same kind of merge patch setting ``spec.suspend: true`` (an empty ``{}``
  when it already is — controller-runtime sends it all the same) or removing it; no
  annotation.

``merge_diff`` is RFC 7386's "create merge patch" (evanphx/json-patch ``CreateMergePatch``,
what ``client.MergeFrom`` computes), so the bodies below are the bytes those clients send.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from kubectl_flux_plunger.core import constants as C

from .cluster import Cluster

WEB = "flux-operator-web"
MCP = "flux-operator-mcp"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


def merge_diff(original: Any, modified: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``original`` into ``modified``."""
    patch: dict[str, Any] = {}
    for key in original:
        if key not in modified:
            patch[key] = None
    for key, value in modified.items():
        before = original.get(key, _ABSENT)
        if before == value:
            continue
        if isinstance(before, dict) and isinstance(value, dict):
            patch[key] = merge_diff(before, value)
        else:
            patch[key] = value
    return patch


_ABSENT = object()


class FluxOperator:
    """The Web UI's and the MCP server's Suspend and Resume against ``cluster``; ``sent``
    records every patch body (None for a Suspend the Web UI skipped)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.sent: list[tuple[str, dict | None]] = []

    def _patch(self, manager: str, ns: str, name: str, change) -> dict:
        read = self.cluster.get(ns, name)
        assert read is not None, f"{ns}/{name} not found"
        changed = copy.deepcopy(read)
        change(changed)
        body = merge_diff(read, changed)
        self.sent.append((manager, body))
        return self.cluster.merge(ns, name, body, manager=manager)

    # -- the Web UI ---------------------------------------------------------------------

    def web_suspend(self, ns: str, name: str, user: str) -> dict | None:
        """Returns the release after the patch, or None when it was already suspended and
        nothing was sent."""
        read = self.cluster.get(ns, name)
        assert read is not None, f"{ns}/{name} not found"
        if (read.get("spec") or {}).get("suspend") is True:
            self.sent.append((WEB, None))
            return None

        def change(obj: dict) -> None:
            obj.setdefault("spec", {})["suspend"] = True
            notes = obj["metadata"].get("annotations") or {}
            notes[C.SUSPENDED_BY_ANNOTATION] = user
            obj["metadata"]["annotations"] = notes

        return self._patch(WEB, ns, name, change)

    def web_resume(self, ns: str, name: str, now: dt.datetime | None = None) -> dict:
        requested = (now or dt.datetime.now(dt.timezone.utc)).isoformat().replace("+00:00", "Z")

        def change(obj: dict) -> None:
            (obj.get("spec") or {}).pop("suspend", None)
            notes = obj["metadata"].get("annotations") or {}
            notes[REQUESTED_AT] = requested
            notes.pop(C.SUSPENDED_BY_ANNOTATION, None)
            obj["metadata"]["annotations"] = notes

        return self._patch(WEB, ns, name, change)

    # -- the MCP server -----------------------------------------------------------------

    def mcp_suspend(self, ns: str, name: str) -> dict:
        return self._patch(MCP, ns, name,
                           lambda obj: obj.setdefault("spec", {}).__setitem__("suspend", True))

    def mcp_resume(self, ns: str, name: str) -> dict:
        return self._patch(MCP, ns, name, lambda obj: (obj.get("spec") or {}).pop("suspend", None))
