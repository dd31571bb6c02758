"""Helpers the apiserver and e2e tiers share: objects in a namespace, Helm storage,
status writes, and a simulated helm-controller for tests that drive its steps by hand."""
from __future__ import annotations

import hashlib
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import storage
from kubectl_flux_plunger.kube import APPLY_PATCH, JSON, MERGE_PATCH, Kube, KubeError, hr_path

from .plane import wait_for

OPERATOR = "kubectl-client-side-apply"


def helm_release_name(hr: dict) -> str:
    """The Helm release name helm-controller uses, written here independently of
    ``storage.release_name`` (the code under test): spec.releaseName, else
    [targetNamespace-]name; longer than 53 characters: its first 40, '-', and the first 12
    hex digits of the sha256 of the whole name."""
    spec, name = hr.get("spec") or {}, hr["metadata"]["name"]
    full = spec.get("releaseName") or (
        f"{spec['targetNamespace']}-{name}" if spec.get("targetNamespace") else name)
    if len(full) <= 53:
        return full
    return full[:40] + "-" + hashlib.sha256(full.encode()).hexdigest()[:12]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


class Cluster:
    """Test-side writes with the admin client (never through flux-plunger's code paths
    except the shared ``Kube`` transport)."""

    def __init__(self, kube: Kube):
        self.kube = kube

    # -- namespaces / releases ------------------------------------------------------

    def namespace(self, prefix: str = "t") -> str:
        name = unique(prefix)
        self.kube.request("CREATE", "POST", "/api/v1/namespaces", content_type=JSON,
                          body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def create_hr(self, namespace: str, name: str = "demo", *, spec: dict | None = None,
                  labels: dict | None = None, annotations: dict | None = None,
                  finalizers: list | None = None, manager: str = OPERATOR) -> dict:
        body = {"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
                "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                             "annotations": annotations or {},
                             "finalizers": finalizers if finalizers is not None
                             else [C.HELM_CONTROLLER_FINALIZER]},
                "spec": {"interval": "5m", "chartRef": {"kind": "ExternalArtifact", "name": name},
                         **(spec or {})}}
        return self.kube.request("CREATE", "POST", hr_path(namespace), body=body,
                                 content_type=JSON, query={"fieldManager": manager})

    def get(self, namespace: str, name: str) -> dict | None:
        return self.kube.get_hr(namespace, name)

    def merge(self, namespace: str, name: str, patch: dict, *, manager: str = OPERATOR,
              subresource: str = "") -> dict:
        path = hr_path(namespace, name) + (f"/{subresource}" if subresource else "")
        return self.kube.request("PATCH", "PATCH", path, body=patch, content_type=MERGE_PATCH,
                                 query={"fieldManager": manager})

    def apply(self, body: dict, *, manager: str, force: bool = False) -> dict:
        md = body["metadata"]
        return self.kube.request("APPLY", "PATCH", hr_path(md["namespace"], md["name"]),
                                 body=body, content_type=APPLY_PATCH,
                                 query={"fieldManager": manager, "force": "true" if force else None})

    def suspend(self, namespace: str, name: str, value: bool = True, *, manager: str = OPERATOR):
        return self.merge(namespace, name, {"spec": {"suspend": value}}, manager=manager)

    def set_status(self, namespace: str, name: str, status: dict) -> dict:
        return self.merge(namespace, name, {"status": status}, manager="helm-controller",
                          subresource="status")

    def make_stuck(self, namespace: str, name: str, *, release: str | None = None,
                   observed: bool = True) -> dict:
        """Ready=False with helm-controller's message; generations as helm-controller
        leaves them after a failed upgrade (lastAttempted == generation)."""
        hr = self.get(namespace, name)
        gen = hr["metadata"]["generation"]
        rel = release or name
        status = {
            "lastAttemptedGeneration": gen,
            "conditions": [{
                "type": "Ready", "status": "False", "reason": "UpgradeFailed",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "observedGeneration": gen,
                "message": (f"Helm upgrade failed for release {namespace}/{rel} with chart "
                            f"demo@0.1.0: \"{rel}\" has no deployed releases")}],
        }
        if observed:
            status["observedGeneration"] = gen
        return self.set_status(namespace, name, status)

    def delete_hr(self, namespace: str, name: str) -> None:
        try:
            self.kube.request("DELETE", "DELETE", hr_path(namespace, name))
        except KubeError as exc:
            if not exc.not_found:
                raise

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> dict | None:
        hr = self.get(namespace, name)
        if hr is None:
            return None
        fins = hr["metadata"].get("finalizers") or []
        if finalizer not in fins:
            return hr
        i = fins.index(finalizer)
        try:
            return self.kube.request("PATCH", "PATCH", hr_path(namespace, name), content_type=
                                     "application/json-patch+json", body=[
                                         {"op": "test", "path": f"/metadata/finalizers/{i}",
                                          "value": finalizer},
                                         {"op": "remove", "path": f"/metadata/finalizers/{i}"}])
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    # -- Helm storage ---------------------------------------------------------------

    def storage(self, namespace: str, release: str, revisions: list[tuple[int, str]]) -> list[dict]:
        out = []
        for number, status in revisions:
            body = storage.make_storage_secret(release, namespace, number, status)
            out.append(self.kube.request("CREATE", "POST", f"/api/v1/namespaces/{namespace}/secrets",
                                         body=body, content_type=JSON))
        return out

    def secret_names(self, namespace: str, release: str) -> list[str]:
        return sorted(s["metadata"]["name"] for s in
                      self.kube.list_secrets(namespace, storage.label_selector(release)))

    def events(self, namespace: str, name: str) -> list[dict]:
        out = self.kube.request("LIST", "GET", f"/api/v1/namespaces/{namespace}/events",
                                query={"fieldSelector": f"involvedObject.name={name}"})
        return out.get("items") or []


