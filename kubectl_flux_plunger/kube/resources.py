"""The other resources: Helm storage Secrets, Events, Leases, the controller's Deployment
and Pods, and discovery."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from ..core.objects import Obj
from .errors import KubeError
from .paths import JSON, MERGE_PATCH, core_path, lease_path
from .protobuf import METADATA_ACCEPT
from .read import Reads
from .transport import Request, Transport


class Secrets:
    """Helm storage Secrets, over one transport."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def list_secrets(self, namespace: str, label_selector: str) -> list[Obj]:
        out = self._transport.request(
            "LIST", "GET", core_path("secrets", namespace), query={"labelSelector": label_selector}
        )
        return out.get("items") or []

    def delete_secret(
        self, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> Obj:
        """DELETE with uid and resourceVersion preconditions: a Secret re-created under the
        same name stays, and so does one rewritten in place (Helm updates release Secrets
        keeping their uid) since it was judged.  A failed precondition answers 409.

        The apiserver reads a DELETE's options from the body when there is one and then
        ignores the query, so dry-run must travel in the body too."""
        preconditions = {"uid": uid}
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": preconditions,
        }
        if self._transport.dry_run:
            options["dryRun"] = ["All"]
        return self._transport.request(
            "DELETE",
            "DELETE",
            core_path("secrets", namespace, name),
            body=options,
            content_type=JSON,
            write=True,
        )


class Events:
    """Events (core/v1)."""

    def __init__(self, transport: Transport, reads: Reads) -> None:
        self._transport = transport
        self._reads = reads

    def get_event(self, namespace: str, name: str) -> Obj | None:
        return self._reads.get_or_none(core_path("events", namespace, name))

    def iter_events(
        self, namespace: str | None, field_selector: str, limit: int = 500
    ) -> Iterator[Obj]:
        """The Events ``field_selector`` selects, in ``namespace`` (every namespace when
        None), one page at a time: a single request unless more than ``limit`` match."""
        pages = self._reads.pages(
            core_path("events", namespace), {"fieldSelector": field_selector, "limit": limit}
        )
        for out in pages:
            yield from out.get("items") or []

    def create_event(self, namespace: str, body: Obj) -> Obj:
        return self._transport.request(
            "CREATE",
            "POST",
            core_path("events", namespace),
            body=body,
            content_type=JSON,
            write=True,
        )

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._transport.request(
            "PATCH",
            "PATCH",
            core_path("events", namespace, name),
            body=patch,
            content_type=MERGE_PATCH,
            write=True,
        )


NODE_LEASE_NAMESPACE = "kube-node-lease"


class Leases:
    """Leases (coordination.k8s.io/v1)."""

    def __init__(self, transport: Transport, reads: Reads) -> None:
        self._transport = transport
        self._reads = reads
        self._accept = METADATA_ACCEPT  # plain JSON once an answer could not be read

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        return self._reads.get_or_none(lease_path(namespace, name))

    def list_leases(self, namespace: str) -> list[Obj]:
        items = self._transport.request("LIST", "GET", lease_path(namespace)).get("items") or []
        return [i for i in items if isinstance(i, dict)]

    def list_cluster_leases(self) -> list[Obj]:
        """Every Lease of the cluster but the nodes' heartbeats (``kube-node-lease``, one a
        node): one LIST, unpaged — a paged one costs a request per page and is slower end to
        end (docs/BENCHMARKS.md, "Finding every running flux-plunger")."""
        query: Obj = {"fieldSelector": f"metadata.namespace!={NODE_LEASE_NAMESPACE}"}
        out = self._transport.request("LIST", "GET", lease_path(None), query=query)
        items = out.get("items") or []
        return [i for i in items if isinstance(i, dict)]

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        return self._transport.request(
            "CREATE", "POST", lease_path(namespace), body=body, content_type=JSON
        )

    def update_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        """PUT ``body`` (its ``managedFields`` left out: the apiserver keeps the ones it has)
        and return the Lease as written: ``body`` with the metadata the apiserver answers.

        The answer is asked for as metadata only, in protobuf where the server speaks it
        (:mod:`.protobuf`): a leader renews every few seconds for as long as it runs, and
        the whole Lease back each time would be most of what serve costs the apiserver."""
        md = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
        sent = {**body, "metadata": md}
        path = lease_path(namespace, name)
        try:
            answer = self._transport.send(
                Request("UPDATE", "PUT", path, body=sent, content_type=JSON, accept=self._accept)
            )
        except KubeError as exc:
            if exc.reason != "BadResponse" or self._accept == JSON:
                raise
            return self._unread_answer(namespace, name, sent, exc)
        if answer.get("kind") == "Lease":  # a server that would not answer with metadata
            return answer
        written = {k: v for k, v in (answer.get("metadata") or {}).items() if k != "managedFields"}
        return {**sent, "metadata": {**md, **written}}

    def _unread_answer(self, namespace: str, name: str, sent: Obj, exc: KubeError) -> Obj:
        """The PUT was answered 2xx but the answer could not be read (a proxy, a server
        speaking a protobuf this reader does not know): ask for plain JSON from now on, and
        take the Lease as stored when it holds what was sent — the write landed; else the
        renewal failed as far as anyone can tell."""
        self._accept = JSON
        stored = self.get_lease(namespace, name)
        if stored is None or (stored.get("spec") or {}) != (sent.get("spec") or {}):
            raise exc
        return stored


class Workloads:
    """The controller's Deployment (release-fence --stop-deployment), its Pods, discovery."""

    def __init__(self, transport: Transport, reads: Reads) -> None:
        self._transport = transport
        self._reads = reads

    def get_deployment(self, namespace: str, name: str) -> Obj | None:
        return self._reads.get_or_none(
            f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}"
            f"/deployments/{quote(name, safe='')}"
        )

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> Obj:
        """Merge patch of the scale subresource (what `kubectl scale` sends)."""
        return self._transport.request(
            "PATCH",
            "PATCH",
            f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}"
            f"/deployments/{quote(name, safe='')}/scale",
            body={"spec": {"replicas": replicas}},
            content_type=MERGE_PATCH,
            write=True,
        )

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        out = self._transport.request(
            "LIST", "GET", core_path("pods", namespace), query={"labelSelector": label_selector}
        )
        return out.get("items") or []

    # -- discovery -----------------------------------------------------------------

    def server_version(self) -> Obj:
        return self._transport.request("GET", "GET", "/version")

    def list_deployments_any(self, label_selector: str) -> list[Obj]:
        out = self._transport.request(
            "LIST", "GET", "/apis/apps/v1/deployments", query={"labelSelector": label_selector}
        )
        return out.get("items") or []
