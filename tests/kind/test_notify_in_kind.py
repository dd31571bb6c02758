"""Flux notifications in a kind cluster: notification-controller as a Deployment in
flux-system (its image built here from the e2e tier's binary, or Flux's own on a laptop), the
chart installed with ``notifications.enabled``, and a receiver pod a ``generic`` Provider
posts to.  A recovery by the in-cluster controller reaches the receiver as exactly one
``Recovered`` notification naming the release and the revision it deleted."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from testplane import binaries, images
from testplane.cluster import Cluster
from testplane.helmctl import break_release, request_reconcile
from testplane.kind import FLUX_NS, UPSTREAM_FLUX, KindFlux, Setup, wait_until

from .conftest import PLUNGER_NS, Plunger, helm_install, install_release, skip_reason
from .test_controller_in_kind import _clean_and_ready

pytestmark = pytest.mark.skipif(bool(skip_reason()), reason=skip_reason())

NC_IP = "10.96.200.30"         # fixed ClusterIPs: the tier may run without CoreDNS
RECEIVER_IP = "10.96.200.31"
RECEIVER_NS = "kfp-receiver"
NOTIFICATION = "notification.toolkit.fluxcd.io/v1beta3"
PROBE = "NotificationProbe"

RECEIVER_PY = """\
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        sys.stdout.write(body.decode(errors="replace").replace("\\n", " ") + "\\n")
        sys.stdout.flush()
        self.send_response(200)
        self.end_headers()
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("", 8080), H).serve_forever()
"""


def _security() -> dict:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}}


def manifests(nc_image: str, python_image: str) -> list[dict]:
    nc = {"app": "notification-controller"}
    rcv = {"app": "receiver"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "notification-controller", "namespace": FLUX_NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "kfp-notification-controller"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": "notification-controller",
                       "namespace": FLUX_NS}]},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "notification-controller", "namespace": FLUX_NS, "labels": nc},
         "spec": {"replicas": 1, "selector": {"matchLabels": nc},
                  "template": {"metadata": {"labels": nc}, "spec": {
                      "serviceAccountName": "notification-controller",
                      "terminationGracePeriodSeconds": 10,
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                          "runAsGroup": 65534},
                      "containers": [{
                          "name": "manager", "image": nc_image, "imagePullPolicy": "IfNotPresent",
                          "args": ["--watch-all-namespaces=true", "--log-level=debug",
                                   "--log-encoding=json", "--enable-leader-election=false",
                                   "--events-addr=:9090", "--health-addr=:9440",
                                   "--metrics-addr=:8080", "--receiverAddr=:9292",
                                   "--rate-limit-interval=1ms"],
                          "env": [{"name": "RUNTIME_NAMESPACE", "valueFrom": {
                              "fieldRef": {"fieldPath": "metadata.namespace"}}}],
                          "ports": [{"name": "http", "containerPort": 9090},
                                    {"name": "healthz", "containerPort": 9440}],
                          "readinessProbe": {"httpGet": {"path": "/readyz", "port": "healthz"},
                                             "periodSeconds": 2},
                          "securityContext": _security(),
                          "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                      "volumes": [{"name": "tmp", "emptyDir": {}}]}}}},
        # Flux's own Service: port 80 to the event listener
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "notification-controller", "namespace": FLUX_NS},
         "spec": {"clusterIP": NC_IP, "selector": nc,
                  "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RECEIVER_NS}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "receiver", "namespace": RECEIVER_NS},
         "data": {"receiver.py": RECEIVER_PY}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "receiver", "namespace": RECEIVER_NS, "labels": rcv},
         "spec": {"replicas": 1, "selector": {"matchLabels": rcv},
                  "template": {"metadata": {"labels": rcv}, "spec": {
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
                      "containers": [{
                          "name": "http", "image": python_image,
                          "imagePullPolicy": "IfNotPresent",
                          "command": ["python3", "-u", "/app/receiver.py"],
                          "ports": [{"name": "http", "containerPort": 8080}],
                          "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                                             "periodSeconds": 2},
                          "securityContext": _security(),
                          "volumeMounts": [{"name": "app", "mountPath": "/app"}]}],
                      "volumes": [{"name": "app", "configMap": {"name": "receiver"}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "receiver",
                                                             "namespace": RECEIVER_NS},
         "spec": {"clusterIP": RECEIVER_IP, "selector": rcv,
                  "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]}},
    ]


def received(kind_flux: KindFlux) -> list[dict]:
    """Every JSON body the receiver pod logged."""
    out = []
    for line in kind_flux.logs(RECEIVER_NS, "deployment/receiver", tail=5000).splitlines():
        try:
            body = json.loads(line)
        except ValueError:
            continue
        if isinstance(body, dict):
            out.append(body)
    return out


@pytest.fixture(scope="module")
def notification_controller(kind_flux: KindFlux, kind_setup: Setup) -> Iterator[None]:
    version = binaries.module_version("notification-controller",
                                      "github.com/fluxcd/notification-controller")
    if kind_setup.local:
        image = images.notification_image()
        kind_flux.load(image)
    else:
        image = f"{UPSTREAM_FLUX}/notification-controller:{version}"
    for f in sorted(binaries.notification_crd_dir().glob("*.yaml")):
        kind_flux.kubectl("apply", "--server-side", "-f", str(f))
    kind_flux.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s",
                      timeout=90)
    kind_flux.apply(manifests(image, kind_setup.http_image))
    kind_flux.rollout("deployment", FLUX_NS, "notification-controller", 180)
    kind_flux.rollout("deployment", RECEIVER_NS, "receiver", 120)
    yield
    kind_flux.kubectl("-n", FLUX_NS, "delete", "deployment/notification-controller",
                      "service/notification-controller", "--wait=false", check=False)


@pytest.fixture(scope="module")
def notifying_plunger(kind_flux: KindFlux, plunger_image: str, kind_setup: Setup,
                      notification_controller: None) -> Iterator[Plunger]:
    """The chart with notifications on: Flux's address where CoreDNS runs, else the
    Service's fixed ClusterIP."""
    address = ("http://notification-controller.flux-system.svc.cluster.local./"
               if kind_setup.coredns else f"http://{NC_IP}/")
    helm_install(kind_flux, plunger_image, kind_setup, "--set", "notifications.enabled=true",
                 "--set", f"notifications.eventsAddr={address}")
    p = Plunger(kind_flux)
    p.leader_pod(timeout=180)
    args = kind_flux.get_json("-n", PLUNGER_NS, "deployment", "flux-plunger")["spec"][
        "template"]["spec"]["containers"][0]["args"]
    assert f"--events-addr={address}" in args, args
    yield p
    if kind_flux.helm("status", "flux-plunger", "-n", PLUNGER_NS, check=False).returncode == 0:
        kind_flux.helm("uninstall", "flux-plunger", "-n", PLUNGER_NS, "--timeout", "5m",
                       check=False, timeout=400)