class Poller:
    """A background thread calling :meth:`step` every ``interval`` seconds until the
    ``with`` block ends; a step raising one of ``tolerated`` is tried again at the next
    tick.  The base of every stand-in that reacts to the cluster in tests."""

    interval: float = 0.05
    tolerated: tuple[type[BaseException], ...] = (KubeError,)

    def __enter__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.step()
            except self.tolerated:
                pass
            self._stop.wait(self.interval)

    def step(self) -> None:
        raise NotImplementedError


class SimulatedHelmController(Poller):
    """helm-controller's observable steps, driven by a background poller on one namespace:

    * a suspended release is "reconciled": ``status.observedGeneration = generation``;
    * a terminating release: when unsuspended its storage is "uninstalled" (Secrets deleted),
      and either way ``finalizers.fluxcd.io`` is dropped and observedGeneration recorded —
      exactly helm-controller's delete handling (deletion checked before suspend).

    ``handle_deletes=False`` leaves deletes alone (helm-controller not answering);
    ``acknowledge=False`` never acknowledges a suspension of a release not being deleted
    (helm-controller busy elsewhere: a recovery waits until the release is deleted)."""

    def __init__(self, cluster: Cluster, namespace: str, *, handle_deletes: bool = True,
                 acknowledge: bool = True, interval: float = 0.05):
        self.cluster, self.namespace = cluster, namespace
        self.handle_deletes = handle_deletes
        self.acknowledge = acknowledge
        self.interval = interval
        self.uninstalled: list[str] = []
        self.dropped_without_uninstall: list[str] = []

    def step(self):
        items = self.cluster.kube.list_hrs(self.namespace)
        for hr in items:
            md, spec = hr["metadata"], hr.get("spec", {})
            name = md["name"]
            gen = md.get("generation")
            observed = hr.get("status", {}).get("observedGeneration")
            if md.get("deletionTimestamp"):
                if not self.handle_deletes:
                    continue
                if C.HELM_CONTROLLER_FINALIZER in (md.get("finalizers") or []):
                    if spec.get("suspend"):
                        self.dropped_without_uninstall.append(name)
                    else:
                        self._uninstall(hr)
                    self.cluster.set_status(self.namespace, name, {"observedGeneration": gen})
                    self.cluster.remove_finalizer(self.namespace, name, C.HELM_CONTROLLER_FINALIZER)
                elif not spec.get("suspend") and observed != gen:
                    # finalizer already gone (dropped while suspended): a reconcile of the
                    # unsuspended, terminating release still runs the uninstall
                    self._uninstall(hr)
                    self.cluster.set_status(self.namespace, name, {"observedGeneration": gen})
            elif spec.get("suspend") and observed != gen and self.acknowledge:
                self.cluster.set_status(self.namespace, name, {"observedGeneration": gen})

    def _uninstall(self, hr: dict) -> None:
        release = helm_release_name(hr)
        ns = (hr.get("spec") or {}).get("storageNamespace") or hr["metadata"]["namespace"]
        for s in self.cluster.kube.list_secrets(ns, f"owner=helm,name={release}"):
            try:
                self.cluster.kube.request("DELETE", "DELETE",
                                          f"/api/v1/namespaces/{ns}/secrets/{s['metadata']['name']}")
            except KubeError:
                pass
        self.uninstalled.append(hr["metadata"]["name"])


