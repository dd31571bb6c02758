"""``version``: the client version and, given a cluster, what it can tell about the server."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..kube import Kube, KubeError

HELM_CONTROLLER_SELECTOR = "app.kubernetes.io/component=helm-controller"


def client() -> dict[str, Any]:
    return {"clientVersion": __version__}


def server(kube: Kube) -> dict[str, Any]:
    """Best effort: the apiserver version and the helm-controller image tag, each
    reported as unknown (with why) rather than failing the command."""
    out: dict[str, Any] = {}
    try:
        out["serverVersion"] = kube.server_version().get("gitVersion", "unknown")
    except KubeError as exc:
        out["serverVersion"] = f"unknown ({exc})"
        return out
    try:
        deployments = kube.list_deployments_any(HELM_CONTROLLER_SELECTOR)
    except KubeError as exc:
        out["helmControllerVersion"] = f"unknown ({exc.reason})"
        return out
    versions = []
    for d in deployments:
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            image = c.get("image", "")
            if "helm-controller" in image:
                tag = image.rsplit("@", 1)[0].rsplit(":", 1)
                versions.append(tag[1] if len(tag) == 2 and "/" not in tag[1] else image)
    out["helmControllerVersion"] = ",".join(sorted(set(versions))) or "not found"
    return out
