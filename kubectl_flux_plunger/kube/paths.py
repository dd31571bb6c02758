"""Where the resources flux-plunger reads and writes live in the API, and the media types
their bodies travel in."""

from __future__ import annotations

from urllib.parse import quote

from ..core import constants as C

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is valid YAML; the apiserver accepts it


def hr_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/apis/{C.HR_GROUP}/{C.HR_VERSION}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{C.HR_PLURAL}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


def core_path(resource: str, namespace: str | None = None, name: str | None = None) -> str:
    base = "/api/v1"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{resource}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


def lease_path(namespace: str | None, name: str | None = None) -> str:
    """A Lease, the Leases of a namespace, or (``namespace`` None) every Lease."""
    base = "/apis/coordination.k8s.io/v1"
    if namespace is not None:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += "/leases"
    return base + (f"/{quote(name, safe='')}" if name else "")