class WatchingAcknowledger(threading.Thread):
    """helm-controller's acknowledgement of a suspension, driven by a watch as the real
    one is: each suspended release (of ``namespace``; every namespace when None) whose
    generation is not observed yet gets ``observedGeneration = generation`` ``delay``
    seconds after its event, through a small pool of writers (the real controller runs
    several workers).  The real helm-controller v1.6.4 sends its acknowledgement 1-9 ms
    (median 3) after the suspension's write completes on this machine (8 rounds of
    bench/acquire_bench.py --serve, 2026-12-07).

    A LIST starts each stream (and acknowledges what it finds), so a watch that ends in
    an error or an apiserver restart loses nothing.  Deletes are not handled: pair it with
    a :class:`SimulatedHelmController` made with ``acknowledge=False`` where they matter.
    Stop it with ``stop.set()``."""

    def __init__(self, cluster: Cluster, namespace: str | None = None, *, delay: float = 0.02,
                 workers: int = 4):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.delay = cluster, namespace, delay
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(workers)
        self.acked = 0

    def _ack(self, ns: str, name: str, gen: int) -> None:
        if self.delay:
            time.sleep(self.delay)
        try:
            self.cluster.set_status(ns, name, {"observedGeneration": gen})
            self.acked += 1
        except KubeError:
            pass

    def _take(self, hr: dict) -> None:
        md = hr.get("metadata") or {}
        if ((hr.get("spec") or {}).get("suspend") and not md.get("deletionTimestamp")
                and (hr.get("status") or {}).get("observedGeneration") != md.get("generation")):
            self.pool.submit(self._ack, md["namespace"], md["name"], md["generation"])

    def _stream(self) -> None:
        items, rv = [], ""
        for page, rv in self.cluster.kube.iter_hr_pages(self.namespace):
            items += page
        for hr in items:
            self._take(hr)
        while not self.stop.is_set():
            for ev in self.cluster.kube.watch_hrs(self.namespace, None, rv, timeout_seconds=30):
                if ev.get("type") == "ERROR":
                    return  # e.g. 410: list again
                obj = ev.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if ev.get("type") in ("ADDED", "MODIFIED"):
                    self._take(obj)
                if self.stop.is_set():
                    return

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._stream()
            except KubeError:
                self.stop.wait(0.2)
        self.pool.shutdown(wait=False)


def eventually(predicate, timeout: float = 20, what: str = "condition"):
    return wait_for(predicate, timeout, what, interval=0.1)