def _route(kind_flux: KindFlux, ns: str) -> None:
    """A generic Provider to the receiver pod and an Alert on the namespace's HelmReleases,
    in effect once a probe event posted through the API server's service proxy arrives."""
    kind_flux.apply([
        {"apiVersion": NOTIFICATION, "kind": "Provider",
         "metadata": {"name": "receiver", "namespace": ns},
         "spec": {"type": "generic", "address": f"http://{RECEIVER_IP}:8080/"}},
        {"apiVersion": NOTIFICATION, "kind": "Alert",
         "metadata": {"name": "receiver", "namespace": ns},
         "spec": {"providerRef": {"name": "receiver"}, "eventSeverity": "info",
                  "eventSources": [{"kind": "HelmRelease", "name": "*"}]}}])
    proxy = f"/api/v1/namespaces/{FLUX_NS}/services/http:notification-controller:http/proxy/"
    sent = [0]

    def through() -> bool:
        if any(b.get("reason") == PROBE and b["involvedObject"]["namespace"] == ns
               for b in received(kind_flux)):
            return True
        sent[0] += 1
        probe = {"involvedObject": {"apiVersion": "helm.toolkit.fluxcd.io/v2",
                                    "kind": "HelmRelease", "namespace": ns, "name": "probe"},
                 "severity": "info",
                 "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "message": f"probe {sent[0]}", "reason": PROBE,
                 "reportingController": "test"}
        kind_flux.kubectl("create", "--raw", proxy, "-f", "-", stdin=json.dumps(probe),
                          check=False)
        return False
    wait_until(through, 90, "notification-controller to route a probe event to the receiver pod",
               interval=1.0,
               detail=lambda: kind_flux.logs(FLUX_NS, "deployment/notification-controller")[-3000:])


def test_a_recovery_in_the_cluster_reaches_the_receiver_pod(
        kind_flux: KindFlux, kcluster: Cluster, notifying_plunger: Plunger) -> None:
    ns = kcluster.namespace("kn")
    _route(kind_flux, ns)
    install_release(kind_flux, kcluster, ns)
    break_release(kcluster.kube, ns, "demo")
    request_reconcile(kcluster.kube, ns, "demo")
    hr = _clean_and_ready(kcluster, ns)
    revision = hr["metadata"]["annotations"]["flux-plunger.cozystack.io/last-processed-version"]

    def ours() -> list[dict]:
        return [b for b in received(kind_flux)
                if b.get("reportingController") == "flux-plunger"
                and b["involvedObject"]["namespace"] == ns]
    got = wait_until(ours, 60, f"flux-plunger's notification for {ns}/demo at the receiver pod",
                     interval=1.0)
    # what the leader sent equals what arrived: a duplicate would show
    wait_until(lambda: (notifying_plunger.metric("flux_plunger_notifications_total",
                                                 result="sent") or 0) == len(ours()), 30,
               "the controller's sent count")
    got = ours()
    assert [b["reason"] for b in got] == ["Recovered"], got
    assert got[0]["involvedObject"]["name"] == "demo"
    assert got[0]["severity"] == "info"
    assert got[0]["metadata"]["releaseName"] == "demo"
    assert got[0]["metadata"]["deletedRevision"] == revision
